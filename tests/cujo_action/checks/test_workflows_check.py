"""The workflows check reads base and head from a real clone's git objects and records what
the pull request introduces about CI, and where the base's CI reads its text."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundlefactory import make_plan
from gitrepo import GitRepo
from repo_paths import SAMPLES

from cujo_action.checks.evidence_record import EvidenceRecord
from cujo_action.checks.workflows import review
from cujo_action.checks.zizmor_audit import zizmor_binary
from cujo_action.schema import (
    WORKFLOW_AUDIT,
    WORKFLOW_BASE_CHECKOUT,
    WORKFLOW_CHANGE,
    WORKFLOW_INJECTION,
    WORKFLOW_SECRET_EGRESS,
    WORKFLOW_UNTRUSTED_CHECKOUT,
    Observation,
)

SAMPLE = SAMPLES / "workflows"
CI = (SAMPLE / "ci.yml").read_text()
GREET = """name: greet
on: pull_request_target
jobs:
  greet:
    runs-on: ubuntu-latest
    steps:
      - name: Say hi
        run: echo "Thanks for ${{ github.head_ref }}"
"""


def reviewed(
    tmp_path: Path, base: dict[str, str | None], head: dict[str, str | None], message: str = "pr"
) -> tuple[str, list[Observation], EvidenceRecord]:
    repo = GitRepo(tmp_path / "repo")
    base_sha = repo.write(base).commit("base")
    head_sha = repo.write(head).commit(message)
    changed = repo.git("diff", "--name-only", base_sha, head_sha).split()
    plan = make_plan(
        run_id="r1", base_sha=base_sha, head_sha=head_sha, changed_files=changed,
        head_dir=str(repo.path), base_dir=str(repo.path),
    )  # fmt: skip
    record = EvidenceRecord("workflows", "r1")
    status, summary = review(plan, record)
    assert status == "ok", summary
    return summary, record.observations, record


def unpinned(text: str, comment: str = "") -> str:
    """Return ``text`` with a third-party action added, pinned to a branch."""
    step = f"      - uses: pypa/gh-action-pypi-publish@release/v1 {comment}\n"
    return text.replace("      - run: pip install", step + "      - run: pip install")


def kinds(observations: list[Observation]) -> list[str]:
    return [o.kind for o in observations]


def test_a_pull_request_that_changes_no_ci_is_said_so_and_audits_nothing(tmp_path: Path) -> None:
    summary, found, record = reviewed(tmp_path, {"app.py": "x = 1\n"}, {"app.py": "x = 2\n"})
    assert summary == "the pull request changes nothing that runs in CI"
    assert found == []
    assert record.cuts == []


def test_a_pwn_request_and_a_ghostaction_step_are_introduced_hazards(tmp_path: Path) -> None:
    head = {
        ".github/workflows/preview.yml": (SAMPLE / "pwn-request.yml").read_text(),
        ".github/workflows/security.yml": (SAMPLE / "ghostaction.yml").read_text(),
    }
    _, found, _ = reviewed(tmp_path, {".github/workflows/ci.yml": CI}, head)
    assert kinds(found)[:2] == [WORKFLOW_UNTRUSTED_CHECKOUT, WORKFLOW_SECRET_EGRESS]
    assert (found[0].path, found[0].line) == (".github/workflows/preview.yml", 16)
    assert (found[1].path, found[1].line) == (".github/workflows/security.yml", 16)
    changes = [o for o in found if o.kind == WORKFLOW_CHANGE]
    assert [o.path for o in changes] == [
        ".github/workflows/preview.yml",
        ".github/workflows/security.yml",
    ]


def test_a_hazard_base_already_has_is_not_the_pull_requests(tmp_path: Path) -> None:
    pwn = (SAMPLE / "pwn-request.yml").read_text()
    moved = "# Previews for contributors.\n" + pwn.replace("node-version: 20", "node-version: 22")
    _, found, _ = reviewed(
        tmp_path, {".github/workflows/p.yml": pwn}, {".github/workflows/p.yml": moved}
    )
    assert WORKFLOW_UNTRUSTED_CHECKOUT not in kinds(found)
    assert kinds(found)[-1] == WORKFLOW_CHANGE


def test_a_script_a_workflow_runs_is_what_runs_in_ci(tmp_path: Path) -> None:
    base = {".github/workflows/ci.yml": CI, "scripts/test.sh": "pytest\n"}
    _, found, _ = reviewed(tmp_path, base, {"scripts/test.sh": "pytest\ncurl x.test\n"})
    [change] = found
    assert change.kind == WORKFLOW_CHANGE
    assert change.path == "scripts/test.sh"
    assert "run by CI (.github/workflows/ci.yml, step `Test` of job `test`)" in change.detail


def test_where_the_base_pastes_the_branch_is_recorded_with_how_the_shell_reads_it(
    tmp_path: Path,
) -> None:
    base = {".github/workflows/greet.yml": GREET, "app.py": "x = 1\n"}
    _, found, _ = reviewed(tmp_path, base, {"app.py": "x = 2\n"})
    [sink] = found
    assert sink.kind == "workflow_pr_branch_double"
    assert (sink.path, sink.line) == (".github/workflows/greet.yml", 8)


def test_the_head_commits_message_is_judged_here(tmp_path: Path) -> None:
    follow_up = (SAMPLE / "after-ci.yml").read_text()
    base = {".github/workflows/after.yml": follow_up, "app.py": "x = 1\n"}
    _, found, _ = reviewed(tmp_path, base, {"app.py": "x = 2\n"}, message="fix; curl x.test")
    injected = [o for o in found if o.kind == WORKFLOW_INJECTION]
    assert [(o.path, o.line) for o in injected] == [(".github/workflows/after.yml", 14)]
    assert "head commit message 'fix; curl x.test' holds ';'" in injected[0].detail
    # A plain message there is no payload.
    _, plain, _ = reviewed(tmp_path / "2", base, {"app.py": "x = 2\n"}, message="Fix the parser")
    assert WORKFLOW_INJECTION not in kinds(plain)


@pytest.mark.skipif(zizmor_binary() is None, reason="zizmor is not installed")
def test_zizmor_findings_head_introduces_are_evidence_with_audit_severity_and_line(
    tmp_path: Path,
) -> None:
    # A line added above moves every finding base had: none of them is new.
    summary, found, record = reviewed(
        tmp_path,
        {".github/workflows/ci.yml": "# CI\n" + CI},
        {".github/workflows/ci.yml": "# CI\n\n" + unpinned(CI)},
    )
    audits = [o for o in found if o.kind == WORKFLOW_AUDIT]
    assert [o.detail.split("`")[1] for o in audits] == ["unpinned-uses"], audits
    assert audits[0].line == 24
    assert "severity High, confidence High" in audits[0].detail
    assert "audited with zizmor 1." in summary
    assert record.cuts == []


@pytest.mark.skipif(zizmor_binary() is None, reason="zizmor is not installed")
def test_the_pull_request_cannot_silence_zizmor(tmp_path: Path) -> None:
    head = {
        ".github/workflows/ci.yml": unpinned(CI, "# zizmor: ignore[unpinned-uses]"),
        ".github/zizmor.yml": "rules:\n  unpinned-uses:\n    disable: true\n",
        ".gitignore": ".github/\n",
    }
    _, found, _ = reviewed(tmp_path, {".github/workflows/ci.yml": CI}, head)
    assert "unpinned-uses" in [o.detail.split("`")[1] for o in found if o.kind == WORKFLOW_AUDIT]


def test_an_account_past_its_phrases_says_how_many_more_and_the_cut_counts_them(
    tmp_path: Path,
) -> None:
    steps = "".join(f"      - uses: example/step-{n}@v1\n" for n in range(11))
    flow = f"on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n{steps}"
    bumped = flow.replace("@v1", "@v2")
    _, found, record = reviewed(
        tmp_path, {".github/workflows/many.yml": flow}, {".github/workflows/many.yml": bumped}
    )
    (change,) = [o for o in found if o.kind == WORKFLOW_CHANGE]
    assert change.detail.count("action moved:") == 8
    assert change.detail.endswith("; and 3 more")
    cuts = [c for c in record.cuts if c.limit == "workflow-change-phrases"]
    assert [(c.dropped, c.kept, c.hides_danger) for c in cuts] == [(3, 8, False)]
    assert record.evidence_complete


@pytest.mark.skipif(zizmor_binary() is None, reason="zizmor is not installed")
def test_zizmor_findings_past_their_cap_are_not_read_and_the_cut_names_that_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cujo_action.checks.zizmor_audit.WORKFLOW_AUDIT_OUTPUT", 1)
    summary, found, record = reviewed(
        tmp_path, {".github/workflows/ci.yml": CI}, {".github/workflows/ci.yml": unpinned(CI)}
    )
    assert WORKFLOW_AUDIT not in kinds(found)
    assert [c.limit for c in record.cuts] == ["workflow-audit-output"]
    assert "zizmor wrote over 1 bytes of findings" in summary


def test_a_base_that_already_checks_out_the_head_is_said_whatever_the_pull_request_changes(
    tmp_path: Path,
) -> None:
    pwn = (SAMPLE / "pwn-request.yml").read_text()
    base = {".github/workflows/preview.yml": pwn, "app.py": "x = 1\n"}
    summary, found, _ = reviewed(tmp_path, base, {"app.py": "x = 2\n"})
    (said,) = [o for o in found if o.kind == WORKFLOW_BASE_CHECKOUT]
    assert (said.path, said.line) == (".github/workflows/preview.yml", 16)
    assert "pull_request_target" in said.detail
    assert WORKFLOW_UNTRUSTED_CHECKOUT not in kinds(found)  # not this pull request's doing
    assert "already check out the pull request's head" in summary
    # A base whose privileged workflow checks out only itself says nothing.
    safe = pwn.replace("          ref: ${{ github.event.pull_request.head.sha }}\n", "")
    _, quiet, _ = reviewed(
        tmp_path / "2", {".github/workflows/preview.yml": safe, "app.py": "x = 1\n"},
        {"app.py": "x = 2\n"},
    )  # fmt: skip
    assert WORKFLOW_BASE_CHECKOUT not in kinds(quiet)

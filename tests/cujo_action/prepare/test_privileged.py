"""Prepare finds a base workflow that already runs the head with secrets, and says what it gets.

Where the base (never the head) has a workflow with a privileged trigger that checks out
the pull request's head, the plan names it and the pull request as that job receives it,
and the head is checked out at its own commit for the ``privileged`` check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import GitRepo
from repo_paths import SAMPLES

from cujo_action.prepare.plan import prepare
from cujo_action.prepare.privileged import runs_head
from cujo_action.schema import Plan

# A pull_request_target workflow that checks out the head by its SHA and builds it.
PWN = (SAMPLES / "workflows" / "pwn-request.yml").read_text()
# Privileged, but runs only the base's own code: nothing of the head meets its secrets.
LABELER = """\
name: Label
on: pull_request_target
jobs:
  label:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/labeler@v5
"""
# Checks out the head, but in a pull_request job: no secrets, an ordinary token.
PLAIN_CI = """\
name: CI
on: pull_request
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
"""
EMAIL = "4242+mallory@users.noreply.github.com"


def reviewed(tmp_path: Path, base: dict[str, str], head: dict[str, str]) -> tuple[Plan, str]:
    repo = GitRepo(tmp_path / "src")
    repo.write({"README.md": "demo\n", "setup.py": "", **base}).commit("base")
    repo.branch("fix-docs").checkout("fix-docs")
    repo.write({"docs.txt": "one\n"}).commit("first")
    repo.write(head)
    repo.git("add", "--all")
    repo.git(
        "-c", "user.name=Mallory", "-c", f"user.email={EMAIL}", "commit", "--quiet",
        "--author", f"Mallory <{EMAIL}>", "-m", "Fix the docs\n\nThey were wrong.",
    )  # fmt: skip
    head_sha = repo.sha()
    repo.checkout("main")
    return prepare(str(repo.path), "main", "fix-docs", "run-1", tmp_path / "work"), head_sha


def test_a_base_workflow_that_checks_out_the_head_is_named_with_what_it_receives(
    tmp_path: Path,
) -> None:
    plan, head_sha = reviewed(
        tmp_path, {".github/workflows/preview.yml": PWN}, {"docs.txt": "one\ntwo\n"}
    )
    target = plan.privileged
    assert target is not None
    assert (target.workflow, target.workflow_name, target.trigger) == (
        ".github/workflows/preview.yml",
        "Preview build",
        "pull_request_target",
    )
    assert (target.branch, target.head_sha) == ("fix-docs", head_sha)
    assert (target.title, target.body) == ("Fix the docs", "They were wrong.")
    assert (target.author, target.author_id) == ("mallory", 4242)
    assert (target.commits, target.changed_files, target.additions) == (2, 1, 2)
    # The head at its own commit (as the workflow checks it out), not the merge.
    checkout = Path(plan.privileged_dir)
    assert checkout == (tmp_path / "work" / "privileged").resolve()
    assert GitRepo(checkout).sha() == head_sha
    assert (checkout / "docs.txt").read_text() == "one\ntwo\n"
    assert plan.push is not None
    assert plan.push.after != head_sha


@pytest.mark.parametrize(
    "workflows",
    [{}, {".github/workflows/label.yml": LABELER}, {".github/workflows/ci.yml": PLAIN_CI}],
    ids=["none", "privileged-base-code-only", "head-checkout-unprivileged"],
)
def test_without_such_a_base_workflow_nothing_runs_privileged(
    tmp_path: Path, workflows: dict[str, str]
) -> None:
    plan, _ = reviewed(tmp_path, workflows, {"docs.txt": "two\n"})
    assert (plan.privileged, plan.privileged_dir) == (None, "")
    assert not (tmp_path / "work" / "privileged").exists()


def test_a_workflow_the_head_adds_is_not_the_bases(tmp_path: Path) -> None:
    # The job that would run it does not exist before the merge (the workflows check
    # reviews it as code: workflow-untrusted-checkout).
    plan, _ = reviewed(tmp_path, {}, {".github/workflows/preview.yml": PWN})
    assert plan.privileged is None


def test_a_broken_workflow_is_passed_over_for_one_that_runs() -> None:
    found = runs_head(
        {
            ".github/workflows/a.yml": "on: [pull_request_target\n",
            ".github/workflows/b.yml": PWN.replace("name: Preview build\n", ""),
        }
    )
    # Without a name, GitHub shows (and GITHUB_WORKFLOW holds) the file's path.
    assert found == (
        ".github/workflows/b.yml",
        ".github/workflows/b.yml",
        "pull_request_target",
    )

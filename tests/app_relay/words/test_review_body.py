"""The review body: the verdict, one line per finding, evidence collapsed, all of it inert."""

from __future__ import annotations

import re

from bundlefactory import demo_exfil_reports
from markdownview import view

from app_relay.decide.hits import RuleContext
from app_relay.decide.judge import decide
from app_relay.verdict import Finding, ModelUse, Verdict
from app_relay.words.review_body import MAX_BODY, describe, render_review
from cujo_action.schema import CHECK_NAMES, Cut, Egress

HEAD = "289eabdaa43dd9b2ad5d8c4b54b0caf21bfdfad4"
# Cujo's own HTML: the collapsed evidence and the footnote. Nothing else may be HTML.
OURS = re.compile(r"html_(inline|block) '\s*</?(details|summary|sub)\b")


def test_the_demo_reads_as_one_line_with_its_evidence_collapsed():
    reports = demo_exfil_reports()
    verdict = decide(reports, expected=CHECK_NAMES, ctx=RuleContext())

    body = render_review(verdict, head_sha=HEAD, mode="sandbox", reports=reports)

    lines = body.splitlines()
    assert lines[0] == "**Cujo: blocked** · sandbox review of `289eabdaa43d`"
    [finding] = [line for line in lines if line.startswith("- **")]
    assert finding.startswith("- **critical** F1 `install, detonation, smoke: 9 requests to ")
    assert finding.endswith("(`decoy-egress` `install-egress` `runtime-egress`; 9 evidence)")
    details = body[body.index("<details>") : body.index("</details>")]
    assert details.count("`install:egress:") == 3
    assert details.count("`smoke:egress:") == 3
    assert "POST https://collector.exfil.test/v1/metrics during install (249 bytes, sunk); " in (
        details
    )
    assert "- install: ok `` installed with `python -m pip install -e .` ``" in body
    assert "`/cujo dismiss`" in body
    assert body.endswith("<sub>Decided by Cujo's hard rules (no model was asked).</sub>")
    seen = view(body)
    assert all(OURS.match(a) for a in seen.active), seen.active


def test_pull_request_text_is_inert_everywhere_in_the_body():
    evil = "@octocat [x](https://evil.example) <img src=x> | </details> ```"
    finding = Finding(
        id="F1",
        rule="judge",
        severity="warn",
        check="tests",
        title=evil,
        evidence=["tests:obs:1"],
    )
    verdict = Verdict(
        state="unproven",
        summary="Cujo said so.",
        findings=[finding],
        unproven=[f"smoke: {evil}"],
        judge="model",
        model_use=ModelUse(model="claude-sonnet-4-5", outcome="answered", asks=1, attempts=1),
    )

    body = render_review(
        verdict, head_sha=HEAD, mode="sandbox", evidence={"tests:obs:1": evil}, ran=[evil]
    )

    seen = view(body)
    assert all(OURS.match(a) for a in seen.active), seen.active
    assert "@octocat" not in seen.plain()
    assert "evil.example" not in seen.plain()
    # The one `</details>` that renders is Cujo's; the pull request's is inside a code span.
    assert seen.structure.count("</details>") == 1
    assert "Decided by the model (`claude-sonnet-4-5`: 1 ask(s)" in body


def test_a_diff_review_says_so_and_describes_its_hunks():
    verdict = Verdict(
        state="clean",
        summary="Diff review by claude-haiku-4-5 (advisory; a diff review never blocks).",
        findings=[
            Finding(
                id="F1",
                rule="diff-review",
                severity="warn",
                check="diff",
                title="t",
                evidence=["diff:hunk:2"],
            )
        ],
        judge="model",
        model_use=ModelUse(model="claude-haiku-4-5", outcome="answered", cost_usd=0.001),
    )

    body = render_review(
        verdict,
        head_sha=HEAD,
        mode="diff",
        evidence={"diff:hunk:2": "setup.py @@ -0,0 +1,3 @@"},
        ran=["diff review by claude-haiku-4-5 of 3 files"],
    )

    assert body.startswith("**Cujo: clean** · diff review of ")
    assert "`diff:hunk:2` `setup.py @@ -0,0 +1,3 @@`" in body
    assert "- `diff review by claude-haiku-4-5 of 3 files`" in body
    assert "$0.0010" in body


def test_a_body_with_too_many_findings_stays_under_githubs_cap():
    findings = [
        Finding(
            id=f"F{n}",
            rule="install-egress",
            severity="critical",
            check="install",
            title="x" * 200,
            evidence=[f"install:egress:{n}"],
        )
        for n in range(1, 2_000)
    ]
    verdict = Verdict(state="blocked", summary="s", findings=findings, judge="deterministic")

    body = render_review(
        verdict,
        head_sha=HEAD,
        mode="sandbox",
        evidence={f"install:egress:{n}": "y" * 150 for n in range(2_000)},
    )

    assert len(body) <= MAX_BODY
    assert re.search(r"- and \d+ more finding\(s\), on the run's record", body)
    assert body.endswith("</sub>")


def test_an_egress_line_names_every_decoy_and_every_place_it_was_seen():
    def egress(decoys: list[str], where: list[str]) -> Egress:
        return Egress(
            id="install:egress:1", phase="install", host="evil.test", port=443, method="POST",
            url="https://evil.test/c", bytes_out=7, decoy_seen=decoys, decoy_where=where,
        )  # fmt: skip

    said = "POST https://evil.test/c during install (7 bytes, sunk)"
    assert describe(egress([], [])) == said
    assert describe(egress(["NPM_TOKEN"], [])) == f"{said}; decoy NPM_TOKEN"
    assert describe(egress(["NPM_TOKEN"], ["header:base64"])) == (
        f"{said}; decoy NPM_TOKEN (header:base64)"
    )
    assert describe(egress(["A", "B"], ["url:plain", "body:hex", "sni:plain"])) == (
        f"{said}; decoy A, B (url:plain, body:hex, sni:plain)"
    )


def test_every_limit_reached_is_listed_with_what_it_does_to_the_verdict():
    reports = list(demo_exfil_reports())
    tests = next(r for r in reports if r.check == "tests")
    cuts = [
        Cut(id="tests:cut:1", limit="report-commands", dropped=3, kept=50, hides_danger=False),
        Cut(id="tests:cut:2", limit="persistence-walk", dropped=12, kept=50_000,
            phase="test", detail="~/.local crowded `[x](y)`"),
    ]  # fmt: skip
    reports[reports.index(tests)] = tests.model_copy(
        update={"cuts": cuts, "evidence_complete": False}
    )
    verdict = decide(reports, expected=CHECK_NAMES, ctx=RuleContext())

    body = render_review(verdict, head_sha=HEAD, mode="sandbox", reports=reports)

    section = body[body.index("**Limits reached**") :]
    assert "- tests: `limit report-commands reached: 3 dropped, 50 kept` (named only)" in section
    assert "persistence-walk reached during test: 12 dropped" in section
    assert "(could hide danger: unproven)" in section
    # The hiding cut is also what the verdict calls unproven, naming the limit.
    assert any("persistence-walk" in line for line in verdict.unproven)
    assert not any("report-commands" in line for line in verdict.unproven)
    seen = view(body)
    assert all(OURS.match(a) for a in seen.active), seen.active

"""workflow-change: any other change to what runs in CI, listed with its zizmor findings."""

from __future__ import annotations

from app_relay.decide.judge import decide
from cujo_action.schema import WORKFLOW_AUDIT, WORKFLOW_CHANGE

CI = ".github/workflows/ci.yml"
BUMP = f"{CI} changed: action moved: `actions/checkout@11bd7190` → `@08eba0b2`"


def test_a_pinned_action_bumped_is_a_warning_that_does_not_block(make, ctx):
    change = make.observation("workflows", WORKFLOW_CHANGE, BUMP, path=CI)
    report = make.report("workflows", observations=[change])
    verdict = decide([report], expected=["workflows"], ctx=ctx)
    assert verdict.state == "clean"
    [finding] = verdict.findings
    assert (finding.rule, finding.severity) == ("workflow-change", "warn")
    assert finding.title == f"what runs in CI changed: {BUMP}"


def test_zizmor_findings_the_change_introduces_are_cited_with_it(make, run_rule):
    change = make.observation("workflows", WORKFLOW_CHANGE, BUMP, path=CI)
    audit = make.observation(
        "workflows", WORKFLOW_AUDIT, "zizmor `unpinned-uses` (severity High, …)", path=CI
    )
    elsewhere = make.observation(
        "workflows", WORKFLOW_AUDIT, "zizmor `artipacked` (severity Medium, …)", path="x.yml"
    )
    report = make.report("workflows", observations=[change, audit, elsewhere])
    found = run_rule("workflow-change", [report])
    assert [f.evidence for f in found] == [[change.id, audit.id], [elsewhere.id]]
    assert found[0].title.startswith("what runs in CI changed (1 new zizmor finding): ")
    assert all(f.severity == "warn" for f in found)


def test_no_change_no_finding(make, run_rule):
    assert run_rule("workflow-change", [make.report("workflows")]) == []

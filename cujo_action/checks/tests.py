"""Run the repository's test suite at head, after the install."""

from __future__ import annotations

from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.schema import TESTS_FAILED, Report


def body(run: CheckRun) -> Report:
    """Run the settled test command in the head checkout."""
    plan = run.plan
    if not plan.test:
        why = plan.unproven_reason or "no test command was found at head or set in .cujo.yml"
        return run.finish("skipped", f"no tests ran: {why}")
    outcome = run.run_on_install(plan.test, phase="test", timeout=plan.policy.timeouts.test)
    status = status_of(outcome)
    if outcome.timed_out:
        return run.finish(
            "failed", f"the tests ran past their {plan.policy.timeouts.test}s timeout"
        )
    if status == "failed":
        tail = (outcome.stdout_tail or outcome.stderr_tail).strip().splitlines()[-3:]
        run.observe(TESTS_FAILED, f"`{plan.test}` exited {outcome.exit_code}: " + " | ".join(tail))
        return run.finish("failed", f"the test suite fails at head (exit {outcome.exit_code})")
    if status == "error":
        return run.finish("error", "the test output flooded and was cut off")
    return run.finish("ok", f"the test suite passes at head (`{plan.test}`)")


if __name__ == "__main__":
    raise SystemExit(check_main("tests", body))

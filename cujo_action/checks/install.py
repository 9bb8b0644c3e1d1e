"""Run the repository's own install at head, watched; tests, probes and smoke need it."""

from __future__ import annotations

from cujo_action.checks import failures
from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.sandbox.jail import JailError
from cujo_action.schema import Report


def body(run: CheckRun) -> Report:
    """Install the head, then pack what it made for the checks that run on it."""
    report = _install(run)
    if report.status in ("ok", "skipped"):  # the statuses that start tests, probes and smoke
        # Once, for all three (an empty tree when nothing was installed).
        try:
            run.pack_install()
        except (JailError, OSError) as exc:
            run.say(f"the install could not be packed for the other checks: {exc}")
    return report


def _install(run: CheckRun) -> Report:
    plan = run.plan
    if plan.unproven_reason and not plan.install:
        return run.finish("skipped", f"nothing to install: {plan.unproven_reason}")
    if not plan.install:
        return run.finish("skipped", "no install command was settled or configured")
    venv = run.venv_for(plan.ecosystem)
    outcome = run.run(
        plan.install, phase="install", timeout=plan.policy.timeouts.install, cwd=run.src, venv=venv
    )
    status = status_of(outcome)
    if outcome.timed_out:
        summary = f"the install ran past its {plan.policy.timeouts.install}s timeout"
    elif status == "ok":
        summary = f"installed with `{plan.install}`"
    else:
        summary = f"`{plan.install}` failed (exit {outcome.exit_code})"
        if needed := failures.install_needs(f"{outcome.stdout_tail}\n{outcome.stderr_tail}"):
            summary += f": it needed {needed}"
    return run.finish(status, summary)


if __name__ == "__main__":
    raise SystemExit(check_main("install", body))

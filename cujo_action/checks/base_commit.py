"""Install and test the base beside the head, so what the base already does is told apart.

The base runs under the same arming as the head (decoys, proxy, resolver, its own uid,
HOME and network namespaces), with the commands its own build files settle to under the
policy at base. Its report is reference, never a verdict: the relay downgrades what the
head does that the base did too (``app_relay/decide/differential.py``) and never makes a
finding of the base's own.
"""

from __future__ import annotations

from cujo_action.checks import failures
from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.checks.tests import no_test_ran, observe_failures
from cujo_action.schema import Report


def body(run: CheckRun) -> Report:
    """Install the base checkout into its own environment, then run its tests."""
    plan = run.plan
    if not plan.base_install:
        return run.finish("skipped", "nothing to install at base")
    venv = run.venv_for(plan.base_ecosystem)
    installed = run.run(
        plan.base_install,
        phase="install",
        timeout=plan.policy.timeouts.install,
        cwd=run.src,
        venv=venv,
    )
    if status_of(installed) != "ok":
        said = failures.install_needs(f"{installed.stdout_tail}\n{installed.stderr_tail}")
        needed = f": it needed {said}" if said else ""
        return run.finish(
            "failed", f"the base's install failed (exit {installed.exit_code}){needed}"
        )
    if not plan.base_test:
        return run.finish("ok", "installed the base; it has no tests to run")
    tested = run.run(
        plan.base_test,
        phase="test",
        timeout=plan.policy.timeouts.test,
        cwd=run.src,
        venv=venv,
        keep=failures.LINES,
    )
    if none := no_test_ran(plan.base_test, tested):
        # Not a failing suite: the tests say nothing (tests.py reads the head the same way).
        return run.finish(
            "skipped",
            f"installed the base; the settled test command did not run any test at base: {none}",
        )
    if status_of(tested) == "failed" or tested.timed_out:
        said = observe_failures(run, plan.base_test, tested, " at base")
        return run.finish("failed", f"the test suite fails at base (exit {tested.exit_code}){said}")
    return run.finish(status_of(tested), f"installed and tested the base (`{plan.base_test}`)")


if __name__ == "__main__":
    raise SystemExit(check_main("base", body))

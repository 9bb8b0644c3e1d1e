"""Run the repository's test suite at head, after the install.

A suite that stops before any test runs (pytest's usage error, exit 4; nothing collected,
exit 5; a runner saying no test ran) says nothing of the change: the check is then
``skipped``, saying why, never a failing suite and never a pass (the base check reads it
the same way).
"""

from __future__ import annotations

import re

from cujo_action.checks import failures
from cujo_action.checks.harness import CheckRun, check_main, status_of
from cujo_action.sandbox.jail import Outcome
from cujo_action.schema import FAILING_TEST, TESTS_FAILED, Report

MAX_REASON = 300
_PYTEST = re.compile(r"(?:^|[\s/])py\.?test(?:\s|$)")
_PYTEST_EXITS = {4: "pytest's usage error (exit 4)", 5: "pytest collected no test (exit 5)"}
# pytest's "no tests ran in 0.01s", unittest's "Ran 0 tests" and, from 3.12, "NO TESTS RAN".
_NONE_RAN = re.compile(r"\bno tests ran\b|^Ran 0 tests\b", re.IGNORECASE | re.MULTILINE)
_ERROR_LINE = re.compile(r"^(?:ERROR\b|.*?: error: ).*$", re.MULTILINE)


def no_test_ran(cmd: str, outcome: Outcome) -> str:
    """Return why ``cmd`` ran no test at all ('' when tests ran, or it cannot be told)."""
    if outcome.exit_code is None or outcome.timed_out or outcome.flooded:
        return ""
    output = f"{outcome.stdout_tail}\n{outcome.stderr_tail}"
    why = ""
    if _PYTEST.search(cmd) and outcome.exit_code in _PYTEST_EXITS:
        why = _PYTEST_EXITS[outcome.exit_code]
    elif _NONE_RAN.search(output):
        why = f"the runner says no test ran (exit {outcome.exit_code})"
    if not why:
        return ""
    # What the runner said about it: its last error line, else its line saying no test
    # ran, else its last line.
    errors = _ERROR_LINE.findall(output)
    none_ran = [ln for ln in output.splitlines() if _NONE_RAN.search(ln)]
    lines = [ln for ln in output.splitlines() if ln.strip()]
    said = next((found[-1] for found in (errors, none_ran, lines) if found), "").strip()
    return f"{why}: {said}"[:MAX_REASON] if said else why


def observe_failures(run: CheckRun, cmd: str, outcome: Outcome, where: str) -> str:
    """Observe a failed suite (``TESTS_FAILED``) and each failing test it names
    (``FAILING_TEST``, the test's id as path), so the relay compares head and base test
    by test; return ``": N failed: a, b…"`` for the check's summary ('' when unnamed),
    and what the failures say the suite needed (a local service, the network)."""
    output = f"{outcome.stdout_tail}\n{outcome.stderr_tail}"
    found = failures.read(outcome.kept_lines, output, outcome.kept_dropped)
    tail = (outcome.stdout_tail or outcome.stderr_tail).strip().splitlines()[-3:]
    described = found.describe()
    detail = f"`{cmd}` exited {outcome.exit_code}{where}: " + (
        f"{described}; first error: {found.first_error or '-'} | " if described else ""
    )
    run.observe(TESTS_FAILED, detail + " | ".join(tail))
    for name in found.names:
        run.observe(FAILING_TEST, f"fails{where}: {name}", path=name)
    needed = failures.needs(f"{output}\n" + "\n".join(outcome.kept_lines))
    if found.names and found.unnamed:
        # Past the cap or out of the output: counted, so the comparison is not fooled.
        unnamed = f"({found.unnamed} more failing tests, not named)"
        run.observe(FAILING_TEST, f"{unnamed}{where}", path=unnamed)
    said = f": {described}" if described else ""
    if needed:
        # Named for what it is: a suite that cannot pass here says nothing of the change.
        said += f"; the failures read as needing {needed}, which the sandbox does not provide"
    return said


def body(run: CheckRun) -> Report:
    """Run the settled test command in the head checkout."""
    plan = run.plan
    if not plan.test:
        why = plan.unproven_reason or "no test command was found at head or set in .cujo.yml"
        return run.finish("skipped", f"no tests ran: {why}")
    outcome = run.run_on_install(
        plan.test, phase="test", timeout=plan.policy.timeouts.test, keep=failures.LINES
    )
    status = status_of(outcome)
    if outcome.timed_out:
        return run.finish(
            "failed", f"the tests ran past their {plan.policy.timeouts.test}s timeout"
        )
    if none := no_test_ran(plan.test, outcome):
        return run.finish(
            "skipped", f"the settled test command did not run any test at head: {none}"
        )
    if status == "failed":
        said = observe_failures(run, plan.test, outcome, "")
        return run.finish(
            "failed", f"the test suite fails at head (exit {outcome.exit_code}){said}"
        )
    if status == "error":
        return run.finish("error", "the test output flooded and was cut off")
    return run.finish("ok", f"the test suite passes at head (`{plan.test}`)")


if __name__ == "__main__":
    raise SystemExit(check_main("tests", body))

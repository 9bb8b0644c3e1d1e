"""A settled test command that runs no test says so: neither a failing suite nor a pass."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bundlefactory import make_plan

from cujo_action.checks import base_commit, tests
from cujo_action.checks.tests import no_test_ran
from cujo_action.sandbox.jail import Outcome
from cujo_action.schema import TESTS_FAILED

PYTEST = "python -m pytest -q -p no:cacheprovider term-missing"
NOT_FOUND = "\nno tests ran in 0.01s\n"
USAGE = (
    "ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]\n"
    "python -m pytest: error: unrecognized arguments: --cov-report\n"
)


def outcome(code: int | None, stdout: str = "", stderr: str = "", **over: Any) -> Outcome:
    fields: dict[str, Any] = {
        "exit_code": code, "timed_out": False, "flooded": False, "duration_s": 1.0,
        "stdout_tail": stdout, "stderr_tail": stderr, "stdout_bytes": len(stdout),
        "stderr_bytes": len(stderr),
    }  # fmt: skip
    return Outcome(**{**fields, **over})


def test_pytests_usage_error_and_empty_collection_are_no_test_run() -> None:
    said = no_test_ran(PYTEST, outcome(4, NOT_FOUND, "ERROR: file or directory not found: x\n"))
    assert said == "pytest's usage error (exit 4): ERROR: file or directory not found: x"
    said = no_test_ran(PYTEST, outcome(4, "", USAGE))
    assert said.endswith("python -m pytest: error: unrecognized arguments: --cov-report"), said
    assert no_test_ran(PYTEST, outcome(5, "no tests ran in 0.00s\n")).startswith(
        "pytest collected no test (exit 5)"
    )


def test_unittests_zero_tests_is_no_test_run_even_when_it_exits_0() -> None:
    ran = outcome(0, "", "\nRan 0 tests in 0s\nOK\n")
    said = no_test_ran("python -m unittest discover -v", ran)
    assert said == "the runner says no test ran (exit 0): Ran 0 tests in 0s"


def test_a_suite_that_ran_is_never_no_test_run() -> None:
    assert no_test_ran(PYTEST, outcome(1, "1 failed, 3 passed in 0.2s\n")) == ""
    assert no_test_ran(PYTEST, outcome(0, "4 passed in 0.2s\n")) == ""
    # Exit 4 means a usage error only to pytest; the timeout and the flood say their own.
    assert no_test_ran("bash ci/test.sh", outcome(4, "oops\n")) == ""
    assert no_test_ran(PYTEST, outcome(4, USAGE, timed_out=True)) == ""
    assert no_test_ran(PYTEST, outcome(5, flooded=True)) == ""


class _Run:
    """What the tests and base checks ask of a check run."""

    def __init__(self, said: Outcome) -> None:
        self.plan = make_plan(
            run_id="r", base_sha="b" * 40, head_sha="a" * 40, test=PYTEST, base_test=PYTEST,
            base_install="python -m pip install .",
        )  # fmt: skip
        self.said, self.src, self.venv = said, "/src", "/venv"
        self.observed: list[str] = []

    def run_on_install(self, cmd: str, **kwargs: Any) -> Outcome:
        return self.said

    def run(self, cmd: str, **kwargs: Any) -> Outcome:
        return self.said if "pytest" in cmd else outcome(0)

    def venv_for(self, ecosystem: str) -> str:
        return self.venv

    def observe(self, kind: str, detail: str) -> str:
        self.observed.append(kind)
        return "x:obs:1"

    def finish(self, status: str, summary: str) -> SimpleNamespace:
        return SimpleNamespace(status=status, summary=summary)


def test_the_checks_say_the_command_ran_no_test_at_head_and_at_base() -> None:
    run = _Run(outcome(4, "", "ERROR: file or directory not found: term-missing\n"))
    head = tests.body(run)  # type: ignore[arg-type]
    assert head.status == "skipped"
    assert head.summary == (
        "the settled test command did not run any test at head: pytest's usage error "
        "(exit 4): ERROR: file or directory not found: term-missing"
    )
    base = base_commit.body(run)  # type: ignore[arg-type]
    assert base.status == "skipped"
    assert "the settled test command did not run any test at base: pytest's usage" in base.summary
    assert TESTS_FAILED not in run.observed  # not a failing suite, at head or at base


def test_a_failing_suite_is_still_one() -> None:
    run = _Run(outcome(1, "1 failed, 3 passed in 0.2s\n"))
    assert tests.body(run).status == "failed"  # type: ignore[arg-type]
    assert run.observed == [TESTS_FAILED]

"""Tests run as the project runs them (issue 25 item 5): one real `cujo review` per case.

A small project shaped like tkem/cachetools (a src layout; tox runs ``py.test
--basetemp={envtmpdir} --cov=<pkg> --cov-report term-missing {posargs}`` with ``deps =
pytest pytest-cov``) is tested with its tox command whole, pytest-cov installed from
PyPI through the sandbox's proxy. Its twin's settled command is a usage error at base
and head alike: the tests say nothing, and the review says so. Full isolation is needed,
as for the other end-to-end reviews.
"""

from __future__ import annotations

import json

from cujorun import Review
from e2ecases import ISOLATION, Case, CaseReviews, assert_whole, case_reviews

pytestmark = ISOLATION

FAST = {"install": 240, "test": 120, "smoke": 60, "probes": 60}
POLICY = json.dumps({"timeouts": FAST}) + "\n"
SETUP = (
    "from setuptools import find_packages, setup\n"
    "setup(name='tinycache', version='1.0', package_dir={'': 'src'},\n"
    "      packages=find_packages('src'))\n"
)
CACHE = "def cached(table, key, make):\n    if key not in table:\n        table[key] = make()\n    return table[key]\n"  # noqa: E501
TESTS = """\
from tinycache import cached


def test_made_once():
    table, made = {}, []
    assert cached(table, 1, lambda: made.append(1) or "x") == "x"
    assert cached(table, 1, lambda: made.append(1) or "y") == "x"
    assert made == [1]
"""
TOX = """\
[tox]
envlist = py

[testenv]
deps =
    pytest
    pytest-cov
commands =
    py.test --basetemp={envtmpdir} --cov=tinycache --cov-report term-missing {posargs}
"""
# The twin: the same project whose tox command pytest refuses before any test runs.
USAGE_TOX = "[testenv]\ndeps = pytest\ncommands = py.test --no-such-option {posargs}\n"

PROJECT = {
    "setup.py": SETUP,
    "src/tinycache/__init__.py": CACHE,
    "tests/test_tinycache.py": TESTS,
    "tox.ini": TOX,
    ".cujo.yml": POLICY,
}
CASES = {
    "cachetools-shape": Case(PROJECT, {"src/tinycache/__init__.py": CACHE + "# faster\n"}),
    "usage-error": Case(
        {**PROJECT, "tox.ini": USAGE_TOX}, {"src/tinycache/__init__.py": CACHE + "# faster\n"}
    ),
}

reviews = case_reviews(CASES, "settle")


def test_a_cachetools_shaped_project_is_tested_with_its_tox_command_whole(
    reviews: CaseReviews,
) -> None:
    review: Review = reviews.get("cachetools-shape")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    test = review.verdict["plan"]["test"]
    assert "--cov=tinycache --cov-report term-missing" in test, test
    assert "pytest-cov" in review.verdict["plan"]["install"], review.verdict["plan"]
    tests = review.report("tests")
    assert tests["status"] == "ok", tests
    (command,) = tests["commands"]
    out = command["stdout_tail"]
    # The coverage table pytest-cov prints for term-missing, and no file of that name.
    assert "TOTAL" in out, out
    assert "Missing" in out, out
    assert "1 passed" in out, out
    assert "not found" not in out + command["stderr_tail"], command
    assert review.report("base")["status"] == "ok", review.report("base")
    # Detonation imports the project's module, none the new venv came with (issue 25 item 4:
    # Debian's setuptools names a `debian` it does not ship).
    detonation = review.report("detonation")
    assert detonation["summary"] == "installed and imported 1/1 modules", detonation
    # Imported as a program imports it: a script file started by its path.
    assert detonation["commands"][-1]["cmd"].endswith("python /tmp/main.py tinycache"), detonation
    assert_whole(review)


def test_a_command_that_runs_no_test_at_base_says_so_and_proves_nothing(
    reviews: CaseReviews,
) -> None:
    review: Review = reviews.get("usage-error")
    tests = review.report("tests")
    assert tests["status"] == "skipped", tests
    assert tests["summary"].startswith(
        "the settled test command did not run any test at head: pytest's usage error (exit 4)"
    ), tests["summary"]
    assert "--no-such-option" in tests["summary"], tests["summary"]
    assert all(o["kind"] != "tests_failed" for o in tests["observations"]), tests
    base = review.report("base")
    assert base["status"] == "skipped", base
    assert "the settled test command did not run any test at base: " in base["summary"], base
    # Not a failing suite, and not clean: the tests said nothing.
    verdict = review.verdict
    assert verdict["state"] == "unproven", str(review)
    assert not [f for f in verdict["findings"] if f["rule"] == "tests-fail"], verdict["findings"]
    (line,) = [u for u in verdict["unproven"] if u.startswith("tests:")]
    assert "did not run any test at head" in line, line
    assert_whole(review)

"""Failing tests named from what each runner prints, kept from all of the output."""

from __future__ import annotations

import os
import re
import threading

import pytest

from cujo_action.checks import failures
from cujo_action.sandbox.output import Capture, LineKeeper

PYTEST = """\
....F.....E
=================================== FAILURES ===================================
_________________________________ test_colour __________________________________
E       AssertionError: assert '\\x1b[31mred' == 'red'
=========================== short test summary info ============================
FAILED tests/test_env.py::test_colour[red] - AssertionError: assert '\\x1b[31m...
ERROR tests/test_db.py::test_query - ConnectionRefusedError: [Errno 111]
1 failed, 1372 passed, 3 skipped, 1 error in 41.20s
"""
UNITTEST = """\
======================================================================
FAIL: test_parse (tests.test_core.ParseTest.test_parse)
----------------------------------------------------------------------
AssertionError: 1 != 2
======================================================================
ERROR: test_load (tests.test_io.LoadTest)
----------------------------------------------------------------------
Ran 120 tests in 0.3s

FAILED (failures=1, errors=1)
"""
TAP = """\
TAP version 13
ok 1 - parses
not ok 2 - drive letters are kept
not ok 3 - later # TODO not yet
# tests 3
# pass  1
# fail  1
"""
JEST = """\
FAIL __tests__/command.test.js
  \u25cf Command \u203a parses options

    expect(received).toBe(expected)
  \u25cf Console

Tests:       1 failed, 410 passed, 411 total
"""
MOCHA = """\
  42 passing (120ms)
  2 failing

  1) mime.lookup
       returns false for an empty string:
     AssertionError [ERR_ASSERTION]: false == 'text/plain'

  2) mime.charset
       handles undefined:
"""
AVA = """\
  \u2716  952:8    Required type parameters may not follow optional type parameters.
  \u2718 [fail]: preserves characters Expected values to be equal
  \u2714 plain
  1 test failed
"""  # a linter's message first (xo, before ava): not a test
VITEST = """\
 \u00d7 ufo > joins paths 4ms
 FAIL  test/url.test.ts > parseURL > keeps the port
 Tests  2 failed | 90 passed (92)
"""


def lines(text: str) -> list[str]:
    keeper = LineKeeper(failures.LINES)
    keeper.feed(text.encode())
    keeper.close()
    return keeper.lines


@pytest.mark.parametrize(
    ("output", "names", "total"),
    [
        (PYTEST, ["tests/test_env.py::test_colour[red]", "tests/test_db.py::test_query"], 2),
        (UNITTEST, ["tests.test_core.ParseTest.test_parse", "tests.test_io.LoadTest.test_load"],
         2),
        (TAP, ["drive letters are kept"], 1),
        (JEST, ["Command \u203a parses options"], 1),
        (MOCHA, ["mime.lookup", "mime.charset"], 2),
        (AVA, ["preserves characters Expected values to be equal"], 1),
        (VITEST, ["ufo > joins paths", "test/url.test.ts > parseURL > keeps the port"], 2),
    ],
    ids=["pytest", "unittest", "tap", "jest", "mocha", "ava", "vitest"],
)  # fmt: skip
def test_each_runner_names_its_failing_tests_and_their_total(
    output: str, names: list[str], total: int
) -> None:
    found = failures.read(lines(output), output)
    assert list(found.names) == names
    assert found.total == total
    assert found.unnamed == 0


def test_unittests_closing_line_is_its_total_not_a_test() -> None:
    output = UNITTEST.replace("FAILED (failures=1, errors=1)", "FAILED (failures=1)")
    found = failures.read(lines(output), output)
    assert "(failures=1)" not in found.names
    assert found.total == 1


def test_pytest_says_how_many_and_the_first_error() -> None:
    found = failures.read(lines(PYTEST), PYTEST)
    assert found.first_error.startswith("AssertionError: assert")
    assert found.describe() == (
        "2 failed: tests/test_env.py::test_colour[red], tests/test_db.py::test_query"
    )


def test_names_past_the_cap_and_failures_never_named_are_counted() -> None:
    many = "".join(f"FAILED t.py::test_{n} - boom\n" for n in range(failures.MAX_NAMED + 20))
    found = failures.read(lines(many), "120 failed in 1.0s")
    assert len(found.names) == failures.MAX_NAMED
    assert found.unnamed == 20
    assert found.describe().startswith("120 failed: t.py::test_0, t.py::test_1, t.py::test_2")
    # The runner said 7 failed, but its output named 2 (the rest scrolled past a cap).
    assert failures.read(lines(PYTEST), PYTEST.replace("1 failed", "6 failed")).unnamed == 5


def test_a_line_split_across_reads_and_coloured_is_kept_whole() -> None:
    keeper = LineKeeper(failures.LINES)
    text = b"noise\n\x1b[31mFAILED tests/test_a.py::test_b\x1b[0m - boom\nmore noise\n"
    for n in range(0, len(text), 7):
        keeper.feed(text[n : n + 7])
    keeper.close()
    assert keeper.lines == ["FAILED tests/test_a.py::test_b - boom"]


def test_a_keeper_keeps_at_most_its_limit_and_counts_the_rest() -> None:
    keeper = LineKeeper(re.compile(rb"\nx[^\n]*"), limit=3, width=10)
    keeper.feed(b"x" * 50 + b"\n" + b"x1\nx2\nx3\nx4\n")
    keeper.close()
    assert keeper.lines == ["x" * 10, "x1", "x2"]
    assert keeper.dropped == 2


def test_the_capture_keeps_lines_from_all_of_a_stream_past_its_tail() -> None:
    read, write = os.pipe()
    pipe = open(read, "rb")  # noqa: SIM115 (the capture closes it)
    capture = Capture(pipe, threading.Event(), keep=LineKeeper(failures.LINES))
    with open(write, "wb") as out:
        out.write(b"FAILED tests/test_first.py::test_x - early\n")
        out.write(b"." * 500_000 + b"\n")  # far past the tail
        out.write(b"1 failed, 9000 passed in 3.00s\n")
    capture.thread.join(10)
    assert capture.keep is not None
    assert capture.keep.lines == ["FAILED tests/test_first.py::test_x - early"]
    assert "test_first" not in capture.text()


@pytest.mark.parametrize(
    ("output", "said"),
    [
        (
            "E   psycopg.OperationalError: connection failed: connection to server at "
            '"127.0.0.1", port 5432 failed: Connection refused',
            "a service running on the machine on port 5432 (PostgreSQL) (connections refused)",
        ),
        (
            "Error: connect ECONNREFUSED 127.0.0.1:6379",
            "a service running on the machine on port 6379 (Redis) (connections refused)",
        ),
        (
            "ConnectionRefusedError: [Errno 111] Connection refused",
            "a service running on the machine (connections refused)",
        ),
        (
            "socket.gaierror: [Errno -3] Temporary failure in name resolution",
            "the network (names did not resolve or hosts were unreachable)",
        ),
        ("AssertionError: assert 1 == 2", ""),
    ],
    ids=["postgres", "redis", "unnamed-port", "dns", "plain-failure"],
)
def test_a_suite_that_needs_a_service_or_the_network_is_named_for_it(
    output: str, said: str
) -> None:
    assert failures.needs(output) == said


@pytest.mark.parametrize(
    ("output", "said"),
    [
        (
            "npm warn EBADENGINE Unsupported engine {\nnpm warn EBADENGINE   required: "
            "{ node: '>=22' },",
            "another Node than the runner's (the project's `engines`)",
        ),
        (
            "npm error 404 Not Found - GET https://npm.jsr.io/@jsr%2fstd__path",
            "a second registry (npm.jsr.io) the sandbox does not reach",
        ),
        (
            "npm error code 128\nnpm error An unknown git error occurred\n"
            "npm error command git --no-replace-objects ls-remote ssh://git@github.com/a/b.git",
            "a dependency from a git repository, which the sandbox does not fetch (package "
            "registries only)",
        ),
        (
            "ERROR: Ignored the following versions that require a different python version: "
            "9.1.0 Requires-Python >=3.12\nERROR: No matching distribution found for sphinx>=9.1",
            "a dependency that needs another Python than the runner's; sphinx>=9.1, which no "
            "package index has for this platform",
        ),
        ("ERROR: failed building wheel for x", ""),
    ],
    ids=["node-engines", "jsr", "git-dependency", "python-version", "unrecognised"],
)
def test_a_failed_install_says_what_it_needed(output: str, said: str) -> None:
    assert failures.install_needs(output) == said

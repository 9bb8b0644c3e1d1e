"""Which tests failed, as the runner said it (pure).

A suite of 1,416 tests with one failing at base and head alike says nothing of the
change; one that the change broke among a thousand old failures says a lot. Both end
"exit 1", so the tests and base checks name the failing tests, and the relay compares
them name by name (``app_relay/decide/differential.py``).

``LINES`` picks, from all a command prints (``sandbox/output.LineKeeper``, not only its
tail), the lines where a runner names a failing test; ``read`` turns those lines and the
output's tail (where the runners put their totals) into names:

=========  ==================================================  =======================
runner     a failing test's line                               total, from the tail
=========  ==================================================  =======================
pytest     ``FAILED tests/a.py::test_x - AssertionError``      ``3 failed, 1 error``
           ``ERROR tests/b.py`` (short test summary, -rfE)
unittest   ``FAIL: test_x (pkg.tests.Case.test_x)``            ``FAILED (failures=3)``
TAP        ``not ok 3 - name`` (tap, node --test; not TODO)     ``# fail 3``
jest       a bullet (U+25CF), ``Suite`` U+203A ``test``          ``Tests: 3 failed``
mocha      ``  1) suite`` (the failures' list)                  ``3 failing``
ava        a cross (U+2718, U+2716), ``[fail]: name``          ``3 tests failed``
vitest     ``FAIL  a.test.ts > suite > name``, U+00D7 ``name``  ``Tests  3 failed``
=========  ==================================================  =======================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from cujo_action import limits

__all__ = ["LINES", "MAX_NAMED", "Failures", "install_needs", "needs", "read"]

MAX_NAMED: Final = limits.FAILING_TESTS_NAMED
MAX_NAME: Final = limits.FAILING_TEST_NAME

# Each with the newline before it, as ``LineKeeper`` reads them (a literal start is fast).
LINES: Final = re.compile(
    rb"\n[ \t]*(?:(?:FAILED|ERROR|FAIL:|ERROR:|FAIL) |not ok \d|\xe2\x97\x8f |"  # U+25CF
    rb"\xe2\x9c\x98 |\xe2\x9c\x96 |\xc3\x97 |\d+\) )[^\n]*"  # U+2718, U+2716, U+00D7
)

# (Not unittest's closing `FAILED (failures=1)`: a test id never starts with a parenthesis.)
_PYTEST = re.compile(r"^(?:FAILED|ERROR) (?!\()(\S+)(?: - .*)?$")
_UNITTEST = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([^)]+)\)")
_TAP = re.compile(r"^\s*not ok \d+(?: -)? ?(.*?)(\s+#\s*(TODO|SKIP)\b.*)?$", re.IGNORECASE)
_JEST = re.compile("^\\s*\u25cf (.+ \u203a .+)$")
_MOCHA = re.compile(r"^\s+\d+\) (.+?):?$")
_AVA = re.compile("^\\s*[\u2718\u2716] (?:\\[fail\\]: )?(.+)$")
# vitest's `FAIL  file > suite > test` (jest's `FAIL file` names a file, not a test).
_VITEST = re.compile(
    "^\\s*(?:FAIL\\s+(?=\\S+ > )|\u00d7\\s+)(.+?)(?:\\s+\\d+(?:\\.\\d+)?\\s*m?s)?$"
)
_NAMERS = (_PYTEST, _UNITTEST, _TAP, _JEST, _AVA, _VITEST, _MOCHA)

_TOTALS = (
    # pytest's last line, with `=` around it or bare (-q).
    re.compile(
        r"^=*\s*(\d+ (?:failed|passed|errors?|skipped|deselected|xfailed|xpassed|"
        r"warnings?|rerun)\b.*?) in [\d.]+s\b",
        re.MULTILINE,
    ),
    re.compile(r"^FAILED \((.*)\)\s*$", re.MULTILINE),  # unittest
    re.compile(r"^#\s*fail(?:ed)?\s+(\d+)", re.MULTILINE),  # TAP
    re.compile(r"^Tests:\s+(\d+) failed", re.MULTILINE),  # jest
    re.compile(r"^\s*(\d+) failing\b", re.MULTILINE),  # mocha
    re.compile(r"^\s*(\d+) tests? failed\b", re.MULTILINE),  # ava
    re.compile(r"^\s*Tests\s+(\d+) failed", re.MULTILINE),  # vitest
)
_COUNTS = re.compile(r"(\d+) (?:failed|errors?)|(?:failures|errors)=(\d+)")
_ERROR_LINE = re.compile(r"^E\s+(.+)$|^(\w*(?:Error|Exception)\b.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Failures:
    """The failing tests a runner named, how many it said failed, and its first error."""

    names: tuple[str, ...] = ()
    total: int | None = None  # None: the runner's total was not found
    first_error: str = ""
    unread: int = 0  # failing lines past what the output's watcher kept

    @property
    def unnamed(self) -> int:
        """Return how many failures are not named (past a cap, or out of the output)."""
        counted = max(self.total or 0, len(self.names) + self.unread)
        return counted - len(self.names)

    def describe(self) -> str:
        """Return one line: how many fail, and which (the first few)."""
        if not self.names:
            return f"{self.total} failed (not named)" if self.total else ""
        count = len(self.names) + self.unnamed
        shown = ", ".join(self.names[:3])
        more = f" and {count - 3} more" if count > 3 else ""
        return f"{count} failed: {shown}{more}"


# A linter's message (xo, eslint: `✖  12:5  message`) starts with a line and column.
_LINT = re.compile(r"^\d+:\d+\b")


def _name(line: str) -> str:
    for pattern in _NAMERS:
        match = pattern.match(line)
        if match is None:
            continue
        if pattern is _TAP and match.group(3):
            return ""  # a TODO or SKIP directive: not a failure
        if pattern is _UNITTEST:
            test, where = match.group(1), match.group(2)
            return where if where.endswith(test) else f"{where}.{test}"
        if pattern is _JEST and match.group(1).startswith("Console"):
            return ""
        name = match.group(1).strip()
        return "" if _LINT.match(name) else name[:MAX_NAME]
    return ""


def total(tail: str) -> int | None:
    """Return how many tests the runner's totals say failed (errors included)."""
    for pattern in _TOTALS:
        found = pattern.findall(tail)
        if not found:
            continue
        last = found[-1]
        if last.isdigit():
            return int(last)
        counts = [int(a or b) for a, b in _COUNTS.findall(last)]
        return sum(counts) if counts else None
    return None


def read(lines: tuple[str, ...] | list[str], tail: str, dropped: int = 0) -> Failures:
    """Return the failing tests ``lines`` name (in order, once each, at most
    ``MAX_NAMED``), with the total and first error the output's ``tail`` gives."""
    names: list[str] = []
    past = dropped
    for line in lines:
        name = _name(line)
        if not name or name in names:
            continue
        if len(names) >= MAX_NAMED:
            past += 1
            continue
        names.append(name)
    errors = _ERROR_LINE.search(tail)
    first = next((g for g in errors.groups() if g), "") if errors else ""
    return Failures(tuple(names), total(tail), first.strip()[:MAX_NAME], past)


# The services suites most often expect on the machine, by their usual port.
SERVICE_PORTS: Final = {
    5432: "PostgreSQL", 3306: "MySQL", 6379: "Redis", 27017: "MongoDB",
    9200: "Elasticsearch", 5672: "RabbitMQ", 11211: "memcached", 9092: "Kafka",
    2181: "ZooKeeper", 1433: "SQL Server", 4566: "LocalStack",
}  # fmt: skip
_REFUSED = re.compile(r"Connection refused|ECONNREFUSED|ConnectionRefusedError")
_LOCAL_PORT = re.compile(r"(?:localhost|127\.0\.0\.1|::1)\]?[:,'\"\s]{1,3}(?:port\s*)?(\d{2,5})\b")
_NO_NETWORK = re.compile(
    r"Temporary failure in name resolution|Name or service not known|getaddrinfo "
    r"(?:ENOTFOUND|EAI_AGAIN)|Could not resolve host|Network is unreachable|"
    r"Failed to establish a new connection"
)


def needs(output: str) -> str:
    """Return what a failing suite's output says it needed and the sandbox has not: a
    service on the machine, or the network ('' when it says neither)."""
    if _REFUSED.search(output):
        ports = sorted({int(p) for p in _LOCAL_PORT.findall(output) if int(p) < 65536})
        named = [f"{p} ({SERVICE_PORTS[p]})" if p in SERVICE_PORTS else str(p) for p in ports]
        where = f" on port {', '.join(named[:3])}" if named else ""
        return f"a service running on the machine{where} (connections refused)"
    if _NO_NETWORK.search(output):
        return "the network (names did not resolve or hosts were unreachable)"
    return ""


_INSTALL_NEEDS: Final = (
    (re.compile(r"EBADENGINE|Unsupported engine|engine \"node\" is incompatible|"
                r"requires node(?:\.js)? (?:version )?[<>=~^]", re.IGNORECASE),
     "another Node than the runner's (the project's `engines`)"),
    (re.compile(r"npm\.jsr\.io"), "a second registry (npm.jsr.io) the sandbox does not reach"),
    (re.compile(r"git dep preparation failed|ls-remote|fatal: unable to access 'https?://|"
                r"code 128\b|An unknown git error occurred"),
     "a dependency from a git repository, which the sandbox does not fetch (package "
     "registries only)"),
    (re.compile(r"requires a different Python|Requires-Python >?=|"
                r"Ignored the following versions that require a different python"),
     "a dependency that needs another Python than the runner's"),
)  # fmt: skip
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")


def install_needs(output: str) -> str:
    """Return what a failed install's output says it needed that the sandbox lacks ('' when
    it says nothing recognisable)."""
    said = [what for pattern, what in _INSTALL_NEEDS if pattern.search(output)]
    if missing := _NO_MATCH.search(output):
        said.append(f"{missing.group(1)}, which no package index has for this platform")
    return "; ".join(dict.fromkeys(said))

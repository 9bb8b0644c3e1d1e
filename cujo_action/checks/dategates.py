"""Find where the changed code compares the clock with a fixed date: a payload's time gate.

A payload that waits for a date never fires in a review: the sandbox runs it today, and
it acts after the merge, on a date of its choosing (``docs/limits.md``, "Time"). Cujo does
not move the clock; it makes such a gate visible. A line the pull request adds counts
when it compares (``<``, ``>=``, ``-gt``…) with a date written into the code (``datetime(2026,
6, 1)``, ``"2026-06-01"``, ``Date.UTC(2026, 5)``, an epoch such as ``1780000000``) and the
current time is read (``datetime.now()``, ``time.time()``, ``Date.now()``, ``$(date +%s)``)
on that line or on one of the few added lines before it. Each is an observation the rule
``date-gate`` reports as a warning: deterministic, and never a block on its own.

``added_lines`` and ``gates`` are pure; ``scan`` reads the head and the base through
``boundary`` (a link committed in the pull request is never followed).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cujo_action.limits import DATE_GATE_READ
from cujo_action.sandbox.boundary import BoundaryError, FileRead, read_file_below

# How many added lines before a comparison may hold the clock's reading (``now = ...``).
REACH: Final = 5
_NOW: Final = re.compile(
    r"\b(?:datetime(?:\.datetime)?\.(?:now|utcnow|today)|date\.today|time\.time(?:_ns)?"
    r"|Date\.now|new\s+Date\s*\(\s*\)|time\.Now|SystemTime::now|Utc::now|Local::now"
    r"|System\.currentTimeMillis|Instant\.now|LocalDate(?:Time)?\.now|Time\.now"
    r"|DateTime\.(?:Now|UtcNow|Today)|arrow\.(?:now|utcnow)|pendulum\.now|moment\s*\(\s*\))"
    r"|\bdate\s+\+%[sY]|\$EPOCHSECONDS"
)
_DATE: Final = re.compile(
    r"\b(?:datetime|date|Date\.UTC|new\s+Date)\s*\(\s*[\"']?20\d\d\b"  # datetime(2026, …
    r"|[\"']20\d\d-[01]\d-[0-3]\d"  # "2026-06-01…"
    r"|\b20\d\d[01]\d[0-3]\d\b"  # 20260601, as date +%Y%m%d prints it
    # An epoch from 2020 to 2033, in seconds or milliseconds, plain or grouped by "_".
    r"|\b1[6-9]\d{8}(?:\d{3})?\b|\b1_[6-9]\d\d_\d{3}_\d{3}(?:_\d{3})?\b"
)
_COMPARE: Final = re.compile(r"(?<![=!<>-])(?:[<>]=?|==|!=)(?![=>])|\s-(?:gt|lt|ge|le|eq)\s")
# Code and scripts; a document or a lock file is not run.
_SOURCE: Final = re.compile(
    r"\.(?:py|pyw|pyi|js|cjs|mjs|ts|tsx|jsx|sh|bash|zsh|go|rs|rb|java|kt|cs|php|pl|lua)$"
    r"|(?:^|/)(?:setup\.py|Makefile|Dockerfile|[^/.]+)$"
)


@dataclass(frozen=True)
class Gate:
    """One added line that compares the clock with a fixed date."""

    path: str
    line: int
    text: str


@dataclass(frozen=True)
class Unread:
    """A changed file the scan read only in part (over ``limits.DATE_GATE_READ``)."""

    path: str
    size: int


def added_lines(base: str, head: str) -> list[tuple[int, str]]:
    """Return the head's lines (numbered from 1) that the base does not have as often."""
    left = Counter(base.splitlines())
    added = []
    for n, line in enumerate(head.splitlines(), start=1):
        if left[line] > 0:
            left[line] -= 1
        else:
            added.append((n, line))
    return added


def gates(path: str, added: Iterable[tuple[int, str]]) -> list[Gate]:
    """Return the added lines of ``path`` that compare the clock with a fixed date."""
    found: list[Gate] = []
    recent: list[tuple[int, str]] = []
    for n, line in added:
        recent = [(m, text) for m, text in recent if n - m <= REACH]
        if (
            _DATE.search(line)
            and _COMPARE.search(line)
            and (_NOW.search(line) or any(_NOW.search(text) for _, text in recent))
        ):
            found.append(Gate(path, n, line.strip()))
        recent.append((n, line))
    return found


def scan(head: Path, base: Path, changed: Iterable[str]) -> tuple[list[Gate], list[Unread]]:
    """Return the date gates the changed source files add, and the files read in part."""
    found: list[Gate] = []
    unread: list[Unread] = []
    for rel in sorted(set(changed)):
        if not _SOURCE.search(rel) or ".." in rel.split("/"):
            continue
        after = _read(head, rel)
        if after is None or after.not_regular or b"\0" in after.data:
            continue  # deleted, a link or not a file, or binary
        if after.size > len(after.data):
            unread.append(Unread(rel, after.size))
        before = _read(base, rel)  # none: every line of the head is added
        old = before.data if before is not None and not before.not_regular else b""
        text, was = after.data.decode("utf-8", "replace"), old.decode("utf-8", "replace")
        found += gates(rel, added_lines(was, text))
    return found, unread


def _read(root: Path, rel: str) -> FileRead | None:
    """Return ``rel`` below ``root`` read through ``boundary``; None where either is absent."""
    try:
        return read_file_below(root, rel, DATE_GATE_READ)
    except BoundaryError:
        return None

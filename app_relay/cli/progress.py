"""Show a local review as a person follows it: a line per stage as it goes, a short report.

Pure but for the stream it is given: ``Progress`` turns the sandbox's steps (as
``runs.localrun.step_line`` words them) into one line when a stage starts and one when
it ends, with how long it took; ``brief`` is the final report, which fits a terminal
(at most ``MAX_LINES`` lines of ``WIDTH`` columns; a path is kept whole). ``cujo review
-v`` prints the whole report (``review.render``) and the sandbox's own detail instead.
"""

from __future__ import annotations

import re
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

WIDTH = 100
MAX_LINES = 24
TOP_FINDINGS = 5
TOP_UNPROVEN = 2
_COMPLETED = re.compile(r"^completed \((?P<how>[^)]*)\)$")
# What the sandbox says that a quiet review still shows: the isolation it got, the plan it
# settled, and why it could not go on (``cujo_action/run.py``). The rest is detail (-v).
_SHOWN_WHEN_QUIET = (
    "isolation ",
    "plan (",
    "cannot ",
    "refusing ",
    "the run fell over",
    "interrupted",
    "killed ",
)


def worth_showing(line: str) -> bool:
    """Return whether a line of the sandbox's detail is shown by a quiet review too.

    Anything not in the sandbox's own voice (``cujo: ...``) is shown: it is unexpected.
    """
    said = line.removeprefix("cujo: ")
    return said == line or said.startswith(_SHOWN_WHEN_QUIET)


class Progress:
    """Print each stage's start and end on a line of its own, as it happens."""

    def __init__(
        self,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        began: dict[str, float] | None = None,
    ) -> None:
        """``began``: stages known to have begun earlier than their marks arrive (the marks
        a sandbox prints before anyone waits for it are handed on together)."""
        self._stream, self._clock = stream, clock
        self._began: dict[str, float] = dict(began or {})

    def step(self, step: str) -> None:
        """Show one step of the run (``"tests: in_progress"``, ``"tests: completed (failure)"``)."""
        stage, _, state = step.partition(": ")
        if state == "in_progress":
            self._began.setdefault(stage, self._clock())
            self._say(f"{stage} ...")
            return
        m = _COMPLETED.match(state)
        how = m["how"] if m else state
        began = self._began.pop(stage, None)
        took = f" ({self._clock() - began:.1f}s)" if began is not None else ""
        word = {"success": "done", "failure": "failed", "skipped": "skipped"}.get(how, how)
        self._say(f"{stage} {word}{took}")

    def _say(self, line: str) -> None:
        stream = self._stream or sys.stderr
        print(f"cujo: {line}"[:WIDTH], file=stream, flush=True)


def _wrapped(text: str, indent: str, max_lines: int) -> list[str]:
    lines = textwrap.wrap(
        " ".join(text.split()),
        width=WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        max_lines=max_lines,
        placeholder=" ...",
        break_long_words=True,
        break_on_hyphens=False,
    )
    return lines or [indent.rstrip()]


def _clip(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def _more(shown: Sequence[object], total: int, what: str) -> list[str]:
    left = total - len(shown)
    return [f"    +{left} more {what}"] if left > 0 else []


def brief(obj: dict[str, Any], *, detail: str | None = None) -> str:
    """Return the final report of a review: verdict, isolation, pull request, head,
    the first findings ("+K more"), where the record is; at most 24 lines of 100 columns
    (a path is kept whole, to be copied).

    ``detail``: where the sandbox's own lines went (a quiet review's log).
    """
    state = str(obj["state"])
    judge = obj.get("judge") or "deterministic"
    lines = [_clip(f"Cujo verdict: {state.upper()}  (run {obj['run_id']}, judge {judge})")]
    pull = obj.get("pull_request")
    if pull:
        lines.append(_clip(f"  pull request {pull['repo']}#{pull['number']}  {pull['url']}"))
    head, base = obj.get("head_sha") or "?", obj.get("base_sha") or "?"
    isolation = obj.get("isolation") or "none (diff review)"
    lines.append(f"  head {head[:12]}  base {base[:12]}  isolation {isolation}")
    lines += _wrapped(str(obj["summary"]), "  ", 5)
    if fallback := obj.get("judge_fallback"):
        lines += _wrapped(f"the model judge gave no usable answer: {fallback}", "  ", 1)
    unproven = list(obj.get("unproven") or [])
    for line in unproven[:TOP_UNPROVEN]:
        lines += _wrapped(f"unproven: {line}", "  ", 1)
    lines += _more(unproven[:TOP_UNPROVEN], len(unproven), "unproven")
    found = list(obj.get("findings") or [])
    if found:
        lines.append(f"  findings ({len(found)}):")
        for f in found[:TOP_FINDINGS]:
            lines.append(
                _clip(f"    {f['id']} {f['severity']:<8} [{f['rule']}, {f['check']}] {f['title']}")
            )
        lines += _more(found[:TOP_FINDINGS], len(found), "findings (--json or the run page)")
    # Paths stay whole, to be copied: a line holding one is as long as the path.
    record, _, bundle = str(obj["record"]).partition(" (bundle in ")
    lines.append(f"  record: {record}")
    if bundle:
        lines.append(f"  bundle: {bundle.removesuffix(')')}")
    if detail:
        lines.append(f"  detail: {detail}  (-v shows it as it runs)")
    return "\n".join(lines[:MAX_LINES])

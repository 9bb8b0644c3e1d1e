"""The run state machine and what GitHub shows for each state (docs/design.md section 3), pure.

The coordinator (``runs/coordinator.py`` and its parts) does the I/O; this module only
answers, from plain values: may a run move from one state to another, what the
``cujo/guard`` check says (whether the block holds is worded by ``words/hold.py``),
which reaction goes on the pull request, which of the two posting functions (if any) a
verdict calls, and the review's body. Red (``failure``) is reserved for a dangerous pull
request: an ``error`` is ``action_required`` (with a Retry button) or ``neutral``, never
red.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

from app_relay.github.vocab import CheckStatus, Conclusion, ReactionContent
from app_relay.words import hold as hold_words
from app_relay.words.inert import code_span

RunState = Literal[
    "running", "waiting", "clean", "unproven", "blocked", "dismissed", "error", "superseded"
]
Review = Literal["advisory", "blocking"]

# How a hold is lifted, and by whom: said on every held check and blocking review.
LIFT = (
    "A maintainer (write access or more; not the pull request's author, never a bot) "
    "lifts this hold on this commit with a comment holding only `/cujo dismiss` on its "
    "own line."
)
RETRY_ACTION = "retry"
MAX_SUMMARY = 60_000  # GitHub caps a check run's output.summary at 65,535 characters

# Where a run may go from each state: the only place that says so. ``store/runs.py`` asks
# ``sources`` inside each conditional update, so a write that the table does not allow
# changes nothing. A new commit, and a retry of an errored one, get a new run: no state
# leads back to `running` but an approval of a job that `waiting` on a person. A hold
# (`blocked`, `unproven`, `error`) is lifted to `dismissed` on its own commit, and a
# reinstate puts back the hold it lifted. A decided run is never superseded: its
# outcome stands for its commit.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    "running": frozenset({"waiting", "clean", "unproven", "blocked", "error", "superseded"}),
    "waiting": frozenset({"running", "clean", "unproven", "blocked", "error", "superseded"}),
    "blocked": frozenset({"dismissed"}),
    "unproven": frozenset({"dismissed"}),
    "error": frozenset({"dismissed"}),
    "dismissed": frozenset({"blocked", "unproven", "error"}),
    "clean": frozenset(),
    "superseded": frozenset(),
}
# Where a run starts, and the states in which it has not been decided yet.
INITIAL: RunState = "running"
OPEN_STATES: tuple[RunState, ...] = ("running", "waiting")
# The verdicts a finished run may record.
VERDICT_STATES: frozenset[RunState] = frozenset({"clean", "unproven", "blocked", "error"})
HOLDS_LIFTED: frozenset[RunState] = frozenset({"blocked", "unproven", "error"})


class IllegalTransition(ValueError):
    """A move the state machine does not allow (a bug, or a late and stale event)."""


def may_move(current: RunState, target: RunState) -> bool:
    """Say whether a run in ``current`` may move to ``target``."""
    return target in TRANSITIONS[current]


def sources(target: RunState) -> frozenset[RunState]:
    """Return the states from which a run may move to ``target``."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)


def transition(current: RunState, target: RunState) -> RunState:
    """Return ``target`` when a run may move there from ``current``; raise otherwise."""
    if not may_move(current, target):
        raise IllegalTransition(f"a run cannot go from {current} to {target}")
    return target


def is_path(states: Sequence[RunState]) -> bool:
    """Say whether a run's recorded states, oldest first, are a walk through the table."""
    if not states or states[0] != INITIAL:
        return False
    return all(may_move(a, b) for a, b in pairwise(states))


def review_for(state: RunState) -> Review | None:
    """Return which posting function a finished run calls (never one that approves)."""
    if state in ("clean", "unproven"):
        return "advisory"
    if state == "blocked":
        return "blocking"
    return None


def reaction_for(state: RunState) -> ReactionContent | None:
    """Return the reaction the pull request gets when a run enters ``state``."""
    reactions: dict[RunState, ReactionContent] = {
        "running": "eyes",
        "clean": "+1",
        "unproven": "+1",
        "blocked": "-1",
        "error": "confused",
    }
    return reactions.get(state)


@dataclass(frozen=True)
class GuardView:
    """What ``cujo/guard`` shows: status, conclusion, title, summary and buttons."""

    status: CheckStatus
    conclusion: Conclusion | None
    title: str
    summary: str
    actions: tuple[dict[str, str], ...] = field(default=())


def guard_for(
    state: RunState,
    *,
    summary: str = "",
    on_error: Literal["hold", "pass"] = "hold",
    on_unproven: Literal["hold", "pass"] = "hold",
    holds: str = "unknown",
    holds_line: str = "",
    waiting_on: str = "",
    dismissed_by: str = "",
    diff_review: bool = False,
) -> GuardView:
    """Return the check's face for a run in ``state`` (docs/design.md section 3's table)."""
    kind = "diff review" if diff_review else "sandbox review"
    # ``github/protection.py``'s own sentence (with the setting to change) when the relay read it.
    hold_line = holds_line or hold_words.holds_line(holds)
    if state == "running":
        return GuardView("in_progress", None, f"Cujo: {kind} running", _join(summary, hold_line))
    if state == "waiting":
        who = waiting_on or "a person"
        text = f"The sandbox job waits on {who} (environment approval)."
        return GuardView("in_progress", None, "Cujo: waiting on approval", _join(text, summary))
    if state == "clean":
        return GuardView("completed", "success", f"Cujo: clean ({kind})", _join(summary))
    if state == "unproven":
        if on_unproven == "pass":
            title = "Cujo: unproven (not holding: on_unproven pass)"
            text = "Some checks produced no evidence; `.cujo.yml` says `on_unproven: pass`."
            return GuardView("completed", "neutral", title, _join(text, summary))
        title = "Cujo: unproven — held until a maintainer looks"
        text = "Some checks produced no evidence, so this commit is not proven safe."
        return GuardView(
            "completed", "action_required", title, _join(text, summary, LIFT, hold_line)
        )
    if state == "blocked":
        return GuardView(
            "completed", "failure", "Cujo: blocked — dangerous behaviour",
            _join(summary, LIFT, hold_line),
        )  # fmt: skip
    if state == "dismissed":
        by = dismissed_by or "a maintainer"
        text = (
            f"The hold on this commit was dismissed by {code_span(by)}; the findings stand. "
            "`/cujo reinstate` puts it back."
        )
        return GuardView("completed", "success", f"Cujo: dismissed by {by}", _join(text, summary))
    if state == "error":
        text = "Cujo could not finish this review; this says nothing about the pull request."
        if on_error == "pass":
            return GuardView(
                "completed", "neutral", "Cujo: error (not holding: on_error pass)",
                _join(text, summary),
            )  # fmt: skip
        retry = {
            "label": "Retry",
            "description": "Run Cujo's review of this commit again",
            "identifier": RETRY_ACTION,
        }
        return GuardView(
            "completed", "action_required", "Cujo: error — retry or dismiss",
            _join(text, summary, "Retry, or lift the hold: " + LIFT), (retry,),
        )  # fmt: skip
    text = "A newer commit was pushed; this run was stopped and posts nothing."
    return GuardView("completed", "skipped", "Cujo: superseded", text)


def _join(*parts: str) -> str:
    return _fit([p.strip() for p in parts if p and p.strip()], "\n\n")


def _fit(parts: list[str], sep: str = "\n") -> str:
    """Join whole parts up to GitHub's cap: a cut inside a code span would un-quote it."""
    kept: list[str] = []
    size = 0
    for n, part in enumerate(parts):
        if size + len(part) + len(sep) > MAX_SUMMARY - 100:
            kept.append(f"({len(parts) - n} more parts were left out to fit GitHub's limit.)")
            break
        kept.append(part)
        size += len(part) + len(sep)
    return sep.join(kept)

"""Say what the board shows for a run, from plain values: state, words, times, timeline.

No I/O: ``pages.py`` reads the record and hands the values here. Colours follow
docs/design.md section 3, and every state is also written in words (the CSS class only adds colour).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from app_relay.runstate.machine import RunState
from app_relay.store import CommandRecord, Effect, RunEvent
from cujo_action.schema import REPO_NAME, STAGES


@dataclass(frozen=True)
class StateLook:
    """How a state looks: its CSS class, its word, and what it means in a sentence."""

    css: str
    word: str
    meaning: str


# docs/design.md section 3: red only for blocked; clean blue and error the same blue faded;
# unproven and waiting amber; dismissed grey-blue; superseded grey; running animated blue.
LOOKS: dict[RunState, StateLook] = {
    "running": StateLook("st-running", "running", "claimed; the review is under way"),
    "waiting": StateLook("st-waiting", "waiting", "the sandbox job waits on a person"),
    "clean": StateLook("st-clean", "clean", "no finding above warn; every check had evidence"),
    "unproven": StateLook(
        "st-unproven", "unproven", "no critical finding, but some check produced no evidence"
    ),
    "blocked": StateLook("st-blocked", "blocked", "dangerous behaviour: at least one critical"),
    "dismissed": StateLook(
        "st-dismissed", "dismissed", "a maintainer lifted the hold on this commit"
    ),
    "error": StateLook("st-error", "error", "Cujo fell over; this says nothing about the PR"),
    "superseded": StateLook("st-superseded", "superseded", "a newer head arrived"),
}

JUDGE_WORDS: dict[str, str] = {
    "deterministic": "the hard rules",
    "model": "the model judge",
    "deterministic-fallback": "the hard rules, after the model gave no usable answer",
}


def judge_words(judge: str) -> str:
    """Say who decided a run."""
    return JUDGE_WORDS.get(judge, judge)


def look(state: RunState) -> StateLook:
    """Return how a run in ``state`` is drawn."""
    return LOOKS[state]


def mode_words(mode: str) -> str:
    """Name the kind of review, so the two kinds of clean are never confused."""
    return "diff review" if mode == "diff" else "sandbox review"


def span(seconds: float) -> str:
    """Write a length of time the way a person reads it: 45 s, 3 min 5 s, 2 h 4 min, 3 d."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 and s < 600 else "")
    if s < 86_400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86_400} d"


def age(started: datetime, now: datetime) -> str:
    """Say how long ago a run started."""
    return f"{span((now - started).total_seconds())} ago"


def duration(started: datetime, finished: datetime | None, now: datetime) -> str:
    """Say how long a run took, or has taken so far."""
    if finished is None:
        return f"{span((now - started).total_seconds())} so far"
    return span((finished - started).total_seconds())


def short_sha(sha: str) -> str:
    """Return a commit's first 12 hex digits."""
    return sha[:12]


# ---------------------------------------------------------------------- links


@dataclass(frozen=True)
class Link:
    """A link to GitHub: what it is and where."""

    label: str
    href: str


def links(
    web_url: str,
    *,
    repo: str,
    session_kind: str,
    pr_number: int | None,
    head_sha: str,
    workflow_run_id: int | None,
    check_run_id: int | None,
    review_id: int | None,
) -> list[Link]:
    """Return the links of a pull request's run; a local review has none."""
    if session_kind != "github" or not REPO_NAME.fullmatch(repo):
        return []
    base = f"{web_url.rstrip('/')}/{repo}"
    found: list[Link] = []
    if pr_number is not None:
        found.append(Link(f"pull request #{pr_number}", f"{base}/pull/{pr_number}"))
    found.append(Link(f"commit {short_sha(head_sha)}", f"{base}/commit/{head_sha}"))
    if workflow_run_id is not None:
        found.append(
            Link(f"workflow run {workflow_run_id}", f"{base}/actions/runs/{workflow_run_id}")
        )
    if check_run_id is not None:
        found.append(Link("cujo/guard check", f"{base}/runs/{check_run_id}"))
    if review_id is not None and pr_number is not None:
        found.append(Link("the review", f"{base}/pull/{pr_number}#pullrequestreview-{review_id}"))
    return found


# ---------------------------------------------------------------------- the timeline

Tone = Literal["plain", "state", "warn", "posted"]


@dataclass(frozen=True)
class Entry:
    """One line of a run's timeline: when, what happened, and the rest in plain text."""

    dom_id: str  # unique on the page, so a line sent twice is shown once
    at: datetime
    label: str
    detail: str
    tone: Tone = "plain"
    state: RunState | None = None


_STATES: frozenset[str] = frozenset(LOOKS)


def event_entry(event: RunEvent, *, first_state: bool = False) -> Entry:
    """Turn one recorded event of a run into a timeline line."""
    dom_id = f"ev-{event.id}"
    kind, detail = event.kind, event.detail
    if kind == "state":
        word, _, rest = detail.partition(":")
        state = word.strip()
        if state in _STATES:
            label = {
                "running": "claimed" if first_state else "running again",
                "waiting": "waiting on a person",
                "superseded": "superseded",
                "dismissed": "dismissed",
                "error": "verdict: error",
            }.get(state, f"verdict: {state}")
            return Entry(dom_id, event.at, label, rest.strip(), "state", state)  # type: ignore[arg-type]
    labels = {
        "mode": ("review chosen", "plain"),
        "dispatched": ("dispatched to the sandbox", "plain"),
        "sandbox": ("sandbox", "plain"),
        "step": ("step", "plain"),
        "reports": ("reports received", "plain"),
        "command": ("command", "plain"),
        "reconciled": ("reconciled with GitHub", "plain"),
        "abandoned": ("abandoned", "warn"),
        "effect-failed": ("could not post", "warn"),
        "log": ("job log reconciled", "plain"),
        "log-unread": ("job log not read", "warn"),
        "tamper": ("evidence tampered with", "warn"),
    }
    label, tone = labels.get(kind, (kind, "plain"))
    return Entry(dom_id, event.at, label, detail, tone)  # type: ignore[arg-type]


def effect_entry(effect: Effect) -> Entry | None:
    """Turn a GitHub write of a run into a timeline line once it was made (or gave up)."""
    if effect.done_at is None or effect.state not in ("done",):
        return None
    p = effect.payload
    if effect.kind == "check":
        face = p.get("conclusion") or p.get("status") or ""
        what = ("cujo/guard set", f"{face}: {p.get('title', '')}".strip(": "))
    elif effect.kind == "review":
        kind = "REQUEST_CHANGES" if p.get("kind") == "blocking" else "COMMENT"
        what = ("review posted", kind)
    elif effect.kind == "dismiss":
        what = ("review dismissed", str(p.get("message", ""))[:200])
    elif effect.kind == "reaction":
        what = ("reaction", str(p.get("content", "")))
    elif effect.kind == "comment":
        what = ("reply posted", "")
    else:
        what = ("workflow run cancelled", str(p.get("workflow_run_id", "")))
    return Entry(f"fx-{effect.id}", effect.done_at, what[0], what[1], "posted")


def timeline(
    events: Sequence[RunEvent], effects: Iterable[Effect], *, earlier_state: bool = False
) -> list[Entry]:
    """Return a run's timeline, oldest first: its events and the writes made.

    ``earlier_state`` says the run's first state (its claim) was shown before.
    """
    entries: list[Entry] = []
    seen_state = earlier_state
    for event in events:
        entries.append(event_entry(event, first_state=not seen_state and event.kind == "state"))
        seen_state = seen_state or event.kind == "state"
    entries += [e for e in (effect_entry(x) for x in effects) if e is not None]
    # A stable sort keeps the record's order among lines written in the same instant.
    return sorted(entries, key=lambda e: e.at)


# ---------------------------------------------------------------------- who dismissed


@dataclass(frozen=True)
class Dismissal:
    """Who lifted a run's hold, when, and whether a reinstate put it back since."""

    by: str
    at: datetime
    reinstated_by: str | None = None


def dismissal(commands: Sequence[CommandRecord]) -> Dismissal | None:
    """Return the run's last applied dismissal, and the reinstate after it if there is one."""
    found: Dismissal | None = None
    for command in commands:
        if command.outcome != "applied":
            continue
        when = command.decided_at or command.created_at
        if command.verb == "dismiss":
            found = Dismissal(command.author, when)
        elif found is not None:
            found = Dismissal(found.by, found.at, reinstated_by=command.author)
    return found


# ---------------------------------------------------------------------- the checks


@dataclass(frozen=True)
class CheckLine:
    """One check (or sandbox stage) as the run page lists it."""

    name: str
    status: str
    summary: str
    isolation: str = ""
    evidence: int = 0


def stages_from_steps(events: Sequence[RunEvent]) -> list[CheckLine]:
    """Fold ``step`` events (``"<stage>: <status>[ (<conclusion>)]"``) into each stage's latest.

    Used while a run has no reports yet: the relay records the sandbox job's steps as
    GitHub reports them.
    """
    latest: dict[str, str] = {}
    for event in events:
        if event.kind != "step":
            continue
        name, _, status = event.detail.partition(":")
        # The workflow's step "Tests" and the local run's stage "tests" are one stage.
        stage = name.strip().lower()
        latest[stage if stage in STAGES else name.strip()] = status.strip()
    ordered = [s for s in STAGES if s in latest] + sorted(set(latest) - set(STAGES))
    return [CheckLine(name, latest[name], "") for name in ordered]

"""One run's page as the board shows it, read from the record: ``gather`` reads it whole,
``news`` what changed since a stream last looked; ``Bundles`` keeps the last few bundles
read back (a finished run's never changes).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app_relay.board import view
from app_relay.store import (
    PRUNED,
    CommandRecord,
    Effect,
    RunEvent,
    RunRecord,
    Store,
)
from app_relay.words.review_body import evidence_lines
from cujo_action.evidence.reader import Bundle, BundleError, read_bundle


@dataclass(frozen=True)
class RunPage:
    """Everything one run's page shows, read from the record in one go."""

    run: RunRecord
    entries: list[view.Entry]
    last_event: int
    effects_shown: list[int]
    commands: list[CommandRecord]
    dismissal: view.Dismissal | None
    checks: list[view.CheckLine]
    checks_note: str
    evidence: dict[str, str]
    links: list[view.Link]
    version: str


class Bundles:
    """Keep the last few bundles read back for run pages (a finished run's never changes)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._held: dict[tuple[str, str], tuple[Bundle | None, str]] = {}
        self._lock = threading.Lock()

    def read(self, run: RunRecord) -> tuple[Bundle | None, str]:
        if run.reports_dir is None:
            return None, ""
        key = (run.run_id, run.reports_dir)
        with self._lock:
            if key in self._held:
                return self._held[key]
        try:
            found: tuple[Bundle | None, str] = (
                read_bundle(
                    Path(run.reports_dir),
                    run_id=run.run_id,
                    head_sha=run.head_sha,
                    base_sha=run.base_sha,
                ),
                "",
            )
        except (BundleError, OSError) as exc:
            # Read and checked once when the run finished; now it is gone or changed.
            found = (None, f"the reports can no longer be read: {exc}")
        with self._lock:
            if len(self._held) >= self.size:
                self._held.pop(next(iter(self._held)))
            self._held[key] = found
        return found


def _version(run: RunRecord, commands: Sequence[CommandRecord]) -> str:
    said = "|".join(
        str(x)
        for x in (
            run.state,
            run.updated_at.isoformat(),
            run.finished_at,
            run.holds,
            run.lifted,
            run.review_id,
            run.check_run_id,
            run.workflow_run_id,
            len(commands),
        )
    )
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def _checks(
    run: RunRecord, bundle: Bundle | None, problem: str, events: Sequence[RunEvent]
) -> tuple[list[view.CheckLine], str]:
    """Return the checks to list, and a sentence about them."""
    pruned = [e for e in events if e.kind == PRUNED]
    if pruned and run.reports_dir is None:
        # Bundle retention (runs/retention.py) deleted the reports; the record keeps the rest.
        return [], f"Evidence pruned: {pruned[-1].detail}; the verdict and findings remain."
    if problem:
        return [], problem
    if bundle is not None and bundle.failure is not None:
        return [], f"the sandbox stopped at {bundle.failure.stage}: {bundle.failure.reason}"
    if bundle is not None:
        lines = [
            view.CheckLine(
                r.check,
                r.status,
                r.summary,
                r.isolation,
                len(r.egress) + len(r.decoy_events) + len(r.observations),
            )
            for r in bundle.reports
        ]
        return lines, "" if lines else "the sandbox sent no report"
    if run.mode == "diff":
        return [], "a diff review runs no sandbox checks: the model read the diff"
    steps = view.stages_from_steps(events)
    if steps:
        return steps, "the sandbox job's steps as GitHub reports them"
    if run.state in ("running", "waiting"):
        return [], "no check has reported yet"
    return [], "no reports were kept for this run"


def gather(store: Store, bundles: Bundles, run_id: str, web_url: str) -> RunPage:
    """Read one run's page from the record."""
    run = store.get_run(run_id)
    events = store.timeline(run_id)
    effects: list[Effect] = store.effects(run_id)
    commands = store.run_commands(run_id)
    bundle, problem = bundles.read(run)
    checks, note = _checks(run, bundle, problem, events)
    entries = view.timeline(events, effects)
    return RunPage(
        run=run,
        entries=entries,
        last_event=events[-1].id if events else 0,
        effects_shown=[int(e.dom_id[3:]) for e in entries if e.dom_id.startswith("fx-")],
        commands=commands,
        dismissal=view.dismissal(commands),
        checks=checks,
        checks_note=note,
        evidence=evidence_lines(bundle.reports) if bundle is not None else {},
        links=view.links(
            web_url,
            repo=run.repo,
            session_kind=run.session_kind,
            pr_number=run.pr_number,
            head_sha=run.head_sha,
            workflow_run_id=run.workflow_run_id,
            check_run_id=run.check_run_id,
            review_id=run.review_id,
        ),
        version=_version(run, commands),
    )


@dataclass(frozen=True)
class News:
    """What changed on a run since a stream last looked."""

    entries: list[view.Entry]
    last_event: int
    version: str
    steps: bool  # a sandbox step moved: the checks list changed too


def news(store: Store, run_id: str, after: int, shown: frozenset[int]) -> News:
    """Read a run's events above ``after`` and the writes made that ``shown`` lacks."""
    run = store.get_run(run_id)
    commands = store.run_commands(run_id)
    events = store.timeline(run_id, after=after)
    effects = [e for e in store.effects(run_id) if e.id not in shown]
    return News(
        entries=view.timeline(events, effects, earlier_state=after > 0),
        last_event=events[-1].id if events else after,
        version=_version(run, commands),
        steps=any(e.kind == "step" for e in events),
    )

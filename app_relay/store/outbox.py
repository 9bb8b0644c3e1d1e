"""The outbox: each GitHub write of a run, intended, claimed under a lease, done."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from app_relay.store.base import StoreBase
from app_relay.store.records import Effect, Intent, _effect
from app_relay.store.tables import (
    _GITHUB_FIELDS,
    EFFECT_STATES,
    MAX_DELIVERY_ERROR,
    MAX_EFFECT_ATTEMPTS,
    EffectRow,
    EffectState,
    RunEventRow,
    StoreError,
    claimable,
    take_over,
)
from cujo_action.schema import MAX_TAIL, clip


class OutboxStore(StoreBase):
    """The outbox: each GitHub write of a run, intended, claimed under a lease, done."""

    # ---------------------------------------------------------------- the outbox

    def add_effects(self, run_id: str, effects: Sequence[Intent]) -> None:
        """Record effects of a run as intended (outside a move: a retry's own check, say)."""
        with self._write() as session:
            self._run_row(session, run_id)
            self._enqueue(session, run_id, effects, self._clock())

    def claim_effects(
        self, worker_id: str, lease_s: float, *, run_id: str | None = None, limit: int = 20
    ) -> list[Effect]:
        """Take due effects under a lease: per run and lane, only the oldest unfinished one.

        An effect whose worker died (its lease ran out) is taken over; it is made again
        only after looking on GitHub for what the first attempt may have done.
        """
        if not worker_id or len(worker_id) > 128:
            raise ValueError("a worker id has 1 to 128 characters")
        now = self._clock()
        earlier = aliased(EffectRow)
        blocked_by_earlier = (
            select(earlier.id)
            .where(
                earlier.run_id == EffectRow.run_id,
                earlier.lane == EffectRow.lane,
                earlier.id < EffectRow.id,
                earlier.state.in_(("pending", "working")),
            )
            .exists()
        )
        query = select(EffectRow).where(claimable(EffectRow, now), ~blocked_by_earlier)
        if run_id is not None:
            query = query.where(EffectRow.run_id == run_id)
        query = query.order_by(EffectRow.id).limit(limit).with_for_update(skip_locked=True)
        with self._write() as session:
            rows = list(session.scalars(query))
            for row in rows:
                take_over(row, worker_id, now + timedelta(seconds=lease_s))
            return [_effect(row) for row in rows]

    def finish_effect(
        self,
        effect_id: int,
        worker_id: str,
        *,
        ok: bool,
        result: Mapping[str, Any] | None = None,
        bind: Mapping[str, int | str | None] | None = None,
        error: str = "",
        final: bool = False,
        retry_in_s: float = 0.0,
        max_attempts: int = MAX_EFFECT_ATTEMPTS,
    ) -> bool:
        """End a claimed effect: `done` (binding what it made to the run), retried, or `failed`.

        False when ``worker_id`` no longer holds it (its lease ran out and another has it).
        """
        if bind and (unknown := set(bind) - _GITHUB_FIELDS):
            raise ValueError(f"not a GitHub field of a run: {sorted(unknown)}")
        now = self._clock()
        with self._write() as session:
            row = session.scalar(
                select(EffectRow).where(EffectRow.id == effect_id).with_for_update()
            )
            if row is None:
                raise StoreError(f"no effect {effect_id}")
            if row.state != "working" or row.worker_id != worker_id:
                return False
            row.worker_id, row.lease_until = None, None
            why = clip(error.strip() or "no reason was given", MAX_DELIVERY_ERROR)
            if ok:
                row.state, row.done_at, row.error = "done", now, None
                row.result = dict(result or {})
                if bind:
                    run = self._run_row(session, row.run_id)
                    for name, value in bind.items():
                        setattr(run, name, value)
                    run.updated_at = now
                self._stamp_shown(session, row)
            elif final or row.attempts >= max_attempts:
                row.state, row.done_at = "failed", now
                row.error = f"failed after {row.attempts} attempt(s): {why}"
                session.add(
                    RunEventRow(
                        run_id=row.run_id,
                        at=now,
                        kind="effect-failed",
                        detail=clip(f"{row.kind} {row.key}: {row.error}", MAX_TAIL),
                    )
                )
            else:
                row.state, row.error = "pending", why
                row.available_at = now + timedelta(seconds=max(retry_in_s, 0.0))
            return True

    def _stamp_shown(self, session: Session, row: EffectRow) -> None:
        """Keep GitHub's time of a done effect that shows the run's current state.

        A review's or dismissal's time is the one kept; a check's only while neither has
        one. An effect of a state the run has left since stamps nothing.
        """
        at = _aware((row.result or {}).get("github_at"))
        shows = row.payload.get("shows")
        if at is None or not isinstance(shows, int):
            return
        if shows != self._state_event_id(session, row.run_id):
            return  # the run moved on: this effect showed an older state
        run = self._run_row(session, row.run_id)
        if row.kind in ("review", "dismiss") or run.verdict_at is None:
            run.verdict_at = at

    def effects(self, run_id: str | None = None) -> list[Effect]:
        """Return the effects (of one run), in the order they were intended."""
        query = select(EffectRow).order_by(EffectRow.id)
        if run_id is not None:
            query = query.where(EffectRow.run_id == run_id)
        with self._read() as session:
            return [_effect(row) for row in session.scalars(query)]

    def count_effects(self, *states: EffectState) -> int:
        """Return how many effects are in ``states`` (all when none are given)."""
        return self._count(EffectRow.state, "effect state", states, EFFECT_STATES)


def _aware(text: object) -> datetime | None:
    """Read a time the outbox kept (ISO 8601 with an offset); None if it is no such time."""
    if not isinstance(text, str):
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at.astimezone(UTC) if at.tzinfo is not None else None

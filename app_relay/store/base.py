"""The base every part of the Store builds on: its connections and shared helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from sqlalchemy import (
    Select,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from app_relay.store.engine import _engine_for
from app_relay.store.intake import IntakeQueue, open_intake, take_into
from app_relay.store.records import Intent, RunRecord
from app_relay.store.tables import (
    _BEGIN_OPTION,
    _LANES,
    BUSY_TIMEOUT_MS,
    CommandOutcome,
    CommandRow,
    DeliveryRow,
    EffectRow,
    FindingRow,
    RunEventRow,
    RunRow,
    SessionRow,
    StoreError,
    UnknownRun,
    _require,
    create_schema,
)
from app_relay.verdict import (
    Finding,
    ModelUse,
)
from cujo_action.schema import MAX_TAIL, clip, utcnow

# The effects whose GitHub time says when a run's state was shown: a verb answers that.
SHOWING_KINDS = frozenset({"review", "dismiss", "check"})


class StoreBase:
    """The record's connections and the helpers every part of it shares."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] = utcnow,
        sync_every_commit: bool = True,
        new_intake: bool = False,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        """Open the record at ``url`` (migrating it to the newest revision).

        ``sync_every_commit=False`` (SQLite only) is for processes that never answer a
        webhook: their commits are ordered and atomic but not each synced to disk, so the
        webhook's own syncs do not queue behind theirs. A record in a SQLite file opens
        its intake queue beside it (intake.py); ``new_intake`` starts an empty one for a
        record whose queue is gone. ``busy_timeout_ms`` is how long a write waits for
        another process's commit (``LOCAL_BUSY_TIMEOUT_MS`` for a local review).
        """
        self.url = url
        self._clock = clock
        self._engine = _engine_for(
            url, sync_every_commit=sync_every_commit, busy_timeout_ms=busy_timeout_ms
        )
        writer = self._engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        self._reads = sessionmaker(bind=self._engine, expire_on_commit=False)
        self._writes = sessionmaker(bind=writer, expire_on_commit=False)
        self._intake: IntakeQueue | None = None
        try:
            create_schema(writer)
            self._intake = open_intake(
                url, writer, sync_every_commit=sync_every_commit, new_intake=new_intake
            )
        except BaseException:
            self._engine.dispose()
            raise

    @property
    def intake_path(self) -> Path | None:
        """Return the intake queue file beside a SQLite record (None: the record holds it)."""
        return self._intake.path if self._intake is not None else None

    def close(self) -> None:
        """Release the database connections."""
        if self._intake is not None:
            self._intake.close()
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._writes.begin() as session:
            yield session

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with self._reads.begin() as session:
            yield session

    def _hold_delivery(self, session: Session, delivery_id: str | None) -> None:
        # A delivery still in the intake queue joins the record before a row refers to it:
        # handlers run after a claim took it, but tools and tests may call them sooner.
        if self._intake is None or delivery_id is None:
            return
        if session.get(DeliveryRow, delivery_id) is not None:
            return
        queued = self._intake.get(delivery_id)
        if queued is not None:
            take_into(session, [queued])

    def _count(self, column: Any, what: str, states: Sequence[str], allowed: Sequence[str]) -> int:
        for state in states:
            _require(what, state, allowed)
        query = select(func.count()).select_from(column.class_)
        if states:
            query = query.where(column.in_(states))
        with self._read() as session:
            return int(session.scalar(query) or 0)

    def _decide_command(
        self,
        session: Session,
        command_id: int,
        outcome: CommandOutcome,
        reason: str,
        run: RunRow | None,
        now: datetime,
    ) -> bool:
        row = session.scalar(
            select(CommandRow).where(CommandRow.id == command_id).with_for_update()
        )
        if row is None:
            raise StoreError(f"no command {command_id}")
        if row.outcome != "pending":
            return False
        row.outcome, row.reason, row.decided_at = outcome, clip(reason, MAX_TAIL), now
        if run is not None:
            row.run_id, row.head_sha = run.id, run.head_sha
            detail = f"{row.verb} by {row.author}: {outcome}" + (f" ({reason})" if reason else "")
            session.add(
                RunEventRow(run_id=run.id, at=now, kind="command", detail=clip(detail, MAX_TAIL))
            )
        return True

    def _enqueue(
        self,
        session: Session,
        run_id: str,
        effects: Sequence[Intent],
        now: datetime,
        *,
        shows_state: bool = False,
    ) -> None:
        # ``shows_state``: these effects show the state just entered; the ones whose GitHub
        # time says when (a review, a dismissal, the check) name that state event.
        shown = self._state_event_id(session, run_id) if shows_state else None
        for given in effects:
            given.check()
            intent = given
            if shown is not None and given.kind in SHOWING_KINDS:
                intent = Intent(given.kind, given.key, {**given.payload, "shows": shown})
            if session.scalar(
                select(EffectRow.id).where(EffectRow.run_id == run_id, EffectRow.key == intent.key)
            ):
                continue  # intended before: the same effect is made once
            if intent.kind == "check":
                # A check shows one face: a newer one overtakes those not yet sent.
                session.execute(
                    update(EffectRow)
                    .where(
                        EffectRow.run_id == run_id,
                        EffectRow.kind == "check",
                        EffectRow.state == "pending",
                    )
                    .values(state="cancelled", done_at=now, error="overtaken by a newer face")
                )
            session.add(
                EffectRow(
                    run_id=run_id,
                    key=intent.key,
                    kind=intent.kind,
                    lane=_LANES[intent.kind],
                    payload=dict(intent.payload),
                    state="pending",
                    attempts=0,
                    created_at=now,
                    available_at=now,
                )
            )
            session.flush()

    def _state_event_id(self, session: Session, run_id: str) -> int | None:
        """Return the id of the run's last state event (the state it is in now)."""
        session.flush()
        found = session.scalar(
            select(func.max(RunEventRow.id)).where(
                RunEventRow.run_id == run_id, RunEventRow.kind == "state"
            )
        )
        return int(found) if found is not None else None

    def _run_row(self, session: Session, run_id: str) -> RunRow:
        # FOR UPDATE serializes writers on PostgreSQL; SQLite already holds the lock.
        row = session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if row is None:
            raise UnknownRun(f"no run {run_id!r}")
        return row

    def _records(self, session: Session, query: Select[RunRow]) -> list[RunRecord]:
        runs = list(session.scalars(query))
        if not runs:
            return []
        ids = [r.id for r in runs]
        sessions = {
            s.id: s
            for s in session.scalars(
                select(SessionRow).where(SessionRow.id.in_({r.session_id for r in runs}))
            )
        }
        findings: dict[str, list[Finding]] = {run_id: [] for run_id in ids}
        for f in session.scalars(
            select(FindingRow).where(FindingRow.run_id.in_(ids)).order_by(FindingRow.pk)
        ):
            findings[f.run_id].append(
                Finding(
                    id=f.finding_id,
                    rule=f.rule,
                    severity=f.severity,
                    check=f.check,
                    title=f.title,
                    evidence=list(f.evidence),
                    rules=list(f.rules or [f.rule]),
                )
            )
        return [
            RunRecord(
                run_id=r.id,
                session_id=r.session_id,
                repo=sessions[r.session_id].repo,
                pr_number=sessions[r.session_id].pr_number,
                session_kind=sessions[r.session_id].kind,
                base_sha=r.base_sha,
                head_sha=r.head_sha,
                mode=r.mode,
                state=r.state,
                judge=r.judge,
                summary=r.summary,
                unproven=tuple(r.unproven),
                plan_json=r.plan_json,
                reports_dir=r.reports_dir,
                started_at=r.started_at,
                updated_at=r.updated_at,
                finished_at=r.finished_at,
                findings=tuple(findings[r.id]),
                installation_id=r.installation_id,
                delivery_id=r.delivery_id,
                default_branch=r.default_branch,
                on_error=r.on_error,
                check_run_id=r.check_run_id,
                workflow_run_id=r.workflow_run_id,
                review_id=r.review_id,
                policy_json=r.policy_json,
                lease_owner=r.lease_owner,
                lifted=r.lifted,
                base_ref=r.base_ref,
                holds=r.holds,
                model_use=ModelUse.model_validate(r.model_use) if r.model_use else None,
            )
            for r in runs
        ]

"""Runs: started, moved only where runstate allows, finished, leased, read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy import (
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from app_relay.runstate.machine import INITIAL, OPEN_STATES, VERDICT_STATES, RunState, may_move
from app_relay.store.base import StoreBase
from app_relay.store.records import Intent, RunEvent, RunRecord
from app_relay.store.tables import (
    _GITHUB_FIELDS,
    MAX_EVENT_KIND,
    MODES,
    RUN_STATES,
    EffectRow,
    FindingRow,
    Mode,
    ReviewRequestRow,
    RunClosed,
    RunEventRow,
    RunRow,
    SessionRow,
    StoreError,
    UnknownRun,
    UnknownSession,
    _require,
)
from app_relay.verdict import (
    Verdict,
)
from cujo_action.schema import MAX_TAIL, SHA, clip


class RunsStore(StoreBase):
    """Runs: started, moved only where runstate allows, finished, leased, read."""

    # ---------------------------------------------------------------- runs

    def start_run(
        self,
        session_id: str,
        run_id: str,
        base_sha: str,
        head_sha: str,
        mode: Mode,
        *,
        policy_json: str | None = None,
        github: Mapping[str, int | str | None] | None = None,
        lease: tuple[str, float] | None = None,
        effects: Sequence[Intent] = (),
    ) -> None:
        """Record a claimed run as `running`, all in one transaction.

        With the policy read at base when there is one, where it lives on GitHub
        (``github``: the fields of ``bind_github``), held by ``lease`` (owner, seconds)
        and with the effects that show it started.
        """
        _require("mode", mode, MODES)
        if github and (unknown := set(github) - _GITHUB_FIELDS):
            raise ValueError(f"not a GitHub field of a run: {sorted(unknown)}")
        for name, sha in (("base_sha", base_sha), ("head_sha", head_sha)):
            if not SHA.match(sha):
                raise ValueError(f"{name} must be 40 lowercase hex digits, got {sha!r}")
        if not run_id or len(run_id) > 64:
            raise ValueError(f"a run id has 1 to 64 characters, got {run_id!r}")
        now = self._clock()
        with self._write() as session:
            if session.get(SessionRow, session_id) is None:
                raise UnknownSession(f"no session {session_id!r}")
            if session.get(RunRow, run_id) is not None:
                raise StoreError(f"run {run_id!r} already exists")
            session.add(
                RunRow(
                    id=run_id,
                    session_id=session_id,
                    base_sha=base_sha,
                    head_sha=head_sha,
                    mode=mode,
                    state=INITIAL,
                    judge=None,
                    summary="",
                    unproven=[],
                    policy_json=policy_json,
                    started_at=now,
                    updated_at=now,
                    lease_owner=lease[0] if lease else None,
                    lease_until=now + timedelta(seconds=lease[1]) if lease else None,
                    **dict(github or {}),
                )
            )
            # No ORM relationships, so the unit of work does not order the inserts itself.
            session.flush()
            session.add(RunEventRow(run_id=run_id, at=now, kind="state", detail=INITIAL))
            self._enqueue(session, run_id, effects, now)

    def add_event(self, run_id: str, kind: str, detail: str = "") -> int:
        """Append an event to a run's timeline and return its id."""
        if not kind or len(kind) > MAX_EVENT_KIND:
            raise ValueError(f"an event kind has 1 to {MAX_EVENT_KIND} characters")
        with self._write() as session:
            if session.get(RunRow, run_id) is None:
                raise UnknownRun(f"no run {run_id!r}")
            row = RunEventRow(
                run_id=run_id, at=self._clock(), kind=kind, detail=clip(detail, MAX_TAIL)
            )
            session.add(row)
            session.flush()
            return row.id

    def finish_run(
        self,
        run_id: str,
        verdict: Verdict,
        plan_json: str | None = None,
        reports_dir: str | None = None,
        *,
        effects: Sequence[Intent] = (),
    ) -> None:
        """Record a run's verdict, findings and the effects that show it, all at once."""
        _require("run state", verdict.state, sorted(VERDICT_STATES))
        with self._write() as session:
            row = self._run_row(session, run_id)
            now = self._clock()
            if row.state not in OPEN_STATES or not self._move(session, row, verdict.state, now=now):
                raise RunClosed(f"run {run_id!r} is already {row.state}")
            row.judge = verdict.judge
            row.model_use = verdict.model_use.model_dump() if verdict.model_use else None
            row.summary = verdict.summary
            row.unproven = list(verdict.unproven)
            row.plan_json = plan_json
            row.reports_dir = reports_dir
            session.add_all(
                FindingRow(
                    run_id=run_id,
                    finding_id=f.id,
                    rule=f.rule,
                    severity=f.severity,
                    check=f.check,
                    title=f.title,
                    evidence=list(f.evidence),
                    rules=list(f.rules),
                )
                for f in verdict.findings
            )
            self._enqueue(session, run_id, effects, now, shows_state=True)

    def mark_abandoned(self, run_id: str, reason: str, *, effects: Sequence[Intent] = ()) -> bool:
        """Turn a run a crash left open into `error`; return False if it was decided."""
        with self._write() as session:
            row = self._run_row(session, run_id)
            if row.state not in OPEN_STATES:
                return False
            now = self._clock()
            why = reason.strip() or "no reason was given"
            session.add(RunEventRow(run_id=run_id, at=now, kind="abandoned", detail=why))
            self._move(session, row, "error", now=now)
            row.summary = (
                f"The review was abandoned: {why}. This says nothing about the pull request."
            )
            self._enqueue(session, run_id, effects, now, shows_state=True)
            return True

    def move(
        self,
        run_id: str,
        to_state: RunState,
        detail: str = "",
        *,
        from_state: RunState | None = None,
        effects: Sequence[Intent] = (),
        command: tuple[int, str] | None = None,
    ) -> bool:
        """Move a run where the state machine allows; False (nothing written) otherwise.

        ``command`` (its id, and why) is a verb this move applies: it is marked applied
        in the same transaction, so a redelivered comment never applies it twice.

        ``from_state`` also requires the run to be there now (an approval moves a
        `waiting` run only). Moving to `dismissed` remembers the hold it lifted, and
        moving out of `dismissed` goes back to that hold only. The effects that show the
        move are recorded in the same transaction.
        """
        _require("run state", to_state, RUN_STATES)
        with self._write() as session:
            row = self._run_row(session, run_id)
            if from_state is not None and row.state != from_state:
                return False
            if row.state == "dismissed" and row.lifted is not None and to_state != row.lifted:
                return False
            lifting = row.state if to_state == "dismissed" else None
            now = self._clock()
            if not self._move(session, row, to_state, detail, now=now):
                return False
            if lifting is not None:
                row.lifted = lifting
            self._enqueue(session, run_id, effects, now, shows_state=True)
            if command is not None:
                self._decide_command(session, command[0], "applied", command[1], row, now)
            return True

    def _move(
        self, session: Session, row: RunRow, to_state: RunState, detail: str = "", *, now: datetime
    ) -> bool:
        # Every change of a run's state goes through here, and here asks runstate.
        if not may_move(row.state, to_state):
            return False
        row.state = to_state
        row.updated_at = now
        row.verdict_at = None  # shown anew by this move's effects, by GitHub's clock
        if to_state not in OPEN_STATES and row.finished_at is None:
            row.finished_at = now
        said = f"{to_state}: {detail}" if detail else to_state
        session.add(RunEventRow(run_id=row.id, at=now, kind="state", detail=clip(said, MAX_TAIL)))
        return True

    # ---------------------------------------------------------------- runs on GitHub

    def bind_github(self, run_id: str, **fields: int | str | None) -> None:
        """Record where a run lives on GitHub (installation, check, workflow run, review)."""
        if unknown := set(fields) - _GITHUB_FIELDS:
            raise ValueError(f"not a GitHub field of a run: {sorted(unknown)}")
        with self._write() as session:
            row = self._run_row(session, run_id)
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = self._clock()

    def note_request(self, delivery_id: str, outcome: str, run_id: str | None = None) -> None:
        """Record what became of a review request: the run it started, or why not."""
        with self._write() as session:
            session.execute(
                update(ReviewRequestRow)
                .where(ReviewRequestRow.delivery_id == delivery_id)
                .values(outcome=clip(outcome, MAX_TAIL), run_id=run_id)
            )

    def run_of_delivery(self, delivery_id: str) -> str | None:
        """Return the run a delivery started, if it started one."""
        with self._read() as session:
            return session.scalar(
                select(RunRow.id).where(RunRow.delivery_id == delivery_id).limit(1)
            )

    def open_runs(self, session_id: str | None = None) -> list[RunRecord]:
        """Return the undecided runs of pull requests (of one session), oldest first."""
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(RunRow.state.in_(OPEN_STATES), SessionRow.kind == "github")
        )
        if session_id is not None:
            query = query.where(RunRow.session_id == session_id)
        with self._read() as session:
            return self._records(session, query.order_by(RunRow.started_at, RunRow.id))

    def run_of_workflow_run(self, repo: str, workflow_run_id: int) -> RunRecord | None:
        """Return the run that dispatched a workflow run of ``repo``."""
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(RunRow.workflow_run_id == workflow_run_id, SessionRow.repo == repo)
        )
        with self._read() as session:
            found = self._records(session, query)
        return found[0] if found else None

    def run_of_check(self, repo: str, check_run_id: int) -> RunRecord | None:
        """Return the newest run that owns a check run of ``repo``."""
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(RunRow.check_run_id == check_run_id, SessionRow.repo == repo)
            .order_by(RunRow.started_at.desc(), RunRow.id.desc())
            .limit(1)
        )
        with self._read() as session:
            found = self._records(session, query)
        return found[0] if found else None

    def move_open(
        self,
        run_id: str,
        from_state: RunState,
        to_state: RunState,
        detail: str = "",
        *,
        effects: Sequence[Intent] = (),
    ) -> bool:
        """Move an undecided run from one state to another; False if it was elsewhere."""
        if from_state not in OPEN_STATES:
            raise ValueError(f"{from_state} is not an undecided state")
        return self.move(run_id, to_state, detail, from_state=from_state, effects=effects)

    def supersede(self, run_id: str, by_run: str, *, effects: Sequence[Intent] = ()) -> bool:
        """Mark an undecided run superseded; False if it was decided meanwhile."""
        with self._write() as session:
            row = self._run_row(session, run_id)
            now = self._clock()
            if not self._move(session, row, "superseded", f"by run {by_run}", now=now):
                return False
            row.summary = f"Superseded by run {by_run}: a newer head was pushed."
            # A superseded run posts nothing: what it meant to write and has not is dropped.
            session.execute(
                update(EffectRow)
                .where(EffectRow.run_id == run_id, EffectRow.state == "pending")
                .values(state="cancelled", done_at=now, error=f"superseded by run {by_run}")
            )
            self._enqueue(session, run_id, effects, now)
            return True

    # ---------------------------------------------------------------- run leases

    def acquire_run(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Hold a run for ``lease_s`` to act on it; False while another relay holds it."""
        if not owner or len(owner) > 128:
            raise ValueError("a lease owner has 1 to 128 characters")
        if lease_s <= 0:
            raise ValueError("a lease lasts more than 0 seconds")
        with self._write() as session:
            row = self._run_row(session, run_id)
            now = self._clock()
            if (
                row.lease_owner not in (None, owner)
                and row.lease_until is not None
                and row.lease_until > now
            ):
                return False
            row.lease_owner = owner
            row.lease_until = now + timedelta(seconds=lease_s)
            return True

    def release_run(self, run_id: str, owner: str) -> None:
        """Let go of a run's lease (nothing happens if ``owner`` does not hold it)."""
        with self._write() as session:
            session.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.lease_owner == owner)
                .values(lease_owner=None, lease_until=None)
            )

    def unleased_open_runs(self) -> list[RunRecord]:
        """Return undecided pull-request runs nobody holds (or whose holder's lease ran out)."""
        now = self._clock()
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(
                RunRow.state.in_(OPEN_STATES),
                SessionRow.kind == "github",
                or_(RunRow.lease_owner.is_(None), RunRow.lease_until < now),
            )
            .order_by(RunRow.started_at, RunRow.id)
        )
        with self._read() as session:
            return self._records(session, query)

    # ---------------------------------------------------------------- reading

    def get_run(self, run_id: str) -> RunRecord:
        """Return one run with its findings."""
        with self._read() as session:
            records = self._records(session, select(RunRow).where(RunRow.id == run_id))
        if not records:
            raise UnknownRun(f"no run {run_id!r}")
        return records[0]

    def list_runs(
        self, limit: int = 50, *, states: Sequence[RunState] | None = None
    ) -> list[RunRecord]:
        """Return the newest runs first, optionally only those in ``states``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        query = select(RunRow)
        if states is not None:
            for state in states:
                _require("run state", state, RUN_STATES)
            query = query.where(RunRow.state.in_(list(states)))
        query = query.order_by(RunRow.started_at.desc(), RunRow.id.desc()).limit(limit)
        with self._read() as session:
            return self._records(session, query)

    def events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """Return a run's events with ids above ``after``, oldest first."""
        with self._read() as session:
            if session.get(RunRow, run_id) is None:
                raise UnknownRun(f"no run {run_id!r}")
            rows = session.scalars(
                select(RunEventRow)
                .where(RunEventRow.run_id == run_id, RunEventRow.id > after)
                .order_by(RunEventRow.id)
            )
            return [RunEvent(r.id, r.run_id, r.at, r.kind, r.detail) for r in rows]

"""Merge attempts from the run page (docs/design.md section 12): recorded, claimed once, settled.

An attempt starts ``reading`` (the gate's two passes), then ends ``refused`` or
``blocked`` without writing to GitHub, or is *claimed*: moved to ``sent`` before the
merge call is made. The claim is the record's rule, not a lock in memory: a partial
unique index admits one attempt per (repository, pull request, head) in ``sent``,
``queued``, ``unknown`` or ``merged``, so two clicks, two tabs or two relays make one
call. ``unknown`` (the call was cut off after it was sent) and ``queued`` stay live until
GitHub shows the pull request merged or closed; ``failed`` lets the head go again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app_relay.store.base import StoreBase
from app_relay.store.merge_tables import (
    MERGE_LIVE,
    MERGE_STATES,
    MergeAttemptRow,
    MergeNewsRow,
    MergeState,
)
from app_relay.store.tables import (
    RunEventRow,
    RunRow,
    SessionRow,
    StoreError,
    UnknownRun,
    _require,
)
from cujo_action.schema import MAX_TAIL, clip

# The states an attempt is settled in; the others may still move.
MERGE_SETTLED: frozenset[MergeState] = frozenset({"refused", "blocked", "merged", "failed"})
# Moves an attempt may make; anything else is refused (a settled attempt never moves).
_MOVES: dict[MergeState, frozenset[MergeState]] = {
    "reading": frozenset({"refused", "blocked", "sent"}),
    "sent": frozenset({"merged", "queued", "unknown", "failed"}),
    "queued": frozenset({"merged", "failed", "unknown"}),
    "unknown": frozenset({"merged", "failed", "queued"}),
}
MAX_WORDS = 2000


class MergeClaimed(StoreError):
    """Another attempt holds this head's merge (in flight, or merged already)."""

    def __init__(self, holder: MergeAttempt | None) -> None:
        self.holder = holder
        said = f"attempt {holder.id} by {holder.login} ({holder.state})" if holder else "another"
        super().__init__(f"this head's merge is held by {said}")


@dataclass(frozen=True)
class MergeAttempt:
    """One click on a run page's merge action, as the record holds it."""

    id: int
    run_id: str
    repo: str
    pr_number: int
    login: str
    at: datetime
    head_sha: str
    base_ref: str
    base_sha: str | None
    first_reading: Mapping[str, Any] | None
    second_reading: Mapping[str, Any] | None
    method: str
    state: MergeState
    status: int | None
    words: str
    merged_sha: str | None
    merged_by: str | None
    settled_at: datetime | None

    @property
    def live(self) -> bool:
        """Say whether the attempt holds its head (in flight, or merged)."""
        return self.state in MERGE_LIVE

    @property
    def in_flight(self) -> bool:
        """Say whether GitHub's last word on it is still awaited (the action stays off)."""
        return self.state in ("reading", "sent", "queued", "unknown")


def _attempt(row: MergeAttemptRow) -> MergeAttempt:
    return MergeAttempt(
        id=row.id,
        run_id=row.run_id,
        repo=row.repo,
        pr_number=row.pr_number,
        login=row.login,
        at=row.at,
        head_sha=row.head_sha,
        base_ref=row.base_ref,
        base_sha=row.base_sha,
        first_reading=dict(row.first_reading) if row.first_reading is not None else None,
        second_reading=dict(row.second_reading) if row.second_reading is not None else None,
        method=row.method,
        state=row.state,
        status=row.status,
        words=row.words,
        merged_sha=row.merged_sha,
        merged_by=row.merged_by,
        settled_at=row.settled_at,
    )


class MergesStore(StoreBase):
    """The merge attempts of run pages: one live merge per head, kept by the database."""

    def begin_merge(self, run_id: str, *, login: str, method: str) -> MergeAttempt:
        """Record a click as an attempt ``reading``, pinned to the run's head and base.

        The head, base and pull request come from the run's record, never from the click.
        """
        with self._write() as session:
            run = session.get(RunRow, run_id)
            if run is None:
                raise UnknownRun(f"no run {run_id!r}")
            owner = session.get(SessionRow, run.session_id)
            if owner is None or owner.pr_number is None or owner.kind != "github":
                raise StoreError(f"run {run_id!r} is not a pull request's run on GitHub")
            row = MergeAttemptRow(
                run_id=run_id,
                repo=owner.repo,
                pr_number=owner.pr_number,
                login=clip(login, 64),
                at=self._clock(),
                head_sha=run.head_sha,
                base_ref=run.base_ref or "",
                method=clip(method, 16),
                state="reading",
                words="",
            )
            session.add(row)
            session.flush()
            return _attempt(row)

    def get_merge(self, attempt_id: int) -> MergeAttempt:
        """Return one attempt."""
        with self._read() as session:
            row = session.get(MergeAttemptRow, attempt_id)
            if row is None:
                raise StoreError(f"no merge attempt {attempt_id}")
            return _attempt(row)

    def run_merges(self, run_id: str) -> list[MergeAttempt]:
        """Return a run's merge attempts, oldest first."""
        query = (
            select(MergeAttemptRow)
            .where(MergeAttemptRow.run_id == run_id)
            .order_by(MergeAttemptRow.id)
        )
        with self._read() as session:
            return [_attempt(row) for row in session.scalars(query)]

    def live_merge(self, repo: str, pr_number: int, head_sha: str) -> MergeAttempt | None:
        """Return the attempt holding this head's merge, if one does."""
        with self._read() as session:
            row = session.scalar(self._live_query(repo, pr_number, head_sha))
            return _attempt(row) if row is not None else None

    def unsettled_merges(self, repo: str | None = None) -> list[MergeAttempt]:
        """Return the attempts GitHub's last word is awaited on (sent, queued, unknown)."""
        query = select(MergeAttemptRow).where(
            MergeAttemptRow.state.in_(["sent", "queued", "unknown"])
        )
        if repo is not None:
            query = query.where(MergeAttemptRow.repo == repo)
        with self._read() as session:
            return [_attempt(row) for row in session.scalars(query.order_by(MergeAttemptRow.id))]

    def merged_runs(self, run_ids: Collection[str]) -> dict[str, MergeAttempt]:
        """Return the merged attempt of each of ``run_ids`` that was merged from the board."""
        if not run_ids:
            return {}
        query = select(MergeAttemptRow).where(
            MergeAttemptRow.run_id.in_(sorted(run_ids)), MergeAttemptRow.state == "merged"
        )
        with self._read() as session:
            return {row.run_id: _attempt(row) for row in session.scalars(query)}

    def record_readings(
        self,
        attempt_id: int,
        first: Mapping[str, Any] | None,
        second: Mapping[str, Any] | None,
        *,
        base_sha: str | None = None,
    ) -> None:
        """Keep the gate's two passes on an attempt that is still reading."""
        with self._write() as session:
            row = self._attempt_row(session, attempt_id)
            if row.state != "reading":
                raise StoreError(f"merge attempt {attempt_id} is {row.state}, not reading")
            row.first_reading = dict(first) if first is not None else None
            row.second_reading = dict(second) if second is not None else None
            row.base_sha = base_sha

    def claim_merge(self, attempt_id: int) -> MergeAttempt:
        """Move a reading attempt to ``sent``: the one claim on its head, or ``MergeClaimed``.

        Made before the merge call. The loser of a race is settled ``refused``, naming the
        attempt that holds the head.
        """
        try:
            with self._write() as session:
                row = self._attempt_row(session, attempt_id)
                self._move_merge(row, "sent")
                session.flush()  # the unique index answers here
                return _attempt(row)
        except IntegrityError:
            pass
        attempt = self.get_merge(attempt_id)
        holder = self.live_merge(attempt.repo, attempt.pr_number, attempt.head_sha)
        said = (
            f"attempt {holder.id} by {holder.login} is {holder.state} on this head"
            if holder is not None
            else "another attempt held this head"
        )
        self.settle_merge(attempt_id, "refused", f"not sent: {said}")
        raise MergeClaimed(holder)

    def settle_merge(
        self,
        attempt_id: int,
        state: MergeState,
        words: str = "",
        *,
        status: int | None = None,
        merged_sha: str | None = None,
        merged_by: str | None = None,
    ) -> MergeAttempt:
        """Move an attempt on and keep GitHub's words; a settled state stamps ``settled_at``.

        The run's timeline gets a ``merge`` line for it.
        """
        _require("merge state", state, MERGE_STATES)
        with self._write() as session:
            row = self._attempt_row(session, attempt_id)
            self._move_merge(row, state)
            now = self._clock()
            row.words = clip(words, MAX_WORDS)
            if status is not None:
                row.status = status
            if merged_sha is not None:
                row.merged_sha = merged_sha
            if merged_by is not None:
                row.merged_by = clip(merged_by, 64)
            if state in MERGE_SETTLED:
                row.settled_at = now
            detail = f"attempt {row.id} by {row.login}: {state}" + (f" ({words})" if words else "")
            session.add(
                RunEventRow(run_id=row.run_id, at=now, kind="merge", detail=clip(detail, MAX_TAIL))
            )
            return _attempt(row)

    # ---------------------------------------------------------------- news for pages

    def note_merge_news(self, repo: str | None) -> None:
        """Say a GitHub event about ``repo`` (None: some repository) may change a reading."""
        with self._write() as session:
            bump_merge_news(session, [repo], self._clock())

    def merge_news(self, repo: str) -> int:
        """Return how many events may have changed ``repo``'s reading (its own and "*")."""
        query = select(MergeNewsRow.seq).where(MergeNewsRow.repo.in_([repo, "*"]))
        with self._read() as session:
            return int(sum(session.scalars(query)))

    # ---------------------------------------------------------------- inside

    @staticmethod
    def _live_query(repo: str, pr_number: int, head_sha: str) -> Any:
        return select(MergeAttemptRow).where(
            MergeAttemptRow.repo == repo,
            MergeAttemptRow.pr_number == pr_number,
            MergeAttemptRow.head_sha == head_sha,
            MergeAttemptRow.state.in_(list(MERGE_LIVE)),
        )

    @staticmethod
    def _attempt_row(session: Any, attempt_id: int) -> MergeAttemptRow:
        row: MergeAttemptRow | None = session.scalar(
            select(MergeAttemptRow).where(MergeAttemptRow.id == attempt_id).with_for_update()
        )
        if row is None:
            raise StoreError(f"no merge attempt {attempt_id}")
        return row

    @staticmethod
    def _move_merge(row: MergeAttemptRow, state: MergeState) -> None:
        if state not in _MOVES.get(row.state, frozenset()):
            raise StoreError(f"merge attempt {row.id} cannot move from {row.state} to {state}")
        row.state = state


def bump_merge_news(session: Session, repos: Iterable[str | None], now: datetime) -> None:
    """Count one piece of news for each of ``repos`` (None: every one) inside ``session``.

    One statement a repository, each an upsert: two workers making a repository's first
    row at once both count, where a read then an insert had one fail with a duplicate key.
    The rows are taken in one order, so transactions bumping several never deadlock.
    """
    counts = Counter(clip(repo, 256) if repo else "*" for repo in repos)
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    for key in sorted(counts):
        new = insert(MergeNewsRow).values(repo=key, seq=counts[key], changed_at=now)
        more = {"seq": MergeNewsRow.seq + new.excluded.seq, "changed_at": new.excluded.changed_at}
        session.execute(new.on_conflict_do_update(index_elements=["repo"], set_=more))

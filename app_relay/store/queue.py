"""The queue of pull requests waiting for a sandbox run: kept in the record, so it
survives a restart and every relay sharing the record sees the same one.

A pull request over its repository's or its author's cap (``runstate/caps.py``) waits here,
one entry per pull request (a newer head takes its place). ``admit_queued`` decides, in
one transaction, which waiting heads of a repository may start now: it counts the sandbox
runs in flight and the heads other relays admitted and have not started yet, walks the
queue first-timers last and oldest first, and marks those that fit as admitted by the
asking relay under a lease (a relay that dies before starting one lets it go at the
lease's end). Relays sharing PostgreSQL admit one at a time per repository (an advisory
lock); SQLite's writes are serial already (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, Boolean, ForeignKey, Integer, String, Text, delete, select, text
from sqlalchemy.orm import Mapped, Session, mapped_column

from app_relay.runstate.caps import Caps, why_wait
from app_relay.runstate.machine import OPEN_STATES
from app_relay.store.base import StoreBase
from app_relay.store.tables import Base, RunRow, SessionRow, UTCDateTime
from cujo_action.schema import MAX_TAIL, clip

# Admissions of one repository happen one at a time across relays sharing PostgreSQL.
_QUEUE_LOCK = 0x43550000


class QueuedRow(Base):
    """One pull request's head waiting for a sandbox run, or admitted and about to start."""

    __tablename__ = "run_queue"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), unique=True)
    repo: Mapped[str] = mapped_column(String(256), index=True)
    pr_number: Mapped[int] = mapped_column(Integer)
    installation_id: Mapped[int] = mapped_column(BigInteger)
    base_sha: Mapped[str] = mapped_column(String(40))
    head_sha: Mapped[str] = mapped_column(String(40))
    base_ref: Mapped[str | None] = mapped_column(String(256))
    default_branch: Mapped[str | None] = mapped_column(String(256))
    delivery_id: Mapped[str] = mapped_column(String(64))
    # The review request's action (opened, synchronize, ...), asked again when it starts.
    action: Mapped[str] = mapped_column(String(32))
    author: Mapped[str] = mapped_column(String(64))
    # GitHub's author_association says the author is new here: behind everyone else.
    first_timer: Mapped[bool] = mapped_column(Boolean)
    # The caps under the policy at base, as they were when the head was queued.
    repo_cap: Mapped[int] = mapped_column(Integer)
    author_cap: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text, default="")
    # The `cujo/guard` check showing `queued`; the run that starts takes it over.
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime())
    admitted_by: Mapped[str | None] = mapped_column(String(128))
    admitted_until: Mapped[datetime | None] = mapped_column(UTCDateTime())


@dataclass(frozen=True)
class NewQueued:
    """A head to queue (or to start at once if ``admit_queued`` lets it)."""

    session_id: str
    repo: str
    pr_number: int
    installation_id: int
    base_sha: str
    head_sha: str
    base_ref: str | None
    default_branch: str | None
    delivery_id: str
    action: str
    author: str
    first_timer: bool
    repo_cap: int
    author_cap: int
    check_run_id: int | None = None


@dataclass(frozen=True)
class Queued(NewQueued):
    """A queued head as the record keeps it."""

    id: int = 0
    reason: str = ""
    queued_at: datetime | None = None
    admitted_by: str | None = None


@dataclass(frozen=True)
class Admission:
    """What one admission decided: heads the asking relay starts now, and those that wait."""

    admitted: tuple[Queued, ...]
    waiting: tuple[Queued, ...]
    # The waiting heads whose reason changed: their checks say the new one.
    changed: tuple[Queued, ...]

    def reason_of(self, queued_id: int) -> str:
        """Return why a waiting head waits ("" when it was admitted or is unknown)."""
        return next((q.reason for q in self.waiting if q.id == queued_id), "")


_NEW = tuple(f.name for f in fields(NewQueued))


def _queued(row: QueuedRow) -> Queued:
    return Queued(
        **{name: getattr(row, name) for name in _NEW},
        id=row.id,
        reason=row.reason,
        queued_at=row.queued_at,
        admitted_by=row.admitted_by,
    )


class QueueStore(StoreBase):
    """The queue of heads waiting for a sandbox run, and admitting them under the caps."""

    def enqueue(self, new: NewQueued) -> Queued:
        """Queue a pull request's head; the same head queued already keeps its place.

        A newer head of the same pull request takes the older one's place (at the back).
        """
        now = self._clock()
        with self._write() as session:
            row = session.scalars(
                select(QueuedRow).where(QueuedRow.session_id == new.session_id)
            ).one_or_none()
            if row is not None and row.head_sha == new.head_sha:
                # A redelivery, a catch-up or a retry of the same head: same place.
                row.repo_cap, row.author_cap = new.repo_cap, new.author_cap
                if new.check_run_id is not None:
                    row.check_run_id = new.check_run_id
                return _queued(row)
            if row is not None:
                session.delete(row)
                session.flush()
            row = QueuedRow(**{n: getattr(new, n) for n in _NEW}, reason="", queued_at=now)
            session.add(row)
            session.flush()
            return _queued(row)

    def queued_of(self, session_id: str) -> Queued | None:
        """Return the head a pull request has waiting, if any."""
        with self._read() as session:
            row = session.scalars(
                select(QueuedRow).where(QueuedRow.session_id == session_id)
            ).one_or_none()
            return None if row is None else _queued(row)

    def queued(self, repo: str | None = None) -> list[Queued]:
        """Return the waiting heads (of ``repo``) in the order they would start."""
        with self._read() as session:
            query = select(QueuedRow).order_by(
                QueuedRow.first_timer, QueuedRow.queued_at, QueuedRow.id
            )
            if repo is not None:
                query = query.where(QueuedRow.repo == repo)
            return [_queued(r) for r in session.scalars(query)]

    def queued_repos(self) -> list[str]:
        """Return the repositories with heads waiting."""
        with self._read() as session:
            return list(session.scalars(select(QueuedRow.repo).distinct().order_by(QueuedRow.repo)))

    def drop_queued(self, queued_id: int) -> bool:
        """Take a head off the queue (started, superseded, or not to be reviewed)."""
        with self._write() as session:
            done = session.execute(delete(QueuedRow).where(QueuedRow.id == queued_id))
            return bool(getattr(done, "rowcount", 0))

    def set_queued_check(self, queued_id: int, check_run_id: int | None, reason: str) -> None:
        """Keep the `cujo/guard` check that shows a head queued, and the reason it shows."""
        with self._write() as session:
            row = session.get(QueuedRow, queued_id)
            if row is not None:
                row.check_run_id = check_run_id
                row.reason = clip(reason, MAX_TAIL)

    def admit_queued(self, repo: str, holder: str, lease_s: float) -> Admission:
        """Admit the waiting heads of ``repo`` that fit under the caps now, for ``holder``.

        Returns the heads ``holder`` is to start (with those it admitted before and has
        not started yet), why each other head waits, and which of them wait for another
        reason than their check shows (``set_queued_check`` keeps the one shown).
        """
        if not holder or len(holder) > 128:
            raise ValueError("a holder name has 1 to 128 characters")
        now = self._clock()
        with self._write() as session:
            self._lock_repo(session, repo)
            flying = session.execute(
                select(RunRow.session_id, RunRow.author)
                .join(SessionRow, SessionRow.id == RunRow.session_id)
                .where(
                    SessionRow.repo == repo,
                    RunRow.mode == "sandbox",
                    RunRow.state.in_(OPEN_STATES),
                )
            ).all()
            # (session, author) of each run in flight and each head admitted, not started.
            busy: list[tuple[str, str | None]] = [(s, a) for s, a in flying]
            rows = list(
                session.scalars(
                    select(QueuedRow)
                    .where(QueuedRow.repo == repo)
                    .order_by(QueuedRow.first_timer, QueuedRow.queued_at, QueuedRow.id)
                )
            )
            live = [r for r in rows if r.admitted_until is not None and r.admitted_until > now]
            busy.extend((r.session_id, r.author) for r in live)
            mine = [r for r in live if r.admitted_by == holder]
            admitted = list(mine)
            waiting: list[Queued] = []
            changed: list[Queued] = []
            for row in rows:
                if row in live:
                    continue
                others = [(s, a) for s, a in busy if s != row.session_id]
                reason = why_wait(
                    Caps(repo=row.repo_cap, author=row.author_cap),
                    repo_busy=len(others),
                    author_busy=sum(1 for _, a in others if a == row.author),
                    first_timer=row.first_timer,
                )
                if not reason:
                    row.admitted_by = holder
                    row.admitted_until = now + timedelta(seconds=lease_s)
                    busy.append((row.session_id, row.author))
                    admitted.append(row)
                    continue
                fresh = replace(_queued(row), reason=clip(reason, MAX_TAIL))
                if fresh.reason != row.reason:
                    changed.append(fresh)
                waiting.append(fresh)
            session.flush()
            return Admission(tuple(_queued(r) for r in admitted), tuple(waiting), tuple(changed))

    def _lock_repo(self, session: Session, repo: str) -> None:
        if self._engine.dialect.name == "postgresql":
            key = _QUEUE_LOCK + zlib.crc32(repo.encode())
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

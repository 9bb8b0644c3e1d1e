"""Catch-up passes: who runs one (a lease), how far the last ones reached, what they did.

A pass (``runs/missed_webhooks.py``) asks GitHub to redeliver the webhooks that never reached the
relay and sweeps open pull requests whose head has no ``cujo/guard``. Relays sharing the
record take turns: a pass is begun under a lease, one at a time, and a pass that
finished lately stands for everyone until the interval has passed. Each pass keeps its
tally for the board, and how far its listings reached, so the next pass starts there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from sqlalchemy import Boolean, Integer, String, Text, func, select, text
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from app_relay.store.base import StoreBase
from app_relay.store.records import NewDelivery
from app_relay.store.tables import (
    Base,
    DeliveryRow,
    ReviewRequestRow,
    RunRow,
    SessionRow,
    UTCDateTime,
)
from cujo_action.schema import clip

# Passes begin one at a time across relays sharing PostgreSQL (SQLite: BEGIN IMMEDIATE).
_PASS_LOCK = 0x43554355
MAX_NOTE = 1_000


class CatchUpPassRow(Base):
    """One catch-up pass: its lease while it runs, then its tally."""

    __tablename__ = "catch_up_passes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    holder: Mapped[str] = mapped_column(String(128))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    lease_until: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The sweep read every open pull request, not only those updated since the last pass.
    full: Mapped[bool] = mapped_column(Boolean)
    deliveries_listed: Mapped[int] = mapped_column(Integer, default=0)
    redeliveries_asked: Mapped[int] = mapped_column(Integer, default=0)
    # Failed deliveries not asked again: the relay itself had refused them (a 4xx).
    redeliveries_skipped: Mapped[int] = mapped_column(Integer, default=0)
    pulls_listed: Mapped[int] = mapped_column(Integer, default=0)
    pulls_swept: Mapped[int] = mapped_column(Integer, default=0)
    # Which caps stopped the pass short ("" none), and what went wrong ("" nothing).
    capped: Mapped[str] = mapped_column(Text, default="")
    trouble: Mapped[str] = mapped_column(Text, default="")
    # Set when the listing was whole: the next pass lists from here on.
    deliveries_through: Mapped[datetime | None] = mapped_column(UTCDateTime())
    pulls_through: Mapped[datetime | None] = mapped_column(UTCDateTime())


@dataclass
class CatchUpTally:
    """What one pass did, as it goes (``runs/missed_webhooks.py`` fills it in)."""

    full: bool = False
    deliveries_listed: int = 0
    redeliveries_asked: int = 0
    redeliveries_skipped: int = 0
    pulls_listed: int = 0
    pulls_swept: int = 0
    capped: str = ""
    trouble: str = ""
    deliveries_through: datetime | None = None
    pulls_through: datetime | None = None

    def cap(self, said: str) -> None:
        """Note a cap the pass reached."""
        self.capped = clip(f"{self.capped}; {said}" if self.capped else said, MAX_NOTE)

    def fail(self, said: str) -> None:
        """Note something that went wrong (the pass goes on with the rest)."""
        self.trouble = clip(f"{self.trouble}; {said}" if self.trouble else said, MAX_NOTE)


@dataclass(frozen=True)
class CatchUpStart:
    """A pass just begun: its id, and where its listings start (None: as far back as allowed)."""

    pass_id: int
    started_at: datetime
    deliveries_since: datetime | None
    pulls_since: datetime | None


@dataclass(frozen=True)
class CatchUpPass:
    """A pass as the record keeps it."""

    id: int
    holder: str
    started_at: datetime
    lease_until: datetime
    finished_at: datetime | None
    tally: CatchUpTally


def _pass(row: CatchUpPassRow) -> CatchUpPass:
    tally = CatchUpTally(**{f.name: getattr(row, f.name) for f in fields(CatchUpTally)})
    return CatchUpPass(row.id, row.holder, row.started_at, row.lease_until, row.finished_at, tally)


class CatchUpStore(StoreBase):
    """Catch-up passes, and the record's answers a pass asks before it acts."""

    # ---------------------------------------------------------------- passes

    def _lock_passes(self, session: Session) -> None:
        if self._engine.dialect.name == "postgresql":
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PASS_LOCK})

    def begin_catch_up(
        self, holder: str, *, lease_s: float, every_s: float, first: bool
    ) -> CatchUpStart | None:
        """Begin a pass under a lease, or None: one is under way, or one ended lately.

        ``first`` (a relay's first pass since it started) does not wait out the
        interval after another relay's pass, and its sweep reads every open pull request.
        """
        if not holder or len(holder) > 128:
            raise ValueError("a holder name has 1 to 128 characters")
        now = self._clock()
        with self._write() as session:
            self._lock_passes(session)
            newest = session.scalar(
                select(CatchUpPassRow).order_by(CatchUpPassRow.id.desc()).limit(1)
            )
            if newest is not None:
                running = newest.finished_at is None and newest.lease_until > now
                lately = newest.finished_at is not None and (
                    newest.started_at > now - timedelta(seconds=every_s)
                )
                if running or (lately and not first):
                    return None
            deliveries_since = session.scalar(select(func.max(CatchUpPassRow.deliveries_through)))
            pulls_since = None if first else session.scalar(
                select(func.max(CatchUpPassRow.pulls_through))
            )  # fmt: skip
            row = CatchUpPassRow(
                holder=holder,
                started_at=now,
                lease_until=now + timedelta(seconds=lease_s),
                full=pulls_since is None,
                capped="",
                trouble="",
            )
            session.add(row)
            session.flush()
            return CatchUpStart(row.id, now, deliveries_since, pulls_since)

    def renew_catch_up(self, pass_id: int, holder: str, lease_s: float) -> bool:
        """Extend a running pass's lease; False when it is no longer this holder's."""
        now = self._clock()
        with self._write() as session:
            row = session.get(CatchUpPassRow, pass_id)
            if row is None or row.holder != holder or row.finished_at is not None:
                return False
            row.lease_until = now + timedelta(seconds=lease_s)
            return True

    def finish_catch_up(self, pass_id: int, holder: str, tally: CatchUpTally) -> bool:
        """Record a pass's tally and end it; False when it was not this holder's."""
        now = self._clock()
        with self._write() as session:
            row = session.get(CatchUpPassRow, pass_id)
            if row is None or row.holder != holder or row.finished_at is not None:
                return False
            for f in fields(CatchUpTally):
                setattr(row, f.name, getattr(tally, f.name))
            row.capped = clip(tally.capped, MAX_NOTE)
            row.trouble = clip(tally.trouble, MAX_NOTE)
            row.finished_at = now
            row.lease_until = now
            return True

    def catch_up_passes(self, limit: int = 20) -> list[CatchUpPass]:
        """Return the newest passes, newest first (one under way included)."""
        with self._read() as session:
            rows = session.scalars(
                select(CatchUpPassRow).order_by(CatchUpPassRow.id.desc()).limit(limit)
            )
            return [_pass(row) for row in rows]

    def last_catch_up(self) -> CatchUpPass | None:
        """Return the newest finished pass, if any finished."""
        with self._read() as session:
            row = session.scalar(
                select(CatchUpPassRow)
                .where(CatchUpPassRow.finished_at.is_not(None))
                .order_by(CatchUpPassRow.id.desc())
                .limit(1)
            )
            return None if row is None else _pass(row)

    # ---------------------------------------------------------------- what a pass asks

    def known_deliveries(self, delivery_ids: Iterable[str]) -> set[str]:
        """Return which of ``delivery_ids`` the relay recorded (its intake queue included)."""
        wanted = list(dict.fromkeys(delivery_ids))
        known: set[str] = set()
        with self._read() as session:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                known.update(
                    session.scalars(select(DeliveryRow.id).where(DeliveryRow.id.in_(chunk)))
                )
        if self._intake is not None:
            known.update(d for d in wanted if d not in known and self._intake.get(d) is not None)
        return known

    def delivery_state(self, delivery_id: str) -> str | None:
        """Return a recorded delivery's state (pending, working, done, failed), or None."""
        with self._read() as session:
            return session.scalar(select(DeliveryRow.state).where(DeliveryRow.id == delivery_id))

    def head_settled(self, repo: str, pr_number: int, head_sha: str, *, draft: bool) -> bool:
        """Say whether the record already took this head further: a run, or a decided request.

        A request counts only with the same ``draft`` flag: a draft made ready for review
        is a new question for the policy.
        """
        with self._read() as session:
            run = session.scalar(
                select(RunRow.id)
                .join(SessionRow, SessionRow.id == RunRow.session_id)
                .where(
                    SessionRow.kind == "github",
                    SessionRow.repo == repo,
                    SessionRow.pr_number == pr_number,
                    RunRow.head_sha == head_sha,
                )
                .limit(1)
            )
            if run is not None:
                return True
            decided = session.scalar(
                select(ReviewRequestRow.id)
                .join(SessionRow, SessionRow.id == ReviewRequestRow.session_id)
                .where(
                    SessionRow.kind == "github",
                    SessionRow.repo == repo,
                    SessionRow.pr_number == pr_number,
                    ReviewRequestRow.head_sha == head_sha,
                    ReviewRequestRow.draft == draft,
                    ReviewRequestRow.outcome.is_not(None),
                )
                .limit(1)
            )
            return decided is not None

    def record_own_delivery(self, new: NewDelivery) -> bool:
        """Record a delivery the relay made itself (a catch-up's), straight into the record.

        Never through the intake queue, which only the webhook process writes; a second
        record of the same id is nothing. Return whether it was new.
        """
        new.check()
        now = self._clock()
        row = {
            **new.columns(),
            "state": "pending",
            "attempts": 0,
            "received_at": now,
            "available_at": now,
        }
        dialect = self._engine.dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        statement = (
            insert(DeliveryRow)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(DeliveryRow.id)
        )
        with self._write() as session:
            return bool(list(session.scalars(statement, [row])))

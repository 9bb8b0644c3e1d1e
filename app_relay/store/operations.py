"""Operating the relay: is the record there, is work waiting, what a stop hands back, pruning.

Reads for ``/readyz`` and ``/metrics`` (a ping, the oldest delivery waiting, runs by
state), the hand-back of a stopping relay's leases, and the record's side of bundle
retention: which finished runs' bundles are past their days, and the mark a pruned
run keeps (its ``reports_dir`` cleared, a ``pruned`` event saying when and why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import func, select, text, update

from app_relay.store.base import StoreBase
from app_relay.store.tables import (
    DeliveryRow,
    EffectRow,
    IntakeCursorRow,
    RunEventRow,
    RunRow,
)
from cujo_action.schema import MAX_TAIL, clip

# The event a run's timeline gets when its bundle is deleted (the board reads it).
PRUNED: Final = "pruned"


@dataclass(frozen=True)
class HandedBack:
    """What a stopping relay gave back: deliveries, runs and effects others may take now."""

    deliveries: int = 0
    runs: int = 0
    effects: int = 0

    def __bool__(self) -> bool:
        return bool(self.deliveries or self.runs or self.effects)

    def __str__(self) -> str:
        return f"{self.deliveries} delivery(ies), {self.runs} run(s) and {self.effects} effect(s)"


def _count(result: object) -> int:
    """Return how many rows an UPDATE changed."""
    return int(getattr(result, "rowcount", 0) or 0)


class OperationsStore(StoreBase):
    """The record's side of readiness, metrics, a clean stop and bundle retention."""

    def ping(self) -> None:
        """Ask the database a trivial question; raise when it cannot answer."""
        with self._read() as session:
            session.execute(text("SELECT 1"))

    def oldest_waiting_at(self) -> datetime | None:
        """Return when the longest-waiting due delivery arrived (None: none is waiting).

        Due: pending and available now, or held past its lease; those still in the
        intake queue file count by when they were received.
        """
        now = self._clock()
        with self._read() as session:
            pending = session.scalar(
                select(func.min(DeliveryRow.available_at)).where(
                    DeliveryRow.state == "pending", DeliveryRow.available_at <= now
                )
            )
            expired = session.scalar(
                select(func.min(DeliveryRow.lease_until)).where(
                    DeliveryRow.state == "working", DeliveryRow.lease_until < now
                )
            )
            through = session.scalar(select(IntakeCursorRow.taken_seq)) or 0
        queued = self._intake.after(through, limit=1) if self._intake is not None else []
        found = [t for t in (pending, expired) if t is not None]
        found.extend(row["received_at"] for row in queued)
        return min(found) if found else None

    def runs_by_state(self) -> dict[str, int]:
        """Return how many runs the record holds in each state."""
        with self._read() as session:
            rows = session.execute(select(RunRow.state, func.count()).group_by(RunRow.state))
            return {str(state): int(count) for state, count in rows}

    def hand_back(self, delivery_workers: Sequence[str], holder: str) -> HandedBack:
        """Let go of what a stopping relay holds, for any relay to take at once.

        The deliveries leased to ``delivery_workers`` go back to the queue (a claim
        that was started still counts as an attempt), and the runs and effects leased to
        ``holder``. An effect keeps its attempts, so whoever makes it next looks on
        GitHub first for what this attempt may have done.
        """
        now = self._clock()
        with self._write() as session:
            deliveries = session.execute(
                update(DeliveryRow)
                .where(
                    DeliveryRow.state == "working",
                    DeliveryRow.worker_id.in_(list(delivery_workers)),
                )
                .values(state="pending", worker_id=None, lease_until=None, available_at=now)
            )
            runs = session.execute(
                update(RunRow)
                .where(RunRow.lease_owner == holder)
                .values(lease_owner=None, lease_until=None)
            )
            effects = session.execute(
                update(EffectRow)
                .where(EffectRow.state == "working", EffectRow.worker_id == holder)
                .values(
                    state="pending",
                    worker_id=None,
                    lease_until=None,
                    available_at=now,
                    error=f"handed back by {holder} as it stopped",
                )
            )
        return HandedBack(_count(deliveries), _count(runs), _count(effects))

    def bundles_past(self, finished_before: datetime) -> list[tuple[str, str]]:
        """Return (run id, bundle folder) of runs that finished before the given time."""
        query = (
            select(RunRow.id, RunRow.reports_dir)
            .where(RunRow.reports_dir.is_not(None), RunRow.finished_at < finished_before)
            .order_by(RunRow.finished_at)
        )
        with self._read() as session:
            return [(run_id, str(folder)) for run_id, folder in session.execute(query)]

    def bundle_folders(self) -> set[str]:
        """Return the bundle folders the record still points at."""
        query = select(RunRow.reports_dir).where(RunRow.reports_dir.is_not(None))
        with self._read() as session:
            return {str(folder) for folder in session.scalars(query)}

    def mark_pruned(self, run_id: str, detail: str) -> bool:
        """Forget a run's bundle folder and say so on its timeline; False if already done."""
        with self._write() as session:
            row = self._run_row(session, run_id)
            if row.reports_dir is None:
                return False
            row.reports_dir = None
            session.add(
                RunEventRow(
                    run_id=run_id, at=self._clock(), kind=PRUNED, detail=clip(detail, MAX_TAIL)
                )
            )
            return True

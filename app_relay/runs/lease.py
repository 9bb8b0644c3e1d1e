"""Serialise work on a run: a lock per pull request here, and the run's lease across relays.

Work on one pull request is serialised by a lock per session (in this process) and by a
lease on the run (across relay processes sharing the record): a relay acts on a run only
while it holds the run's lease, and reconciles only runs nobody holds. The lease is
counted, so acting on a run while already acting on it (starting a run may finish it at
once) takes it once and lets it go once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app_relay.observe.logs import about
from app_relay.store import Store

# How long a relay holds a run while acting on it; one that dies mid-act lets go after it.
RUN_LEASE_S = 300.0


class RunBusy(RuntimeError):
    """Another relay process holds this run right now; the delivery is tried again later."""


class RunLeases:
    """The session locks of this process and the run leases it holds, by the name ``name``."""

    def __init__(self, store: Store, name: str, lease_s: float = RUN_LEASE_S) -> None:
        self.store = store
        self.name = name
        self.lease_s = lease_s
        # Re-entrant: starting a run may finish it at once (a policy error) under the lock.
        self._locks: dict[str, threading.RLock] = {}
        self._locks_lock = threading.Lock()
        self._holding: dict[str, int] = {}
        self._holding_lock = threading.Lock()

    @contextmanager
    def session(self, session_id: str) -> Iterator[None]:
        """Hold the pull request's lock in this process (re-entrant)."""
        with self._locks_lock:
            lock = self._locks.setdefault(session_id, threading.RLock())
        with lock:
            yield

    @contextmanager
    def acting(self, run_id: str) -> Iterator[None]:
        """Hold the run's lease while acting on it (re-entrant); ``RunBusy`` if a peer has it.

        Taken under the session lock, so this relay's own threads never meet here; the
        heartbeat of the coordinator's ``maintain`` renews the leases held while an act lasts.
        """
        with self._holding_lock:
            held = self._holding.get(run_id, 0)
        if held == 0 and not self.store.acquire_run(run_id, self.name, self.lease_s):
            raise RunBusy(f"run {run_id} is being acted on by another relay")
        with self.taken(run_id):
            yield

    @contextmanager
    def taken(self, run_id: str) -> Iterator[None]:
        """Count one more act on a run whose lease this relay holds; let it go after the last.

        Also for a run the record leased to this relay as it recorded it (``start_run``).
        """
        self._count(run_id, +1)
        try:
            with about(run=run_id):  # the lines logged meanwhile name the run
                yield
        finally:
            if self._count(run_id, -1) == 0:
                self.store.release_run(run_id, self.name)

    def _count(self, run_id: str, step: int) -> int:
        with self._holding_lock:
            count = self._holding.get(run_id, 0) + step
            if count:
                self._holding[run_id] = count
            else:
                self._holding.pop(run_id, None)
            return count

    def renew(self) -> None:
        """Renew the leases on the runs this relay is acting on right now."""
        with self._holding_lock:
            held = list(self._holding)
        for run_id in held:
            self.store.acquire_run(run_id, self.name, self.lease_s)

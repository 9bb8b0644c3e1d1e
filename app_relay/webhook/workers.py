"""Work through recorded deliveries with a bounded pool of threads.

Each worker claims one delivery at a time under a lease (``Store.claim_delivery``),
routes it through ``events.ROUTER`` and finishes it. A heartbeat renews the leases of
deliveries in hand, so a slow handler keeps its delivery; a relay that dies stops
renewing, and after the lease runs out any worker (this relay restarted, or another
one sharing the database) takes the delivery over. A finished delivery is never taken
again. ``stop()`` stops claiming and lets the deliveries in hand finish; what is still
in hand after its deadline is handed back by the caller (``Store.hand_back``). A worker
that dies says why, and ``health()`` names it (``/readyz``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from sqlalchemy.exc import SQLAlchemyError

from app_relay.github.event import Event, MalformedEvent
from app_relay.observe import metrics
from app_relay.observe.logs import about
from app_relay.store import MAX_DELIVERY_ATTEMPTS, Delivery, Finished, Store
from app_relay.store.tables import holder_name
from app_relay.webhook.events import ROUTER, Context, Router

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolConfig:
    """How many workers, how long a lease, how patient a retry."""

    workers: int = 4
    lease_s: float = 30.0
    # An idle worker looks again this often even when nobody wakes it (another relay
    # sharing the database may have recorded a delivery, or a lease may have run out).
    idle_s: float = 1.0
    retry_s: float = 5.0  # the first retry's delay, doubled on each further attempt
    max_retry_s: float = 300.0
    max_attempts: int = MAX_DELIVERY_ATTEMPTS
    # A worker claims up to this many deliveries in one transaction and finishes them in
    # one: fewer commits (each a sync to disk) per delivery under load.
    batch: int = 4
    # A worker on one turn (claim, handle, finish) for longer than this is named stuck.
    stuck_s: float = 900.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("a pool has at least one worker")
        if self.lease_s <= 0 or self.idle_s <= 0:
            raise ValueError("leases and idle waits last more than 0 seconds")
        if self.max_attempts < 1:
            raise ValueError("a delivery gets at least one attempt")
        if self.batch < 1:
            raise ValueError("a worker claims at least one delivery at a time")


class WorkerPool:
    """Threads that claim, route and finish deliveries until stopped."""

    def __init__(
        self,
        store: Store,
        context: Context,
        router: Router = ROUTER,
        config: PoolConfig | None = None,
    ) -> None:
        self.store = store
        self.context = context
        self.router = router
        self.config = config or PoolConfig()
        self.name = holder_name()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._drained = threading.Event()
        self._threads: list[threading.Thread] = []
        self._heartbeat_thread: threading.Thread | None = None
        self._in_hand: dict[str, str] = {}  # delivery id → worker id
        self._lock = threading.Lock()
        # When each worker began its current turn, and why a dead one died.
        self._turns: dict[str, float] = {}
        self._died: dict[str, str] = {}

    def start(self) -> None:
        """Start the workers and the lease heartbeat."""
        if self._threads:
            raise RuntimeError("the pool is already started")
        for n in range(self.config.workers):
            worker_id = f"{self.name}/{n}"
            thread = threading.Thread(
                target=self._work, args=(worker_id,), name=f"cujo-worker-{n}", daemon=True
            )
            self._threads.append(thread)
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat, name="cujo-lease-heartbeat", daemon=True
        )
        for thread in [*self._threads, self._heartbeat_thread]:
            thread.start()

    def notify(self) -> None:
        """Wake idle workers: a delivery was just recorded."""
        self._wake.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop claiming, let the deliveries in hand finish; return False on ``timeout``."""
        self._stopping.set()
        self._wake.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        if any(thread.is_alive() for thread in self._threads):
            return False
        self._drained.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join()
        return True

    def in_hand(self) -> int:
        """Return how many deliveries the workers hold right now."""
        with self._lock:
            return len(self._in_hand)

    def worker_ids(self) -> list[str]:
        """Return the ids the workers claim under (what ``Store.hand_back`` releases)."""
        return [f"{self.name}/{n}" for n in range(self.config.workers)]

    def health(self, now: float | None = None) -> list[str]:
        """Name each part of the pool that is not working: dead, stuck, or stopped."""
        now = time.monotonic() if now is None else now
        if not self._threads:
            return ["the worker pool was not started"]
        problems = []
        with self._lock:
            died, turns = dict(self._died), dict(self._turns)
        for n, thread in enumerate(self._threads):
            worker_id = f"{self.name}/{n}"
            if worker_id in died:
                problems.append(f"{thread.name} died: {died[worker_id]}")
            elif not thread.is_alive():
                problems.append(f"{thread.name} is not running")
            elif worker_id in turns and now - turns[worker_id] > self.config.stuck_s:
                problems.append(
                    f"{thread.name} has been on one delivery for {now - turns[worker_id]:.0f}s"
                )
        beat = self._heartbeat_thread
        if beat is not None and not beat.is_alive() and not self._drained.is_set():
            problems.append(f"{beat.name} is not running (leases would run out)")
        if self._stopping.is_set():
            problems.append("the worker pool is stopping")
        return problems

    def _work(self, worker_id: str) -> None:
        try:
            self._claim_and_handle(worker_id)
        except BaseException as exc:
            # A worker must not vanish unnoticed: /readyz names it, with why.
            with self._lock:
                self._died[worker_id] = f"{type(exc).__name__}: {exc}"
            log.critical("%s died", worker_id, exc_info=True)

    def _claim_and_handle(self, worker_id: str) -> None:
        while not self._stopping.is_set():
            with self._lock:
                self._turns[worker_id] = time.monotonic()
            try:
                claimed = self.store.claim_deliveries(
                    worker_id,
                    self.config.lease_s,
                    limit=self.config.batch,
                    max_attempts=self.config.max_attempts,
                )
            except SQLAlchemyError:
                log.exception("%s: could not claim deliveries; trying again", worker_id)
                self._stopping.wait(self.config.idle_s)
                continue
            if not claimed:
                self._wake.wait(self.config.idle_s)
                self._wake.clear()
                continue
            with self._lock:
                for delivery in claimed:
                    self._in_hand[delivery.id] = worker_id
            try:
                results: list[Finished] = []
                for delivery in claimed:
                    if self._stopping.is_set():
                        break  # stopping: what was not started goes back to the queue
                    results.append(self._handle(worker_id, delivery))
                self._finish(worker_id, results)
                self._hand_back(worker_id, [d.id for d in claimed[len(results) :]])
            finally:
                with self._lock:
                    for delivery in claimed:
                        self._in_hand.pop(delivery.id, None)

    def _handle(self, worker_id: str, delivery: Delivery) -> Finished:
        with about(delivery=delivery.id, run=None):
            found = self._dispatch(worker_id, delivery)
        if found.ok:
            outcome = "done"
        elif found.final:
            outcome = "malformed"
        else:
            outcome = "failed" if delivery.attempts >= self.config.max_attempts else "retry"
        metrics.delivery_worked(delivery.event, outcome)
        return found

    def _dispatch(self, worker_id: str, delivery: Delivery) -> Finished:
        ok, final, detail = True, False, ""
        # The merge-gate news the handlers note is counted when the delivery is finished.
        news: list[str | None] = []
        try:
            event = Event.parse(delivery.id, delivery.event, delivery.body)
            ran = self.router.dispatch(event, replace(self.context, gate_news=news.append))
            detail = f"{ran} handler(s) ran"
        except MalformedEvent as exc:
            # The payload is wrong, so trying again gives the same answer.
            ok, final, detail = False, True, f"malformed {delivery.event}: {exc}"
        except Exception as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
            log.exception(
                "%s: delivery %s failed (attempt %d)", worker_id, delivery.id, delivery.attempts
            )
        retry_in = min(
            self.config.retry_s * 2 ** max(delivery.attempts - 1, 0), self.config.max_retry_s
        )
        return Finished(delivery.id, ok, detail, final=final, retry_in_s=retry_in, news=tuple(news))

    def _hand_back(self, worker_id: str, delivery_ids: list[str]) -> None:
        if not delivery_ids:
            return
        try:
            self.store.release_deliveries(delivery_ids, worker_id)
        except SQLAlchemyError:
            log.exception("%s: could not hand back %d deliveries", worker_id, len(delivery_ids))

    def _finish(self, worker_id: str, results: list[Finished]) -> None:
        if not results:
            return
        try:
            finished = self.store.finish_deliveries(
                results, worker_id=worker_id, max_attempts=self.config.max_attempts
            )
        except SQLAlchemyError:
            # The leases run out and the deliveries are tried again: handlers are idempotent.
            log.exception("%s: could not finish %d deliveries", worker_id, len(results))
            return
        for result, ours in zip(results, finished, strict=True):
            if not ours:
                log.warning(
                    "%s: lost the lease on delivery %s before finishing it",
                    worker_id,
                    result.delivery_id,
                )

    def _heartbeat(self) -> None:
        # Renew a third of the way into each lease, until the last worker has stopped.
        while not self._drained.wait(self.config.lease_s / 3):
            with self._lock:
                held = list(self._in_hand.items())
            for delivery_id, worker_id in held:
                try:
                    self.store.renew_lease(delivery_id, worker_id, self.config.lease_s)
                except SQLAlchemyError:
                    log.exception("could not renew the lease on delivery %s", delivery_id)

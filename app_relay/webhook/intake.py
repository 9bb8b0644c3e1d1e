"""Record the webhook's deliveries in shared transactions (group commit), one writer thread.

The webhook (``receive.py``) submits each verified delivery and answers once the commit
that holds it is done.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future

from app_relay.store import NewDelivery, Store

log = logging.getLogger(__name__)

# How often the delivery writer asks the record how far the intake queue is finished.
LOOK_BACK_EVERY_S = 1.0


class DeliveryIntake:
    """Record the deliveries of concurrent requests in shared transactions (group commit).

    One writer thread takes every delivery waiting and records them with one commit, so
    a burst costs one sync to disk per batch rather than one per request, and requests
    never queue on the database's write lock against each other. How far the record has
    finished the queued deliveries (what the next commit may drop from a SQLite intake
    queue) is asked once the batch is answered, at most once a second: that read scans
    every delivery still waiting, and a backlog of them must not slow an answer.
    """

    def __init__(self, store: Store, max_batch: int = 256) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[tuple[NewDelivery, Future[bool]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._finished_through = 0
        self._looked_back_at = float("-inf")

    def submit(self, new: NewDelivery) -> Future[bool]:
        """Queue ``new`` for recording; the future says whether it was new, once committed."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write, name="cujo-delivery-intake", daemon=True
                )
                self._thread.start()
        answer: Future[bool] = Future()
        self._queue.put((new, answer))
        return answer

    def problems(self) -> list[str]:
        """Name what keeps the writer from recording: dead, or deliveries piling up."""
        with self._lock:
            thread = self._thread
        found = []
        if thread is not None and not thread.is_alive():
            found.append("the webhook's delivery writer is not running")
        if self._queue.qsize() > 4 * self.max_batch:
            found.append(f"{self._queue.qsize()} deliveries wait for the webhook's writer")
        return found

    def close(self) -> None:
        """Record what is queued, then stop the writer."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _write(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._record(batch)
            self._look_back()

    def _record(self, batch: list[tuple[NewDelivery, Future[bool]]]) -> None:
        through = self._finished_through
        try:
            answers = self.store.record_deliveries([new for new, _ in batch], drop_through=through)
        except Exception:
            # One bad delivery must not fail its neighbours: record them one by one.
            for new, answer in batch:
                try:
                    answer.set_result(self.store.record_deliveries([new], drop_through=through)[0])
                except Exception as exc:
                    answer.set_exception(exc)
            return
        for (_, answer), was_new in zip(batch, answers, strict=True):
            answer.set_result(was_new)

    def _look_back(self) -> None:
        now = time.monotonic()
        if now - self._looked_back_at < LOOK_BACK_EVERY_S:
            return
        self._looked_back_at = now
        try:
            self._finished_through = self.store.intake_finished_through()
        except Exception:
            # The queue keeps what the record finished until a later look.
            log.exception("could not read how far the record finished the intake queue")

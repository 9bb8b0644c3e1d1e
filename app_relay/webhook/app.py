"""Serve the relay over HTTP: ``POST /webhook`` records verified deliveries, workers do the rest.

The webhook handler reads the raw body under a size cap, checks its signature before
anything parses it, records the delivery (idempotent on ``X-GitHub-Delivery``) and
answers 202. It never logs the secret or the signature.
https://docs.github.com/en/webhooks/using-webhooks/best-practices-for-using-webhooks

Beside it: ``/healthz`` (the process answers), ``/readyz`` (the record, the workers, the
intake and GitHub; ``health.py``) and ``/metrics`` (Prometheus text: what every relay
process counted, and what the record holds).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from app_relay.board import Access, access_from_env, board_router, web_url_of
from app_relay.github.event import Event, MalformedEvent
from app_relay.merge.attempt import MergeDesk
from app_relay.observe import metrics
from app_relay.observe.logs import about
from app_relay.settings import RelaySettings
from app_relay.store import NewDelivery, Store
from app_relay.webhook.health import Readiness, RecordCollector
from app_relay.webhook.signature import signature_matches

log = logging.getLogger(__name__)

# GitHub caps webhook payloads at 25 MB and does not send larger ones:
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#payload-cap
MAX_BODY = 25 * 1024 * 1024
# GitHub's delivery ids are GUIDs; the record keeps at most 64 characters.
_DELIVERY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_EVENT_NAME = re.compile(r"^[a-z][a-z_]{0,63}$")


# Bodies up to this size are parsed on the event loop; larger ones in a thread.
_PARSE_INLINE = 256 * 1024
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


class BodyTooLarge(Exception):
    """The request body passed the cap."""


async def read_capped(request: Request, cap: int) -> bytes:
    """Return the raw body, or raise ``BodyTooLarge`` as soon as it passes ``cap`` bytes."""
    # A Content-Length over the cap is refused unread; one under it is not trusted, so the
    # stream is counted as it arrives (chunked bodies carry no length at all).
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise BodyTooLarge
    return bytes(body)


def _answer(status: int, **fields: Any) -> JSONResponse:
    return JSONResponse(fields, status_code=status)


def create_app(
    settings: RelaySettings,
    store: Store,
    *,
    max_body: int = MAX_BODY,
    on_recorded: Callable[[], None] | None = None,
    board: Access | None = None,
    readiness: Readiness | None = None,
    merges: MergeDesk | None = None,
) -> FastAPI:
    """Return the relay's ASGI app over ``store``; ``on_recorded`` wakes the workers.

    The board is served at ``/`` to whom ``board`` lets in (by default: people signed in
    with GitHub, when the App's OAuth client is set in the environment; nobody otherwise).
    ``readiness`` answers ``/readyz`` (by default: the record and the intake alone).
    ``merges`` lets signed-in people merge a reviewed head from its run page.
    """
    app = FastAPI(title="Cujo relay", docs_url=None, redoc_url=None, openapi_url=None)
    secret = settings.webhook_secret.reveal().encode()
    intake = DeliveryIntake(store)
    app.state.intake = intake  # closed by whoever serves the app, after the server stops
    ready = readiness if readiness is not None else Readiness(store)
    ready.intake = intake.problems
    record_metrics = RecordCollector(store)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Answer that the relay's process is up (``/readyz`` says whether it can work)."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Answer 200 when every part can work, else 503 naming the parts that cannot."""
        report = await anyio.to_thread.run_sync(ready.check)
        return JSONResponse(report.body(), status_code=200 if report.ready else 503)

    @app.get("/metrics")
    async def metrics_text() -> Response:
        """Serve the relay's metrics in Prometheus's text format."""
        text, content_type = await anyio.to_thread.run_sync(metrics.exposition, [record_metrics])
        return Response(text, media_type=content_type)

    @app.post("/webhook")
    async def webhook(request: Request) -> JSONResponse:
        """Verify, record and acknowledge one delivery."""
        started = time.perf_counter()
        delivery_id = request.headers.get("x-github-delivery", "")
        # The lines logged for this request name the delivery, when its id is one.
        with about(delivery=delivery_id if _DELIVERY_ID.match(delivery_id) else None):
            event, outcome, answer = await _take(request, delivery_id)
        metrics.delivery_received(event, outcome)
        metrics.intake_seconds(time.perf_counter() - started)
        return answer

    async def _take(request: Request, delivery_id: str) -> tuple[str, str, JSONResponse]:
        """Verify and record one delivery; return its event (or "-"), outcome and answer."""
        try:
            body = await read_capped(request, max_body)
        except BodyTooLarge:
            return "-", "too_large", _answer(413, error=f"the body is over {max_body} bytes")
        # Invariant 1 (docs/design.md section 11): the raw body is verified before any parsing.
        if not signature_matches(secret, body, request.headers.get("x-hub-signature-256")):
            log.warning("webhook refused: missing or wrong signature")
            return "-", "refused", _answer(401, error="missing or wrong X-Hub-Signature-256")
        name = request.headers.get("x-github-event", "")
        if not _EVENT_NAME.match(name):
            return (
                "-",
                "malformed",
                _answer(400, error="X-GitHub-Event is missing or not an event name"),
            )
        if not _DELIVERY_ID.match(delivery_id):
            return (
                name,
                "malformed",
                _answer(400, error="X-GitHub-Delivery is missing or not a delivery id"),
            )
        try:
            if len(body) <= _PARSE_INLINE:
                event = Event.parse(delivery_id, name, body)
            else:
                event = await anyio.to_thread.run_sync(Event.parse, delivery_id, name, body)
        except MalformedEvent as exc:
            return (
                name,
                "malformed",
                _answer(400, error=f"{exc}; GitHub Apps send application/json"),
            )
        if name == "ping":
            # https://docs.github.com/en/webhooks/webhook-events-and-payloads#ping
            return (
                name,
                "ping",
                _answer(200, ok=True, delivery=delivery_id, zen=event.payload.get("zen")),
            )
        recorded = intake.submit(
            NewDelivery(delivery_id, name, event.action, event.installation_id, event.repo, body)
        )
        new = await asyncio.wrap_future(recorded)
        log.info(
            "delivery %s (%s.%s) %s",
            delivery_id,
            name,
            event.action,
            "recorded" if new else "seen before",
        )
        if new and on_recorded is not None:
            on_recorded()
        outcome = "recorded" if new else "duplicate"
        return name, outcome, _answer(202, delivery=delivery_id, recorded=new)

    api_url = settings.github_api_url
    access = board if board is not None else access_from_env(os.environ, api_url)
    app.include_router(
        board_router(store, access, web_url=web_url_of(api_url, os.environ), desk=merges)
    )
    return app

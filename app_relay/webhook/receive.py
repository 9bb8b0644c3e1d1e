"""``POST /webhook``: verify, record and acknowledge one delivery.

The handler reads the raw body under a size cap, checks its signature before anything
parses it, records the delivery (idempotent on ``X-GitHub-Delivery``, through the intake's
writer, ``intake.py``) and answers 202. It never logs the secret or the signature.
https://docs.github.com/en/webhooks/using-webhooks/best-practices-for-using-webhooks
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app_relay.github.event import Event, MalformedEvent
from app_relay.observe import metrics
from app_relay.observe.logs import about
from app_relay.store import NewDelivery
from app_relay.webhook.intake import DeliveryIntake
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


class Refused(Exception):
    """A delivery answered without being recorded: its event (or "-"), outcome, answer."""

    def __init__(self, event: str, outcome: str, status: int, **fields: Any) -> None:
        super().__init__(outcome)
        self.event, self.outcome, self.answer = event, outcome, _answer(status, **fields)


class Receiver:
    """The webhook's route: each step of taking one delivery is a method."""

    def __init__(
        self,
        secret: bytes,
        intake: DeliveryIntake,
        *,
        max_body: int = MAX_BODY,
        on_recorded: Callable[[], None] | None = None,
    ) -> None:
        self.secret, self.intake = secret, intake
        self.max_body, self.on_recorded = max_body, on_recorded

    def router(self) -> APIRouter:
        router = APIRouter()
        router.add_api_route("/webhook", self.webhook, methods=["POST"])
        return router

    async def webhook(self, request: Request) -> JSONResponse:
        """Verify, record and acknowledge one delivery."""
        started = time.perf_counter()
        delivery_id = request.headers.get("x-github-delivery", "")
        # The lines logged for this request name the delivery, when its id is one.
        with about(delivery=delivery_id if _DELIVERY_ID.match(delivery_id) else None):
            try:
                event, outcome, answer = await self.take(request, delivery_id)
            except Refused as refused:
                event, outcome, answer = refused.event, refused.outcome, refused.answer
        metrics.delivery_received(event, outcome)
        metrics.intake_seconds(time.perf_counter() - started)
        return answer

    async def take(self, request: Request, delivery_id: str) -> tuple[str, str, JSONResponse]:
        """Verify and record one delivery; return its event, outcome and answer (or raise
        ``Refused``)."""
        body = await self.verified_body(request)
        name = _names(request.headers.get("x-github-event", ""), delivery_id)
        event = await _parsed(delivery_id, name, body)
        if name == "ping":
            # https://docs.github.com/en/webhooks/webhook-events-and-payloads#ping
            zen = event.payload.get("zen")
            return name, "ping", _answer(200, ok=True, delivery=delivery_id, zen=zen)
        new = await self.record(
            NewDelivery(delivery_id, name, event.action, event.installation_id, event.repo, body)
        )
        return (
            name,
            "recorded" if new else "duplicate",
            _answer(202, delivery=delivery_id, recorded=new),
        )

    async def verified_body(self, request: Request) -> bytes:
        """Return the raw body, read under the cap, once its signature matches."""
        try:
            body = await read_capped(request, self.max_body)
        except BodyTooLarge:
            raise Refused(
                "-", "too_large", 413, error=f"the body is over {self.max_body} bytes"
            ) from None
        # Invariant 1 (docs/design.md section 11): the raw body is verified before any parsing.
        if not signature_matches(self.secret, body, request.headers.get("x-hub-signature-256")):
            log.warning("webhook refused: missing or wrong signature")
            raise Refused("-", "refused", 401, error="missing or wrong X-Hub-Signature-256")
        return body

    async def record(self, new: NewDelivery) -> bool:
        """Record the delivery (with the batch its commit holds); say whether it was new."""
        was_new = await asyncio.wrap_future(self.intake.submit(new))
        log.info(
            "delivery %s (%s.%s) %s",
            new.id,
            new.event,
            new.action,
            "recorded" if was_new else "seen before",
        )
        if was_new and self.on_recorded is not None:
            self.on_recorded()
        return was_new


def _names(name: str, delivery_id: str) -> str:
    """Return the event's name once it and the delivery's id are well formed."""
    if not _EVENT_NAME.match(name):
        raise Refused("-", "malformed", 400, error="X-GitHub-Event is missing or not an event name")
    if not _DELIVERY_ID.match(delivery_id):
        raise Refused(
            name, "malformed", 400, error="X-GitHub-Delivery is missing or not a delivery id"
        )
    return name


async def _parsed(delivery_id: str, name: str, body: bytes) -> Event:
    """Parse the verified body (a large one off the event loop)."""
    try:
        if len(body) <= _PARSE_INLINE:
            return Event.parse(delivery_id, name, body)
        return await anyio.to_thread.run_sync(Event.parse, delivery_id, name, body)
    except MalformedEvent as exc:
        raise Refused(
            name, "malformed", 400, error=f"{exc}; GitHub Apps send application/json"
        ) from None


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

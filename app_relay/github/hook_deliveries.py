"""The App's own endpoints for catching up: its webhook deliveries and its installations.

GitHub never redelivers a failed webhook by itself; its guide "Handling failed webhook
deliveries" lists the App's deliveries since the last look, picks those that never
reached the receiver and asks for each again. These calls are made as the App (its
JWT), never as an installation, through ``GitHubApp.app_request`` and so by the one
call policy; every answer is read fail-closed.
https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries
https://docs.github.com/en/rest/apps/webhooks
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from app_relay.github.answers import GitHubError, answer_list, parse_time
from app_relay.github.payloads import positive
from app_relay.github.vocab import Reader

# GitHub lists at most 100 deliveries a page.
MAX_PER_PAGE: Final = 100
# A `Link` header's next page: <URL>; rel="next" (RFC 8288, as GitHub writes it).
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


class AppRequests(Protocol):
    """What these calls need of the App (``GitHubApp`` is one)."""

    def app_request(
        self,
        verb: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        idempotent: bool,
    ) -> tuple[dict[str, Any], Any]: ...


@dataclass(frozen=True, slots=True)
class HookDelivery:
    """One attempt GitHub made to deliver a webhook to the App (a redelivery is another)."""

    id: int  # this attempt: what a redelivery is asked by
    guid: str  # the delivery: X-GitHub-Delivery, the same for every attempt
    delivered_at: float  # epoch seconds, GitHub's clock
    redelivery: bool
    status: str  # "OK" when it reached the receiver
    status_code: int  # the receiver's HTTP status; 0 when none answered
    event: str
    action: str | None
    installation_id: int | None
    repository_id: int | None

    @property
    def delivered(self) -> bool:
        """Say whether this attempt reached the receiver and was taken (a 2xx, ``OK``)."""
        return self.status == "OK" and 200 <= self.status_code < 300


@dataclass(frozen=True, slots=True)
class DeliveryListing:
    """The deliveries newer than a bound, newest first, and whether the list reached it."""

    deliveries: tuple[HookDelivery, ...]
    # False when the page bound stopped the listing before the time bound: older
    # deliveries may be missing, and a caller must say so.
    complete: bool
    pages: int


@dataclass(frozen=True, slots=True)
class AppInstallation:
    """One installation of the App, as its own list says."""

    id: int
    suspended: bool


def _delivery(call: str, a: Reader) -> HookDelivery:
    return HookDelivery(
        id=a.positive("id"),
        guid=a.text("guid"),
        delivered_at=parse_time(call, "delivered_at", a.text("delivered_at")),
        redelivery=a.flag("redelivery"),
        status=a.text("status"),
        status_code=a.integer("status_code"),
        event=a.text("event"),
        action=a.opt_text("action") if "action" in a.data else None,
        installation_id=a.opt_integer("installation_id") if "installation_id" in a.data else None,
        repository_id=a.opt_integer("repository_id") if "repository_id" in a.data else None,
    )


def next_cursor(call: str, link: str | None) -> str | None:
    """Return the ``cursor`` of the next page a ``Link`` header names; None on the last page."""
    if not link:
        return None
    found = _NEXT.search(link)
    if found is None:
        return None
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(found.group(1)).query)
    cursors = query.get("cursor", [])
    if len(cursors) != 1 or not cursors[0]:
        raise GitHubError(call, "the Link header's next page names no cursor")
    return cursors[0]


class AppHookCalls:
    """List the App's webhook deliveries, ask for one again, list its installations."""

    def __init__(self, app: AppRequests) -> None:
        self._app = app

    def deliveries_since(
        self,
        since: float,
        *,
        max_pages: int,
        per_page: int = MAX_PER_PAGE,
        on_page: Callable[[int], None] | None = None,
    ) -> DeliveryListing:
        """List deliveries made at ``since`` (epoch seconds) or later, newest first.

        Pages follow the ``cursor`` of each answer's ``Link`` header, as GitHub pages
        this list, and stop at the first delivery older than ``since`` (the list is
        newest first), at the last page, or after ``max_pages``.
        """
        # https://docs.github.com/en/rest/apps/webhooks#list-deliveries-for-an-app-webhook
        path = "/app/hook/deliveries"
        call = f"GET {path}"
        positive("max_pages", max_pages)
        if not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"per_page is 1 to {MAX_PER_PAGE}, got {per_page}")
        found: list[HookDelivery] = []
        cursor: str | None = None
        for page in range(1, max_pages + 1):
            params: dict[str, object] = {"per_page": per_page}
            if cursor is not None:
                params["cursor"] = cursor
            headers, data = self._app.app_request("GET", path, params=params, idempotent=True)
            if on_page is not None:
                on_page(page)
            items = [_delivery(call, a) for a in answer_list(call, data)]
            if len(items) > per_page:
                raise GitHubError(call, f"page {page} holds {len(items)} items, over {per_page}")
            for item in items:
                if item.delivered_at < since:
                    return DeliveryListing(tuple(found), True, page)
                found.append(item)
            cursor = next_cursor(call, headers.get("link"))
            if cursor is None:
                return DeliveryListing(tuple(found), True, page)
        return DeliveryListing(tuple(found), False, max_pages)

    def redeliver(self, delivery_id: int) -> None:
        """Ask GitHub to deliver a delivery again (it answers 202 and sends it soon after)."""
        # https://docs.github.com/en/rest/apps/webhooks#redeliver-a-delivery-for-an-app-webhook
        path = f"/app/hook/deliveries/{positive('delivery_id', delivery_id)}/attempts"
        # A repeated POST would ask for a second redelivery: never retried within the call.
        self._app.app_request("POST", path, idempotent=False)

    def installations(self, *, max_pages: int = 10) -> tuple[list[AppInstallation], bool]:
        """List the App's installations; say whether the list ended within ``max_pages``."""
        # https://docs.github.com/en/rest/apps/apps#list-installations-for-the-authenticated-app
        path = "/app/installations"
        call = f"GET {path}"
        found: list[AppInstallation] = []
        for page in range(1, max_pages + 1):
            params = {"per_page": MAX_PER_PAGE, "page": page}
            _, data = self._app.app_request("GET", path, params=params, idempotent=True)
            items = answer_list(call, data)
            for a in items:
                suspended = "suspended_at" in a.data and a.data["suspended_at"] is not None
                found.append(AppInstallation(id=a.positive("id"), suspended=suspended))
            if len(items) < MAX_PER_PAGE:
                return found, True
        return found, False

"""What a relay's catch-up reads and asks: the App's webhook deliveries, and open pull requests.

WRITTEN BY HAND FROM GITHUB'S DOCUMENTATION, not recorded from GitHub:

* the App's webhook deliveries, https://docs.github.com/en/rest/apps/webhooks
  (``GET /app/hook/deliveries``: newest first, ``per_page`` up to 100, paged by an opaque
  ``cursor`` given in the ``Link`` header; ``POST /app/hook/deliveries/{id}/attempts``
  answers 202 and delivers the same payload again under the same ``guid``, as a new
  delivery with ``redelivery: true``; both with the App's JWT);
* "Handling failed webhook deliveries",
  https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries
  (GitHub never redelivers by itself; a failed delivery's ``status`` is not ``OK``);
* ``GET /app/installations``, https://docs.github.com/en/rest/apps/apps#list-installations-for-the-authenticated-app
* ``GET /installation/repositories``, https://docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-app-installation
* ``GET /repos/{owner}/{repo}/pulls``, https://docs.github.com/en/rest/pulls/pulls#list-pull-requests
  (``state`` open by default; ``sort`` created or updated; ``direction`` desc by default
  for created, asc otherwise).

The hook log is GitHub's side of the App's webhook: ``deliver`` signs a payload with the
webhook secret and POSTs it to ``url()`` as GitHub does, and records the outcome; a relay
that is down (nothing listens, or ``url()`` is None) makes a failed delivery, which a test
can also add by hand (``add``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fakegithub.server import Answer, Api, Request, _page, _public, refuse, route
from fakegithub.state import iso

_LOCK = threading.Lock()
_CURSOR = re.compile(r"v1_(\d{1,18})")
# GitHub waits this long for the receiver's answer before recording a failure.
DELIVERY_TIMEOUT_S = 10.0


@dataclass
class HookLog:
    """The App's webhook as GitHub keeps it: where it goes, its secret, every delivery."""

    url: Callable[[], str | None] = lambda: None
    secret: str = ""
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 70_000_000
    # Payloads kept for redelivery, by guid (GitHub keeps them for three days).
    payloads: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def wait_for(self, what: Callable[[], object], timeout_s: float = 30.0) -> None:
        """Wait until ``what`` holds, looked at again whenever a delivery is recorded."""
        with self.changed:
            if not self.changed.wait_for(what, timeout=timeout_s):
                raise TimeoutError(f"the fake's webhook log never reached {what!r}")

    def add(
        self,
        event: str,
        body: Mapping[str, Any],
        *,
        status_code: int = 0,
        status: str | None = None,
        guid: str | None = None,
        delivered_at: float | None = None,
        redelivery: bool = False,
    ) -> dict[str, Any]:
        """Record a delivery as made, without sending it (a test's failed one, say)."""
        raw = json.dumps(body).encode()
        guid = guid or str(uuid.uuid4())
        said = status or (
            "OK" if 200 <= status_code < 300 else
            "failed to connect to host" if status_code == 0 else
            f"Invalid HTTP Response: {status_code}"
        )  # fmt: skip
        installation = body.get("installation")
        repository = body.get("repository")
        with self.lock:
            self.next_id += 1
            entry = {
                "id": self.next_id,
                "guid": guid,
                "delivered_at": iso(time.time() if delivered_at is None else delivered_at),
                "redelivery": redelivery,
                "duration": 0.05,
                "status": said,
                "status_code": status_code,
                "event": event,
                "action": body.get("action"),
                "installation_id": installation.get("id")
                if isinstance(installation, dict)
                else None,
                "repository_id": repository.get("id") if isinstance(repository, dict) else None,
                "throttled_at": None,
            }
            self.deliveries.append(entry)
            self.payloads[guid] = (event, raw)
            self.changed.notify_all()
            return entry

    def deliver(
        self, event: str, body: Mapping[str, Any], *, guid: str | None = None
    ) -> dict[str, Any]:
        """Sign and POST a payload to the App's webhook URL, and record how it went."""
        guid = guid or str(uuid.uuid4())
        return self._send(event, json.dumps(body).encode(), guid, redelivery=False)

    def redeliver(self, delivery_id: int) -> None:
        """Deliver a recorded delivery's payload again, under its guid."""
        with self.lock:
            (found,) = [d for d in self.deliveries if d["id"] == delivery_id]
            event, raw = self.payloads[found["guid"]]
        self._send(event, raw, found["guid"], redelivery=True)

    def _send(self, event: str, raw: bytes, guid: str, *, redelivery: bool) -> dict[str, Any]:
        url = self.url()
        code = 0
        if url is not None:
            signature = "sha256=" + hmac.new(self.secret.encode(), raw, hashlib.sha256).hexdigest()
            request = urllib.request.Request(
                f"{url}/webhook",
                data=raw,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "GitHub-Hookshot/fake",
                    "X-GitHub-Event": event,
                    "X-GitHub-Delivery": guid,
                    "X-GitHub-Hook-Installation-Target-Type": "integration",
                    "X-Hub-Signature-256": signature,
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=DELIVERY_TIMEOUT_S) as answer:
                    code = answer.status
            except urllib.error.HTTPError as exc:
                code = exc.code
            except (OSError, urllib.error.URLError):
                code = 0  # nothing listens: the relay is down
        body = json.loads(raw)
        return self.add(event, body, status_code=code, guid=guid, redelivery=redelivery)

    def of_guid(self, guid: str) -> list[dict[str, Any]]:
        """Return every delivery of one guid, oldest first."""
        with self.lock:
            return [d for d in self.deliveries if d["guid"] == guid]


def hook_log(api_or_state: Any) -> HookLog:
    """Return the App's webhook of a fake GitHub (made on first use)."""
    state = getattr(api_or_state, "state", api_or_state)
    with _LOCK:
        found: HookLog | None = getattr(state, "hook_log", None)
        if found is None:
            found = HookLog()
            state.hook_log = found
        return found


# -- the App's webhook deliveries ------------------------------------------------------


@route("GET", "/app/hook/deliveries", auth="jwt")
def _deliveries(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/webhooks#list-deliveries-for-an-app-webhook
    log = hook_log(api)
    per_page = min(int(req.q("per_page", "30") or 30), 100)
    with log.lock:
        newest_first = sorted(log.deliveries, key=lambda d: -d["id"])
    cursor = req.q("cursor")
    if cursor is not None:
        m = _CURSOR.fullmatch(cursor)
        if m is None:
            raise refuse(422, "Validation Failed: cursor is not a cursor this API gave")
        newest_first = [d for d in newest_first if d["id"] <= int(m.group(1))]
    page, rest = newest_first[:per_page], newest_first[per_page:]
    headers = {}
    if rest:
        nxt = (
            f"{api.state.api_url}/app/hook/deliveries?per_page={per_page}&cursor=v1_{rest[0]['id']}"
        )
        headers["Link"] = f'<{nxt}>; rel="next"'
    return Answer(200, [dict(d) for d in page], headers)


@route("POST", "/app/hook/deliveries/{delivery_id}/attempts", auth="jwt")
def _redeliver(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/webhooks#redeliver-a-delivery-for-an-app-webhook
    log = hook_log(api)
    try:
        delivery_id = int(req.params["delivery_id"])
    except ValueError:
        raise refuse(404, "Not Found") from None
    with log.lock:
        if not any(d["id"] == delivery_id for d in log.deliveries):
            raise refuse(404, "Not Found")
    # Accepted now; GitHub sends it once the answer is out.
    return Answer(202, {}, after=(log.redeliver, delivery_id))


# -- installations and their pull requests ---------------------------------------------


@route("GET", "/app/installations", auth="jwt")
def _installations(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/apps#list-installations-for-the-authenticated-app
    found = [
        {
            "id": installation,
            "app_id": api.state.app_id,
            "account": {"login": f"owner-{installation}"},
            "target_type": "Organization",
            "suspended_at": None,
        }
        for installation in sorted(api.state.installations)
    ]
    return _page(req, found)


@route("GET", "/installation/repositories")
def _installation_repositories(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-app-installation
    installation = int(req.auth.split(":")[1].split("#")[0])
    names = sorted(api.state.installations.get(installation, set()))
    repos = [
        {
            "id": api.state.repos[name].id,
            "full_name": name,
            "default_branch": api.state.repos[name].default_branch,
            "archived": False,
            "disabled": False,
        }
        for name in names
        if name in api.state.repos
    ]
    return {"total_count": len(repos), "repositories": _page(req, repos)}


@route("GET", "/repos/{owner}/{repo}/pulls")
def _pulls(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/pulls/pulls#list-pull-requests
    r = api.repo(req)
    state = req.q("state", "open")
    sort = req.q("sort", "created")
    if state not in ("open", "closed", "all") or sort not in ("created", "updated"):
        raise refuse(422, "Validation Failed: state or sort")
    direction = req.q("direction", "desc" if sort == "created" else "asc")
    key = "created_at" if sort == "created" else "updated_at"
    found = [p for p in r.pulls.values() if state in ("all", p["state"])]
    found.sort(key=lambda p: (p[key], p["number"]), reverse=direction == "desc")
    return [_public(p) for p in _page(req, found)]

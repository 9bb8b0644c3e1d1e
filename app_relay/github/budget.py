"""Keep what GitHub says of each installation's rate budget: for the call policy, and metrics.

Every answer GitHub gives carries its primary rate limit in headers (``x-ratelimit-limit``,
``-remaining``, ``-used``, ``-reset`` in epoch seconds, ``-resource``).
``RateBudgets`` keeps the last seen per installation (and for the App's own calls, signed
with its JWT, which have a budget of their own), when calls must pause (a budget spent,
or a rate limit that asked for a wait), and counts the calls: by answer, the 304s of
conditional requests (which do not count against the limit), the rate limits met and the
seconds waited for them. ``GitHubApp.attempt`` (``app_auth.py``) feeds it and asks it
before each call.

Metrics read ``rate_budget_snapshot()``: a frozen ``Budget`` per installation of every
``GitHubApp`` alive in this process (the relay has one; each App keeps its own, so that
its pauses follow its own clock). With ``--worker-processes`` above 0 the calls, and so
the budgets, are the worker process's.
https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#checking-the-status-of-your-rate-limit
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol

from app_relay.github.retry import MAX_WAIT_S
from app_relay.observe import metrics

APP_KEY: Final = "app"
_COUNT: Final = re.compile(r"[0-9]{1,12}")
_RESOURCE: Final = re.compile(r"[a-z_]{1,40}")


# Every RateBudgets alive in this process, for rate_budget_snapshot.
_ALIVE: Final[weakref.WeakSet[RateBudgets]] = weakref.WeakSet()


class RateReading(Protocol):
    """Where PyGithub keeps the last rate-limit headers it saw (its ``Requester``)."""

    rate_limiting: tuple[int, int]  # (remaining, limit); (-1, -1) until an answer
    rate_limiting_resettime: int  # epoch seconds; 0 until an answer


def budget_key(installation_id: int | None) -> str:
    """Return the key a budget is kept under: its installation's, or the App's own."""
    return APP_KEY if installation_id is None else f"installation:{installation_id}"


@dataclass(frozen=True, slots=True)
class Budget:
    """One installation's rate budget as last seen, and what its calls met; read-only.

    ``reset_at`` is GitHub's epoch seconds; ``paused_until`` is the relay's clock (calls
    of this installation wait until then). ``calls`` counts answers by HTTP status, "ok"
    for a success (304s included, also counted in ``not_modified``) and "none" when no
    answer came.
    """

    key: str
    installation_id: int | None
    limit: int | None = None
    remaining: int | None = None
    used: int | None = None
    reset_at: float | None = None
    resource: str | None = None
    paused_until: float | None = None
    calls: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    not_modified: int = 0
    rate_limited: int = 0
    waited_s: float = 0.0


@dataclass(slots=True)
class _Held:
    """What is kept of one budget, changed under ``RateBudgets``' lock."""

    limit: int | None = None
    remaining: int | None = None
    used: int | None = None
    reset_at: float | None = None
    resource: str | None = None
    paused_until: float | None = None
    calls: dict[str, int] = field(default_factory=dict)
    not_modified: int = 0
    rate_limited: int = 0
    waited_s: float = 0.0


class RateBudgets:
    """Hold each installation's budget as GitHub last told it; safe across threads."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        _ALIVE.add(self)

    def _of(self, key: str) -> _Held:
        """Return what is held for ``key``, made empty the first time (the lock is held)."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        return held

    def seen_headers(self, key: str, headers: Mapping[str, str] | None) -> None:
        """Keep the rate-limit headers of one answer (those that are malformed are skipped)."""
        told = {k.lower(): str(v).strip() for k, v in (headers or {}).items()}

        def count(name: str) -> int | None:
            raw = told.get(f"x-ratelimit-{name}", "")
            return int(raw) if _COUNT.fullmatch(raw) else None

        limit, remaining, used, reset = count("limit"), count("remaining"), count("used"), None
        if (raw := count("reset")) is not None:
            reset = float(raw)
        resource = told.get("x-ratelimit-resource", "")
        self._seen(
            key, limit, remaining, used, reset, resource if _RESOURCE.fullmatch(resource) else None
        )

    def seen_reading(self, key: str, reading: RateReading) -> None:
        """Keep what PyGithub read from the last answer's headers, if it read any."""
        remaining, limit = reading.rate_limiting
        if remaining < 0 or limit < 0:
            return
        reset = float(reading.rate_limiting_resettime) or None
        self._seen(key, limit, remaining, max(limit - remaining, 0), reset, None)

    def _seen(
        self,
        key: str,
        limit: int | None,
        remaining: int | None,
        used: int | None,
        reset: float | None,
        resource: str | None,
    ) -> None:
        with self._lock:
            held = self._of(key)
            if remaining is None:
                return
            held.limit, held.remaining, held.used = limit, remaining, used
            held.reset_at, held.resource = reset, resource or held.resource
            if remaining == 0 and reset is not None:
                # GitHub: no further request until the reset.
                held.paused_until = max(held.paused_until or 0.0, reset)
        # The budget as GitHub last told it, on /metrics (cujo_github_rate_*).
        metrics.set_rate_budget(key, remaining, reset if reset is not None else 0.0)

    def count(self, key: str, answer: str) -> None:
        """Count one call by its answer: an HTTP status, "ok", or "none"."""
        with self._lock:
            calls = self._of(key).calls
            calls[answer] = calls.get(answer, 0) + 1

    def not_modified(self, key: str) -> None:
        """Count a 304 to a conditional request: it cost nothing against the limit."""
        with self._lock:
            self._of(key).not_modified += 1

    def limited(self, key: str, until: float) -> None:
        """Count a rate limit met; calls of ``key`` pause until ``until`` (the relay's clock)."""
        with self._lock:
            held = self._of(key)
            held.rate_limited += 1
            held.paused_until = max(held.paused_until or 0.0, until)

    def pause_s(self, key: str, now: float) -> float:
        """Return how long a call of ``key`` must wait before it is sent (0: at once)."""
        with self._lock:
            held = self._held.get(key)
            if held is None or held.paused_until is None:
                return 0.0
            if held.paused_until <= now:
                held.paused_until = None
                return 0.0
            return min(held.paused_until - now, MAX_WAIT_S)

    def waited(self, key: str, seconds: float) -> None:
        """Add seconds a call of ``key`` waited for its budget."""
        with self._lock:
            self._of(key).waited_s += seconds

    def snapshot(self) -> tuple[Budget, ...]:
        """Return every budget as it stands, by key: frozen copies, safe to keep."""
        with self._lock:
            return tuple(_frozen(key, held) for key, held in sorted(self._held.items()))

    def get(self, key: str) -> Budget | None:
        """Return one budget as it stands, or None when no call of ``key`` was made."""
        with self._lock:
            held = self._held.get(key)
            return None if held is None else _frozen(key, held)


def _frozen(key: str, held: _Held) -> Budget:
    """Return a frozen copy of what is held for ``key``."""
    installation = key.removeprefix("installation:")
    return Budget(
        key=key,
        installation_id=int(installation) if _COUNT.fullmatch(installation) else None,
        limit=held.limit,
        remaining=held.remaining,
        used=held.used,
        reset_at=held.reset_at,
        resource=held.resource,
        paused_until=held.paused_until,
        calls=MappingProxyType(dict(held.calls)),
        not_modified=held.not_modified,
        rate_limited=held.rate_limited,
        waited_s=held.waited_s,
    )


def rate_budget_snapshot() -> tuple[Budget, ...]:
    """Return this process's GitHub rate budgets, one per installation (and ``app``) of each
    App alive, by key: for /metrics."""
    return tuple(
        sorted((b for budgets in list(_ALIVE) for b in budgets.snapshot()), key=lambda b: b.key)
    )

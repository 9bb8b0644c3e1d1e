"""Decide when a GitHub call is tried again, and how long to wait before it.

The one GitHub call policy, for every call: the client (``GitHubApp.attempt``) waits out
a rate limit within the call, as long as GitHub's headers say, and tries again (a write
too: GitHub refused it before doing anything); it retries an idempotent call after
GitHub's own trouble or a lost connection with a short, jittered, doubling backoff. The
outbox tries a run's write again later (``runs/effects.py``: also a refused token or a
timeout, a longer jittered doubling backoff, or as long as GitHub's headers ask).

A rate limit is GitHub's 429, or a 403 that says so: its message, a ``Retry-After``, or
``x-ratelimit-remaining: 0``. Any other 403 is a refusal (a missing permission) and is
never tried again. Pure functions over an answer's status, its headers, the attempt
number and a jitter drawn by the caller; no clock of their own (GitHub's ``Date``, when
the headers carry it, else the ``now`` given, is what a date or a reset is read against).
https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-rate-limit
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Final

# GitHub's own trouble: the same request may well succeed a moment later. The client
# retries these within a call.
SERVER_TROUBLE: Final = frozenset({500, 502, 503, 504})
# After these the same write may succeed later, not within the call: GitHub's own
# trouble, a timeout, a rate limit, or a token refused (the gateway drops it and buys a
# new one). The outbox tries these again.
LATER: Final = SERVER_TROUBLE | {401, 408, 429}
# GitHub's secondary rate limit asks for at least a minute when no header says how long.
RATE_LIMITED_S: Final = 60.0
# The longest wait a header is believed for: a primary rate limit resets within the hour.
MAX_WAIT_S: Final = 3600.0
# A rate limit whose headers ask for no wait (a reset already passed by the relay's clock)
# still waits this long, doubled with each further limit on the same call: GitHub warns
# that requests sent while limited may get the integration banned.
RATE_FLOOR_S: Final = 1.0
# Waits a rate limit told are spread over this much more, so the calls it held do not all
# wake in the same second.
RATE_SPREAD_S: Final = 1.0
# The headers that say how long to wait (and GitHub's clock, which they are read
# against); the rest of an answer's headers are not kept.
WAIT_HEADERS: Final = frozenset(
    {"retry-after", "x-ratelimit-remaining", "x-ratelimit-reset", "date"}
)

_SECONDS: Final = re.compile(r"[0-9]{1,10}")


def backoff_s(first_s: float, attempt: int, cap_s: float = math.inf) -> float:
    """Return the wait after failed attempt ``attempt`` (1 is the first): doubling, capped."""
    return float(min(first_s * 2.0 ** max(attempt - 1, 0), cap_s))


def jittered_s(wait_s: float, jitter: float) -> float:
    """Return ``wait_s`` less up to half of it: ``jitter`` in [0, 1) is drawn by the caller.

    Equal jitter: at least half the backoff, spread so that callers that failed together
    do not all try again together.
    """
    return wait_s * (1.0 - 0.5 * min(max(jitter, 0.0), 1.0))


def retried_within_call(status: int | None) -> bool:
    """Say whether the client tries an idempotent call again at once (None: no answer)."""
    return status is None or status in SERVER_TROUBLE


def is_rate_limited(
    status: int | None, message: str, headers: Mapping[str, str] | None = None
) -> bool:
    """Say whether an answer is GitHub's rate limit (primary or secondary), not a refusal.

    A 429 always is. A 403 is when its message says so ("API rate limit exceeded for
    installation ID …", "You have exceeded a secondary rate limit …"), when it carries
    ``Retry-After`` (GitHub sends it only with a secondary limit), or when
    ``x-ratelimit-remaining`` is 0 (the primary limit). Any other 403 is a refusal.
    """
    if status == 429:
        return True
    if status != 403:
        return False
    told = wait_headers(headers)
    return (
        "rate limit" in message.lower()
        or "retry-after" in told
        or told.get("x-ratelimit-remaining", "").strip() == "0"
    )


def wait_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Return only the headers that say how long to wait, their names in lower case."""
    return {k.lower(): v for k, v in (headers or {}).items() if k.lower() in WAIT_HEADERS}


def header_wait_s(headers: Mapping[str, str], now: float) -> float | None:
    """Return how long GitHub's headers ask to wait (0 to ``MAX_WAIT_S``); None if they don't.

    ``Retry-After`` first, in seconds or as an HTTP date; else, when
    ``x-ratelimit-remaining`` is 0, until ``x-ratelimit-reset`` (epoch seconds). Dates
    and the reset are read against GitHub's own ``Date`` when the answer carries one, so
    the relay's clock being off does not shorten the wait; else against ``now``.
    """
    told = wait_headers(headers)
    now = _githubs_now(told, now)
    after = told.get("retry-after", "").strip()
    if _SECONDS.fullmatch(after):
        return _capped(float(after))
    if after:
        try:
            when = parsedate_to_datetime(after)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            return _capped(when.timestamp() - now)
    reset = told.get("x-ratelimit-reset", "").strip()
    if told.get("x-ratelimit-remaining", "").strip() == "0" and _SECONDS.fullmatch(reset):
        return _capped(float(reset) - now)
    return None


def retry_later_s(
    status: int | None,
    message: str,
    headers: Mapping[str, str],
    attempt: int,
    *,
    first_s: float,
    cap_s: float,
    now: float,
    rate_limited_s: float = RATE_LIMITED_S,
    jitter: float = 0.0,
) -> float | None:
    """Return how long to wait before trying a failed write again; None: never again.

    ``status`` None means no answer came (a lost connection, a passed deadline). The
    doubling backoff is jittered by ``jitter`` in [0, 1) (``jittered_s``); a wait GitHub
    asked for is kept as asked.
    """
    limited = is_rate_limited(status, message, headers)
    if not (status is None or status in LATER or limited):
        return None
    told = header_wait_s(headers, now)
    if told is not None:
        return told
    return rate_limited_s if limited else jittered_s(backoff_s(first_s, attempt, cap_s), jitter)


def rate_limit_wait_s(
    headers: Mapping[str, str], limited: int, now: float, *, jitter: float = 0.0
) -> float:
    """Return how long a call waits after its ``limited``-th rate-limited answer (1 is the first).

    As GitHub's headers say (``header_wait_s``), never less than a floor that doubles
    with each limit on the same call; without a header, a minute, doubled likewise
    (GitHub: "wait for at least one minute … an exponentially increasing amount of time
    between retries"). At most ``MAX_WAIT_S``, then spread by up to ``RATE_SPREAD_S``.
    """
    told = header_wait_s(headers, now)
    wait = (
        backoff_s(RATE_LIMITED_S, limited)
        if told is None
        else max(told, backoff_s(RATE_FLOOR_S, limited))
    )
    return min(wait, MAX_WAIT_S) + RATE_SPREAD_S * min(max(jitter, 0.0), 1.0)


def _githubs_now(told: Mapping[str, str], now: float) -> float:
    """Return the time of GitHub's ``Date`` header when it carries a readable one, else ``now``."""
    stamp = told.get("date", "").strip()
    if not stamp:
        return now
    try:
        when = parsedate_to_datetime(stamp)
    except (TypeError, ValueError):
        return now
    return when.timestamp() if when.tzinfo is not None else now


def _capped(wait_s: float) -> float:
    return min(max(wait_s, 0.0), MAX_WAIT_S)

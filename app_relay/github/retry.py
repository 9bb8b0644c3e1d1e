"""Decide when a GitHub call is tried again, and how long to wait before it.

The one GitHub call policy: the client retries an idempotent call within itself
(``GitHubApp.attempt``: GitHub's own trouble or a lost connection, a short doubling
backoff), and the outbox tries a run's write again later (``runs/effects.py``: also a
refused token, a timeout or a rate limit, a longer doubling backoff, or as long as
GitHub's headers ask). Pure functions over an answer's status, its headers and the
attempt number; no clock of their own (a date in ``Retry-After`` is read against the
``now`` given).
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
# The headers that say how long to wait; the rest of an answer's headers are not kept.
WAIT_HEADERS: Final = frozenset({"retry-after", "x-ratelimit-remaining", "x-ratelimit-reset"})

_SECONDS: Final = re.compile(r"[0-9]{1,10}")


def backoff_s(first_s: float, attempt: int, cap_s: float = math.inf) -> float:
    """Return the wait after failed attempt ``attempt`` (1 is the first): doubling, capped."""
    return float(min(first_s * 2.0 ** max(attempt - 1, 0), cap_s))


def retried_within_call(status: int | None) -> bool:
    """Say whether the client tries an idempotent call again at once (None: no answer)."""
    return status is None or status in SERVER_TROUBLE


def is_rate_limited(status: int | None, message: str) -> bool:
    """Say whether an answer is GitHub's 403 for a rate limit (primary or secondary)."""
    return status == 403 and "rate limit" in message.lower()


def wait_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Return only the headers that say how long to wait, their names in lower case."""
    return {k.lower(): v for k, v in (headers or {}).items() if k.lower() in WAIT_HEADERS}


def header_wait_s(headers: Mapping[str, str], now: float) -> float | None:
    """Return how long GitHub's headers ask to wait (0 to ``MAX_WAIT_S``); None if they don't.

    ``Retry-After`` first, in seconds or as an HTTP date; else, when
    ``x-ratelimit-remaining`` is 0, until ``x-ratelimit-reset`` (epoch seconds).
    """
    told = wait_headers(headers)
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
) -> float | None:
    """Return how long to wait before trying a failed write again; None: never again.

    ``status`` None means no answer came (a lost connection, a passed deadline).
    """
    limited = is_rate_limited(status, message)
    if not (status is None or status in LATER or limited):
        return None
    told = header_wait_s(headers, now)
    if told is not None:
        return told
    return rate_limited_s if limited else backoff_s(first_s, attempt, cap_s)


def _capped(wait_s: float) -> float:
    return min(max(wait_s, 0.0), MAX_WAIT_S)

"""The one GitHub call policy: which answers are tried again, the backoff, GitHub's headers.

Every expected wait is written out by hand from GitHub's documentation and RFC 9110
(``Retry-After`` is delay-seconds or an HTTP date), never computed with the code under
test. https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
"""

from __future__ import annotations

import pytest

from app_relay.github.retry import (
    backoff_s,
    header_wait_s,
    is_rate_limited,
    jittered_s,
    rate_limit_wait_s,
    retried_within_call,
    retry_later_s,
    wait_headers,
)

NOW = 1_768_478_400.0  # Thu, 15 Jan 2026 12:00:00 GMT
HOUR = 3600.0


# ---- the backoff schedule ----------------------------------------------------------


@pytest.mark.parametrize(
    ("first_s", "attempt", "cap_s", "expected"),
    [
        (0.5, 1, None, 0.5),
        (0.5, 2, None, 1.0),
        (0.5, 3, None, 2.0),
        (0.01, 2, None, 0.02),
        (2.0, 0, 300.0, 2.0),  # no attempt yet counts as the first
        (2.0, 1, 300.0, 2.0),
        (2.0, 4, 300.0, 16.0),
        (2.0, 8, 300.0, 256.0),
        (2.0, 9, 300.0, 300.0),  # 512 is over the cap
        (0.0, 5, 300.0, 0.0),
    ],
)
def test_the_backoff_doubles_from_the_first_wait_up_to_the_cap(
    first_s: float, attempt: int, cap_s: float | None, expected: float
) -> None:
    got = backoff_s(first_s, attempt) if cap_s is None else backoff_s(first_s, attempt, cap_s)
    assert got == expected
    assert isinstance(got, float)


# ---- what the client retries within a call -----------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504, None])
def test_the_client_retries_githubs_own_trouble_and_a_lost_connection(
    status: int | None,
) -> None:
    assert retried_within_call(status)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 409, 422, 429, 501, 505])
def test_the_client_does_not_retry_anything_else_within_a_call(status: int) -> None:
    assert not retried_within_call(status)


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (403, "API rate limit exceeded for installation ID 52173914.", True),
        (403, "You have exceeded a secondary rate limit. Please wait a few minutes.", True),
        (403, "API RATE LIMIT exceeded", True),
        (403, "Resource not accessible by integration", False),
        (429, "API rate limit exceeded", True),  # a 429 is always a rate limit
        (429, "no message", True),
        (None, "rate limit", False),
        (404, "API rate limit exceeded", False),
    ],
)
def test_a_rate_limit_is_githubs_429_or_a_403_saying_so(
    status: int | None, message: str, expected: bool
) -> None:
    assert is_rate_limited(status, message) is expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # GitHub sends Retry-After only with a secondary rate limit.
        ({"Retry-After": "60"}, True),
        # The primary limit: none remaining.
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768479000"}, True),
        # A refusal carries the budget too, with requests left: it is a refusal.
        ({"x-ratelimit-remaining": "4999", "x-ratelimit-reset": "1768479000"}, False),
        ({}, False),
    ],
)
def test_a_403_is_a_rate_limit_when_its_headers_say_so(
    headers: dict[str, str], expected: bool
) -> None:
    assert is_rate_limited(403, "Forbidden", headers) is expected
    # Only a 403 or 429 is ever a rate limit.
    assert is_rate_limited(404, "Not Found", headers) is False


# ---- GitHub's headers ------------------------------------------------------------


def test_only_the_headers_that_say_how_long_to_wait_are_kept() -> None:
    answered = {
        "Retry-After": "30",
        "X-RateLimit-Remaining": "0",
        "x-ratelimit-reset": "1768479000",
        "X-RateLimit-Used": "5000",
        "Content-Type": "application/json",
        "Authorization": "token secret",
        "Date": "Thu, 15 Jan 2026 12:00:00 GMT",
    }
    assert wait_headers(answered) == {
        "retry-after": "30",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "1768479000",
        "date": "Thu, 15 Jan 2026 12:00:00 GMT",  # GitHub's clock, which the rest is read by
    }
    assert wait_headers(None) == {}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # Retry-After in seconds.
        ({"Retry-After": "30"}, 30.0),
        ({"retry-after": " 45 "}, 45.0),
        ({"retry-after": "0"}, 0.0),
        # Retry-After as an HTTP date, read against NOW (12:00:00 GMT).
        ({"Retry-After": "Thu, 15 Jan 2026 12:01:30 GMT"}, 90.0),
        ({"Retry-After": "Thu, 15 Jan 2026 12:00:01 GMT"}, 1.0),
        ({"Retry-After": "Thu, 15 Jan 2026 11:59:00 GMT"}, 0.0),  # already passed
        ({"Retry-After": "Fri, 16 Jan 2026 12:00:00 GMT"}, HOUR),  # a day: capped
        # The primary rate limit: none left until the reset (epoch seconds).
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768479000"}, 600.0),
        ({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1768478401"}, 1.0),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768478000"}, 0.0),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768500000"}, HOUR),
        # Retry-After wins over the reset.
        (
            {"retry-after": "5", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768479000"},
            5.0,
        ),
        # A Retry-After that cannot be read leaves the reset to say.
        (
            {
                "retry-after": "soon",
                "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": "1768478460",
            },
            60.0,
        ),
        ({"retry-after": "99999"}, HOUR),
    ],
)
def test_githubs_headers_say_how_long_to_wait(headers: dict[str, str], expected: float) -> None:
    assert header_wait_s(headers, NOW) == expected


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"content-type": "application/json"},
        {"retry-after": ""},
        {"retry-after": "soon"},
        {"retry-after": "-5"},
        {"retry-after": "1.5"},
        {"retry-after": "\u00b2"},  # a digit to str.isdigit, not a number
        {"retry-after": "Thu, 15 Jan 2026 12:01:30 -0000"},  # no time zone
        {"x-ratelimit-remaining": "1", "x-ratelimit-reset": "1768479000"},
        {"x-ratelimit-remaining": "0"},
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "tomorrow"},
        {"x-ratelimit-reset": "1768479000"},
    ],
)
def test_headers_that_do_not_say_how_long_give_no_wait(headers: dict[str, str]) -> None:
    assert header_wait_s(headers, NOW) is None


# ---- what the outbox tries again, and when ------------------------------------------


def later(
    status: int | None,
    message: str = "answered",
    headers: dict[str, str] | None = None,
    attempt: int = 1,
    **kw: float,
) -> float | None:
    return retry_later_s(
        status, message, headers or {}, attempt, first_s=2.0, cap_s=300.0, now=NOW, **kw
    )


@pytest.mark.parametrize(
    ("status", "attempt", "expected"),
    [
        (500, 1, 2.0),
        (502, 2, 4.0),
        (503, 4, 16.0),
        (504, 10, 300.0),
        (401, 1, 2.0),  # a refused token: the gateway buys a new one
        (408, 3, 8.0),
        (None, 2, 4.0),  # no answer at all
    ],
)
def test_the_outbox_tries_again_later_with_the_doubling_backoff(
    status: int | None, attempt: int, expected: float
) -> None:
    assert later(status, attempt=attempt) == expected


def test_a_rate_limit_without_headers_waits_a_minute_whatever_the_attempt() -> None:
    assert later(403, "API rate limit exceeded", attempt=1) == 60.0
    assert later(403, "You have exceeded a secondary rate limit", attempt=7) == 60.0
    assert later(403, "API rate limit exceeded", rate_limited_s=10.0) == 10.0
    assert later(429, attempt=1) == 60.0  # a 429 is a rate limit, not GitHub's trouble


def test_the_outbox_backoff_is_jittered_but_never_below_half() -> None:
    # Equal jitter: the draw in [0, 1) takes off up to half the doubling backoff.
    assert later(502, attempt=3, jitter=0.0) == 8.0
    assert later(502, attempt=3, jitter=0.5) == 6.0
    assert later(502, attempt=3, jitter=0.999) == pytest.approx(4.004)
    # A wait GitHub asked for is kept as asked.
    assert later(503, headers={"retry-after": "90"}, jitter=0.9) == 90.0
    assert later(403, "API rate limit exceeded", jitter=0.9) == 60.0


@pytest.mark.parametrize(
    ("wait_s", "jitter", "expected"),
    [(2.0, 0.0, 2.0), (2.0, 0.5, 1.5), (2.0, 1.0, 1.0), (2.0, -1.0, 2.0), (2.0, 7.0, 1.0)],
)
def test_jitter_takes_off_at_most_half(wait_s: float, jitter: float, expected: float) -> None:
    assert jittered_s(wait_s, jitter) == expected


def test_githubs_headers_set_the_wait_when_they_say() -> None:
    assert later(403, "API rate limit exceeded", {"retry-after": "7"}) == 7.0
    assert later(429, headers={"Retry-After": "Thu, 15 Jan 2026 12:02:00 GMT"}) == 120.0
    reset = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768478430"}
    assert later(403, "API rate limit exceeded", reset, attempt=3) == 30.0
    assert later(503, headers={"retry-after": "90"}, attempt=1) == 90.0
    assert later(403, "API rate limit exceeded", {"retry-after": "86400"}) == HOUR


@pytest.mark.parametrize("status", [400, 403, 404, 409, 410, 422])
def test_an_answer_that_cannot_change_is_never_tried_again(status: int) -> None:
    assert later(status, "Resource not accessible by integration") is None
    budget = {"x-ratelimit-remaining": "4321", "x-ratelimit-reset": "1768479000"}
    assert later(status, "Resource not accessible by integration", budget) is None


@pytest.mark.parametrize("status", [400, 404, 409, 410, 422])
def test_a_wait_named_on_a_refusal_does_not_make_it_a_rate_limit(status: int) -> None:
    # Not even when a header names a wait: the answer is still no. (On a 403, GitHub's
    # Retry-After is a secondary rate limit: test_a_403_is_a_rate_limit_when_its_headers_say_so.)
    assert later(status, "Validation Failed", {"retry-after": "5"}) is None


# ---- how long a call waits out a rate limit within itself ---------------------------


@pytest.mark.parametrize(
    ("headers", "limited", "expected"),
    [
        ({"retry-after": "30"}, 1, 30.0),
        ({"retry-after": "30"}, 3, 30.0),
        ({"retry-after": "0"}, 1, 1.0),  # never less than the floor ...
        ({"retry-after": "0"}, 4, 8.0),  # ... which doubles with each limit on the call
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768479000"}, 1, 600.0),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768478000"}, 2, 2.0),  # passed
        ({}, 1, 60.0),  # no header: at least a minute (GitHub's documentation) ...
        ({}, 2, 120.0),  # ... then exponentially more
        ({}, 9, HOUR),  # at most an hour
        ({"retry-after": "86400"}, 1, HOUR),
    ],
)
def test_a_call_waits_out_a_rate_limit_as_githubs_headers_say(
    headers: dict[str, str], limited: int, expected: float
) -> None:
    assert rate_limit_wait_s(headers, limited, NOW) == expected


def test_the_wait_for_a_rate_limit_is_spread_by_up_to_a_second() -> None:
    assert rate_limit_wait_s({"retry-after": "30"}, 1, NOW, jitter=0.25) == 30.25
    assert rate_limit_wait_s({}, 1, NOW, jitter=0.5) == 60.5


def test_the_reset_is_read_against_githubs_date_not_the_relays_clock() -> None:
    # The relay's clock runs 10 minutes fast: by it the reset has passed, by GitHub's
    # Date (12:00:00) it is 600 seconds away.
    fast = NOW + 600
    reset = {
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "1768479000",
        "date": "Thu, 15 Jan 2026 12:00:00 GMT",
    }
    assert header_wait_s(reset, fast) == 600.0
    assert rate_limit_wait_s(reset, 1, fast) == 600.0
    dated = {
        "retry-after": "Thu, 15 Jan 2026 12:01:30 GMT",
        "date": "Thu, 15 Jan 2026 12:00:00 GMT",
    }
    assert header_wait_s(dated, fast) == 90.0
    # A Date that cannot be read leaves the relay's clock to say.
    assert header_wait_s({**reset, "date": "yesterday"}, NOW) == 600.0

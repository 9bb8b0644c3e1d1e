"""The outbox's retries: a failed write is tried again later by the one GitHub call policy.

A stub store records how each effect was finished; a stub gateway fails the write the
way GitHub would. Every expected wait is written out by hand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from app_relay.github.answers import GitHubError
from app_relay.runs.effects import Outbox, OutboxConfig, reaction_intent
from app_relay.store import Effect, Store

NOW = 1_768_478_400.0  # Thu, 15 Jan 2026 12:00:00 GMT


@dataclass
class Finishes:
    """A store that holds one run and records how effects were finished."""

    finished: list[dict[str, Any]] = field(default_factory=list)

    def get_run(self, run_id: str) -> SimpleNamespace:
        return SimpleNamespace(
            run_id=run_id, repo="octo/widgets", installation_id=77, pr_number=7, check_run_id=None
        )

    def finish_effect(self, effect_id: int, worker_id: str, **kw: Any) -> bool:
        self.finished.append({"effect_id": effect_id, **kw})
        return True


class Failing:
    """A gateway whose reaction write fails with the error given."""

    def __init__(self, error: GitHubError) -> None:
        self.error = error

    def add_reaction(self, *args: object) -> None:
        raise self.error


def reaction_effect(attempts: int) -> Effect:
    intent = reaction_intent("eyes", number=7)
    return Effect(
        id=1,
        run_id="run-1",
        key=intent.key,
        kind="reaction",
        payload=dict(intent.payload),
        state="in_hand",
        attempts=attempts,
        error=None,
        result=None,
        created_at=datetime.fromtimestamp(NOW, UTC),
        done_at=None,
    )


def finish(error: GitHubError, attempts: int = 1, **config: float) -> dict[str, Any]:
    store = Finishes()
    outbox = Outbox(
        cast(Store, store),
        lambda installation_id: cast(Any, Failing(error)),
        name="test",
        config=OutboxConfig(retry_s=2.0, max_retry_s=300.0, **config),
        jitter=lambda: 0.0,  # the backoff as written (github/test_retry.py tests its spread)
    )
    assert outbox._make_one(reaction_effect(attempts)) == 0
    (done,) = store.finished
    assert done["effect_id"] == 1
    assert done["ok"] is False
    return done


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: NOW)


@pytest.mark.parametrize(
    ("status", "attempts", "wait_s"),
    [(502, 1, 2.0), (503, 3, 8.0), (401, 2, 4.0), (None, 9, 300.0)],
)
def test_a_write_github_may_take_later_waits_the_doubling_backoff(
    status: int | None, attempts: int, wait_s: float
) -> None:
    done = finish(GitHubError("POST /reactions", "answered", status=status), attempts)
    assert done["retry_in_s"] == wait_s
    assert "final" not in done


def test_a_rate_limit_without_headers_waits_the_configured_minute() -> None:
    error = GitHubError("POST /reactions", "answered HTTP 403: API rate limit exceeded", status=403)
    assert finish(error, attempts=4)["retry_in_s"] == 60.0
    assert finish(error, rate_limited_s=5.0)["retry_in_s"] == 5.0
    too_many = GitHubError("POST /reactions", "answered HTTP 429: no message", status=429)
    assert finish(too_many)["retry_in_s"] == 60.0


def test_a_rate_limit_waits_as_long_as_githubs_headers_say() -> None:
    after = GitHubError(
        "POST /reactions",
        "answered HTTP 403: You have exceeded a secondary rate limit",
        status=403,
        headers={"Retry-After": "Thu, 15 Jan 2026 12:02:30 GMT"},
    )
    assert finish(after)["retry_in_s"] == 150.0
    reset = GitHubError(
        "POST /reactions",
        "answered HTTP 429: API rate limit exceeded",
        status=429,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1768479300"},
    )
    assert finish(reset)["retry_in_s"] == 900.0


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (403, {"x-ratelimit-remaining": "4000"}),  # a permission refused, budget left
        (404, {"retry-after": "1"}),
        (422, {"retry-after": "1"}),
    ],
)
def test_a_write_github_refused_for_good_is_finished_for_good(
    status: int, headers: dict[str, str]
) -> None:
    error = GitHubError("POST /reactions", "answered: no", status=status, headers=headers)
    done = finish(error)
    assert done["final"] is True
    assert "retry_in_s" not in done

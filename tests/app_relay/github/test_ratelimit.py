"""Inside GitHub's rate limits: the budget kept, limits waited out, refusals not, 304s reused.

Against the fake GitHub, whose answers carry the rate-limit headers and ETags GitHub's
documentation describes, on a clock the test moves: the App's sleep moves it, so a wait
the App makes is time passing for the fake too (its reset comes, its Date moves on).
https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fakegithub import FakeGitHub
from githubworld import BASE, HEAD, REPO, Clock, make_app

from app_relay.github.answers import GitHubError
from app_relay.github.app_auth import GitHubApp
from app_relay.github.budget import Budget, rate_budget_snapshot
from app_relay.github.client import GitHubGateway
from app_relay.github.payloads import CheckOutput
from app_relay.observe.metrics import exposition, samples

INSTALLATION = "installation:77"


def budget_of(app: GitHubApp, key: str) -> Budget:
    """Return the App's budget for ``key``; fail when no call of it was made."""
    found = app.budgets.get(key)
    assert found is not None, f"no budget kept for {key}"
    return found


@dataclass
class Limited:
    """A gateway onto the fake GitHub whose waits pass on a clock shared with the fake."""

    fake: FakeGitHub
    app: GitHubApp
    gw: GitHubGateway
    clock: Clock
    sleeps: list[float]

    def calls(self, method: str, path: str) -> int:
        return len(self.fake.state.calls(method, path))


@pytest.fixture
def limited(fake_github: FakeGitHub) -> Iterator[Limited]:
    fake_github.add_repo(REPO)
    fake_github.state.add_pull(REPO, 7, head_sha=HEAD, base_sha=BASE, author="alice")
    clock, sleeps = Clock(), []
    fake_github.state.clock = clock

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    app = make_app(fake_github, clock, sleeps, sleep=sleep)
    gw = app.gateway(fake_github.installation_id)
    yield Limited(fake_github, app, gw, clock, sleeps)
    gw.close()
    app.close()


def run_with_jobs(w: Limited, steps: list[tuple[str, str, str | None]]) -> int:
    w.fake.state.add_workflow(REPO, "cujo.yml")
    run = w.fake.state.add_run(REPO, "cujo.yml", status="in_progress")
    w.fake.state.set_jobs(REPO, run["id"], steps)
    return int(run["id"])


# ---- the budget, as GitHub's headers say ------------------------------------------


def test_every_answer_tells_the_budget_and_the_app_keeps_it_where_metrics_read(
    limited: Limited,
) -> None:
    limited.gw.pull_request(REPO, 7)
    limited.gw.pull_request(REPO, 7)
    budget = budget_of(limited.app, INSTALLATION)
    assert (budget.limit, budget.remaining, budget.used) == (5000, 4998, 2)
    assert budget.reset_at == float(int(limited.clock.now) + 3600)
    assert budget.installation_id == 77
    assert budget.calls == {"ok": 2}
    # The token was bought with the App's JWT: a budget of its own.
    app_budget = budget_of(limited.app, "app")
    assert app_budget.remaining == 4999
    # The read-only snapshot /metrics reads holds this App's budgets.
    shown = {b.key: b for b in rate_budget_snapshot() if b in limited.app.budgets.snapshot()}
    assert set(shown) == {"app", INSTALLATION}
    assert shown[INSTALLATION].remaining == 4998
    # And /metrics shows it, by the budget's key.
    text = exposition()[0].decode()
    gauge = {
        labels["installation"]: value
        for labels, value in samples(text, "cujo_github_rate_remaining")
    }
    assert gauge[INSTALLATION] == 4998


# ---- the primary limit ------------------------------------------------------------


def test_a_spent_budget_is_waited_out_until_the_reset_then_the_call_succeeds(
    limited: Limited,
) -> None:
    limited.gw.pull_request(REPO, 7)
    limited.fake.state.exhaust_rate_limit(77, reset_in_s=600)
    assert limited.gw.pull_request(REPO, 7).head_sha == HEAD
    # One 403 (none remaining), a wait to the reset by GitHub's Date, then the answer.
    assert limited.sleeps == [600.0]
    assert limited.calls("GET", "/pulls/7$") == 3
    budget = budget_of(limited.app, INSTALLATION)
    assert (budget.rate_limited, budget.waited_s, budget.remaining) == (1, 600.0, 4999)
    assert budget.calls == {"ok": 2, "403": 1}


def test_a_budget_seen_spent_pauses_the_next_call_before_it_is_sent(limited: Limited) -> None:
    limited.gw.pull_request(REPO, 7)
    window = limited.fake.state.rate_windows[INSTALLATION]
    window.used = window.limit - 1
    reset = window.reset
    limited.gw.pull_request(REPO, 7)  # takes the last request: remaining 0
    assert limited.sleeps == []
    before = limited.clock.now
    limited.gw.pull_request(REPO, 7)
    # Paused until the reset before sending: no request was spent on a 403.
    assert limited.sleeps == [pytest.approx(reset - before)]
    assert limited.calls("GET", "/pulls/7$") == 3
    budget = budget_of(limited.app, INSTALLATION)
    assert budget.calls == {"ok": 3}


# ---- secondary limits ----------------------------------------------------------------


@pytest.mark.parametrize("status", [403, 429])
def test_a_secondary_limit_with_retry_after_is_waited_out_as_asked(
    limited: Limited, status: int
) -> None:
    limited.gw.pull_request(REPO, 7)
    limited.fake.state.limit_secondary_next(1, status=status, retry_after=30, path="/pulls/7$")
    assert limited.gw.pull_request(REPO, 7).head_sha == HEAD
    assert limited.sleeps == [30.0]
    assert limited.calls("GET", "/pulls/7$") == 3


def test_a_secondary_limit_without_retry_after_waits_a_minute_then_longer(
    limited: Limited,
) -> None:
    limited.fake.state.limit_secondary_next(2, retry_after=None, path="/pulls/7$")
    assert limited.gw.pull_request(REPO, 7).head_sha == HEAD
    assert limited.sleeps == [60.0, 120.0]


def test_a_write_refused_by_a_rate_limit_is_sent_again_and_made_once(limited: Limited) -> None:
    limited.fake.state.limit_secondary_next(
        1, status=429, retry_after=5, method="POST", path="/check-runs$"
    )
    limited.gw.create_check_run(REPO, HEAD, output=CheckOutput("Cujo", "Running"))
    assert limited.sleeps == [5.0]
    assert limited.calls("POST", "/check-runs$") == 2
    assert len(limited.fake.state.repos[REPO].check_runs) == 1


def test_a_dispatch_refused_by_a_rate_limit_starts_exactly_one_run(limited: Limited) -> None:
    limited.fake.state.add_workflow(REPO, "cujo.yml")
    limited.fake.state.limit_secondary_next(1, retry_after=20, method="POST", path="/dispatches$")
    result = limited.gw.dispatch_workflow(REPO, "cujo.yml", "main", {"run-id": "r1"})
    assert result.workflow_run_id is not None
    assert limited.sleeps == [20.0]
    assert len(limited.fake.state.repos[REPO].runs) == 1


def test_a_limit_that_does_not_lift_fails_after_its_waits(limited: Limited) -> None:
    limited.fake.state.limit_secondary_next(9, retry_after=10, path="/pulls/7$")
    with pytest.raises(GitHubError, match="HTTP 403: You have exceeded a secondary rate limit"):
        limited.gw.pull_request(REPO, 7)
    assert limited.sleeps == [10.0, 10.0, 10.0, 10.0, 16.0]  # the floor doubles: 1, 2, 4, 8, 16
    assert limited.calls("GET", "/pulls/7$") == 6


# ---- refusals ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "call"),
    [
        ("GET", "/pulls/7$", lambda gw: gw.pull_request(REPO, 7)),
        (
            "POST",
            "/check-runs$",
            lambda gw: gw.create_check_run(REPO, HEAD, output=CheckOutput("t", "s")),
        ),
    ],
)
def test_a_permission_403_is_not_retried(
    limited: Limited, method: str, path: str, call: object
) -> None:
    refused = '{"message": "Resource not accessible by integration"}'
    limited.fake.state.answer_next(method, path, refused, status=403)
    with pytest.raises(GitHubError, match="HTTP 403: Resource not accessible") as caught:
        call(limited.gw)  # type: ignore[operator]
    assert caught.value.status == 403
    assert limited.calls(method, path) == 1
    assert limited.sleeps == []
    budget = budget_of(limited.app, INSTALLATION)
    assert budget.rate_limited == 0


# ---- conditional requests --------------------------------------------------------------


def test_a_304_reuses_the_jobs_kept_and_costs_nothing_against_the_limit(
    limited: Limited,
) -> None:
    run_id = run_with_jobs(
        limited, [("prepare", "completed", "success"), ("arm", "in_progress", None)]
    )
    first = limited.gw.workflow_jobs(REPO, run_id)
    used = limited.fake.state.rate_windows[INSTALLATION].used
    again = limited.gw.workflow_jobs(REPO, run_id)
    assert again == first
    sent = limited.fake.state.calls("GET", "/jobs$")
    assert "if-none-match" not in sent[0].headers
    assert sent[1].headers["if-none-match"].startswith('W/"')
    # Answered 304: not counted by GitHub, counted as such by the App.
    assert limited.fake.state.rate_windows[INSTALLATION].used == used
    budget = budget_of(limited.app, INSTALLATION)
    assert budget.not_modified == 1
    # Jobs that moved on are answered in full, and kept anew.
    limited.fake.state.set_jobs(REPO, run_id, [("prepare", "completed", "success"),
        ("arm", "completed", "success"), ("install", "in_progress", None)])  # fmt: skip
    moved = limited.gw.workflow_jobs(REPO, run_id)
    assert [s.name for s in moved[0].steps] == ["prepare", "arm", "install"]
    assert limited.gw.workflow_jobs(REPO, run_id) == moved
    assert budget.not_modified == 1  # a snapshot: frozen when taken
    latest = budget_of(limited.app, INSTALLATION)
    assert latest.not_modified == 2


def test_a_workflow_run_read_again_is_answered_304(limited: Limited) -> None:
    run_id = run_with_jobs(limited, [])
    first = limited.gw.workflow_run(REPO, run_id)
    assert limited.gw.workflow_run(REPO, run_id) == first
    (_, second) = limited.fake.state.calls("GET", f"/runs/{run_id}$")
    assert "if-none-match" in second.headers


def test_without_an_etag_cache_every_get_is_plain(limited: Limited) -> None:
    run_id = run_with_jobs(limited, [("prepare", "in_progress", None)])
    app = make_app(limited.fake, limited.clock, limited.sleeps, etag_entries=0)
    gw = app.gateway(77)
    try:
        gw.workflow_jobs(REPO, run_id)
        gw.workflow_jobs(REPO, run_id)
    finally:
        gw.close()
        app.close()
    assert all("if-none-match" not in c.headers for c in limited.fake.state.calls("GET", "/jobs$"))


def test_a_304_to_a_request_that_named_no_etag_fails_closed(limited: Limited) -> None:
    run_id = run_with_jobs(limited, [])
    limited.fake.state.answer_next("GET", "/jobs$", b"", status=304)
    with pytest.raises(GitHubError, match="304 Not Modified to a request naming no ETag"):
        limited.gw.workflow_jobs(REPO, run_id)


def test_a_rate_limited_conditional_read_is_waited_out_too(limited: Limited) -> None:
    run_id = run_with_jobs(limited, [("prepare", "in_progress", None)])
    limited.gw.workflow_jobs(REPO, run_id)
    limited.fake.state.exhaust_rate_limit(77, reset_in_s=120)
    assert [j.name for j in limited.gw.workflow_jobs(REPO, run_id)] == ["sandbox / cujo sandbox"]
    assert limited.sleeps == [120.0]


# ---- the backoff is jittered -------------------------------------------------------


def test_the_backoff_within_a_call_is_jittered(limited: Limited) -> None:
    app = make_app(limited.fake, limited.clock, limited.sleeps, jitter=lambda: 0.5)
    gw = app.gateway(77)
    try:
        gw.pull_request(REPO, 7)
        limited.fake.state.fail_next(2, status=502, method="GET", path="/pulls/7$")
        gw.pull_request(REPO, 7)
    finally:
        gw.close()
        app.close()
    # 0.01 then 0.02 doubled, each less up to half: three quarters of each with 0.5.
    assert limited.sleeps == [pytest.approx(0.0075), pytest.approx(0.015)]


def test_githubs_trouble_on_a_conditional_read_is_retried_even_without_json(
    limited: Limited,
) -> None:
    run_id = run_with_jobs(limited, [("prepare", "in_progress", None)])
    limited.fake.state.answer_next("GET", "/jobs$", "<html>502 Bad Gateway</html>", status=502)
    assert len(limited.gw.workflow_jobs(REPO, run_id)) == 1
    assert limited.calls("GET", "/jobs$") == 2
    limited.fake.state.answer_next("GET", "/jobs$", "<html>not JSON</html>", status=200)
    with pytest.raises(GitHubError, match="answer is not valid JSON"):
        limited.gw.workflow_jobs(REPO, run_id)

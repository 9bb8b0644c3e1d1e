"""/healthz, /readyz and /metrics of the relay's web app, on loopback over a real record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from boardworld import Served, relay_settings
from fakegithub import FakeGitHub
from hooksignature import github_signature
from prometheus_client.parser import text_string_to_metric_families
from repo_paths import SAMPLES

from app_relay.github.app_auth import GitHubApp
from app_relay.github.event import Event
from app_relay.observe import metrics
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store
from app_relay.webhook.app import create_app
from app_relay.webhook.events import Context, Router
from app_relay.webhook.health import Readiness, read_health, write_health
from app_relay.webhook.workers import PoolConfig, WorkerPool
from cujo_action.schema import utcnow

OPENED = (SAMPLES / "webhooks" / "pull_request.opened.json").read_bytes()
SECRET = "test-webhook-secret"  # boardworld.relay_settings's
DEADLINE_S = 10.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/relay.db") as opened:
        yield opened


def github_of(fake: FakeGitHub) -> GitHubApp:
    """The App as /readyz asks GitHub: one try, a short deadline."""
    return GitHubApp(
        app_id=fake.app_id, private_key=fake.private_key_pem, base_url=fake.url, timeout_s=5,
        attempts=1, seconds_between_writes=None,
    )  # fmt: skip


def pool_of(store: Store, router: Router | None = None, workers: int = 2) -> WorkerPool:
    context = Context(store=store, reviewer=RecordingReviewer(store))
    config = PoolConfig(workers=workers, lease_s=10.0, idle_s=0.05, retry_s=0.0)
    return WorkerPool(store, context, router or Router(), config)


def served(store: Store, readiness: Readiness | None = None) -> Served:
    return Served(create_app(relay_settings(store), store, readiness=readiness))


def get(url: str) -> requests.Response:
    return requests.get(url, timeout=DEADLINE_S)


def post_opened(url: str, delivery: str) -> requests.Response:
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(SECRET, OPENED),
    }
    return requests.post(f"{url}/webhook", data=OPENED, headers=headers, timeout=DEADLINE_S)


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------------- /readyz


def test_healthz_says_only_that_the_process_answers(store):
    # Nothing works behind it (no workers, GitHub unreachable), and still: up.
    dead = Readiness(store, workers=lambda: ["cujo-worker-0 died"], cache_s=0)
    with served(store, dead) as relay:
        assert get(f"{relay.url}/healthz").json() == {"status": "ok"}
        assert get(f"{relay.url}/readyz").status_code == 503


def test_a_relay_whose_parts_all_work_is_ready(store, fake_github):
    pool = pool_of(store)
    pool.start()
    github = github_of(fake_github)
    try:
        readiness = Readiness(store, workers=pool.health, github=github.check_reachable)
        with served(store, readiness) as relay:
            answer = get(f"{relay.url}/readyz")
    finally:
        assert pool.stop(DEADLINE_S)
        github.close()
    assert answer.status_code == 200
    assert answer.json() == {
        "status": "ready",
        "parts": {"record": "ok", "workers": "ok", "intake": "ok", "github": "ok"},
    }
    assert [c.auth for c in fake_github.state.calls("GET", "^/app$")] == ["jwt"]


class Killed(BaseException):
    """What kills a worker thread: nothing it handles catches it."""


def test_a_dead_worker_makes_readyz_fail_naming_it(store):
    router = Router()

    @router.register("pull_request")
    def fatal(event: Event, context: Context) -> None:
        raise Killed("the worker's thread ended here")

    pool = pool_of(store, router, workers=2)
    pool.start()
    readiness = Readiness(store, workers=pool.health, cache_s=0)
    try:
        with served(store, readiness) as relay:
            assert get(f"{relay.url}/readyz").status_code == 200
            assert post_opened(relay.url, "d-fatal").status_code == 202
            pool.notify()
            wait_for(pool.health, "a worker to die")
            answer = get(f"{relay.url}/readyz")
    finally:
        pool.stop(DEADLINE_S)
    assert answer.status_code == 503
    said = answer.json()
    assert said["status"] == "not ready"
    [failing] = said["failing"]
    assert failing.startswith("workers: cujo-worker-")
    assert "died: Killed: the worker's thread ended here" in failing
    assert said["parts"]["record"] == "ok"


def test_an_unreachable_github_makes_readyz_fail_naming_it(store, fake_github):
    github = github_of(fake_github)
    fake_github.state.fail_next(1, status=502, method="GET", path="^/app$")
    try:
        readiness = Readiness(store, github=github.check_reachable, cache_s=0)
        with served(store, readiness) as relay:
            answer = get(f"{relay.url}/readyz")
    finally:
        github.close()
    assert answer.status_code == 503
    assert answer.json()["failing"] == [
        "github: does not answer the App: GitHubError: GET /app: answered HTTP 502: Server Error"
    ]


def test_a_backed_up_intake_makes_readyz_fail_saying_how_long(tmp_path):
    url = f"sqlite:///{tmp_path}/relay.db"
    ten_minutes_ago = utcnow() - timedelta(minutes=10)
    with Store(url, clock=lambda: ten_minutes_ago) as then:
        then.record_delivery("d-old", "pull_request", "opened", 1, "o/r", OPENED)
    with Store(url) as store:
        answer = Readiness(store, backlog_s=120, cache_s=0).check()
        assert not answer.ready
        assert answer.failing()[0].startswith("intake: the oldest waiting delivery has waited 6")
        assert "over 120s (CUJO_READY_BACKLOG_S)" in answer.failing()[0]
        # Once a worker took it, nothing waits.
        assert store.claim_delivery("w", 30) is not None
        assert Readiness(store, backlog_s=120, cache_s=0).check().ready


def test_the_answer_is_kept_a_few_seconds_and_github_longer(store, fake_github):
    now = [1000.0]
    github = github_of(fake_github)
    asked: list[int] = []

    def workers() -> list[str]:
        asked.append(1)
        return []

    readiness = Readiness(
        store, workers=workers, github=github.check_reachable, cache_s=5, github_cache_s=30,
        clock=lambda: now[0],
    )  # fmt: skip
    try:
        for step in (0, 1, 4):  # within 5 s of the first: the kept answer
            now[0] = 1000.0 + step
            assert readiness.check().ready
        assert len(asked) == 1
        now[0] = 1006.0  # asked again; GitHub's answer is still kept
        readiness.check()
        now[0] = 1031.0  # and now GitHub is asked again too
        readiness.check()
    finally:
        github.close()
    assert len(asked) == 3
    assert len(fake_github.state.calls("GET", "^/app$")) == 2


def test_a_worker_process_is_named_when_silent_or_when_a_part_of_it_fails(tmp_path):
    assert read_health(tmp_path, 41) == ["worker process 41 has not reported yet (starting)"]
    write_health(tmp_path, 41, [])
    assert read_health(tmp_path, 41) == []
    write_health(tmp_path, 41, ["cujo-worker-2 died: Killed: x"])
    assert read_health(tmp_path, 41) == ["worker process 41: cujo-worker-2 died: Killed: x"]
    assert read_health(tmp_path, 41, now=time.time() + 60)[0].startswith(
        "worker process 41 has not reported for 6"
    )


# ---------------------------------------------------------------------- /metrics


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Read /metrics with prometheus-client's own parser: sample name and labels → value."""
    answer = get(f"{url}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def received(found: dict[Any, float], outcome: str, event: str = "pull_request") -> float:
    key = ("cujo_deliveries_received_total", (("event", event), ("outcome", outcome)))
    return found.get(key, 0.0)


def test_metrics_parse_and_count_a_delivery_by_event_and_outcome(store):
    with served(store) as relay:
        before = scrape(relay.url)
        assert post_opened(relay.url, "d-counted").status_code == 202
        assert post_opened(relay.url, "d-counted").status_code == 202  # a redelivery
        bad = requests.post(
            f"{relay.url}/webhook", data=OPENED, timeout=DEADLINE_S,
            headers={"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-forged",
                     "X-Hub-Signature-256": "sha256=" + "0" * 64},
        )  # fmt: skip
        assert bad.status_code == 401
        after = scrape(relay.url)
    assert received(after, "recorded") - received(before, "recorded") == 1
    assert received(after, "duplicate") - received(before, "duplicate") == 1
    # A refused delivery's event is not believed: it is counted under "-".
    assert received(after, "refused", "-") - received(before, "refused", "-") == 1
    took = after[("cujo_intake_seconds_count", ())] - before[("cujo_intake_seconds_count", ())]
    assert took == 3
    # What the record holds: the delivery waits, no run yet.
    assert after[("cujo_deliveries_waiting", ())] == 1
    assert after[("cujo_runs", (("state", "running"),))] == 0
    assert after[("cujo_record_up", ())] == 1


def test_metrics_count_worked_deliveries_and_runs_from_the_record(store):
    pool = pool_of(store)
    with served(store) as relay:
        before = scrape(relay.url)
        assert post_opened(relay.url, "d-worked").status_code == 202
        pool.start()
        try:
            wait_for(lambda: store.get_delivery("d-worked").state == "done", "the worker")
        finally:
            assert pool.stop(DEADLINE_S)
        session = store.open_session("o/r", 3, "github")
        store.start_run(session, "run-metrics-1", "b" * 40, "a" * 40, "sandbox")
        after = scrape(relay.url)
    key = ("cujo_deliveries_worked_total", (("event", "pull_request"), ("outcome", "done")))
    assert after[key] - before.get(key, 0.0) == 1
    assert after[("cujo_runs", (("state", "running"),))] == 1
    assert after[("cujo_deliveries_waiting", ())] == 0


def test_github_calls_are_counted_by_status_and_the_rate_budget_hook_shows(store, fake_github):
    github = github_of(fake_github)
    fake_github.state.fail_next(1, status=502, method="GET", path="^/app$")
    with served(store) as relay:
        before = scrape(relay.url)
        with pytest.raises(Exception, match="HTTP 502"):
            github.check_reachable()
        github.check_reachable()
        metrics.set_rate_budget(77, 4321, 1_900_000_000)
        after = scrape(relay.url)
    github.close()

    def calls(found: dict[Any, float], status: str) -> float:
        return found.get(("cujo_github_calls_total", (("method", "GET"), ("status", status))), 0.0)

    assert calls(after, "502") - calls(before, "502") == 1
    assert calls(after, "2xx") - calls(before, "2xx") == 1
    assert after[("cujo_github_rate_remaining", (("installation", "77"),))] == 4321
    reset = ("cujo_github_rate_reset_timestamp_seconds", (("installation", "77"),))
    assert after[reset] == 1_900_000_000

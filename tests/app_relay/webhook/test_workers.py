"""The worker pool over a real SQLite file: claims, retries, and relays killed mid-delivery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from fakegithub import FakeGitHub
from hooksignature import github_signature
from repo_paths import SAMPLES, TOP

from app_relay.github.event import Event
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store
from app_relay.webhook.events import ROUTER, Context, Router
from app_relay.webhook.workers import PoolConfig, WorkerPool

WEBHOOKS = SAMPLES / "webhooks"
CUJO = Path(sys.executable).parent / "cujo"
# A bound on a wait for an event, not a timing: the workers run at nice +10
# (serve.WORKER_NICENESS), so on a loaded machine their start waits behind everything else.
DEADLINE_S = 180.0
OPENED = (WEBHOOKS / "pull_request.opened.json").read_bytes()
SECRET = "workers-test-secret-2b9e"


def wait_for(condition: Callable[[], object], what: str, deadline_s: float = DEADLINE_S) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` once the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {deadline_s}s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/relay.db"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store(url) as opened:
        yield opened


def record(store: Store, delivery_id: str, body: bytes = OPENED, event: str = "pull_request"):
    assert store.record_delivery(delivery_id, event, "opened", 1, "Codertocat/Hello-World", body)


def pool_of(store: Store, router: Router = ROUTER, **config: float) -> WorkerPool:
    settings = {"workers": 2, "lease_s": 10.0, "idle_s": 0.05, "retry_s": 0.0, **config}
    return WorkerPool(
        store,
        Context(store=store, reviewer=RecordingReviewer(store)),
        router,
        PoolConfig(**settings),  # type: ignore[arg-type]
    )


def test_an_opened_pull_request_becomes_a_session_and_a_review_request(store):
    record(store, "d-1")
    pool = pool_of(store)
    pool.start()
    try:
        wait_for(lambda: store.get_delivery("d-1").state == "done", "d-1 to be done")
    finally:
        assert pool.stop(DEADLINE_S)

    [request] = store.review_requests()
    assert (request.repo, request.pr_number, request.action) == (
        "Codertocat/Hello-World",
        2,
        "opened",
    )
    assert request.head_sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    assert request.base_sha == "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"
    assert (request.base_ref, request.author, request.author_type) == (
        "master",
        "Codertocat",
        "User",
    )
    assert (request.draft, request.installation_id, request.delivery_id) == (False, 1, "d-1")
    assert store.get_delivery("d-1").attempts == 1


def test_a_closed_pull_request_and_unrouted_events_are_done_without_a_review(store):
    record(store, "d-closed", (WEBHOOKS / "pull_request.closed.json").read_bytes())
    record(store, "d-star", b'{"action": "created"}', event="star")
    pool = pool_of(store)
    pool.start()
    try:
        wait_for(lambda: store.count_deliveries("done") == 2, "both deliveries to be done")
    finally:
        assert pool.stop(DEADLINE_S)

    assert store.review_requests() == []


def test_a_malformed_pull_request_fails_at_once_with_the_reason(store):
    record(store, "d-bad", OPENED.replace(b'"sha": "ec26c3e5', b'"sha": "zz26c3e5'))
    pool = pool_of(store)
    pool.start()
    try:
        wait_for(lambda: store.get_delivery("d-bad").state == "failed", "d-bad to fail")
    finally:
        assert pool.stop(DEADLINE_S)

    failed = store.get_delivery("d-bad")
    assert failed.attempts == 1
    assert "pull_request.head.sha is not a 40-digit commit SHA" in (failed.error or "")
    assert store.review_requests() == []


def test_a_handler_that_keeps_raising_is_retried_then_failed_with_the_reason(store):
    router = Router()
    calls: list[str] = []

    @router.register("pull_request", "opened")
    def explode(event: Event, context: Context) -> None:
        calls.append(event.delivery_id)
        raise RuntimeError(f"GitHub answered 502 (call {len(calls)})")

    record(store, "d-boom")
    pool = pool_of(store, router, max_attempts=3)
    pool.start()
    try:
        wait_for(lambda: store.get_delivery("d-boom").state == "failed", "d-boom to fail")
    finally:
        assert pool.stop(DEADLINE_S)

    failed = store.get_delivery("d-boom")
    assert calls == ["d-boom"] * 3
    assert failed.attempts == 3
    assert failed.error == "failed after 3 attempt(s): RuntimeError: GitHub answered 502 (call 3)"
    assert (failed.worker_id, failed.lease_until) == (None, None)


def test_a_handler_that_fails_once_is_done_on_the_retry(store):
    router = Router()
    calls: list[str] = []

    @router.register("pull_request")
    def flaky(event: Event, context: Context) -> None:
        calls.append(event.delivery_id)
        if len(calls) == 1:
            raise ConnectionError("reset by peer")

    record(store, "d-flaky")
    pool = pool_of(store, router)
    pool.start()
    try:
        wait_for(lambda: store.get_delivery("d-flaky").state == "done", "d-flaky to be done")
    finally:
        assert pool.stop(DEADLINE_S)

    assert calls == ["d-flaky", "d-flaky"]
    assert store.get_delivery("d-flaky").attempts == 2


def test_merge_gate_news_is_counted_once_in_the_commit_that_finishes_the_delivery(store):
    # Open run pages read the gate again on news; a worker counts it with the delivery's
    # finish (one write a delivery), so a handler that failed after noting it counts once.
    router = Router()
    calls: list[str] = []

    @router.register("pull_request")
    def note_then_fail_once(event: Event, context: Context) -> None:
        assert context.gate_news is not None
        context.gate_news(event.repo)
        calls.append(event.delivery_id)
        if len(calls) == 1:
            raise ConnectionError("reset by peer")
        assert store.merge_news("Codertocat/Hello-World") == 0  # not before the finish

    record(store, "d-news")
    pool = pool_of(store, router)
    pool.start()
    try:
        wait_for(lambda: store.get_delivery("d-news").state == "done", "d-news to be done")
    finally:
        assert pool.stop(DEADLINE_S)

    assert calls == ["d-news", "d-news"]
    assert store.merge_news("Codertocat/Hello-World") == 1


def test_the_routers_gate_news_handler_counts_a_worked_pull_request(store):
    record(store, "d-1")
    pool = pool_of(store)
    pool.start()
    try:
        wait_for(lambda: store.get_delivery("d-1").state == "done", "d-1 to be done")
    finally:
        assert pool.stop(DEADLINE_S)

    assert store.merge_news("Codertocat/Hello-World") == 1
    assert store.merge_news("octo/else") == 0


def test_two_pools_on_one_file_do_each_delivery_once(url):
    count = 120
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    router = Router()

    @router.register("pull_request")
    def count_it(event: Event, context: Context) -> None:
        with lock:
            seen[event.delivery_id] += 1

    with Store(url) as first, Store(url) as second:
        pools = [pool_of(first, router, workers=3), pool_of(second, router, workers=3)]
        for pool in pools:
            pool.start()
        try:
            for n in range(count):
                record(first if n % 2 else second, f"d-{n}")
                pools[n % 2].notify()
            wait_for(lambda: first.count_deliveries("done") == count, "every delivery done")
        finally:
            for pool in pools:
                assert pool.stop(DEADLINE_S)

    assert seen == Counter({f"d-{n}": 1 for n in range(count)})


def test_stop_lets_the_delivery_in_hand_finish(store):
    router = Router()
    started, release = threading.Event(), threading.Event()

    @router.register("pull_request")
    def slow(event: Event, context: Context) -> None:
        started.set()
        assert release.wait(DEADLINE_S)

    record(store, "d-slow")
    record(store, "d-next")
    pool = pool_of(store, router, workers=1)
    pool.start()
    assert started.wait(DEADLINE_S)
    stopper = threading.Thread(target=pool.stop, args=(DEADLINE_S,))
    stopper.start()
    release.set()
    stopper.join(DEADLINE_S)

    assert not stopper.is_alive()
    assert store.get_delivery("d-slow").state == "done"
    # Stopping means no new claim: the next one waits for the next relay.
    assert store.get_delivery("d-next").state == "pending"


def test_a_slow_handler_keeps_its_lease(store):
    router = Router()
    started, release = threading.Event(), threading.Event()

    @router.register("pull_request")
    def slow(event: Event, context: Context) -> None:
        started.set()
        assert release.wait(DEADLINE_S)

    record(store, "d-slow")
    pool = pool_of(store, router, workers=1, lease_s=0.3)
    pool.start()
    try:
        assert started.wait(DEADLINE_S)
        first_lease = store.get_delivery("d-slow").lease_until
        assert first_lease is not None
        wait_for(
            lambda: (store.get_delivery("d-slow").lease_until or first_lease) > first_lease,
            "the heartbeat to renew the lease",
        )
        # Renewed, so no other worker may take it over.
        assert store.claim_delivery("intruder", 5) is None
    finally:
        release.set()
        assert pool.stop(DEADLINE_S)
    assert store.get_delivery("d-slow").attempts == 1


# A relay in a process of its own, whose handler writes what it does to a log; in "hang"
# mode the handler never returns, so a SIGKILL lands mid-delivery.
RELAY = """
import os, sys, threading
from app_relay.webhook.events import Context, Router
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store
from app_relay.webhook.workers import PoolConfig, WorkerPool

url, log, mode = sys.argv[1:4]
store = Store(url)
router = Router()


@router.register("pull_request")
def handle(event, context):
    with open(log, "a") as out:
        out.write(f"start {event.delivery_id} {os.getpid()}\\n")
    if mode == "hang" and event.delivery_id == "d-1":
        threading.Event().wait()
    with open(log, "a") as out:
        out.write(f"done {event.delivery_id} {os.getpid()}\\n")


config = PoolConfig(workers=2, lease_s=1.0, idle_s=0.05)
pool = WorkerPool(store, Context(store=store, reviewer=RecordingReviewer(store)), router, config)
pool.start()
threading.Event().wait()
"""


def start_relay(url: str, log: Path, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", RELAY, url, str(log), mode], cwd=TOP, stdin=subprocess.DEVNULL
    )


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_relay_killed_mid_delivery_is_resumed_once_on_restart(store, url, tmp_path):
    log = tmp_path / "handled.log"
    record(store, "d-1")
    first = start_relay(url, log, "hang")
    try:
        wait_for(lambda: lines(log) == [f"start d-1 {first.pid}"], "the first relay to start d-1")
        first.send_signal(signal.SIGKILL)
        assert first.wait(DEADLINE_S) == -signal.SIGKILL
    finally:
        first.kill()
    assert store.get_delivery("d-1").state == "working"

    second = start_relay(url, log, "work")
    try:
        wait_for(lambda: store.get_delivery("d-1").state == "done", "the restarted relay")
        # A third delivery, recorded after d-1 is done, proves the relay looked again.
        record(store, "d-2")
        wait_for(lambda: store.get_delivery("d-2").state == "done", "d-2 to be done")
    finally:
        second.kill()
        second.wait(DEADLINE_S)

    assert lines(log) == [
        f"start d-1 {first.pid}",
        f"start d-1 {second.pid}",
        f"done d-1 {second.pid}",
        f"start d-2 {second.pid}",
        f"done d-2 {second.pid}",
    ]
    resumed = store.get_delivery("d-1")
    assert resumed.attempts == 2


def test_a_finished_delivery_is_not_done_again_after_a_restart(store, url, tmp_path):
    log = tmp_path / "handled.log"
    record(store, "d-1")
    first = start_relay(url, log, "work")
    try:
        wait_for(lambda: store.get_delivery("d-1").state == "done", "d-1 to be done")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(DEADLINE_S)

    second = start_relay(url, log, "work")
    try:
        record(store, "d-2")
        wait_for(lambda: store.get_delivery("d-2").state == "done", "d-2 to be done")
    finally:
        second.kill()
        second.wait(DEADLINE_S)

    assert [line.rsplit(" ", 1)[0] for line in lines(log)] == [
        "start d-1",
        "done d-1",
        "start d-2",
        "done d-2",
    ]


@pytest.fixture
def relay_env(tmp_path: Path, url: str, fake_github: FakeGitHub) -> dict[str, str]:
    # The sample's repository and pull request, on a fake GitHub that has no Cujo
    # workflow: the run is claimed, then errors at dispatch, and the delivery is done.
    fake_github.state.add_repo("Codertocat/Hello-World", installation_id=1)
    pr = json.loads(OPENED)["pull_request"]
    fake_github.state.add_pull(
        "Codertocat/Hello-World",
        pr["number"],
        head_sha=pr["head"]["sha"],
        base_sha=pr["base"]["sha"],
    )
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CUJO_APP_ID": str(fake_github.app_id),
        "CUJO_PRIVATE_KEY": fake_github.private_key_pem,
        "CUJO_WEBHOOK_SECRET": SECRET,
        "CUJO_DATABASE_URL": url,
        "CUJO_GITHUB_API_URL": fake_github.url,
    }


def serve(env: dict[str, str], tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [str(CUJO), "relay", "serve", "--port", "0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # The relay prints its address once the socket listens; reading blocks until then.
    for line in proc.stderr:
        if "listening on " in line:
            return proc, line.split("listening on ", 1)[1].split()[0]
    proc.wait(DEADLINE_S)
    pytest.fail(f"cujo relay serve exited {proc.returncode} without listening")


def test_cujo_relay_serve_records_reviews_and_stops_on_sigterm(relay_env, tmp_path, store):
    proc, base = serve(relay_env, tmp_path)
    try:
        assert post_opened(base, "d-serve").status_code == 202
        wait_for(lambda: store.get_delivery("d-serve").state == "done", "the relay's workers")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE_S) == 0
    finally:
        proc.kill()
        assert proc.stderr is not None
        said = proc.stderr.read()
        proc.stderr.close()
    assert "cujo relay: stopped" in said
    assert SECRET not in said
    assert [r.delivery_id for r in store.review_requests()] == ["d-serve"]


def post_opened(base: str, delivery: str) -> requests.Response:
    """Post the sample `pull_request.opened`, signed, to a served relay."""
    return requests.post(
        f"{base}/webhook",
        data=OPENED,
        headers={
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": github_signature(SECRET, OPENED),
        },
        timeout=DEADLINE_S,
    )


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    # A worker that exited but was not reaped yet (a zombie) has stopped all the same.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_the_webhook_process_works_nothing_itself_and_its_workers_die_with_it(
    relay_env, tmp_path, store
):
    relay_env = {**relay_env, "CUJO_DELIVERY_LEASE_S": "2"}
    proc = subprocess.Popen(
        [str(CUJO), "relay", "serve", "--port", "0", "--worker-processes", "2"],
        env=relay_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening on " in line:
                base = line.split("listening on ", 1)[1].split()[0]
                break
        wait_for(lambda: len(_children(proc.pid)) == 2, "two worker processes")
        workers = _children(proc.pid)
        assert post_opened(base, "d-procs").status_code == 202
        wait_for(lambda: store.get_delivery("d-procs").state == "done", "a worker process")
        # The webhook process dies without a word: its workers see their input end, stop.
        proc.kill()
        proc.wait(DEADLINE_S)
        wait_for(lambda: not any(_running(w) for w in workers), "workers gone", 90)
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_cujo_relay_serve_names_each_missing_setting(relay_env):
    env = {k: v for k, v in relay_env.items() if k not in ("CUJO_APP_ID", "CUJO_WEBHOOK_SECRET")}

    done = subprocess.run(
        [str(CUJO), "relay", "serve"], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 2
    assert "CUJO_APP_ID: missing" in done.stderr
    assert "CUJO_WEBHOOK_SECRET: missing" in done.stderr

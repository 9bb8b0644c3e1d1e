"""`cujo relay serve` stopped and broken as an operator sees it: SIGTERM, a dead worker.

The relay runs as a real process group (the webhook process and its worker process)
against the fake GitHub; SIGTERM goes to the whole group, as systemd and `docker stop`
of a shell entrypoint do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cujorun import CUJO
from fakegithub import FakeGitHub
from hooksignature import github_signature
from repo_paths import SAMPLES

from app_relay.cli.children import WORKER_NICENESS
from app_relay.github.event import Event
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store
from app_relay.webhook.events import Context, Router
from app_relay.webhook.workers import PoolConfig, WorkerPool

OPENED = (SAMPLES / "webhooks" / "pull_request.opened.json").read_bytes()
SECRET = "shutdown-test-secret-77a1"
REPO = "Codertocat/Hello-World"
DEADLINE_S = 90.0


def wait_for(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Poll ``condition`` until it answers something true; fail naming ``what``."""
    deadline = time.monotonic() + deadline_s
    while not (found := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {deadline_s}s waiting for {what}")
        time.sleep(0.05)
    return found


class Relay:
    """`cujo relay serve` in a process group of its own, its stderr in a file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                [str(CUJO), "relay", "serve", "--port", "0"],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True,
            )  # fmt: skip

        def listening() -> str | None:
            assert self.proc.poll() is None, self.said()
            m = re.search(r"listening on (http://\S+)", self.said())
            return m.group(1) if m else None

        self.url: str = wait_for(listening, "the relay to listen")

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                found.append(int(stat.parent.name))
        return found

    def readyz(self) -> requests.Response:
        return requests.get(f"{self.url}/readyz", timeout=30)

    def terminate_group(self) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(DEADLINE_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/relay.db"


@pytest.fixture
def env(tmp_path: Path, url: str, fake_github: FakeGitHub) -> dict[str, str]:
    fake_github.state.add_repo(REPO, installation_id=1)
    pr = json.loads(OPENED)["pull_request"]
    fake_github.state.add_pull(
        REPO, pr["number"], head_sha=pr["head"]["sha"], base_sha=pr["base"]["sha"]
    )
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),  # the metrics folder of a relay killed at teardown
        "CUJO_HOME": str(tmp_path / "home"),
        "CUJO_APP_ID": str(fake_github.app_id),
        "CUJO_PRIVATE_KEY": fake_github.private_key_pem,
        "CUJO_WEBHOOK_SECRET": SECRET,
        "CUJO_DATABASE_URL": url,
        "CUJO_GITHUB_API_URL": fake_github.url,
        "CUJO_STOP_GRACE_S": "1",
    }


@pytest.fixture
def relay(env: dict[str, str], tmp_path: Path) -> Iterator[Callable[[], Relay]]:
    started: list[Relay] = []

    def start() -> Relay:
        started.append(Relay(env, tmp_path / f"relay-{len(started)}.log"))
        return started[-1]

    yield start
    for r in started:
        r.kill()


def post_opened(base: str, delivery: str) -> requests.Response:
    return requests.post(
        f"{base}/webhook", data=OPENED, timeout=30,
        headers={"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
                 "X-Hub-Signature-256": github_signature(SECRET, OPENED)},
    )  # fmt: skip


def test_sigterm_hands_back_a_held_lease_and_exits_0_without_a_fatal_error(relay, fake_github, url):
    # GitHub holds the delivery's own first request (its read of the pull request), so the
    # delivery stays in hand. Only that request: the catch-up pass lists the repository's
    # pull requests at start, and a hold it took first would let the delivery finish.
    own_read = rf"^/repos/{REPO}/pulls/{json.loads(OPENED)['number']}$"
    fake_github.state.delay_next(120, method="GET", path=own_read)
    served = relay()
    assert post_opened(served.url, "d-held").status_code == 202
    wait_for(lambda: fake_github.state.calls("GET", own_read), "the held request")
    with Store(url) as store:
        held = store.get_delivery("d-held")
        assert (held.state, held.attempts) == ("working", 1)
        assert held.worker_id is not None

        code = served.terminate_group()

        said = served.said()
        assert code == 0, said
        assert "Fatal Python error" not in said
        assert "cujo relay: stopped" in said
        handed = store.get_delivery("d-held")
        assert (handed.state, handed.worker_id, handed.lease_until) == ("pending", None, None)
        assert all(run.lease_owner is None for run in store.list_runs())
    lines = [json.loads(line) for line in said.splitlines() if line.startswith("{")]
    [back] = [line for line in lines if "handed back" in line["message"]]
    assert "1 delivery(ies)" in back["message"]
    # Every log line of both processes is JSON; only the CLI's own words are plain.
    plain = [line for line in said.splitlines() if not line.startswith("{")]
    assert all(line.startswith("cujo relay: ") for line in plain), plain


def _niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_an_idle_relay_stopped_with_sigterm_exits_0(relay):
    served = relay()
    wait_for(lambda: served.readyz().status_code == 200, "the relay to be ready")
    # The worker process steps back so the webhook's answers get the cores first.
    [worker] = served.worker_pids()
    assert _niceness(worker) == min(19, _niceness(served.proc.pid) + WORKER_NICENESS)
    assert served.terminate_group() == 0, served.said()
    assert "Fatal Python error" not in served.said()


def test_a_dead_worker_process_makes_readyz_fail_naming_it(relay):
    served = relay()
    ready = wait_for(lambda: served.readyz().status_code == 200, "the relay to be ready")
    assert ready
    [worker] = served.worker_pids()
    os.kill(worker, signal.SIGKILL)

    def failing() -> dict[str, Any] | None:
        answer = served.readyz()
        return answer.json() if answer.status_code == 503 else None

    said = wait_for(failing, "/readyz to see the worker gone", 30)
    assert said["failing"] == [f"workers: worker process {worker} exited with status -9"]
    assert said["parts"]["record"] == "ok"
    assert said["parts"]["github"] == "ok"
    assert requests.get(f"{served.url}/healthz", timeout=30).json() == {"status": "ok"}


def test_a_stop_hands_back_the_delivery_a_stuck_handler_holds(tmp_path):
    router = Router()
    started, release = threading.Event(), threading.Event()

    @router.register("pull_request")
    def stuck(event: Event, context: Context) -> None:
        started.set()
        release.wait(DEADLINE_S)

    with Store(f"sqlite:///{tmp_path}/relay.db") as store:
        store.record_delivery("d-stuck", "pull_request", "opened", 1, REPO, OPENED)
        pool = WorkerPool(
            store, Context(store=store, reviewer=RecordingReviewer(store)), router,
            PoolConfig(workers=1, idle_s=0.05),
        )  # fmt: skip
        pool.start()
        try:
            assert started.wait(DEADLINE_S)
            assert not pool.stop(timeout=0.1)  # still in hand at the deadline
            handed = store.hand_back(pool.worker_ids(), "nobody")
            assert (handed.deliveries, handed.runs, handed.effects) == (1, 0, 0)
            # Another relay takes it at once, not after the lease runs out.
            taken = store.claim_delivery("another-relay", 30)
            assert taken is not None
            assert taken.id == "d-stuck"
        finally:
            release.set()
            assert pool.stop(DEADLINE_S)
        # The stuck handler's late finish is not taken: the delivery is another's now.
        assert store.get_delivery("d-stuck").worker_id == "another-relay"

"""Benchmark the time from a signed webhook to `cujo/guard` in_progress on the fake GitHub.

`cujo relay serve` runs as a process of its own over a real SQLite file, pointed at the
loopback fake GitHub of the tests. Each pull request's `opened` webhook is posted signed;
the clock stops when the fake holds an in_progress `cujo/guard` check run on its head.
The pull requests are opened one after the other, so each figure is one claim's latency
(read the pull request, the policy at base and the changed files, record, create the
check). Target: p95 ≤ 1 s.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "fakes"))

from fakegithub import FakeGitHubServer, FakeState, fake_sha, make_key  # noqa: E402
from fakegithub.fixture import APP_ID, INSTALLATION_ID, FakeGitHub  # noqa: E402
from relayworld import (  # noqa: E402
    REPO,
    SECRET,
    open_pull,
    post_webhook,
    pull_request_event,
    set_up_repo,
)

CUJO = Path(sys.executable).with_name("cujo")


def _in_progress(state: FakeState, head: str) -> bool:
    with state.lock:
        return any(
            c["head_sha"] == head and c["status"] == "in_progress"
            for c in state.repos[REPO].check_runs.values()
        )


def _fake_world() -> tuple[FakeState, FakeGitHubServer, FakeGitHub, str]:
    """Serve a fake GitHub with the App installed on the test repository; return its base."""
    key = make_key()
    state = FakeState(app_id=APP_ID, public_key_pem=key.public_pem)
    state.add_installation(INSTALLATION_ID)
    server = FakeGitHubServer(state).start()
    fake = FakeGitHub(state, server.url, APP_ID, INSTALLATION_ID, key.private_pem)
    base = fake_sha()
    set_up_repo(fake, base_sha=base, policy="{}\n")
    return state, server, fake, base


def _relay_env(fake: FakeGitHub, database: str, home: str) -> dict[str, str]:
    return {
        **os.environ,
        "CUJO_APP_ID": str(APP_ID),
        "CUJO_PRIVATE_KEY": fake.private_key_pem,
        "CUJO_WEBHOOK_SECRET": SECRET,
        "CUJO_GITHUB_API_URL": fake.url,
        "CUJO_DATABASE_URL": database,
        "CUJO_HOME": home,
    }


def bench_claim_latency(n: int) -> dict[str, float]:
    """Open ``n`` pull requests one by one; print and return p50/p95 webhook → in_progress."""
    state, server, fake, base = _fake_world()
    with tempfile.TemporaryDirectory(prefix="cujo-bench-relay-") as tmp:
        log = Path(tmp) / "relay.log"
        env = _relay_env(fake, f"sqlite:///{tmp}/relay.db", tmp)
        with log.open("wb") as err:
            relay = subprocess.Popen(
                [str(CUJO), "relay", "serve", "--port", "0"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            url = _wait_listening(relay, log)
            latencies = []
            for number in range(1, n + 1):
                head = fake_sha()
                open_pull(fake, number, head=head, base=base)
                body = pull_request_event(fake, number=number, head=head, base=base)
                started = time.perf_counter()
                answer = post_webhook(url, "pull_request", body)
                if answer.status_code != 202:
                    raise RuntimeError(f"the relay answered {answer.status_code}")
                deadline = started + 30
                while not _in_progress(state, head):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"no in_progress check after 30 s:\n{log.read_text()}")
                    time.sleep(0.001)
                latencies.append(time.perf_counter() - started)
        finally:
            relay.terminate()
            relay.wait(60)
            server.stop()
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p95 = ordered[min(int(0.95 * len(ordered)), len(ordered) - 1)]
    verdict = "ok" if p95 <= 1.0 else "OVER TARGET"
    print(
        f"webhook → cujo/guard in_progress over {n} PRs: p50 {p50 * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms (target p95 ≤ 1000 ms: "
        f"{verdict})"
    )
    return {"p50_s": p50, "p95_s": p95, "max_s": ordered[-1]}


def bench_replicas(n: int = 40, counts: tuple[int, ...] = (1, 2, 3)) -> dict[int, float]:
    """Deliveries fully processed per second with 1, 2 and 3 relays on one PostgreSQL record.

    Each relay is `cujo relay serve` with one worker process; ``n`` pull requests are posted
    round-robin as fast as they are answered, and the clock stops when every one has its
    `cujo/guard` in progress (claimed, read, recorded, check created, sandbox dispatched).
    """
    import pgcluster

    rates: dict[int, float] = {}
    with pgcluster.cluster(Path(tempfile.mkdtemp(prefix="cujo-pg-"))) as admin:
        for count in counts:
            rates[count] = _replica_round(n, count, pgcluster.new_database(admin))
    base_rate = rates[counts[0]]
    print(
        "replicas on PostgreSQL, "
        + ", ".join(f"{c}: {r:.2f} deliveries/s ({r / base_rate:.2f}x)" for c, r in rates.items())
        + f" over {n} pull requests each (target: grows with replicas)"
    )
    return rates


def _replica_round(n: int, count: int, database: str) -> float:
    state, server, fake, base = _fake_world()
    relays: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="cujo-bench-replicas-") as tmp:
        env = _relay_env(fake, database, tmp)
        try:
            urls = []
            for k in range(count):
                log = Path(tmp) / f"relay-{k}.log"
                with log.open("wb") as err:
                    relays.append(
                        subprocess.Popen(
                            [str(CUJO), "relay", "serve", "--port", "0"],
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=err,
                            start_new_session=True,
                        )
                    )
                urls.append(_wait_listening(relays[-1], log))
            heads = []
            for number in range(1, n + 1):
                heads.append(fake_sha())
                open_pull(fake, number, head=heads[-1], base=base)
            started = time.perf_counter()
            for number, head in enumerate(heads, start=1):
                body = pull_request_event(fake, number=number, head=head, base=base)
                answer = post_webhook(urls[number % count], "pull_request", body)
                if answer.status_code != 202:
                    raise RuntimeError(f"a relay answered {answer.status_code}")
            deadline = started + 600
            while not all(_in_progress(state, head) for head in heads):
                if time.perf_counter() > deadline:
                    raise RuntimeError("not every pull request was claimed within 600 s")
                time.sleep(0.01)
            return n / (time.perf_counter() - started)
        finally:
            for relay in relays:
                relay.terminate()
            for relay in relays:
                relay.wait(90)
            server.stop()


def _wait_listening(relay: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if relay.poll() is not None:
            raise RuntimeError(f"the relay exited:\n{log.read_text()}")
        m = re.search(r"listening on (http://\S+)", log.read_text())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise RuntimeError("the relay did not listen within 60 s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["replicas"]:
        bench_replicas(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
    else:
        bench_claim_latency(int(sys.argv[1]) if len(sys.argv) > 1 else 50)

"""Benchmark POST /webhook against the durability floor: a bare FastAPI endpoint that
appends each body to a file and fsyncs it before answering 202.

Both run under uvicorn in processes of their own on loopback; the relay records into a
real SQLite file (or PostgreSQL, ``--postgres``) with its workers running in a process of
their own, woken through its stdin, as `cujo relay serve` does. The load is
open-loop at a steady rate (each request has a scheduled send time, and its latency is
counted from then, so a stall is not hidden by the client waiting), interleaved in
10-second slices so machine noise falls on both alike. Target: relay p99 ≤ 2× bare p99,
and every delivery answered 202 is in the record.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import requests
from fastapi import Request

from app_relay.webhook.signature import signature_of

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "samples" / "webhooks" / "pull_request.opened.json"
SECRET = "bench-webhook-secret"
KEY = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
SLICE_S = 10.0


@dataclass
class Tally:
    """Latencies and answers of one target."""

    name: str
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    sent: int = 0
    busy_s: float = 0.0

    def add(self, latency: float, status: int | None) -> None:
        if status is None:
            self.errors += 1
            return
        self.latencies.append(latency)
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")

    def line(self) -> str:
        rate = len(self.latencies) / self.busy_s if self.busy_s else 0.0
        return (
            f"{self.name:<6} p50 {self.quantile(0.50) * 1e3:7.2f} ms  "
            f"p99 {self.quantile(0.99) * 1e3:7.2f} ms  max {max(self.latencies) * 1e3:7.2f} ms  "
            f"mean {statistics.fmean(self.latencies) * 1e3:6.2f} ms  "
            f"{rate:6.1f} answers/s  answers {self.statuses}  errors {self.errors}"
        )


def serve(kind: str, database: str) -> None:
    """Serve the relay, its intake alone, or the bare endpoint on a port printed on stdout."""
    import logging

    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    logging.basicConfig(level=logging.WARNING)
    listener = socket.create_server(("127.0.0.1", 0), backlog=2048)
    pool = None
    worker: subprocess.Popen[bytes] | None = None
    if kind == "bare":
        app = FastAPI()
        floor = open(Path(tempfile.mkdtemp(prefix="cujo-floor-")) / "bodies", "ab")  # noqa: SIM115
        lock = threading.Lock()

        def keep(body: bytes) -> None:
            with lock:
                floor.write(len(body).to_bytes(4, "big") + body)
                floor.flush()
                os.fsync(floor.fileno())

        @app.post("/webhook")
        async def webhook(request: Request) -> JSONResponse:
            import anyio.to_thread

            await anyio.to_thread.run_sync(keep, await request.body())
            return JSONResponse({}, status_code=202)

        @app.get("/healthz")
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}
    else:
        from app_relay.runs.review_request import RecordingReviewer
        from app_relay.settings import RelaySettings, Secret
        from app_relay.store import Store
        from app_relay.webhook.app import create_app
        from app_relay.webhook.events import Context
        from app_relay.webhook.workers import WorkerPool

        settings = RelaySettings(
            app_id=1,
            private_key=Secret(KEY),
            webhook_secret=Secret(SECRET),
            github_api_url="http://127.0.0.1:9",
            database_url=database,
            workflow="cujo.yml",
            anthropic_api_key=None,
        )
        store = Store(database)
        if kind == "relay":
            # The workers in a process of their own, woken through its stdin.
            worker = subprocess.Popen(
                [sys.executable, "-m", "bench.webhook", "work", "-", database],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            assert worker.stdin is not None
            os.set_blocking(worker.stdin.fileno(), False)
            child = worker

            def wake() -> None:
                assert child.stdin is not None
                with contextlib.suppress(BlockingIOError, BrokenPipeError):
                    os.write(child.stdin.fileno(), b"\n")

            app = create_app(settings, store, on_recorded=wake)
        elif kind == "threads":
            pool = WorkerPool(store, Context(store=store, reviewer=RecordingReviewer(store)))
            app = create_app(settings, store, on_recorded=pool.notify)
            pool.start()
        else:
            app = create_app(settings, store)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    print(listener.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[listener])
    if kind != "bare":
        app.state.intake.close()
    if pool is not None:
        pool.stop(60)
    if worker is not None:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait(120)


def work(database: str) -> None:
    """Work the recorded deliveries (recording reviewer) until stdin closes."""
    from app_relay.cli.children import give_way
    from app_relay.runs.review_request import RecordingReviewer
    from app_relay.store import Store
    from app_relay.webhook.events import Context
    from app_relay.webhook.workers import WorkerPool

    give_way()  # as `cujo relay work` does
    store = Store(database, sync_every_commit=False)  # as `cujo relay work` opens it
    pool = WorkerPool(store, Context(store=store, reviewer=RecordingReviewer(store)))
    pool.start()
    for _ in iter(sys.stdin.buffer.readline, b""):
        pool.notify()
    pool.stop(120)
    store.close()


def start(kind: str, database: str) -> tuple[subprocess.Popen[str], str]:
    """Start a server process and return it with its base URL once it answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.webhook", "serve", kind, database],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise SystemExit(f"the {kind} server did not start")
    base = f"http://127.0.0.1:{port}"
    requests.get(f"{base}/healthz", timeout=30).raise_for_status()
    return proc, base


def drive(base: str, tally: Tally, body: bytes, rate: int, seconds: float) -> None:
    """Send ``rate`` signed deliveries a second for ``seconds``, open loop."""
    local = threading.local()

    def send(scheduled: float) -> None:
        http = getattr(local, "http", None)
        if http is None:
            http = local.http = requests.Session()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature_of(SECRET.encode(), body),
        }
        try:
            status: int | None = http.post(
                f"{base}/webhook", data=body, headers=headers, timeout=30
            ).status_code
        except requests.RequestException:
            status = None
        tally.add(time.perf_counter() - scheduled, status)

    count = int(rate * seconds)
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=64) as senders:
        for n in range(count):
            scheduled = began + n / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # the schedule itself, not a wait for a result
            senders.submit(send, scheduled)
            tally.sent += 1
    tally.busy_s += time.perf_counter() - began


def bench_webhook(
    duration_s: float = 60.0, rate: int = 200, *, workers: bool = True, postgres: bool = False
) -> None:
    """Print the latency and throughput of POST /webhook against a bare 202 endpoint.

    ``workers=False`` measures the intake alone (verify, record, 202) with no worker
    pool draining the queue in the same process.
    """
    body = SAMPLE.read_bytes()
    json.loads(body)
    work = Path(tempfile.mkdtemp(prefix="cujo-bench-webhook-"))
    with contextlib.ExitStack() as stack:
        counter = iter(range(1000))

        def databases() -> str:
            return f"sqlite:///{work / f'relay-{next(counter)}.db'}"

        if postgres:
            sys.path.insert(0, str(ROOT / "tests" / "support"))
            import pgcluster

            # Its own temp folder: the postgres user must reach it (initdb refuses root).
            admin = stack.enter_context(
                pgcluster.cluster(Path(tempfile.mkdtemp(prefix="cujo-pg-")))
            )

            def databases() -> str:
                return pgcluster.new_database(admin)

        _measure(body, databases, duration_s, rate, workers=workers)


def _measure(
    body: bytes, databases: Callable[[], str], duration_s: float, rate: int, *, workers: bool
) -> None:
    kinds = ["relay", "threads"] if workers else ["intake"]
    floor_proc, floor_url = start("bare", databases())
    served = {kind: (db := databases(), *start(kind, db)) for kind in kinds}
    floor = Tally("floor")
    tallies = {kind: Tally(kind) for kind in kinds}
    slices = max(1, round(duration_s / SLICE_S))
    print(
        f"webhook ({'relay with its workers' if workers else 'intake alone'}, "
        f"{served[kinds[0]][0].split(':', 1)[0]}): "
        f"{rate} deliveries/s for {duration_s:.0f} s against each, "
        f"in {slices} interleaved slice(s); body {len(body)} bytes; floor: append + fsync"
    )
    try:
        for _ in range(slices):
            drive(floor_url, floor, body, rate, duration_s / slices)
            for kind in kinds:
                drive(served[kind][2], tallies[kind], body, rate, duration_s / slices)
    finally:
        for proc in [floor_proc, *(served[k][1] for k in kinds)]:
            proc.terminate()
            proc.wait(120)
    from app_relay.store import Store

    print(floor.line())
    for kind in kinds:
        tally = tallies[kind]
        with Store(served[kind][0]) as store:
            recorded = store.count_deliveries()
            left = store.count_deliveries("pending", "working")
        accepted = tally.statuses.get(202, 0)
        print(tally.line())
        print(
            f"  {kind}/floor p99 {tally.quantile(0.99) / floor.quantile(0.99):.2f}x "
            f"(target <= 2x); p50 {tally.quantile(0.5) / floor.quantile(0.5):.2f}x; "
            f"answered 202 {accepted} of {tally.sent}, recorded {recorded}, "
            f"lost {accepted - recorded}, still queued at stop {left}"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["work"]:
        work(sys.argv[3])
    else:
        seconds = [a for a in sys.argv[1:] if not a.startswith("--")]
        bench_webhook(
            float(seconds[0]) if seconds else 60.0,
            workers="--intake" not in sys.argv,
            postgres="--postgres" in sys.argv,
        )

"""Benchmark POST /webhook against a bare FastAPI endpoint that only answers 202.

Both run under uvicorn in processes of their own on loopback; the relay records into a
real SQLite file with its worker pool running, as `cujo relay serve` does. The load is
open-loop at a steady rate (each request has a scheduled send time, and its latency is
counted from then, so a stall is not hidden by the client waiting), interleaved in
10-second slices so machine noise falls on both alike. Target: relay p99 ≤ 2× bare p99,
and every delivery answered 202 is in the record.
"""

from __future__ import annotations

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import requests

from app_relay.events import signature_of

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
    if kind == "bare":
        app = FastAPI()

        @app.post("/webhook")
        async def webhook() -> JSONResponse:
            return JSONResponse({}, status_code=202)

        @app.get("/healthz")
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}
    else:
        from app_relay.events import Context, RecordingReviewer
        from app_relay.settings import RelaySettings, Secret
        from app_relay.store import Store
        from app_relay.web import create_app
        from app_relay.workers import WorkerPool

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
        pool = WorkerPool(store, Context(store=store, reviewer=RecordingReviewer(store)))
        app = create_app(settings, store, on_recorded=pool.notify)
        if kind == "relay":
            pool.start()
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    print(listener.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[listener])
    if pool is not None:
        app.state.intake.close()
        pool.stop(60)


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


def bench_webhook(duration_s: float = 60.0, rate: int = 200, *, workers: bool = True) -> None:
    """Print the latency and throughput of POST /webhook against a bare 202 endpoint.

    ``workers=False`` measures the intake alone (verify, record, 202) with no worker
    pool draining the queue in the same process.
    """
    body = SAMPLE.read_bytes()
    json.loads(body)
    work = Path(tempfile.mkdtemp(prefix="cujo-bench-webhook-"))
    database = f"sqlite:///{work / 'relay.db'}"
    bare_proc, bare_url = start("bare", database)
    relay_proc, relay_url = start("relay" if workers else "intake", database)
    bare, relay = Tally("bare"), Tally("relay")
    slices = max(1, round(duration_s / SLICE_S))
    print(
        f"webhook ({'relay with its workers' if workers else 'intake alone'}): "
        f"{rate} deliveries/s for {duration_s:.0f} s against each, "
        f"in {slices} interleaved slice(s); body {len(body)} bytes"
    )
    try:
        for _ in range(slices):
            drive(bare_url, bare, body, rate, duration_s / slices)
            drive(relay_url, relay, body, rate, duration_s / slices)
    finally:
        for proc in (bare_proc, relay_proc):
            proc.terminate()
            proc.wait(120)
    from app_relay.store import Store

    with Store(database) as store:
        recorded = store.count_deliveries()
        left = store.count_deliveries("pending", "working")
    accepted = relay.statuses.get(202, 0)
    print(bare.line())
    print(relay.line())
    ratio = relay.quantile(0.99) / bare.quantile(0.99)
    print(
        f"relay/bare p99 {ratio:.2f}x (target <= 2x); p50 "
        f"{relay.quantile(0.5) / bare.quantile(0.5):.2f}x; sent {relay.sent}, answered 202 "
        f"{accepted}, recorded {recorded}, lost {accepted - recorded}, "
        f"still queued at stop {left}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], sys.argv[3])
    else:
        bench_webhook(
            float(sys.argv[1]) if len(sys.argv) > 1 else 60.0, workers="--intake" not in sys.argv
        )

"""Is the relay ready: ``/readyz`` asks the record, the workers, the intake and GitHub.

``/healthz`` says only that the process answers. ``Readiness`` says whether the relay
can do its work: the record answers, the workers are alive and claiming, the intake is
not backed up (no delivery has waited past ``CUJO_READY_BACKLOG_S``, the webhook's own
writer is alive) and GitHub answers the App. Each part is named with what is wrong, so
a 503 says where to look. The answer is kept a few seconds (GitHub's longer), so probes
cost the record and GitHub little.

Worker processes (``cujo relay work``) report their pool's health to the webhook
process through a small file each (``write_health``), beside the shared metrics.
``RecordCollector`` puts what the record knows (runs by state, deliveries waiting)
into ``/metrics``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

import anyio.to_thread
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from app_relay.observe import metrics
from app_relay.store import RUN_STATES, Store
from cujo_action.schema import utcnow

READY_CACHE_S: Final = 5.0
GITHUB_CACHE_S: Final = 30.0
# A worker process writes its health this often; older than STALE_S, it is not heard.
HEALTH_EVERY_S: Final = 2.0
HEALTH_STALE_S: Final = 30.0
PARTS: Final = ("record", "workers", "intake", "github")


@dataclass(frozen=True)
class Report:
    """Each part's state ("ok" or what is wrong with it), and when it was taken."""

    parts: dict[str, str]
    at: float = 0.0

    @property
    def ready(self) -> bool:
        """Say whether every part is ok."""
        return all(v == "ok" for v in self.parts.values())

    def failing(self) -> list[str]:
        """Return ``part: problem`` for each part that is not ok."""
        return [f"{k}: {v}" for k, v in self.parts.items() if v != "ok"]

    def body(self) -> dict[str, object]:
        """Return the JSON answer of ``/readyz``."""
        if self.ready:
            return {"status": "ready", "parts": self.parts}
        return {"status": "not ready", "failing": self.failing(), "parts": self.parts}


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


@dataclass
class Readiness:
    """Ask each part whether it can work, and keep the answer ``cache_s`` seconds.

    ``workers`` returns the problems of the workers (empty: all well); ``github`` raises
    when GitHub does not answer the App. Either may be None where there is none to ask
    (a webhook without workers of its own is then judged by its backlog alone).
    """

    store: Store
    workers: Callable[[], list[str]] | None = None
    github: Callable[[], None] | None = None
    backlog_s: float = 120.0
    cache_s: float = READY_CACHE_S
    github_cache_s: float = GITHUB_CACHE_S
    clock: Callable[[], float] = time.monotonic
    intake: Callable[[], list[str]] | None = None  # the webhook's writer (create_app sets it)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _last: Report | None = field(default=None, repr=False)
    _github: tuple[float, str] | None = field(default=None, repr=False)

    def check(self) -> Report:
        """Return the parts' states, asked anew once the kept answer is ``cache_s`` old."""
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last.at < self.cache_s:
                return self._last
            parts = {
                "record": "ok",
                "workers": self._workers(),
                "intake": "ok",
                "github": self._github_now(now),
            }
            try:
                self.store.ping()
                oldest = self.store.oldest_waiting_at()
            except Exception as exc:
                parts["record"] = f"cannot be read: {_reason(exc)}"
                oldest = None
            parts["intake"] = self._intake(oldest, utcnow())
            self._last = Report(parts, now)
            return self._last

    def _workers(self) -> str:
        if self.workers is None:
            return "ok"
        try:
            problems = self.workers()
        except Exception as exc:
            return f"cannot be asked: {_reason(exc)}"
        return "; ".join(problems) if problems else "ok"

    def _intake(self, oldest: datetime | None, now: datetime) -> str:
        problems = list(self.intake()) if self.intake is not None else []
        if oldest is not None:
            waited = (now - oldest).total_seconds()
            if waited > self.backlog_s:
                problems.append(
                    f"the oldest waiting delivery has waited {waited:.0f}s, over "
                    f"{self.backlog_s:g}s (CUJO_READY_BACKLOG_S)"
                )
        return "; ".join(problems) if problems else "ok"

    def _github_now(self, now: float) -> str:
        if self.github is None:
            return "ok"
        if self._github is not None and now - self._github[0] < self.github_cache_s:
            return self._github[1]
        try:
            self.github()
            state = "ok"
        except Exception as exc:
            state = f"does not answer the App: {_reason(exc)}"
        self._github = (now, state)
        return state


# ------------------------------------------------------------------ worker processes


def health_file(folder: Path, pid: int) -> Path:
    """Return where worker process ``pid`` writes its health."""
    return folder / f"health-{pid}.json"


def write_health(folder: Path, pid: int, problems: Iterable[str]) -> None:
    """Write a worker process's health (whole, by rename) for the webhook process."""
    path = health_file(folder, pid)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps({"at": time.time(), "problems": list(problems)}))
    os.replace(partial, path)


def read_health(folder: Path, pid: int, now: float | None = None) -> list[str]:
    """Return the problems worker process ``pid`` reported, or that it is not heard from."""
    now = time.time() if now is None else now
    try:
        said = json.loads(health_file(folder, pid).read_text())
        at, problems = float(said["at"]), [str(p) for p in said["problems"]]
    except FileNotFoundError:
        return [f"worker process {pid} has not reported yet (starting)"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"worker process {pid}'s health cannot be read: {_reason(exc)}"]
    if now - at > HEALTH_STALE_S:
        return [f"worker process {pid} has not reported for {now - at:.0f}s"]
    return [f"worker process {pid}: {p}" for p in problems]


# ------------------------------------------------------------------ /metrics from the record


class RecordCollector:
    """What the record knows, read at each scrape: runs by state, deliveries and heads waiting."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterable[Metric]:
        """Yield the record's gauges (``cujo_record_up`` 0 when it cannot be read)."""
        up = GaugeMetricFamily("cujo_record_up", "Whether the record answered this scrape.")
        try:
            states = self.store.runs_by_state()
            oldest = self.store.oldest_waiting_at()
            waiting = self.store.count_deliveries("pending")
            queued = len(self.store.queued())
        except Exception:
            up.add_metric([], 0.0)
            return [up]
        up.add_metric([], 1.0)
        runs = GaugeMetricFamily("cujo_runs", "Runs in the record, by state.", labels=["state"])
        for state in RUN_STATES:
            runs.add_metric([state], float(states.get(state, 0)))
        pending = GaugeMetricFamily(
            "cujo_deliveries_waiting", "Deliveries recorded and not yet worked."
        )
        pending.add_metric([], float(waiting))
        age = GaugeMetricFamily(
            "cujo_delivery_wait_seconds", "How long the oldest due delivery has waited."
        )
        age.add_metric([], (utcnow() - oldest).total_seconds() if oldest is not None else 0.0)
        heads = GaugeMetricFamily(
            "cujo_heads_queued", "Pull requests waiting for a sandbox run beyond the caps."
        )
        heads.add_metric([], float(queued))
        return [up, runs, pending, age, heads]


def health_router(ready: Readiness, record: RecordCollector) -> APIRouter:
    """Return ``/healthz`` (the process answers), ``/readyz`` (``ready``) and ``/metrics``
    (what every relay process counted, and what the record holds)."""
    router = APIRouter()

    async def healthz() -> dict[str, str]:
        """Answer that the relay's process is up (``/readyz`` says whether it can work)."""
        return {"status": "ok"}

    async def readyz() -> JSONResponse:
        """Answer 200 when every part can work, else 503 naming the parts that cannot."""
        report = await anyio.to_thread.run_sync(ready.check)
        return JSONResponse(report.body(), status_code=200 if report.ready else 503)

    async def metrics_text() -> Response:
        """Serve the relay's metrics in Prometheus's text format."""
        text, content_type = await anyio.to_thread.run_sync(metrics.exposition, [record])
        return Response(text, media_type=content_type)

    router.add_api_route("/healthz", healthz, methods=["GET"])
    router.add_api_route("/readyz", readyz, methods=["GET"])
    router.add_api_route("/metrics", metrics_text, methods=["GET"])
    return router

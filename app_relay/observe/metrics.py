"""The relay's Prometheus metrics: what each part records, and the text ``/metrics`` serves.

Every part of the relay records through the plain functions here (``delivery_received``,
``github_call``, ``model_used``, ``set_rate_budget`` …), so none of them touches
prometheus-client itself. The metrics are made on first use: ``share_across_processes``,
called by ``cujo relay serve`` before anything is recorded, puts them in
prometheus-client's multiprocess mode (a folder of memory-mapped files, one set per
process), so the webhook process serves what its worker processes counted too.
https://prometheus.github.io/client_python/multiprocess/

What the record knows (runs by state, deliveries waiting) is read from it when
``/metrics`` is asked (``webhook/health.py``), so every relay sharing a record shows
the same numbers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

# prometheus-client's own variable: the folder of the processes' metric files.
MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
# From a millisecond (a recorded delivery's group commit) to ten seconds.
INTAKE_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
# From a diff review's half minute to a sandbox job's hour.
RUN_BUCKETS: Final = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)


class _Metrics:
    """The relay's metrics, made once, in the mode chosen before (one process, or several)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deliveries_received = Counter(
            "cujo_deliveries_received",
            "Webhook deliveries answered, by event and outcome "
            "(recorded, duplicate, ping, refused, malformed, too_large).",
            ["event", "outcome"],
            registry=registry,
        )
        self.intake_seconds = Histogram(
            "cujo_intake_seconds",
            "Seconds from a delivery's arrival to its answer (the durable write included).",
            buckets=INTAKE_BUCKETS,
            registry=registry,
        )
        self.deliveries_worked = Counter(
            "cujo_deliveries_worked",
            "Deliveries the workers handled, by event and outcome (done, retry, failed, "
            "malformed).",
            ["event", "outcome"],
            registry=registry,
        )
        self.runs_finished = Counter(
            "cujo_runs_finished",
            "Runs decided, by verdict state and mode.",
            ["state", "mode"],
            registry=registry,
        )
        self.run_seconds = Histogram(
            "cujo_run_duration_seconds",
            "Seconds from a run's start to its verdict, by mode.",
            ["mode"],
            buckets=RUN_BUCKETS,
            registry=registry,
        )
        self.github_calls = Counter(
            "cujo_github_calls",
            "GitHub calls sent (each retry counted), by method and status: 2xx for an "
            "answer taken, the HTTP status of a refusal, timeout, connection or error.",
            ["method", "status"],
            registry=registry,
        )
        self.rate_remaining = Gauge(
            "cujo_github_rate_remaining",
            "Requests left in the installation's GitHub rate limit, as last answered.",
            ["installation"],
            multiprocess_mode="mostrecent",
            registry=registry,
        )
        self.rate_reset = Gauge(
            "cujo_github_rate_reset_timestamp_seconds",
            "When the installation's GitHub rate limit resets (Unix time), as last answered.",
            ["installation"],
            multiprocess_mode="mostrecent",
            registry=registry,
        )
        self.model_asks = Counter(
            "cujo_model_asks",
            "Messages calls to the model, by model and outcome.",
            ["model", "outcome"],
            registry=registry,
        )
        self.model_tokens = Counter(
            "cujo_model_tokens",
            "Tokens the model read (input) and wrote (output), by model.",
            ["model", "kind"],
            registry=registry,
        )
        self.merge_attempts = Counter(
            "cujo_merge_attempts",
            "Clicks on a run page's merge action, by outcome (merged, queued, unknown, "
            "failed, blocked, refused, stopping, forbidden).",
            ["outcome"],
            registry=registry,
        )
        self.model_cost = Counter(
            "cujo_model_cost_usd",
            "What the model's tokens cost at list price, in US dollars, by model.",
            ["model"],
            registry=registry,
        )


_lock = threading.Lock()
_made: _Metrics | None = None
_registry = CollectorRegistry(auto_describe=True)
_shared: Path | None = None


def _metrics() -> _Metrics:
    """Return the metrics, making them on first use."""
    global _made  # noqa: PLW0603 -- made once per process, on first use
    with _lock:
        if _made is None:
            _made = _Metrics(_registry)
        return _made


def share_across_processes(folder: Path, *, fresh: bool) -> None:
    """Keep this process's metrics in ``folder``, beside its worker processes' own.

    Called before anything is recorded; the variable it sets is inherited by the worker
    processes started after it. ``fresh`` empties the folder first (the process that made
    it, at its start: files left by a relay that died would add to the counts).
    """
    global _shared  # noqa: PLW0603 -- the process's one choice, made at its start
    with _lock:
        if _made is not None:
            raise RuntimeError("metrics were recorded before they were shared across processes")
        folder.mkdir(parents=True, exist_ok=True)
        if fresh:
            for old in folder.glob("*.db"):
                old.unlink(missing_ok=True)
        os.environ[MULTIPROC_ENV] = str(folder)
        # prometheus-client picks its value class from this variable at import; the
        # relay's modules imported it before the folder was known.
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        _shared = folder


def shared_folder() -> Path | None:
    """Return the folder the processes' metrics are kept in (None: this process alone)."""
    return _shared


def process_gone(pid: int) -> None:
    """Forget what a stopped worker process held live (its counters still count)."""
    if _shared is not None:
        mark_process_dead(pid, str(_shared))  # type: ignore[no-untyped-call]


class _Own:
    """This process's registry, collected into the one served (single-process mode)."""

    def collect(self) -> Iterable[Metric]:
        """Yield this process's metrics."""
        return _registry.collect()


def exposition(extra: Iterable[Collector] = ()) -> tuple[bytes, str]:
    """Return the text ``/metrics`` serves and its content type, with ``extra`` collectors."""
    _metrics()  # every family is listed, at 0, before its first sample
    registry = CollectorRegistry(auto_describe=False)
    if _shared is not None:
        MultiProcessCollector(registry, path=str(_shared))  # type: ignore[no-untyped-call]
    else:
        registry.register(_Own())
    for collector in extra:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE


# ------------------------------------------------------------------ what the parts record


def delivery_received(event: str, outcome: str) -> None:
    """Count one delivery answered at the webhook (``event`` "-" when it was not verified)."""
    _metrics().deliveries_received.labels(event=event, outcome=outcome).inc()


def intake_seconds(seconds: float) -> None:
    """Note how long the webhook took to answer one delivery."""
    _metrics().intake_seconds.observe(max(seconds, 0.0))


def delivery_worked(event: str, outcome: str) -> None:
    """Count one delivery a worker handled, by how it ended."""
    _metrics().deliveries_worked.labels(event=event, outcome=outcome).inc()


def run_finished(state: str, mode: str, seconds: float) -> None:
    """Count a decided run and note how long it took from its start."""
    m = _metrics()
    m.runs_finished.labels(state=state, mode=mode).inc()
    m.run_seconds.labels(mode=mode).observe(max(seconds, 0.0))


def merge_attempt(outcome: str) -> None:
    """Count one click on a run page's merge action by how it ended."""
    _metrics().merge_attempts.labels(outcome=outcome).inc()


def github_call(method: str, status: str) -> None:
    """Count one GitHub request by its method and how it was answered."""
    _metrics().github_calls.labels(method=method, status=status).inc()


def set_rate_budget(installation: int | str, remaining: int, reset: float) -> None:
    """Show an installation's rate budget as GitHub last told it (``x-ratelimit-*``).

    The hook for the rate-budget snapshot (``app_relay/github/``): call it with each
    answer's ``x-ratelimit-remaining`` and ``x-ratelimit-reset`` (Unix seconds).
    """
    m = _metrics()
    m.rate_remaining.labels(installation=str(installation)).set(remaining)
    m.rate_reset.labels(installation=str(installation)).set(reset)


def model_used(
    model: str, outcome: str, input_tokens: int, output_tokens: int, cost_usd: float | None
) -> None:
    """Count one model call, its tokens and (for a priced model) its cost."""
    m = _metrics()
    m.model_asks.labels(model=model, outcome=outcome).inc()
    if input_tokens:
        m.model_tokens.labels(model=model, kind="input").inc(input_tokens)
    if output_tokens:
        m.model_tokens.labels(model=model, kind="output").inc(output_tokens)
    if cost_usd:
        m.model_cost.labels(model=model).inc(cost_usd)


def samples(text: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """Yield the labels and value of each sample named ``name`` in exposition ``text``."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                yield sample.labels, sample.value

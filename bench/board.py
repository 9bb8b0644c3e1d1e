"""Benchmark the board's server time: `/` over 10,000 runs, and a run page of 1,000 events.

The app is called in-process over ASGI (no socket), so each figure is the server's own
work: routing, reading the record (a real SQLite file), rendering. Each is printed next
to a baseline measured in the same run, interleaved, best of N: `/` over a record of 50
runs (one page's worth), and a run page with 10 events. Target: `/` with 10,000 runs in
the record ≤ 200 ms.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
from fastapi import Request
from sqlalchemy import create_engine, insert

from app_relay.board import Viewer, board_app
from app_relay.store import FindingRow, RunEventRow, RunRow, SessionRow, Store

TARGET_MS = 200.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)
STATES = ["clean"] * 60 + ["superseded"] * 20 + ["blocked"] * 6 + ["unproven"] * 5 + [
    "error"
] * 4 + ["dismissed"] * 3 + ["running"] * 2  # fmt: skip


class Reader:
    """A signed-in viewer who reads some repositories (what GitHub said, already cached)."""

    signs_in = True
    note = ""

    def __init__(self, repos: frozenset[str]) -> None:
        self.repos = repos

    async def viewer(self, request: Request) -> Viewer | None:
        """Return the bench's viewer."""
        return Viewer("bench", self.repos)

    def router(self) -> Any:
        """Return no routes."""
        from fastapi import APIRouter

        return APIRouter()


def seed(url: str, runs: int, *, events_per_run: int = 4, repos: int = 100) -> list[str]:
    """Fill a record with ``runs`` runs over ``repos`` repositories; return the run ids."""
    Store(url).close()  # the schema, by the migrations
    rng = random.Random(7)
    sessions: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    per_session = 5
    for n in range(runs):
        if n % per_session == 0:
            repo = f"octo/repo-{len(sessions) % repos:03d}"
            sessions.append(
                {"id": f"s{len(sessions):06d}", "repo": repo, "pr_number": len(sessions) + 1,
                 "kind": "github", "created_at": T0}
            )  # fmt: skip
        started = T0 + timedelta(seconds=n * 30)
        state = rng.choice(STATES)
        done = None if state == "running" else started + timedelta(seconds=rng.randint(20, 900))
        run_id = f"run-{n:06d}"
        rows.append(
            {"id": run_id, "session_id": sessions[-1]["id"], "base_sha": "b" * 40,
             "head_sha": f"{n:040x}", "mode": "diff" if n % 9 == 0 else "sandbox",
             "state": state, "summary": "", "unproven": [], "started_at": started,
             "updated_at": done or started, "finished_at": done, "holds": "holds"}
        )  # fmt: skip
        for k in range(events_per_run):
            events.append(
                {"run_id": run_id, "at": started + timedelta(seconds=k), "kind": "state",
                 "detail": "running" if k == 0 else f"sandbox step {k}"}
            )  # fmt: skip
        if state == "blocked":
            findings.append(
                {"run_id": run_id, "finding_id": "F1", "rule": "decoy-egress",
                 "severity": "critical", "check_name": "install",
                 "title": "POST to collector.exfil.test", "evidence": ["install:egress:1"],
                 "rules": ["decoy-egress"]}
            )  # fmt: skip
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(SessionRow.__table__), sessions)
        conn.execute(insert(RunRow.__table__), rows)
        conn.execute(insert(RunEventRow.__table__), events)
        if findings:
            conn.execute(insert(FindingRow.__table__), findings)
    engine.dispose()
    return [r["id"] for r in rows]


def add_events(url: str, run_id: str, count: int) -> None:
    """Give one run ``count`` more events, as a long sandbox run's timeline would have."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            insert(RunEventRow.__table__),
            [
                {"run_id": run_id, "at": T0 + timedelta(seconds=k), "kind": "sandbox",
                 "detail": f"workflow_job in_progress: step {k} of the sandbox job"}
                for k in range(count)
            ],
        )  # fmt: skip
    engine.dispose()


def timings(paths: dict[str, tuple[Any, str]], rounds: int) -> dict[str, list[float]]:
    """Time GET of each (app, path), interleaved, ``rounds`` times each; return seconds."""
    found: dict[str, list[float]] = {name: [] for name in paths}

    async def run() -> None:
        clients = {
            name: httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
            )
            for name, (app, _) in paths.items()
        }
        try:
            for name, (_, path) in paths.items():  # warm: templates compiled, caches filled
                (await clients[name].get(path)).raise_for_status()
            for _ in range(rounds):
                for name, (_, path) in paths.items():
                    start = time.perf_counter()
                    answer = await clients[name].get(path)
                    found[name].append(time.perf_counter() - start)
                    answer.raise_for_status()
        finally:
            for client in clients.values():
                await client.aclose()

    anyio.run(run)
    return found


def bench_board(rounds: int = 20) -> dict[str, float]:
    """Print and return the board's server times (best of ``rounds``, in ms)."""
    with tempfile.TemporaryDirectory(prefix="cujo-bench-board-") as tmp:
        small_url = f"sqlite:///{Path(tmp) / 'small.db'}"
        big_url = f"sqlite:///{Path(tmp) / 'big.db'}"
        small_ids = seed(small_url, 50)
        big_ids = seed(big_url, 10_000)
        add_events(small_url, small_ids[0], 10 - 4)
        add_events(big_url, big_ids[0], 1_000 - 4)
        small, big = Store(small_url), Store(big_url)
        try:
            readable = frozenset(f"octo/repo-{n:03d}" for n in range(0, 100, 2))
            apps: dict[str, tuple[Any, str]] = {
                "list-50": (board_app(small), "/"),
                "list-10k": (board_app(big), "/"),
                "list-10k-reader": (board_app(big, Reader(readable)), "/"),
                "list-10k-blocked": (board_app(big), "/?state=blocked"),
                "list-10k-repo": (board_app(big), "/?repo=octo/repo-007"),
                "list-10k-none": (board_app(big, Reader(frozenset({"octo/quiet"}))), "/"),
                "run-10": (board_app(small), f"/runs/{small_ids[0]}"),
                "run-1000": (board_app(big), f"/runs/{big_ids[0]}"),
            }
            found = timings(apps, rounds)
        finally:
            small.close()
            big.close()
    best = {name: min(times) * 1e3 for name, times in found.items()}
    median = {name: statistics.median(times) * 1e3 for name, times in found.items()}
    print(f"board server time (in-process ASGI, SQLite file), best of {rounds} (median):")

    def line(label: str, name: str, base: str | None = None) -> None:
        ratio = f"   ratio {best[name] / best[base]:.2f}x" if base else "   (baseline)"
        print(f"  {label:<46}: {best[name]:7.2f} ms ({median[name]:7.2f}){ratio}")

    line("/ over 50 runs", "list-50")
    line("/ over 10,000 runs", "list-10k", "list-50")
    line("/ over 10,000 runs, a reader of 50 of 100 repos", "list-10k-reader", "list-50")
    line("/?state=blocked over 10,000 runs", "list-10k-blocked", "list-50")
    line("/?repo= one of 100 repos, over 10,000 runs", "list-10k-repo", "list-50")
    line("/ for a reader of a repo with no run (10,000)", "list-10k-none", "list-50")
    line("/runs/{id} with 10 events", "run-10")
    line("/runs/{id} with 1,000 events", "run-1000", "run-10")
    verdict = "met" if best["list-10k"] <= TARGET_MS else "NOT met"
    print(f"  target: / with 10,000 runs ≤ {TARGET_MS:.0f} ms: {verdict}")
    return best


def main() -> None:
    """Run the board benchmark alone: `python -m bench.board`."""
    bench_board()


if __name__ == "__main__":
    main()

"""The record on a real SQLite file: round trips, sharing, crashes and refusals."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.exc import IntegrityError, StatementError

from app_relay.decide.judge import error_verdict
from app_relay.decide.verdict import Finding, Verdict
from app_relay.store import (
    RunClosed,
    Store,
    StoreError,
    UnknownRun,
    UnknownSession,
    UnknownState,
)

BASE = "b" * 40
HEAD = "a" * 40
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """Tick one second per reading, so order never depends on the machine's clock."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path}/nested/dir/cujo.db"


@pytest.fixture
def store(url):
    with Store(url, clock=Clock()) as opened:
        yield opened


def blocked_verdict() -> Verdict:
    return Verdict(
        state="blocked",
        summary="Blocked by 1 critical finding.",
        findings=[
            Finding(
                id="F1",
                rule="decoy-egress",
                severity="critical",
                check="install",
                title="install: 1 request to evil.example carried decoy GITHUB_TOKEN",
                evidence=["install:egress:1", "install:egress:2"],
            ),
            Finding(
                id="F2",
                rule="decoy-read",
                severity="warn",
                check="tests",
                title="decoy file ~/.pypirc was read",
                evidence=["tests:decoy:1"],
            ),
        ],
        unproven=["smoke: no report came back"],
        judge="deterministic",
    )


def started(store: Store, run_id: str = "run-1", pr: int | None = 7) -> str:
    session_id = store.open_session("octo/repo", pr, "github")
    store.start_run(session_id, run_id, BASE, HEAD, "sandbox")
    return session_id


def test_round_trip_of_a_finished_run(store, tmp_path):
    session_id = started(store)
    first = store.add_event("run-1", "dispatched", "workflow run 42")
    store.add_event("run-1", "reports", "5 reports arrived")

    store.finish_run(
        "run-1", blocked_verdict(), plan_json='{"install": "pip install ."}', reports_dir="/r"
    )

    assert (tmp_path / "nested" / "dir" / "cujo.db").is_file()
    run = store.get_run("run-1")
    assert (run.run_id, run.session_id, run.repo, run.pr_number) == (
        "run-1",
        session_id,
        "octo/repo",
        7,
    )
    assert (run.session_kind, run.mode, run.base_sha, run.head_sha) == (
        "github",
        "sandbox",
        BASE,
        HEAD,
    )
    assert run.state == "blocked"
    assert run.judge == "deterministic"
    assert run.summary == "Blocked by 1 critical finding."
    assert run.unproven == ("smoke: no report came back",)
    assert run.findings == tuple(blocked_verdict().findings)
    assert run.plan_json == '{"install": "pip install ."}'
    assert run.reports_dir == "/r"
    assert run.started_at.tzinfo is not None
    assert run.finished_at is not None
    assert run.finished_at > run.started_at
    kinds = [(e.kind, e.detail) for e in store.events("run-1")]
    assert kinds == [
        ("state", "running"),
        ("dispatched", "workflow run 42"),
        ("reports", "5 reports arrived"),
        ("state", "blocked"),
    ]
    assert [e.kind for e in store.events("run-1", after=first)] == ["reports", "state"]


def test_a_pull_request_keeps_one_session_and_local_reviews_get_their_own(store):
    assert store.open_session("octo/repo", 7, "github") == store.open_session(
        "octo/repo", 7, "github"
    )
    assert store.open_session("octo/repo", 7, "github") != store.open_session(
        "octo/repo", 8, "github"
    )
    assert store.open_session("/src/repo", None, "local") != store.open_session(
        "/src/repo", None, "local"
    )


def test_list_runs_newest_first_with_a_limit_and_a_state_filter(store):
    session_id = started(store, "run-1")
    store.start_run(session_id, "run-2", BASE, "c" * 40, "diff")
    store.start_run(session_id, "run-3", BASE, "d" * 40, "sandbox")
    store.finish_run("run-2", error_verdict("deadline passed"))

    assert [r.run_id for r in store.list_runs()] == ["run-3", "run-2", "run-1"]
    assert [r.run_id for r in store.list_runs(2)] == ["run-3", "run-2"]
    assert [r.run_id for r in store.list_runs(states=["running"])] == ["run-3", "run-1"]
    assert store.list_runs()[0].findings == ()


def test_two_stores_share_one_file(url):
    with Store(url, clock=Clock()) as review, Store(url, clock=Clock()) as board:
        started(review)
        review.add_event("run-1", "note", "from the review")

        assert board.get_run("run-1").state == "running"
        assert [e.detail for e in board.events("run-1")][-1] == "from the review"

        board.finish_run("run-1", blocked_verdict())
        assert review.get_run("run-1").state == "blocked"


def test_writers_in_two_stores_at_once_lose_nothing(url):
    with Store(url) as first, Store(url) as second:
        started(first)
        start = threading.Barrier(2)
        failures: list[BaseException] = []

        def write(store: Store, name: str) -> None:
            start.wait()
            try:
                for n in range(40):
                    store.add_event("run-1", "note", f"{name}-{n}")
            except BaseException as exc:
                failures.append(exc)

        threads = [
            threading.Thread(target=write, args=(s, n)) for s, n in ((first, "a"), (second, "b"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert failures == []
        details = [e.detail for e in first.events("run-1") if e.kind == "note"]
        assert sorted(details) == sorted(
            [f"a-{n}" for n in range(40)] + [f"b-{n}" for n in range(40)]
        )


def test_the_file_is_in_wal_mode_so_a_reader_does_not_stop_a_writer(store, url):
    started(store)
    path = url.removeprefix("sqlite:///")
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        assert reader.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM run_events").fetchone()

        store.add_event("run-1", "note", "written while the board reads")
        store.finish_run("run-1", blocked_verdict())

        assert reader.execute("SELECT state FROM runs").fetchone() == ("running",)
        reader.execute("COMMIT")
        assert reader.execute("SELECT state FROM runs").fetchone() == ("blocked",)
    finally:
        reader.close()


CRASH = """
import os, sys
from app_relay.store import Store
store = Store(sys.argv[1])
session_id = store.open_session("octo/repo", 7, "github")
store.start_run(session_id, "run-1", "b" * 40, "a" * 40, "sandbox")
store.add_event("run-1", "dispatched", "workflow run 42")
os._exit(9)  # die mid-run: no close, no finish
"""


def test_a_crash_leaves_the_run_running_and_abandoning_it_makes_it_error(url):
    crashed = subprocess.run([sys.executable, "-c", CRASH, url], capture_output=True, text=True)
    assert crashed.returncode == 9, crashed.stderr

    with Store(url, clock=Clock()) as store:
        assert store.get_run("run-1").state == "running"
        assert [e.kind for e in store.events("run-1")] == ["state", "dispatched"]

        assert store.mark_abandoned("run-1", "the relay restarted mid-run") is True

        run = store.get_run("run-1")
        assert run.state == "error"
        assert "the relay restarted mid-run" in run.summary
        assert run.finished_at is not None
        assert [e.kind for e in store.events("run-1")][-2:] == ["abandoned", "state"]
        assert store.mark_abandoned("run-1", "again") is False


def test_abandoning_a_decided_run_changes_nothing(store):
    started(store)
    store.finish_run("run-1", blocked_verdict())

    assert store.mark_abandoned("run-1", "late reconcile") is False
    assert store.get_run("run-1").state == "blocked"


def test_unknown_states_modes_and_kinds_are_refused(store, url):
    session_id = started(store)

    with pytest.raises(UnknownState, match="exploded"):
        store.set_state("run-1", "exploded")  # type: ignore[arg-type]
    with pytest.raises(UnknownState):
        store.start_run(session_id, "run-2", BASE, HEAD, "fast")  # type: ignore[arg-type]
    with pytest.raises(UnknownState):
        store.open_session("octo/repo", 1, "gitlab")  # type: ignore[arg-type]
    with pytest.raises(UnknownState):
        store.list_runs(states=["exploded"])  # type: ignore[list-item]
    assert store.get_run("run-1").state == "running"

    # The database refuses it too, whoever writes.
    raw = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw.execute("UPDATE runs SET state = 'exploded'")
    finally:
        raw.close()


def test_set_state_moves_the_run_and_records_why(store):
    started(store)

    store.set_state("run-1", "waiting", "environment approval by @octocat")

    assert store.get_run("run-1").state == "waiting"
    assert store.events("run-1")[-1].detail == "waiting: environment approval by @octocat"


def test_a_run_is_finished_once(store):
    started(store)
    store.finish_run("run-1", blocked_verdict())

    with pytest.raises(RunClosed, match="already blocked"):
        store.finish_run("run-1", error_verdict("again"))

    assert store.get_run("run-1").state == "blocked"
    assert len(store.get_run("run-1").findings) == 2


def test_finish_is_all_or_nothing(store):
    started(store)
    # Bypass validation to make the second finding insert fail after the first.
    one = blocked_verdict().findings[0]
    broken = Verdict.model_construct(
        state="blocked", summary="s", findings=[one, one], unproven=[], judge="deterministic"
    )

    with pytest.raises(IntegrityError):
        store.finish_run("run-1", broken)

    run = store.get_run("run-1")
    assert run.state == "running"
    assert run.findings == ()
    assert [e.detail for e in store.events("run-1")] == ["running"]


def test_unknown_runs_and_sessions_and_bad_input_are_refused(store):
    session_id = started(store)

    with pytest.raises(UnknownRun):
        store.get_run("nope")
    with pytest.raises(UnknownRun):
        store.add_event("nope", "note")
    with pytest.raises(UnknownRun):
        store.finish_run("nope", blocked_verdict())
    with pytest.raises(UnknownRun):
        store.mark_abandoned("nope", "x")
    with pytest.raises(UnknownSession):
        store.start_run("no-session", "run-2", BASE, HEAD, "sandbox")
    with pytest.raises(StoreError, match="already exists"):
        store.start_run(session_id, "run-1", BASE, HEAD, "sandbox")
    with pytest.raises(UnknownRun):
        store.events("nope")
    with pytest.raises(ValueError, match="event kind"):
        store.add_event("run-1", "")
    with pytest.raises(ValueError, match="limit"):
        store.list_runs(0)
    with pytest.raises(ValueError, match="head_sha"):
        store.start_run(session_id, "run-2", BASE, "HEAD", "sandbox")


def test_naive_times_are_refused(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/c.db", clock=lambda: datetime(2026, 1, 1))
    try:
        with pytest.raises(StatementError, match="timezone-aware"):
            store.open_session("octo/repo", 1, "github")
    finally:
        store.close()


def test_all_six_tables_exist(store, url):
    raw = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        names = {
            row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    finally:
        raw.close()

    assert {"deliveries", "sessions", "runs", "run_events", "findings", "commands"} <= names


def test_an_in_memory_store_works_for_quick_runs():
    with Store("sqlite://") as store:
        started(store)
        store.finish_run("run-1", blocked_verdict())

        assert store.get_run("run-1").findings == tuple(blocked_verdict().findings)

"""The record on a real SQLite file: round trips, sharing, crashes and refusals."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
import recordtemplate
from sqlalchemy.exc import IntegrityError, StatementError

from app_relay.decide.judge import error_verdict
from app_relay.store import (
    RunClosed,
    Store,
    StoreError,
    UnknownRun,
    UnknownSession,
    UnknownState,
)
from app_relay.verdict import Finding, Verdict

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
        store.move("run-1", "exploded")  # type: ignore[arg-type]
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


def test_move_follows_the_state_machine_and_records_why(store):
    started(store)

    assert store.move("run-1", "waiting", "environment approval by @octocat")
    assert store.get_run("run-1").state == "waiting"
    assert store.events("run-1")[-1].detail == "waiting: environment approval by @octocat"

    # A move the table does not have writes nothing at all.
    before = store.events("run-1")
    assert not store.move("run-1", "dismissed", "no hold to lift")
    assert not store.move_open("run-1", "running", "waiting")  # it is not running now
    assert store.get_run("run-1").state == "waiting"
    assert store.events("run-1") == before


def test_a_dismissal_remembers_the_hold_and_reinstating_puts_back_only_that(store):
    started(store)
    store.finish_run("run-1", error_verdict("the runner vanished"))

    assert store.move("run-1", "dismissed", "by @maintainer")
    assert store.get_run("run-1").lifted == "error"
    assert not store.move("run-1", "blocked", "reinstated")  # it was never blocked
    assert store.move("run-1", "error", "reinstated by @maintainer")
    assert store.get_run("run-1").state == "error"


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


# --------------------------------------------------------------------------- deliveries


class SetClock:
    """A clock that stands still until the test moves it."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock():
    return SetClock()


@pytest.fixture
def queue(url, clock):
    with Store(url, clock=clock) as opened:
        yield opened


def recorded(store: Store, delivery_id: str = "d-1") -> None:
    assert store.record_delivery(delivery_id, "pull_request", "opened", 9, "octo/repo", b"{}")


def test_a_delivery_is_recorded_once_per_id(queue):
    assert queue.record_delivery("d-1", "pull_request", "opened", 9, "octo/repo", b'{"a": 1}')
    assert not queue.record_delivery("d-1", "pull_request", "opened", 9, "octo/repo", b"{}")

    kept = queue.get_delivery("d-1")
    assert (kept.body, kept.state, kept.attempts) == (b'{"a": 1}', "pending", 0)
    assert queue.count_deliveries() == 1


def test_claims_take_the_oldest_pending_delivery_once(queue, clock):
    recorded(queue, "d-1")
    clock.now += timedelta(seconds=1)
    recorded(queue, "d-2")

    first = queue.claim_delivery("w1", 30)
    second = queue.claim_delivery("w2", 30)

    assert first is not None
    assert second is not None
    assert (first.id, first.worker_id, first.attempts) == ("d-1", "w1", 1)
    assert first.lease_until == clock.now + timedelta(seconds=30)
    assert second.id == "d-2"
    assert queue.claim_delivery("w3", 30) is None


def test_an_expired_lease_is_taken_over_and_the_old_worker_cannot_finish(queue, clock):
    recorded(queue)
    assert queue.claim_delivery("dead", 30) is not None
    clock.now += timedelta(seconds=29)
    assert queue.claim_delivery("w2", 30) is None

    clock.now += timedelta(seconds=2)
    taken = queue.claim_delivery("w2", 30)

    assert taken is not None
    assert (taken.worker_id, taken.attempts) == ("w2", 2)
    assert taken.error == "taken over from dead, whose lease ran out"
    assert not queue.finish_delivery("d-1", True, worker_id="dead")
    assert queue.finish_delivery("d-1", True, worker_id="w2")
    assert queue.get_delivery("d-1").state == "done"
    # Done is final: not claimed again, not finished again.
    clock.now += timedelta(hours=1)
    assert queue.claim_delivery("w3", 30) is None
    assert not queue.finish_delivery("d-1", False, "late")


def test_a_renewed_lease_is_not_taken_over(queue, clock):
    recorded(queue)
    queue.claim_delivery("w1", 30)
    clock.now += timedelta(seconds=20)
    assert queue.renew_lease("d-1", "w1", 30)
    assert not queue.renew_lease("d-1", "someone-else", 30)
    clock.now += timedelta(seconds=20)

    assert queue.claim_delivery("w2", 30) is None


def test_a_failure_is_retried_after_its_delay_then_fails_for_good(queue, clock):
    recorded(queue)
    for attempt in (1, 2):
        claimed = queue.claim_delivery("w", 30, max_attempts=3)
        assert claimed is not None
        assert claimed.attempts == attempt
        assert queue.finish_delivery("d-1", False, "boom", retry_in_s=10, max_attempts=3)
        assert queue.get_delivery("d-1").state == "pending"
        assert queue.claim_delivery("w", 30, max_attempts=3) is None  # backing off
        clock.now += timedelta(seconds=10)

    assert queue.claim_delivery("w", 30, max_attempts=3) is not None
    assert queue.finish_delivery("d-1", False, "boom", max_attempts=3)

    failed = queue.get_delivery("d-1")
    assert (failed.state, failed.attempts) == ("failed", 3)
    assert failed.error == "failed after 3 attempt(s): boom"
    clock.now += timedelta(hours=1)
    assert queue.claim_delivery("w", 30, max_attempts=3) is None


def test_a_delivery_whose_workers_keep_dying_ends_failed(queue, clock):
    recorded(queue)
    for _ in range(3):
        assert queue.claim_delivery("w", 5, max_attempts=3) is not None
        clock.now += timedelta(seconds=6)

    assert queue.claim_delivery("w", 5, max_attempts=3) is None

    failed = queue.get_delivery("d-1")
    assert failed.state == "failed"
    assert "gave up after 3 attempts" in (failed.error or "")


def test_a_final_failure_is_not_retried(queue):
    recorded(queue)
    queue.claim_delivery("w", 30)

    assert queue.finish_delivery("d-1", False, "malformed", final=True)

    assert queue.get_delivery("d-1").state == "failed"
    assert queue.claim_delivery("w", 30) is None


def test_a_review_request_is_recorded_once_per_delivery(queue):
    recorded(queue)
    session_id = queue.open_session("octo/repo", 7, "github")
    fields = {
        "delivery_id": "d-1",
        "session_id": session_id,
        "installation_id": 9,
        "action": "opened",
        "head_sha": HEAD,
        "base_sha": BASE,
        "base_ref": "main",
        "author": "octocat",
        "author_type": "User",
        "draft": False,
    }

    first = queue.request_review(**fields)
    again = queue.request_review(**fields)

    assert first == again
    [request] = queue.review_requests(session_id)
    assert (request.repo, request.pr_number, request.head_sha) == ("octo/repo", 7, HEAD)
    with pytest.raises(ValueError, match="head_sha"):
        queue.request_review(**{**fields, "delivery_id": "d-2", "head_sha": "HEAD"})


def test_migrations_adopt_a_record_made_before_them(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    # The record as `create_all` made it before migrations: revision 0001, unstamped.
    from alembic import command
    from alembic.config import Config

    from app_relay.store import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "0001")
    raw = sqlite3.connect(f"{tmp_path}/old.db")
    raw.execute("DROP TABLE alembic_version")
    raw.execute(
        "INSERT INTO deliveries (id, event, payload, state, attempts, received_at) "
        "VALUES ('d-old', 'ping', '{\"zen\": 1}', 'pending', 0, '2026-01-01 00:00:00')"
    )
    raw.commit()
    raw.close()

    with Store(url) as store:
        kept = store.get_delivery("d-old")
        assert (kept.body, kept.state) == (b'{"zen": 1}', "pending")
        assert store.claim_delivery("w", 30) is not None


def test_a_record_with_runs_upgrades_from_an_old_revision_keeping_every_row(tmp_path):
    """SQLite alters a table by copying it: foreign keys must not refuse the copy."""
    from alembic import command
    from alembic.config import Config

    from app_relay.store import MIGRATIONS

    url = f"sqlite:///{tmp_path}/old.db"
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "0003")
    raw = sqlite3.connect(f"{tmp_path}/old.db")
    when = "2026-11-30 15:14:03"
    raw.execute(f"INSERT INTO sessions VALUES ('s-1', 'octo/app', 7, 'github', '{when}')")
    raw.execute(
        "INSERT INTO runs (id, session_id, base_sha, head_sha, mode, state, judge, summary, "
        "unproven, started_at, updated_at, finished_at) VALUES ('run-1', 's-1', ?, ?, "
        f"'sandbox', 'blocked', 'deterministic', 'Blocked.', '[]', '{when}', '{when}', '{when}')",
        ("b" * 40, "c" * 40),
    )
    raw.execute(f"INSERT INTO run_events (run_id, at, kind, detail) VALUES ('run-1', '{when}', "
                "'state', 'blocked: Blocked.')")  # fmt: skip
    raw.execute(
        "INSERT INTO findings (run_id, finding_id, rule, severity, check_name, title, evidence) "
        "VALUES ('run-1', 'F1', 'decoy-egress', 'critical', 'install', 'sent', "
        "'[\"install:egress:1\"]')"
    )
    raw.commit()
    raw.close()

    with Store(url) as store:
        run = store.get_run("run-1")
        assert run.state == "blocked"
        assert [(f.rule, f.check) for f in run.findings] == [("decoy-egress", "install")]
        assert [e.kind for e in store.events("run-1")] == ["state"]
        # Foreign keys hold again once the record is upgraded.
        with pytest.raises(UnknownRun):
            store.add_event("run-404", "state", "nowhere")
        with store._engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(config).get_current_head()
    again = sqlite3.connect(f"{tmp_path}/old.db")
    assert again.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
    again.close()


@pytest.mark.parametrize("folder", ["record", "intake"])
def test_each_migration_is_numbered_as_its_file_and_follows_the_one_before(folder):
    """``newest_revision`` reads the head from the file names, without Alembic."""
    from alembic.script import ScriptDirectory

    from app_relay.store import MIGRATIONS
    from app_relay.store.tables import newest_revision

    where = MIGRATIONS if folder == "record" else MIGRATIONS / "intake"
    scripts = ScriptDirectory(str(where))
    revisions = sorted(scripts.walk_revisions(), key=lambda r: r.path or "")
    for before, revision in zip([None, *revisions], revisions, strict=False):
        assert revision.path is not None
        number = revision.path.split("/")[-1].split("_")[0]
        assert revision.revision.endswith(number), (revision.revision, revision.path)
        assert revision.down_revision == (before.revision if before else None), revision
    assert newest_revision(where) == scripts.get_current_head()


def _alembic_loaded_opening(url: str) -> list[str]:
    """Open the record at ``url`` in a fresh process; return the Alembic modules it loaded."""
    opened = subprocess.run(
        [sys.executable, "-c", "import json, sys\nfrom app_relay.store import Store\n"
         f"Store({url!r}).close()\n"
         "print(json.dumps(sorted(m for m in sys.modules if 'alembic' in m)))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    loaded: list[str] = json.loads(opened.stdout)
    return loaded


def test_a_record_at_the_newest_revision_opens_without_loading_alembic(tmp_path):
    """Every `cujo` command opens the record: at head, Alembic is not even imported."""
    url = f"sqlite:///{tmp_path}/record.db"
    Store(url).close()
    assert _alembic_loaded_opening(url) == []
    # An older record still migrates (and then needs Alembic).
    raw = sqlite3.connect(f"{tmp_path}/record.db")
    raw.execute("UPDATE alembic_version SET version_num = '0014'")
    raw.commit()
    raw.close()
    assert "alembic" in _alembic_loaded_opening(url)


def test_a_tests_new_record_is_exactly_what_the_migrations_make(tmp_path):
    """The suite's template (tests/support/recordtemplate.py) hides no migration's work."""
    from sqlalchemy import create_engine

    from app_relay.store import MIGRATIONS, tables

    template = tables.upgrade_to_head
    assert isinstance(getattr(template, "__self__", None), recordtemplate.RecordTemplate)

    def schema(path):
        raw = sqlite3.connect(path)
        try:
            made = raw.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
            # A batch migration lists a copied table's constraints in set order (it varies
            # from run to run of the migrations themselves): each definition's lines sorted.
            return [
                (kind, name, table, sorted((sql or "").replace(", \n", "\n").splitlines()))
                for kind, name, table, sql in made
            ], raw.execute("SELECT * FROM alembic_version").fetchall()
        finally:
            raw.close()

    engine = create_engine(f"sqlite:///{tmp_path}/migrated.db")
    with engine.begin() as connection:
        assert template.__self__._real(connection, MIGRATIONS) is True
    engine.dispose()
    Store(f"sqlite:///{tmp_path}/templated.db").close()
    migrated, templated = schema(tmp_path / "migrated.db"), schema(tmp_path / "templated.db")
    assert migrated[0], migrated  # tables and indexes
    assert migrated[1], migrated  # the version row
    assert templated == migrated

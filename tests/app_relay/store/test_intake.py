"""The intake queue beside a SQLite record: the webhook's writes never wait on a worker's.

Real files, real processes: a worker killed with SIGKILL, a record whose write lock
another connection holds, `cujo relay migrate` on a fresh and on an older record, and
queue files that are missing, unreadable or another record's.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from cujorun import cujo_relay
from repo_paths import SAMPLES, TOP

from app_relay.github.event import Event
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import MIGRATIONS, Finished, IntakeError, Store, intake_path
from app_relay.store.intake import INTAKE_MIGRATIONS, VERSION_TABLE
from app_relay.webhook.events import ROUTER, Context

WEBHOOKS = SAMPLES / "webhooks"
OPENED = (WEBHOOKS / "pull_request.opened.json").read_bytes()
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'relay.db'}"


def record(store: Store, delivery_id: str) -> bool:
    return store.record_delivery(
        delivery_id, "pull_request", "opened", 1, "Codertocat/Hello-World", OPENED
    )


def work(store: Store, worker_id: str, lease_s: float = 30.0) -> list[str]:
    """Claim, route and finish what a worker finds, as the pool does; return the ids."""
    context = Context(store=store, reviewer=RecordingReviewer(store))
    claimed = store.claim_deliveries(worker_id, lease_s, limit=8)
    for delivery in claimed:
        ROUTER.dispatch(Event.parse(delivery.id, delivery.event, delivery.body), context)
    store.finish_deliveries([Finished(d.id, True) for d in claimed], worker_id=worker_id)
    return [d.id for d in claimed]


def queued_ids(url: str) -> list[str]:
    path = intake_path(url)
    assert path is not None
    with sqlite3.connect(path) as raw:
        return [row[0] for row in raw.execute("SELECT id FROM queue ORDER BY seq")]


def record_rows(url: str) -> list[tuple[str, str]]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
        return list(raw.execute("SELECT id, state FROM deliveries ORDER BY id"))


def test_the_queue_lives_beside_the_record_and_only_sqlite_files_have_one(tmp_path: Path) -> None:
    assert intake_path(f"sqlite:///{tmp_path}/cujo.db") == tmp_path / "cujo.intake.db"
    assert intake_path(f"sqlite:///{tmp_path}/record") == tmp_path / "record.intake"
    assert intake_path("sqlite://") is None
    assert intake_path("sqlite:///file:shared?mode=memory&uri=true") is None
    assert intake_path("postgresql+psycopg://cujo@localhost/cujo") is None
    with Store("sqlite://") as in_memory:
        assert in_memory.intake_path is None
        assert in_memory.record_delivery("d-1", "ping", None, None, None, b"{}")
        assert in_memory.claim_delivery("w", 30) is not None


def test_recording_never_waits_for_the_records_writer(url: str) -> None:
    with Store(url) as store:
        # A worker's transaction holds the record's write lock: a webhook writing the
        # record would wait its busy timeout out and fail with "database is locked".
        worker = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        worker.execute("BEGIN IMMEDIATE")
        try:
            assert record(store, "d-1")
            assert not record(store, "d-1")
        finally:
            worker.execute("ROLLBACK")
            worker.close()
        assert queued_ids(url) == ["d-1"]
        assert record_rows(url) == []
        # Still in the queue, it is pending all the same.
        assert store.get_delivery("d-1").state == "pending"
        assert store.count_deliveries("pending") == 1
        assert store.count_deliveries("working", "done") == 0


def test_a_claim_takes_queued_deliveries_into_the_record_and_the_webhook_drops_them(
    url: str,
) -> None:
    with Store(url) as store:
        record(store, "d-1")
        record(store, "d-2")
        assert work(store, "w") == ["d-1", "d-2"]
        assert record_rows(url) == [("d-1", "done"), ("d-2", "done")]
        assert queued_ids(url) == ["d-1", "d-2"]  # dropped with the webhook's next append
        record(store, "d-3")
        assert queued_ids(url) == ["d-3"]
        assert store.count_deliveries() == 3
        assert store.count_deliveries("pending") == 1


def test_a_body_is_written_once_and_stays_queued_until_its_delivery_is_finished(
    url: str,
) -> None:
    with Store(url) as store:
        record(store, "d-1")
        [claimed] = store.claim_deliveries("w", 30, limit=8)
        assert claimed.body == OPENED  # read back from the queue
        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            assert raw.execute("SELECT body FROM deliveries").fetchall() == [(b"",)]
        record(store, "d-2")
        assert queued_ids(url) == ["d-1", "d-2"]  # d-1 is still being worked
        assert store.get_delivery("d-1").body == OPENED
        store.finish_delivery("d-1", ok=False, detail="GitHub was down", retry_in_s=0)
        record(store, "d-3")
        assert queued_ids(url) == ["d-1", "d-2", "d-3"]  # to be retried: still needed
        [retried] = store.claim_deliveries("w", 30, limit=1)
        assert (retried.id, retried.body, retried.attempts) == ("d-1", OPENED, 2)
        store.finish_delivery("d-1", ok=True)
        record(store, "d-4")
        assert queued_ids(url) == ["d-2", "d-3", "d-4"]


# A worker in a process of its own: it claims (taking the queue's rows into the record),
# optionally runs the handlers, says so, and waits on its stdin for the SIGKILL.
DOOMED = """
import sys
from app_relay.webhook.events import ROUTER, Context
from app_relay.github.event import Event
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store

url, stage = sys.argv[1:3]
store = Store(url, sync_every_commit=False)
claimed = store.claim_deliveries("doomed", 30.0, limit=8)
if stage == "handled":
    context = Context(store=store, reviewer=RecordingReviewer(store))
    for delivery in claimed:
        ROUTER.dispatch(Event.parse(delivery.id, delivery.event, delivery.body), context)
print(",".join(d.id for d in claimed), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("stage", ["claimed", "handled"])
def test_a_worker_killed_after_its_claim_leaves_the_delivery_to_be_done_once(
    url: str, stage: str
) -> None:
    later = datetime.now(UTC) + timedelta(minutes=5)  # past the doomed worker's lease
    with Store(url) as store:
        record(store, "d-1")
    with subprocess.Popen(
        [sys.executable, "-c", DOOMED, url, stage],
        cwd=TOP,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as doomed:
        try:
            assert doomed.stdout is not None
            assert doomed.stdout.readline().strip() == "d-1"
            doomed.send_signal(signal.SIGKILL)
            assert doomed.wait(30) == -signal.SIGKILL
        finally:
            doomed.kill()
    assert record_rows(url) == [("d-1", "working")]

    with Store(url, clock=lambda: later) as store:
        assert work(store, "heir") == ["d-1"]
        assert work(store, "heir") == []
        done = store.get_delivery("d-1")
        assert (done.state, done.attempts) == ("done", 2)
        # The doomed worker's handler may have run; the request is made once either way.
        assert [r.delivery_id for r in store.review_requests()] == ["d-1"]
        record(store, "d-2")  # the webhook's next append drops what the record took
    assert queued_ids(url) == ["d-2"]


def test_a_redelivery_of_a_processed_id_is_not_processed_again(url: str) -> None:
    with Store(url) as store:
        record(store, "d-1")
        assert work(store, "w") == ["d-1"]
        record(store, "d-2")
        assert queued_ids(url) == ["d-2"]  # d-1 left the queue once the record held it
        # GitHub redelivers d-1: the webhook sees the record holds it.
        assert not record(store, "d-1")
        # Had it reached the queue anyway (the webhook read the record just before a
        # worker took d-1), a claim takes it as nothing.
        path = intake_path(url)
        assert path is not None
        with sqlite3.connect(path) as raw:
            raw.execute(
                "INSERT INTO queue (id, event, action, repo, installation_id, body, received_at)"
                " VALUES ('d-1', 'pull_request', 'opened', 'Codertocat/Hello-World', 1, ?, ?)",
                (OPENED, "2026-11-30 12:00:00"),
            )
        assert work(store, "w") == ["d-2"]
        assert work(store, "w") == []
        again = store.get_delivery("d-1")
        assert (again.state, again.attempts) == ("done", 1)
        assert [r.delivery_id for r in store.review_requests()] == ["d-1", "d-2"]


def test_a_handler_called_before_any_claim_finds_its_delivery_in_the_record(url: str) -> None:
    with Store(url) as store:
        record(store, "d-1")
        context = Context(store=store, reviewer=RecordingReviewer(store))
        ROUTER.dispatch(Event.parse("d-1", "pull_request", OPENED), context)
        assert [r.delivery_id for r in store.review_requests()] == ["d-1"]
        assert record_rows(url) == [("d-1", "pending")]
        assert work(store, "w") == ["d-1"]  # then worked once, as any pending delivery


# ------------------------------------------------------------------ migrate and refusals


def relay(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return cujo_relay(*args, database_url=url)


def versions(url: str) -> tuple[str, str]:
    path = intake_path(url)
    assert path is not None
    with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
        (record_at,) = raw.execute("SELECT version_num FROM alembic_version").fetchone()
    with sqlite3.connect(path) as raw:
        (queue_at,) = raw.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
    return record_at, queue_at


def heads() -> tuple[str, str]:
    (record_head,) = ScriptDirectory(str(MIGRATIONS)).get_heads()
    (queue_head,) = ScriptDirectory(str(INTAKE_MIGRATIONS)).get_heads()
    return record_head, queue_head


def test_cujo_relay_migrate_makes_both_files(url: str, tmp_path: Path) -> None:
    done = relay("migrate", url=url)
    assert done.returncode == 0, done.stderr
    assert f"its intake queue {tmp_path / 'relay.intake.db'}" in done.stdout
    assert versions(url) == heads()


def test_cujo_relay_migrate_upgrades_an_older_record_and_keeps_its_pending_deliveries(
    url: str,
) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "0007")  # before the queue: deliveries lived in the record
    with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
        raw.execute(
            "INSERT INTO deliveries (id, event, body, state, attempts, received_at, available_at)"
            " VALUES ('d-old', 'pull_request', ?, 'pending', 0, ?, ?)",
            (OPENED, "2026-11-30 12:00:00", "2026-11-30 12:00:00"),
        )

    done = relay("migrate", url=url)
    assert done.returncode == 0, done.stderr
    assert versions(url) == heads()
    assert relay("migrate", url=url).returncode == 0  # again: nothing to do
    with Store(url) as store:
        record(store, "d-new")
        assert work(store, "w") == ["d-old", "d-new"]


def test_a_missing_queue_is_refused_naming_the_file_and_the_fix(url: str) -> None:
    with Store(url) as store:
        record(store, "d-1")
        path = store.intake_path
    assert path is not None
    path.unlink()
    Path(f"{path}-wal").unlink(missing_ok=True)
    Path(f"{path}-shm").unlink(missing_ok=True)

    with pytest.raises(IntakeError, match="missing") as refused:
        Store(url)
    assert str(path) in str(refused.value)
    assert "cujo relay migrate --new-intake" in str(refused.value)
    assert not path.exists()  # refusing made no empty queue in its place

    served = relay("serve", "--port", "0", url=url)
    assert served.returncode == 3
    assert f"the intake queue {path} is missing" in served.stderr

    assert relay("migrate", "--new-intake", url=url).returncode == 0
    with Store(url) as store:
        record(store, "d-2")
        assert work(store, "w") == ["d-2"]


def test_an_unreadable_queue_is_refused_naming_the_file_and_the_fix(url: str) -> None:
    with Store(url) as store:
        path = store.intake_path
    assert path is not None
    path.write_bytes(b"this is no database, whatever it was" * 200)

    with pytest.raises(IntakeError, match="cannot be read") as refused:
        Store(url)
    assert str(path) in str(refused.value)
    assert "cujo relay migrate --new-intake" in str(refused.value)

    kept = relay("migrate", "--new-intake", url=url)  # not while the file is there
    assert kept.returncode == 3
    assert f"the intake queue {path} is still there" in kept.stderr
    assert path.read_bytes().startswith(b"this is no database")


def test_another_records_queue_is_refused(url: str, tmp_path: Path) -> None:
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with Store(url) as store, Store(other) as elsewhere:
        mine, theirs = store.intake_path, elsewhere.intake_path
        record(elsewhere, "d-theirs")
    assert mine is not None
    assert theirs is not None
    shutil.copyfile(theirs, mine)

    with pytest.raises(IntakeError, match="not the one the record takes from") as refused:
        Store(url)
    assert str(mine) in str(refused.value)

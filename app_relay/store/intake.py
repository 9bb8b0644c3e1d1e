"""The intake queue: a SQLite file beside the record that only the webhook writes.

SQLite lets one connection write a file at a time, and the workers' transactions
(claims, runs, the outbox) held the record's lock while the webhook waited to record a
delivery before its 202. So a record in a SQLite file gets a queue file of its own,
``<record>.intake<suffix>`` (``cujo.db`` → ``cujo.intake.db``), in WAL: the webhook
appends each batch of deliveries to it with one synced commit and nothing else writes
it. Workers read it, which takes no lock, and take its new rows into the record's
``deliveries`` inside the transaction of their claim, moving the record's cursor
(``intake_cursor``) past them; from there a delivery is leased, finished and retried in
the record as before.

A body is written once, to the queue: the record's row keeps its number there
(``queue_seq``) and a claim reads the body back. Copying every body into the record too
doubled what goes to the disk, and on ext4 the webhook's sync waits for the record's
data (measured: a relay p99 of 11x the floor with the copy, 1.6x without). The webhook
drops a queue row once the record has finished its delivery, in the commit of an append
(it asks the record how far that is after answering, at most once a second, so a backlog
of waiting deliveries never slows an answer); so the record keeps no body of a finished
delivery.

Nothing answered 202 is lost: a row leaves the queue only once the record has finished
its delivery, and a delivery is marked done only after what its handlers wrote is
committed. The record keeps every delivery id it took, so a redelivery of one (after the
queue dropped it) is taken as nothing. PostgreSQL records, and SQLite in memory or at a
``file:`` URI, keep their deliveries, bodies and all, in the record: there is no queue.

The record names the queue it takes from (``queue_identity``): a queue that is missing,
unreadable or another record's is refused with the way out, never silently made anew,
since it may hold deliveries that were answered 202 and not yet worked.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    RowMapping,
    String,
    delete,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from app_relay.store.engine import _engine_for
from app_relay.store.records import NewDelivery
from app_relay.store.tables import (
    _BEGIN_OPTION,
    MIGRATIONS,
    DeliveryRow,
    IntakeCursorRow,
    MigrationError,
    StoreError,
    UTCDateTime,
    upgrade_to_head,
)

log = logging.getLogger(__name__)
INTAKE_MIGRATIONS = MIGRATIONS / "intake"
# Its own version table: a queue file mistaken for a record (or the reverse) is told apart.
VERSION_TABLE = "intake_version"
# A claim takes at most this many queued deliveries into the record at once.
TAKE_AT_ONCE = 256
# The checkpointer copies the WAL into the queue file at most this often.
CHECKPOINT_EVERY_S = 1.0
_FIX = "start an empty queue with `cujo relay migrate --new-intake`"


class IntakeError(StoreError):
    """The intake queue beside a SQLite record is missing, unreadable or not the record's."""


class IntakeBase(DeclarativeBase):
    """The declarative base of the intake queue; its own Alembic migrations build it."""

    metadata = MetaData(
        naming_convention={
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class QueuedRow(IntakeBase):
    """One verified delivery, appended by the webhook before its 202."""

    __tablename__ = "queue"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)  # X-GitHub-Delivery
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    repo: Mapped[str | None] = mapped_column(String(256))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = ({"sqlite_autoincrement": True},)


class QueueIdentityRow(IntakeBase):
    """The queue's id, made with the file; the record keeps it in ``intake_cursor``."""

    __tablename__ = "queue_identity"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)


def _no_autocheckpoint(dbapi_connection: Any, connection_record: object) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")


def intake_path(url: str) -> Path | None:
    """Return where the queue of the record at ``url`` lives; None when it has none."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):
        return None  # a URI may name memory or a shared cache: the record holds its queue
    path = Path(database).expanduser()
    return path.with_name(f"{path.stem}.intake{path.suffix}")


class IntakeQueue:
    """The queue file: the webhook appends to it, workers read after a sequence number."""

    def __init__(self, path: Path, *, sync_every_commit: bool) -> None:
        """Open (making or migrating) the queue at ``path``."""
        self.path = path
        self._engine = _engine_for(f"sqlite:///{path}", sync_every_commit=sync_every_commit)
        # A commit that fills the WAL would copy it into the file and sync that before the
        # webhook's 202 (about one batch in a hundred: the webhook's p99). The process
        # that appends checkpoints from a thread of its own instead, beside its commits.
        event.listen(self._engine, "connect", _no_autocheckpoint)
        self._appended = threading.Event()
        self._closed = threading.Event()
        self._checkpointer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._writer = self._engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        self._dropped_through = 0
        try:
            with self._writer.begin() as connection:
                upgrade_to_head(connection, INTAKE_MIGRATIONS, version_table=VERSION_TABLE)
            with self._read() as connection:
                identity = connection.scalar(select(QueueIdentityRow.id))
        except BaseException:
            self._engine.dispose()
            raise
        if identity is None:
            self._engine.dispose()
            raise IntakeError(f"the intake queue {path} has no identity: it was not made by Cujo")
        self.identity: str = identity

    def close(self) -> None:
        """Stop checkpointing and release the queue's connections."""
        self._closed.set()
        self._appended.set()
        if self._checkpointer is not None:
            self._checkpointer.join()
        self._engine.dispose()

    def _checkpoint(self) -> None:
        # PASSIVE copies what no reader still needs and never holds up the writer.
        while not self._closed.is_set():
            self._appended.wait()
            self._appended.clear()
            if self._closed.is_set():
                return
            raw = self._engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")  # type: ignore[union-attr]
            except sqlite3.Error:
                log.exception("could not checkpoint the intake queue %s", self.path)
            finally:
                raw.close()
            self._closed.wait(CHECKPOINT_EVERY_S)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.begin() as connection:
            yield connection

    def append(
        self, deliveries: Sequence[NewDelivery], now: datetime, *, drop_through: int
    ) -> set[str]:
        """Append deliveries with one commit; return the ids it had not held before.

        Rows up to ``drop_through`` (the record has finished them) go in the same commit.
        """
        rows = [{**new.columns(), "received_at": now} for new in deliveries]
        statement = (
            sqlite_insert(QueuedRow)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(QueuedRow.id)
        )
        with self._writer.begin() as connection:
            if drop_through > self._dropped_through:
                connection.execute(delete(QueuedRow).where(QueuedRow.seq <= drop_through))
            inserted = set(connection.scalars(statement, rows)) if rows else set()
        self._dropped_through = max(self._dropped_through, drop_through)
        with self._lock:
            if self._checkpointer is None and not self._closed.is_set():
                self._checkpointer = threading.Thread(
                    target=self._checkpoint, name="cujo-intake-checkpoint", daemon=True
                )
                self._checkpointer.start()
        self._appended.set()
        return inserted

    def after(self, seq: int, limit: int = TAKE_AT_ONCE) -> list[RowMapping]:
        """Return up to ``limit`` queued deliveries after ``seq`` (no bodies), in order."""
        # Without the bodies: the record takes the rows, the bodies stay here.
        columns = [c for c in QueuedRow.__table__.c if c.name != "body"]
        query = select(*columns).where(QueuedRow.seq > seq).order_by(QueuedRow.seq)
        with self._read() as connection:
            return list(connection.execute(query.limit(limit)).mappings())

    def bodies(self, seqs: Sequence[int]) -> dict[int | None, bytes]:
        """Return the bodies of the queued deliveries numbered ``seqs`` that it still holds."""
        if not seqs:
            return {}
        query = select(QueuedRow.seq, QueuedRow.body).where(QueuedRow.seq.in_(list(seqs)))
        with self._read() as connection:
            found: dict[int | None, bytes] = {}
            for seq, body in connection.execute(query):
                found[seq] = body
            return found

    def ids_after(self, seq: int) -> list[str]:
        """Return the ids of every queued delivery after ``seq``."""
        query = select(QueuedRow.id).where(QueuedRow.seq > seq).order_by(QueuedRow.seq)
        with self._read() as connection:
            return list(connection.scalars(query))

    def get(self, delivery_id: str) -> RowMapping | None:
        """Return the queued delivery ``delivery_id``, if the queue holds it."""
        with self._read() as connection:
            query = select(QueuedRow.__table__).where(QueuedRow.id == delivery_id)
            return connection.execute(query).mappings().first()

    def count(self) -> int:
        """Return how many deliveries the queue holds."""
        with self._read() as connection:
            return int(connection.scalar(select(func.count()).select_from(QueuedRow)) or 0)


def take_into(session: Session, queued: Sequence[RowMapping]) -> None:
    """Add queued deliveries to the record's ``deliveries`` as pending (known ids: nothing).

    Their bodies stay in the queue: a claim reads them back by ``queue_seq``.
    """
    session.execute(
        sqlite_insert(DeliveryRow).on_conflict_do_nothing(index_elements=["id"]),
        [
            {
                "id": row["id"],
                "event": row["event"],
                "action": row["action"],
                "installation_id": row["installation_id"],
                "repo": row["repo"],
                "body": b"",  # read back from the queue by the claim
                "queue_seq": row["seq"],
                "state": "pending",
                "attempts": 0,
                "received_at": row["received_at"],
                "available_at": row["received_at"],
            }
            for row in queued
        ],
    )


def open_intake(
    url: str, record: Engine, *, sync_every_commit: bool, new_intake: bool = False
) -> IntakeQueue | None:
    """Open the queue of the record at ``url`` (None when it has none), checked against it.

    ``record`` is the record's writing engine: the check holds the record's write lock, so
    processes starting at once adopt the same queue. ``new_intake`` starts an empty queue
    for a record whose queue is gone (the file must not be there any more).
    """
    path = intake_path(url)
    if path is None:
        return None
    with record.begin() as connection:
        cursor = connection.execute(
            select(IntakeCursorRow.queue_id, IntakeCursorRow.taken_seq)
        ).first()
        if new_intake:
            if path.exists():
                raise IntakeError(
                    f"the intake queue {path} is still there; --new-intake starts an empty "
                    "one only once it is gone: deliveries in it not yet taken would be lost. "
                    "Move it aside first"
                )
            connection.execute(delete(IntakeCursorRow))
            cursor = None
        if cursor is not None and not path.exists():
            raise IntakeError(
                f"the intake queue {path} is missing: the record took deliveries from it "
                f"(up to #{cursor.taken_seq}), and any answered 202 but not yet taken were "
                f"in it. Put it back from a backup, or, if it is gone for good, {_FIX} "
                "(GitHub can redeliver what was lost)"
            )
        try:
            queue = IntakeQueue(path, sync_every_commit=sync_every_commit)
        except (DatabaseError, MigrationError) as exc:
            why = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise IntakeError(
                f"the intake queue {path} cannot be read ({why}). Move it aside (sqlite3's "
                f"`.recover` can save what it holds), then {_FIX}"
            ) from None
        if cursor is None:
            connection.execute(insert(IntakeCursorRow).values(queue_id=queue.identity, taken_seq=0))
        elif cursor.queue_id != queue.identity:
            queue.close()
            raise IntakeError(
                f"the intake queue {path} is not the one the record takes from (it is queue "
                f"{queue.identity}, the record's is {cursor.queue_id}). Put the record's own "
                f"queue back, or move this one aside and {_FIX}"
            )
    return queue

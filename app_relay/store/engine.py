"""Connections: SQLite in WAL with real transactions, or PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import (
    Engine,
    create_engine,
    event,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import StaticPool

from app_relay.store.records import Delivery
from app_relay.store.tables import _BEGIN_OPTION, BUSY_TIMEOUT_MS, DeliveryRow

# --------------------------------------------------------------------------- store


def _engine_for(
    url: str, *, sync_every_commit: bool = True, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    database = parsed.database or ""
    if database in ("", ":memory:"):
        # One shared connection, or every connection would see its own empty database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        if not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000})
    synchronous = "FULL" if sync_every_commit else "NORMAL"

    def connect(dbapi_connection: Any, connection_record: object) -> None:
        _sqlite_connect(
            dbapi_connection, connection_record, synchronous=synchronous, busy_ms=busy_timeout_ms
        )

    event.listen(engine, "connect", connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(
    dbapi_connection: Any,
    connection_record: object,
    *,
    synchronous: str = "FULL",
    busy_ms: int = BUSY_TIMEOUT_MS,
) -> None:
    # Take BEGIN away from the sqlite3 driver, which skips it for SELECT; _sqlite_begin
    # issues it instead (SQLAlchemy's documented recipe for real transactions).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # WAL lets the board read while a review writes; FULL syncs each commit, so a
        # commit that returned survives a crash of the process or the machine. NORMAL
        # (the workers') survives a crash of the process; the machine's may lose the
        # newest commits, in order, and the work they recorded is redone: a delivery is
        # marked done after what it did, and every effect is found again before it is
        # made twice.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # Writers take the write lock up front (IMMEDIATE) and wait for it under the busy
    # timeout; a deferred transaction that reads and then writes would instead fail at
    # once with "database is locked" when another process wrote in between.
    mode = conn.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _delivery(row: DeliveryRow) -> Delivery:
    return Delivery(
        id=row.id,
        event=row.event,
        action=row.action,
        installation_id=row.installation_id,
        repo=row.repo,
        body=row.body,
        state=row.state,
        attempts=row.attempts,
        error=row.error,
        received_at=row.received_at,
        worker_id=row.worker_id,
        lease_until=row.lease_until,
        done_at=row.done_at,
        queue_seq=row.queue_seq,
    )

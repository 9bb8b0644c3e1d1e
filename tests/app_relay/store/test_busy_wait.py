"""How long a write waits for another process's commit: the relay's short wait, a local
review's long one (it shares its record with the reviews beside it and the board)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app_relay.cli.review import _open_record
from app_relay.store import BUSY_TIMEOUT_MS, LOCAL_BUSY_TIMEOUT_MS, Store


def busy_ms(store: Store) -> int:
    with store._engine.connect() as connection:
        return int(connection.execute(text("PRAGMA busy_timeout")).scalar_one())


def test_the_relay_waits_its_short_time_and_a_local_review_its_long_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cujo.db'}"
    relay, local = Store(url), Store(url, busy_timeout_ms=LOCAL_BUSY_TIMEOUT_MS)
    try:
        assert busy_ms(relay) == BUSY_TIMEOUT_MS
        assert busy_ms(local) == LOCAL_BUSY_TIMEOUT_MS > 4 * BUSY_TIMEOUT_MS
    finally:
        relay.close()
        local.close()


def test_a_write_past_its_wait_is_an_error_and_within_it_goes_through(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cujo.db'}"
    Store(url).close()  # the schema, made once
    impatient = Store(url, busy_timeout_ms=50)
    holder = sqlite3.connect(tmp_path / "cujo.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's write, not yet committed
        with pytest.raises(OperationalError, match="locked"):
            impatient.open_session("octo/repo", 7, "local")
        holder.execute("COMMIT")
        assert impatient.open_session("octo/repo", 7, "local")
    finally:
        holder.close()
        impatient.close()


def test_a_local_review_opens_its_record_with_the_long_wait(tmp_path: Path) -> None:
    store = _open_record(tmp_path, "octo/repo", "local-1", "a" * 40, "b" * 40, "sandbox", None)
    try:
        assert busy_ms(store) == LOCAL_BUSY_TIMEOUT_MS
    finally:
        store.close()

"""New SQLite records for the tests, made by the migrations once a session, then copied.

Hundreds of tests open a record in a new SQLite file, and each used to run all of the
record's migrations (a third of a second of CPU each on a 2-core machine). Here the
migrations run for real once, into a scratch file; the schema they left (every
``CREATE`` statement in ``sqlite_master``, in order, and the version row) is then what
each later new record is given. What a test sees is byte for byte what the migrations
make. Only an empty SQLite record of the record's own migrations takes this path: any
database that holds a table (an old revision a migration test built), PostgreSQL, the
intake queue (whose migration writes a fresh identity) and every ``cujo`` process the
tests start migrate as the product does.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, create_engine, inspect

from app_relay.store import tables
from app_relay.store.tables import MIGRATIONS

Upgrade = Callable[..., bool]


class RecordTemplate:
    """Replay the record's migrated schema into empty SQLite records."""

    def __init__(self, real: Upgrade) -> None:
        self._real = real
        self._schema: list[str] | None = None

    def _capture(self) -> list[str]:
        scratch = Path(tempfile.mkdtemp(prefix="cujo-record-template-")) / "record.db"
        engine = create_engine(f"sqlite:///{scratch}")
        try:
            with engine.begin() as connection:
                self._real(connection, MIGRATIONS)
            with engine.connect() as connection:
                made = connection.exec_driver_sql(
                    "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
                ).all()
                versions = connection.exec_driver_sql(
                    "SELECT version_num FROM alembic_version"
                ).scalars()
                inserts = [f"INSERT INTO alembic_version VALUES ('{v}')" for v in versions]
        finally:
            engine.dispose()
        return [sql for name, sql in made if not name.startswith("sqlite_")] + inserts

    def upgrade(self, connection: Connection, folder: Path, **options: object) -> bool:
        """``tables.upgrade_to_head``, replaying the template into an empty SQLite record."""
        empty = connection.dialect.name == "sqlite" and not inspect(connection).get_table_names()
        if folder != MIGRATIONS or not empty:
            return self._real(connection, folder, **options)
        if self._schema is None:
            self._schema = self._capture()
        for statement in self._schema:
            connection.exec_driver_sql(statement)
        return True


def install(monkeypatch: object) -> RecordTemplate:
    """Route ``create_schema``'s upgrade through a template (``monkeypatch``: pytest's)."""
    template = RecordTemplate(tables.upgrade_to_head)
    monkeypatch.setattr(tables, "upgrade_to_head", template.upgrade)  # type: ignore[attr-defined]
    return template

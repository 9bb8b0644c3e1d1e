"""Which migration the record is at, against the newest this relay knows (``cujo doctor``).

Reads only: a record that does not exist yet is not made here (``cujo relay migrate`` or
``cujo relay serve`` make it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url

from app_relay.store.tables import MIGRATIONS


@dataclass(frozen=True, slots=True)
class RecordRevision:
    """The record's revision (None: no record, or one made before migrations) and the head."""

    current: str | None
    head: str
    exists: bool

    @property
    def current_is_head(self) -> bool:
        """Say whether the record is at the newest revision."""
        return self.exists and self.current == self.head


def head_revision() -> str:
    """Return the newest migration this relay knows."""
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    if head is None:
        raise RuntimeError(f"no migration in {MIGRATIONS}")
    return head


def record_revision(database_url: str) -> RecordRevision:
    """Read the record's revision without creating or changing anything."""
    head = head_revision()
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        path = url.database or ""
        if path in ("", ":memory:") or not Path(path).is_file():
            return RecordRevision(current=None, head=head, exists=False)
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    return RecordRevision(current=current, head=head, exists=True)

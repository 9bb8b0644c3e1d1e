"""Run the record's Alembic migrations, on the connection the store hands over.

The store calls ``upgrade head`` inside a transaction it already holds (``BEGIN
IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL), so two relays starting at once
migrate one after the other. Run by hand (``alembic -c app_relay/migrations/alembic.ini``),
it opens its own connection to ``CUJO_DATABASE_URL``.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from app_relay.store import Base

config = context.config


def run(connection: Connection) -> None:
    """Run the pending migrations on ``connection``."""
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite alters a table by copying it; batch mode does that for every migration.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


given = config.attributes.get("connection")
if isinstance(given, Connection):
    run(given)
else:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("CUJO_DATABASE_URL", "")
    if not url:
        raise SystemExit("set CUJO_DATABASE_URL to the record's database URL")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            run(connection)
    finally:
        engine.dispose()

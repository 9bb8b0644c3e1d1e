"""Run the intake queue's Alembic migrations, on the connection the store hands over.

The queue is a SQLite file beside the record (``store/intake.py``) with a history of its
own: it is made, and may be made anew (``cujo relay migrate --new-intake``), apart from
the record, so its revisions are not the record's. The store runs ``upgrade head`` on it
as it opens it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from app_relay.store.intake import VERSION_TABLE, IntakeBase

given = context.config.attributes.get("connection")
if not isinstance(given, Connection):
    raise SystemExit("the intake queue is migrated as the store opens it: run `cujo relay migrate`")
context.configure(
    connection=given,
    target_metadata=IntakeBase.metadata,
    render_as_batch=True,
    version_table=VERSION_TABLE,
)
with context.begin_transaction():
    context.run_migrations()

"""intake cursor: how far a SQLite record has taken deliveries from its intake queue, and
each taken delivery's number there (its body stays in the queue until it is finished)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 19:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # The webhook appends to a queue file of its own (store/intake.py); the record keeps
    # which queue it takes from and up to where. PostgreSQL keeps the table empty.
    op.create_table(
        "intake_cursor",
        sa.Column("queue_id", sa.String(length=32), nullable=False),
        sa.Column("taken_seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue_id", name=op.f("pk_intake_cursor")),
    )
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queue_seq", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_column("queue_seq")
    op.drop_table("intake_cursor")

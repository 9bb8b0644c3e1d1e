"""intake queue: the deliveries the webhook recorded, and the queue's identity

Revision ID: i0001
Revises:
Create Date: 2026-11-30 19:30:00.000000
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "i0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "queue",
        # AUTOINCREMENT: a number is never given twice, even after the rows below it go.
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=True),
        sa.Column("repo", sa.String(length=256), nullable=True),
        sa.Column("installation_id", sa.BigInteger(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_queue")),
        sa.UniqueConstraint("id", name=op.f("uq_queue_id")),
        sqlite_autoincrement=True,
    )
    identity = op.create_table(
        "queue_identity",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_queue_identity")),
    )
    # The record keeps this id: a queue replaced behind its back is refused, not read.
    op.bulk_insert(identity, [{"id": uuid.uuid4().hex}])


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("queue_identity")
    op.drop_table("queue")

"""verdict at: when GitHub showed a run's current state (verdict, dismissal), by its clock

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 21:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # A verb compares a comment's GitHub time with this, never with the relay's clock.
    # Runs recorded before keep NULL and fall back to their state event's time.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("verdict_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("verdict_at")

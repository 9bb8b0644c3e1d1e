"""run hold: the base branch a run's pull request merges into, and whether a block holds it

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 16:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # github/protection.py's answer (holds, does-not-hold, unknown) is shown on the check
    # and kept here.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("base_ref", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("holds", sa.String(length=16), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("holds")
        batch_op.drop_column("base_ref")

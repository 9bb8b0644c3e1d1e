"""github runs: where each run lives on GitHub, and why a request was not reviewed

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # A pull request's run carries what the relay needs to move it on GitHub after a
    # restart: the installation that acts, the check it owns, the workflow run it follows.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("installation_id", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("delivery_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("default_branch", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("on_error", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("check_run_id", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("workflow_run_id", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("review_id", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("finishing", sa.String(length=128), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_delivery_id"), ["delivery_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runs_workflow_run_id"), ["workflow_run_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_runs_check_run_id"), ["check_run_id"], unique=False)
    with op.batch_alter_table("review_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outcome", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("run_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("review_requests", schema=None) as batch_op:
        batch_op.drop_column("run_id")
        batch_op.drop_column("outcome")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_check_run_id"))
        batch_op.drop_index(batch_op.f("ix_runs_workflow_run_id"))
        batch_op.drop_index(batch_op.f("ix_runs_delivery_id"))
        for column in (
            "finishing",
            "review_id",
            "workflow_run_id",
            "check_run_id",
            "on_error",
            "default_branch",
            "delivery_id",
            "installation_id",
        ):
            batch_op.drop_column(column)

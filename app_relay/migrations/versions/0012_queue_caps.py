"""caps and a queue: the heads waiting for a sandbox run, and each run's author

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 21:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # One row per waiting pull request (store/queue.py); it survives a restart.
    op.create_table(
        "run_queue",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("repo", sa.String(length=256), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("installation_id", sa.BigInteger(), nullable=False),
        sa.Column("base_sha", sa.String(length=40), nullable=False),
        sa.Column("head_sha", sa.String(length=40), nullable=False),
        sa.Column("base_ref", sa.String(length=256), nullable=True),
        sa.Column("default_branch", sa.String(length=256), nullable=True),
        sa.Column("delivery_id", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("author", sa.String(length=64), nullable=False),
        sa.Column("first_timer", sa.Boolean(), nullable=False),
        sa.Column("repo_cap", sa.Integer(), nullable=False),
        sa.Column("author_cap", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("check_run_id", sa.BigInteger(), nullable=True),
        sa.Column("queued_at", sa.DateTime(), nullable=False),
        sa.Column("admitted_by", sa.String(length=128), nullable=True),
        sa.Column("admitted_until", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_run_queue_session_id_sessions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_queue")),
        sa.UniqueConstraint("session_id", name=op.f("uq_run_queue_session_id")),
    )
    with op.batch_alter_table("run_queue", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_queue_repo"), ["repo"], unique=False)
    # The caps count runs in flight per author; runs recorded before keep NULL.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("author", sa.String(length=64), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("author")
    with op.batch_alter_table("run_queue", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_queue_repo"))
    op.drop_table("run_queue")

"""merge attempts: each click on a run page's merge action, one live merge per head

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 23:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_STATES = ("reading", "refused", "blocked", "sent", "merged", "queued", "unknown", "failed")
_LIVE = sa.text("state IN ('sent', 'queued', 'unknown', 'merged')")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "merge_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("repo", sa.String(length=256), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("login", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("head_sha", sa.String(length=40), nullable=False),
        sa.Column("base_ref", sa.String(length=256), nullable=False),
        sa.Column("base_sha", sa.String(length=40), nullable=True),
        sa.Column("first_reading", sa.JSON(), nullable=True),
        sa.Column("second_reading", sa.JSON(), nullable=True),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                *_STATES,
                name="merge_state",
                native_enum=False,
                create_constraint=True,
                length=max(len(s) for s in _STATES),
            ),
            nullable=False,
        ),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("words", sa.Text(), nullable=False),
        sa.Column("merged_sha", sa.String(length=40), nullable=True),
        sa.Column("merged_by", sa.String(length=64), nullable=True),
        sa.Column("settled_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_merge_attempts_run_id_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_merge_attempts")),
    )
    with op.batch_alter_table("merge_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_merge_attempts_run_id"), ["run_id"], unique=False)
        batch_op.create_index("ix_merge_attempts_state", ["state"], unique=False)
        # One live merge per (repository, pull request, head): the record's rule, so two
        # clicks, two tabs or two relays make one PUT (the loser's claim is refused).
        batch_op.create_index(
            "uq_merge_attempts_live",
            ["repo", "pr_number", "head_sha"],
            unique=True,
            sqlite_where=_LIVE,
            postgresql_where=_LIVE,
        )

    # Open run pages read the gate again when a webhook about the repository arrives.
    op.create_table(
        "merge_news",
        sa.Column("repo", sa.String(length=256), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("repo", name=op.f("pk_merge_news")),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("merge_news")
    with op.batch_alter_table("merge_attempts", schema=None) as batch_op:
        batch_op.drop_index("uq_merge_attempts_live")
        batch_op.drop_index("ix_merge_attempts_state")
        batch_op.drop_index(batch_op.f("ix_merge_attempts_run_id"))
    op.drop_table("merge_attempts")

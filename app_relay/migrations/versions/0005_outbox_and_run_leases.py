"""outbox and run leases: every GitHub write of a run recorded before it is made

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_KINDS = ("check", "review", "dismiss", "reaction", "comment", "cancel")
_STATES = ("pending", "working", "done", "failed", "cancelled")


def upgrade() -> None:
    """Apply this revision."""
    # A run is acted on under a lease (who, until when), as deliveries are; `finishing`
    # (a claim that never expired) goes. `lifted` is the hold a dismissal lifted.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("lifted", sa.String(length=16), nullable=True))
        batch_op.drop_column("finishing")
    op.create_table(
        "effects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=96), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(*_KINDS, name="effect_kind", native_enum=False, create_constraint=True),
            nullable=False,
        ),
        sa.Column("lane", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(*_STATES, name="effect_state", native_enum=False, create_constraint=True),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("available_at", sa.DateTime(), nullable=False),
        sa.Column("worker_id", sa.String(length=128), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("done_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_effects_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_effects"),
        sa.UniqueConstraint("run_id", "key", name="uq_effects_run_id"),
    )
    op.create_index("ix_effects_run_id", "effects", ["run_id"], unique=False)
    op.create_index("ix_effects_state", "effects", ["state", "available_at"], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index("ix_effects_state", table_name="effects")
    op.drop_index("ix_effects_run_id", table_name="effects")
    op.drop_table("effects")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("finishing", sa.String(length=128), nullable=True))
        batch_op.drop_column("lifted")
        batch_op.drop_column("lease_until")
        batch_op.drop_column("lease_owner")

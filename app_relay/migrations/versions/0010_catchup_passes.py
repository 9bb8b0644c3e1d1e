"""catch-up passes: the lease of the pass under way, and each pass's tally and reach

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # One row per pass (store/catchup_passes.py): redeliveries asked, pull requests swept.
    op.create_table(
        "catch_up_passes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("lease_until", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("full", sa.Boolean(), nullable=False),
        sa.Column("deliveries_listed", sa.Integer(), nullable=False),
        sa.Column("redeliveries_asked", sa.Integer(), nullable=False),
        sa.Column("redeliveries_skipped", sa.Integer(), nullable=False),
        sa.Column("pulls_listed", sa.Integer(), nullable=False),
        sa.Column("pulls_swept", sa.Integer(), nullable=False),
        sa.Column("capped", sa.Text(), nullable=False),
        sa.Column("trouble", sa.Text(), nullable=False),
        sa.Column("deliveries_through", sa.DateTime(), nullable=True),
        sa.Column("pulls_through", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catch_up_passes")),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("catch_up_passes")

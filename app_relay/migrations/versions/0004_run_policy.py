"""run policy: the .cujo.yml the relay read at base, which the verdict is judged under

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    # The relay decides with the policy it read itself (docs/design.md invariant 9);
    # the bundle's copy in plan.json is evidence only, compared against this one.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy_json", sa.Text(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("policy_json")

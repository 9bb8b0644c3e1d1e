"""tamper record: a finding may rest on the job log's record of the evidence

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 19:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_CHECKS = ("install", "detonation", "tests", "probes", "smoke")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    """Apply this revision."""
    # `evidence-tamper` cites what the job's log recorded and the bundle lost: its source
    # is the record, not a check.
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_findings_check_name"), type_="check")
        batch_op.create_check_constraint(
            "check_name", _in("check_name", (*_CHECKS, "diff", "record"))
        )


def downgrade() -> None:
    """Revert this revision."""
    op.execute("DELETE FROM findings WHERE check_name = 'record'")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_findings_check_name"), type_="check")
        batch_op.create_check_constraint("check_name", _in("check_name", (*_CHECKS, "diff")))

"""the privileged check: a finding may rest on its evidence

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 10:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_CHECKS = ("install", "detonation", "tests", "probes", "smoke", "workflows")
_SOURCES = ("diff", "record")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    """Apply this revision."""
    # The head again in the job of a base workflow that runs it with secrets
    # (checks/privileged.py) is a check of its own.
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_findings_check_name"), type_="check")
        batch_op.create_check_constraint(
            "check_name", _in("check_name", (*_CHECKS, "privileged", *_SOURCES))
        )


def downgrade() -> None:
    """Revert this revision."""
    op.execute("DELETE FROM findings WHERE check_name = 'privileged'")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_findings_check_name"), type_="check")
        batch_op.create_check_constraint("check_name", _in("check_name", (*_CHECKS, *_SOURCES)))

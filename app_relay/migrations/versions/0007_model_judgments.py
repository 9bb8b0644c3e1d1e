"""model judgments: the judge that fell back, findings from a diff, every rule, model cost

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 16:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_CHECKS = ("install", "detonation", "tests", "probes", "smoke")
_JUDGES_BEFORE = ("deterministic", "model")
_JUDGES = ("deterministic", "model", "deterministic-fallback")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    """Apply this revision."""
    # The judge that decided may be the hard rules after the model failed; a diff review's
    # findings cite the diff; a finding names every rule that found its behaviour; the
    # model's tokens and cost are kept on the run.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_use", sa.JSON(), nullable=True))
        batch_op.drop_constraint(op.f("ck_runs_judge_kind"), type_="check")
        batch_op.alter_column(
            "judge", existing_type=sa.String(length=13), type_=sa.String(length=22)
        )
        batch_op.create_check_constraint("judge_kind", _in("judge", _JUDGES))
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rules", sa.JSON(), nullable=True))
        batch_op.drop_constraint(op.f("ck_findings_check_name"), type_="check")
        batch_op.create_check_constraint("check_name", _in("check_name", (*_CHECKS, "diff")))


def downgrade() -> None:
    """Revert this revision."""
    op.execute("DELETE FROM findings WHERE check_name = 'diff'")
    op.execute("UPDATE runs SET judge = 'deterministic' WHERE judge = 'deterministic-fallback'")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_findings_check_name"), type_="check")
        batch_op.create_check_constraint("check_name", _in("check_name", _CHECKS))
        batch_op.drop_column("rules")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_runs_judge_kind"), type_="check")
        batch_op.alter_column(
            "judge", existing_type=sa.String(length=22), type_=sa.String(length=13)
        )
        batch_op.create_check_constraint("judge_kind", _in("judge", _JUDGES_BEFORE))
        batch_op.drop_column("model_use")

"""Build valid plans and reports for tests that write bundles without running the sandbox."""

from __future__ import annotations

from pathlib import Path

from cujo_action.evidence.reportfit import parse_report
from cujo_action.schema import CHECK_NAMES, Plan, Policy, Report, utcnow

DEMO_EXFIL = Path(__file__).resolve().parents[1] / "samples" / "demo-exfil"


def make_plan(*, run_id: str, base_sha: str, head_sha: str, **over: object) -> Plan:
    """Return a valid Python plan for the run; ``over`` replaces any field."""
    fields: dict[str, object] = {
        "run_id": run_id,
        "repo": "/r",
        "base_sha": base_sha,
        "head_sha": head_sha,
        "policy_from": base_sha,
        "policy": Policy(),
        "ecosystem": "python",
        "head_dir": "/h",
        "base_dir": "/b",
    }
    fields.update(over)
    return Plan.model_validate(fields)


def make_report(check: str, *, run_id: str, base_sha: str, head_sha: str, **over: object) -> Report:
    """Return a valid `ok` report of ``check`` for the run; ``over`` replaces any field."""
    now = utcnow()
    fields: dict[str, object] = {
        "run_id": run_id,
        "check": check,
        "head_sha": head_sha,
        "base_sha": base_sha,
        "status": "ok",
        "started_at": now,
        "finished_at": now,
        "isolation": "full",
        "evidence_complete": True,
    }
    fields.update(over)
    return Report.model_validate(fields)


def demo_exfil_reports() -> list[Report]:
    """Return the five reports of a real run of the demo's exfiltration (samples/demo-exfil).

    The run was recorded before the workflows check existed: it has no report there.
    """
    plan = Plan.model_validate_json((DEMO_EXFIL / "plan.json").read_text())
    return [
        parse_report(
            (DEMO_EXFIL / f"{check}.json").read_bytes(),
            run_id=plan.run_id,
            head_sha=plan.head_sha,
            base_sha=plan.base_sha,
        )
        for check in CHECK_NAMES
        if (DEMO_EXFIL / f"{check}.json").exists()
    ]

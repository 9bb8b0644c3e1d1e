"""Run a check that reads the pull request without running any of it, as a process.

Such a check (``workflows``) has no phase, no network namespace and no command of the
pull request to watch, so it needs none of ``CheckRun``'s watchers: it reads the context
and the plan as every check does, records its observations and cuts in an
``EvidenceRecord`` (each written to the tamper record as it is made), and writes exactly
one report, an error report when it falls over.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from cujo_action.arm.context import Armed
from cujo_action.checks.evidence_record import EvidenceRecord
from cujo_action.checks.harness import write_report
from cujo_action.checks.modules import CHECK_MODULES
from cujo_action.evidence.timing import Timeline
from cujo_action.schema import MAX_TEXT, CheckName, Plan, Report, Status, clip, utcnow

StaticBody = Callable[[Plan, EvidenceRecord], tuple[Status, str]]


def static_report(check: CheckName, armed: Armed, plan: Plan, body: StaticBody) -> Report:
    """Run ``body`` into a fresh record and return the check's report."""
    started = utcnow()
    record = EvidenceRecord(check, plan.run_id)
    try:
        status, summary = body(plan, record)
    except Exception as exc:  # a check that falls over still reports, as an error
        tail = "".join(traceback.format_exception(exc))[-1500:]
        status, summary = "error", f"the {check} check failed inside Cujo: {exc!r}\n{tail}"
    if armed.isolation == "partial":
        # As every check's report says, so the verdict's unproven line has its reason here.
        record.observe(
            "isolation_partial",
            "the review ran with proxy variables only (no network namespace); this check "
            "runs none of the pull request: "
            + (armed.isolation_reason or "full isolation was not available"),
        )
    if record.dropped_observations:
        record.cut(
            "report-observations",
            dropped=record.dropped_observations,
            kept=len(record.observations),
        )
    return Report(
        run_id=plan.run_id,
        check=check,
        head_sha=plan.head_sha,
        base_sha=plan.base_sha,
        status=status,
        summary=clip(summary, MAX_TEXT),
        started_at=started,
        finished_at=utcnow(),
        isolation=armed.isolation,
        evidence_complete=record.evidence_complete,
        observations=record.observations,
        cuts=record.cuts,
    )


def static_check_main(check: CheckName, body: StaticBody) -> int:
    """Run a reading check as a process: read the context, run ``body``, write one report."""
    parser = argparse.ArgumentParser(prog=f"python -m {CHECK_MODULES[check]}")
    parser.add_argument("--context", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--timings", type=Path, help="where to write the check's timeline")
    args = parser.parse_args()
    timeline = Timeline()
    started = time.monotonic()
    armed = Armed.model_validate_json(args.context.read_text())
    plan = Plan.model_validate_json(Path(armed.plan_path).read_text())
    with timeline.span(check):
        report = static_report(check, armed, plan, body)
    write_report(report, args.out)
    if args.timings is not None:
        timeline.write(args.timings)
    record_say = f"cujo: {check}: {report.status} in {time.monotonic() - started:.1f}s"
    print(record_say, file=sys.stderr, flush=True)
    return 0

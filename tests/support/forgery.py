"""Rewrite a bundle as a pull request that became root on the runner would: consistently.

The forger knows Cujo's formats: it drops every request that carried a decoy from the raw
egress log, rebuilds each report's egress from what is left exactly as the harness does,
drops the decoy events, and writes the evidence seal and the manifest again, so the bundle
validates and its reports agree with its log. Only the job's log, printed before the
rewrite, still knows what happened (``app_relay/runs/tamper.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cujo_action.evidence.bundle import egress_for, write_manifest
from cujo_action.evidence.reader import Manifest
from cujo_action.net.egress import parse_egress_log
from cujo_action.schema import ALL_CHECKS, Plan, Report

EGRESS = "evidence/egress.jsonl"


def strip_decoys(out: Path) -> int:
    """Forge the bundle in ``out`` without its decoy evidence; return the log lines dropped."""
    log = out / EGRESS
    kept, dropped = [], 0
    for line in log.read_bytes().splitlines(keepends=True):
        try:
            carried = bool(json.loads(line).get("decoy_seen"))
        except ValueError:
            carried = False
        if carried:
            dropped += 1
        else:
            kept.append(line)
    log.write_bytes(b"".join(kept))
    plan = Plan.model_validate_json((out / "plan.json").read_bytes())
    lines, _ = parse_egress_log(log.read_bytes())
    for check in ALL_CHECKS:
        path = out / f"{check}.json"
        if not path.is_file():
            continue
        report = Report.model_validate_json(path.read_bytes())
        egress, _ = egress_for(report.check, lines, plan.policy.egress_allow)
        forged = report.model_copy(update={"egress": egress, "decoy_events": []})
        path.write_text(forged.dump())
    manifest = Manifest.model_validate_json((out / "manifest.json").read_bytes())
    data = log.read_bytes()
    seals = [
        seal.model_copy(update={"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
        if seal.name.endswith("egress.jsonl")
        else seal
        for seal in manifest.evidence
    ]
    write_manifest(out, manifest.run_id, manifest.head_sha, manifest.base_sha, seals)
    return dropped

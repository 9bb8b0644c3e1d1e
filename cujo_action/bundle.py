"""Bundle a run for upload: attach the proxy's egress to each report, write the manifest.

The proxy's log is read once the proxy has stopped, so every request it saw is in the
bundle. Requests forwarded to a registry are folded into one entry per host and phase
(an ``npm install`` makes hundreds); everything else is kept one by one, decoys first.
"""

from __future__ import annotations

import hashlib
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from cujo_action.proxy import egress_from_record
from cujo_action.schema import (
    MAX_EGRESS,
    MAX_OBSERVATIONS,
    CheckName,
    Egress,
    Failure,
    Manifest,
    ManifestFile,
    Observation,
    Report,
)

MAX_EVIDENCE_LOG = 8 * 1024 * 1024
_PHASES = {"install", "import", "test", "probe", "smoke"}


def _egress(check: str, n: int, line: dict[str, Any], url: str, bytes_out: int) -> Egress:
    record = {**line, "url": url, "bytes_out": max(int(line.get("bytes_out", 0)), bytes_out)}
    return egress_from_record(record, f"{check}:egress:{n}")


def egress_for(check: str, lines: list[dict[str, Any]]) -> tuple[list[Egress], bool]:
    """Return the check's egress entries (forwarded ones folded) and whether all fit."""
    mine = [ln for ln in lines if ln.get("check") == check and ln.get("phase") in _PHASES]
    kept: list[dict[str, Any]] = []
    folded: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for line in mine:
        if line.get("action") == "forwarded" and not line.get("decoy_seen"):
            folded[(line["phase"], str(line.get("host")), str(line.get("method")))].append(line)
        else:
            kept.append(line)
    # Decoy-bearing requests first, so a cap can never push them out.
    kept.sort(key=lambda ln: (not ln.get("decoy_seen"), float(ln.get("ts", 0))))
    out: list[Egress] = []
    for line in kept:
        out.append(_egress(check, len(out) + 1, line, str(line.get("url", "")), 0))
        if len(out) >= MAX_EGRESS:
            return out, len(kept) + len(folded) <= MAX_EGRESS
    for group in folded.values():
        first = group[0]
        url = str(first.get("url", ""))
        if len(group) > 1:
            url = f"{url} (+{len(group) - 1} more requests to this host)"
        total = sum(int(g.get("bytes_out", 0)) for g in group)
        out.append(_egress(check, len(out) + 1, first, url, total))
        if len(out) >= MAX_EGRESS:
            return out, False
    return out, True


def attach_egress(
    report: Report, lines: list[dict[str, Any]], *, proxy_ok: bool, bad_lines: int
) -> Report:
    """Return the report with its egress attached and completeness updated."""
    egress, fits = egress_for(report.check, lines)
    observations = list(report.observations)
    complete = report.evidence_complete and fits and proxy_ok
    # model_copy does not validate: a 501st observation would make the report invalid.
    if not proxy_ok and len(observations) < MAX_OBSERVATIONS:
        observations.append(
            Observation(
                id=f"{report.check}:obs:{len(observations) + 1}",
                kind="harness_died",
                detail="the logging proxy was not running at the end of the run; "
                "egress after it died was not seen",
            )
        )
    if bad_lines:
        complete = False
    return report.model_copy(
        update={
            "egress": egress,
            "observations": observations,
            "evidence_complete": complete,
        }
    )


def write_manifest(out: Path, run_id: str, head_sha: str, base_sha: str) -> Path:
    """Write manifest.json with the sha256 of every file in ``out``."""
    files = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"):
        data = path.read_bytes()
        files.append(
            ManifestFile(
                name=str(path.relative_to(out)),
                sha256=hashlib.sha256(data).hexdigest(),
                bytes=len(data),
            )
        )
    manifest = Manifest(run_id=run_id, head_sha=head_sha, base_sha=base_sha, files=files)
    target = out / "manifest.json"
    target.write_text(manifest.model_dump_json(by_alias=True, indent=2))
    return target


def copy_evidence(log: Path, out: Path) -> None:
    """Copy the raw egress log into the bundle, capped."""
    if not log.exists():
        return
    dest = out / "evidence"
    dest.mkdir(exist_ok=True)
    with log.open("rb") as src, (dest / "egress.jsonl").open("wb") as dst:
        shutil.copyfileobj(_Capped(src, MAX_EVIDENCE_LOG), dst)


class _Capped:
    def __init__(self, fh: Any, limit: int) -> None:
        self.fh, self.left = fh, limit

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n < 0 else min(n, self.left)
        data: bytes = self.fh.read(n)
        self.left -= len(data)
        return data


def write_failure(out: Path, failure: Failure) -> None:
    """Write failure.json and the manifest: the run produced no reports, and says why."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "failure.json").write_text(failure.model_dump_json(by_alias=True, indent=2))
    write_manifest(out, failure.run_id, failure.head_sha or "0" * 40, failure.base_sha or "0" * 40)


def report_path(out: Path, check: CheckName) -> Path:
    """Return where a check's report lives in the bundle."""
    return out / f"{check}.json"

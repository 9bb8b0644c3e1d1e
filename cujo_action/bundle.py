"""Bundle a run for upload: attach the proxy's egress to each report, write the manifest.

The proxy's log is read once the proxy has stopped, so every request it saw is in the
bundle. Requests forwarded to a registry are folded into one entry per host and phase
(an ``npm install`` makes hundreds); everything else is kept one by one, what the hard
rules act on first.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from cujo_action.egress import egress_from_record, order_egress
from cujo_action.schema import (
    MAX_EGRESS,
    MAX_OBSERVATIONS,
    REGISTRY_HOSTS,
    CheckName,
    Egress,
    EvidenceSeal,
    Failure,
    Manifest,
    ManifestFile,
    Observation,
    Report,
)

MAX_EVIDENCE_LOG = 8 * 1024 * 1024
_PHASES = {"install", "import", "test", "probe", "smoke"}


def _entry(check: str, n: int, group: list[dict[str, Any]]) -> Egress:
    """Return the report entry of one line, or of lines folded into their first."""
    first = group[0]
    url = str(first.get("url", ""))
    if len(group) > 1:
        url = f"{url} (+{len(group) - 1} more requests to this host)"
    total = sum(int(g.get("bytes_out", 0)) for g in group)
    record = {**first, "url": url, "bytes_out": max(int(first.get("bytes_out", 0)), total)}
    return egress_from_record(record, f"{check}:egress:{n}")


def _fold(
    lines: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]
) -> list[list[dict[str, Any]]]:
    """Return ``lines`` grouped by ``key``, groups in the order of their first line."""
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault(key(line), []).append(line)
    return list(groups.values())


def _alike(line: dict[str, Any]) -> Hashable:
    # Lines the rules cannot tell apart; a decoy-bearing line is never folded.
    if line.get("decoy_seen"):
        return id(line)
    fields = ("phase", "host", "method", "action", "route")
    return tuple(str(line.get(f)) for f in fields)


def egress_for(
    check: str, lines: list[dict[str, Any]], egress_allow: Sequence[str] = ()
) -> tuple[list[Egress], bool]:
    """Return the check's egress entries (forwarded ones folded) and whether all fit.

    Lines are kept in the order the rules care about (``order_egress``): within the cap,
    every line that would make a critical finding goes before the first that would not.
    Over the cap, lines the rules cannot tell apart (same phase, host, method, action
    and route) are folded into one, as forwarded ones always are.
    """
    mine = [ln for ln in lines if ln.get("check") == check and ln.get("phase") in _PHASES]
    kept: list[dict[str, Any]] = []
    forwarded: list[dict[str, Any]] = []
    for line in mine:
        if line.get("action") == "forwarded" and not line.get("decoy_seen"):
            forwarded.append(line)
        else:
            kept.append(line)
    folded = _fold(forwarded, lambda ln: (ln["phase"], str(ln.get("host")), str(ln.get("method"))))
    ordered = order_egress(kept, [*REGISTRY_HOSTS, *egress_allow])
    groups = [[line] for line in ordered]
    if len(groups) + len(folded) > MAX_EGRESS:
        groups = _fold(ordered, _alike)
    entries = [*groups, *folded]
    out = [_entry(check, n, group) for n, group in enumerate(entries[:MAX_EGRESS], start=1)]
    return out, len(entries) <= MAX_EGRESS


def attach_egress(
    report: Report,
    lines: list[dict[str, Any]],
    *,
    proxy_ok: bool,
    bad_lines: int,
    egress_allow: Sequence[str] = (),
) -> Report:
    """Return the report with its egress attached and completeness updated."""
    egress, fits = egress_for(report.check, lines, egress_allow)
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


def write_manifest(
    out: Path, run_id: str, head_sha: str, base_sha: str, evidence: Sequence[EvidenceSeal] = ()
) -> Path:
    """Write manifest.json with the sha256 of every file in ``out`` and the evidence seals."""
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
    manifest = Manifest(
        run_id=run_id,
        head_sha=head_sha,
        base_sha=base_sha,
        files=files,
        evidence=list(evidence),
    )
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


def write_failure(out: Path, failure: Failure, evidence: Sequence[EvidenceSeal] = ()) -> None:
    """Write failure.json and the manifest: the run produced no reports, and says why."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "failure.json").write_text(failure.model_dump_json(by_alias=True, indent=2))
    write_manifest(
        out,
        failure.run_id,
        failure.head_sha or "0" * 40,
        failure.base_sha or "0" * 40,
        evidence,
    )


def report_path(out: Path, check: CheckName) -> Path:
    """Return where a check's report lives in the bundle."""
    return out / f"{check}.json"

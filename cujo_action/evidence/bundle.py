"""Bundle a run for upload: attach the proxy's egress to each report, write the manifest.

The proxy's log is read once the proxy has stopped, so every request it saw is in the
bundle; it is read as a stream into a bounded digest per check (``egressdigest``), so a
flood of requests cannot grow the harness's memory. Requests forwarded to a registry are
folded into one entry per host and phase (an ``npm install`` makes hundreds); everything
else is kept one by one, what the hard rules act on first. Every limit reached on the way
is a cut in the report, and the report is fitted to what the reader accepts
(``reportfit``) once its egress is attached.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cujo_action import limits
from cujo_action.evidence.egressdigest import (
    PHASES,
    CheckEgress,
    Dropped,
    EgressDigest,
    digest_records,
)
from cujo_action.evidence.reader import MAX_EVIDENCE_LOG, EvidenceSeal, Manifest, ManifestFile
from cujo_action.evidence.reportfit import add_cut, fit_report, note_clipped_fields
from cujo_action.schema import (
    MAX_EGRESS,
    MAX_OBSERVATIONS,
    CheckName,
    Egress,
    Failure,
    Observation,
    Report,
)


def fit_egress(
    check: str, lines: Iterable[dict[str, Any]], egress_allow: Sequence[str] = ()
) -> CheckEgress:
    """Return the check's egress entries (forwarded ones folded) and what was left out.

    Lines are kept in the order the rules care about (``order_egress``): within the cap,
    every line that would make a critical finding goes before the first that would not.
    Over the cap, lines the rules cannot tell apart (same phase, host, method, action
    and route) are folded into one, as forwarded ones always are; what is still over is
    dropped from the least telling end. The same as the log's streamed digest makes.
    """
    return digest_records(lines, egress_allow).fit(check)


def egress_for(
    check: str, lines: Iterable[dict[str, Any]], egress_allow: Sequence[str] = ()
) -> tuple[list[Egress], bool]:
    """Return the check's egress entries (``fit_egress``) and whether all fit."""
    entries, dropped = fit_egress(check, lines, egress_allow)
    return entries, not dropped.lines


def _egress_cut(report: Report, dropped: Dropped) -> Report:
    """Return ``report`` with the ``report-egress`` cut for the lines that did not fit.

    It hides danger when a dropped line would have made a finding (its rank is above
    ``RANK_EXPECTED``): the rules never saw it. A line only a registry or ``egress_allow``
    host received is one the rules cannot tell from those kept, and hides nothing.
    """
    phase = dropped.phase
    detail = (
        f"{dropped.lines} requests did not fit the report's {MAX_EGRESS} entries even "
        f"after folding ({dropped.telling} of them would have made a finding); most during "
        f"{phase}"
    )
    if dropped.uncounted_kinds:
        detail += (
            f"; {dropped.uncounted_kinds} of them were only counted, over the "
            f"{limits.EGRESS_DIGEST} kinds of request a check's digest keeps"
        )
    if dropped.uncounted_decoys:
        detail += (
            f", {dropped.uncounted_decoys} of those decoy-bearing or unreadable: more than "
            "the digest holds, the earliest kept"
        )
    return add_cut(
        report,
        "report-egress",
        kept=len(report.egress),
        dropped=dropped.lines,
        phase=phase if phase in PHASES else None,  # type: ignore[arg-type]
        detail=detail,
        hides_danger=dropped.telling > 0,
    )


def attach_egress(
    report: Report,
    egress: EgressDigest,
    *,
    proxy_ok: bool,
    egress_allow: Sequence[str] = (),
) -> Report:
    """Return the report with its egress attached, every limit reached named as a cut,
    and fitted to what the reader accepts (``reportfit.fit_report``).

    ``egress`` is the log's digest (``egressdigest.read_egress``), made with the same
    ``egress_allow``.
    """
    if tuple(egress_allow) != egress.egress_allow:
        raise ValueError("the egress digest was made with another egress_allow")
    entries, dropped = egress.fit(report.check)
    observations = list(report.observations)
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
    report = report.model_copy(update={"egress": entries, "observations": observations})
    if dropped.lines:
        report = _egress_cut(report, dropped)
    if dropped.uncounted_kinds:
        report = add_cut(
            report,
            "egress-digest",
            kept=limits.EGRESS_DIGEST,
            dropped=dropped.uncounted_kinds,
            phase=dropped.phase if dropped.phase in PHASES else None,  # type: ignore[arg-type]
            detail=f"{dropped.uncounted_kinds} requests of the least telling kinds were only "
            f"counted: over the {limits.EGRESS_DIGEST} kinds of request one check's digest of "
            f"the egress log keeps ({dropped.uncounted_decoys} decoy-bearing or unreadable)",
            hides_danger=dropped.uncounted_telling > 0,
        )
    if not proxy_ok:
        report = add_cut(
            report,
            "harness-process",
            dropped=1,
            detail="the logging proxy was not running at the end of the run: what it would "
            "have logged after it died was not seen",
        )
    if egress.bad_lines:
        report = add_cut(
            report,
            "harness-process",
            dropped=egress.bad_lines,
            kept=egress.records,
            detail=f"{egress.bad_lines} lines of the egress log are not whole records (a harness "
            "process cut off while writing): what they held was not read",
        )
    if egress.long_lines:
        report = add_cut(
            report,
            "egress-log-line",
            dropped=egress.long_lines,
            kept=egress.records,
            detail=f"{egress.long_lines} lines of the egress log were over "
            f"{limits.EGRESS_LOG_LINE} bytes and were skipped unread",
        )
    report = note_clipped_fields(report)
    return fit_report(report, expected_hosts=egress_allow)


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

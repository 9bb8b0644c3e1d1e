"""Bundle a run for upload: attach the proxy's egress to each report, write the manifest.

The proxy's log is read once the proxy has stopped, so every request it saw is in the
bundle. Requests forwarded to a registry are folded into one entry per host and phase
(an ``npm install`` makes hundreds); everything else is kept one by one, what the hard
rules act on first. Every limit reached on the way is a cut in the report, and the
report is fitted to what the reader accepts (``reportfit``) once its egress is attached.
"""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from cujo_action import limits
from cujo_action.egress import RANK_EXPECTED, egress_from_record, egress_rank, order_egress
from cujo_action.reportfit import add_cut, fit_report, note_clipped_fields
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

MAX_EVIDENCE_LOG = limits.EGRESS_LOG_COPY
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


class CheckEgress(NamedTuple):
    """A check's egress entries, and the log lines that did not fit ``MAX_EGRESS``."""

    entries: list[Egress]
    dropped: list[dict[str, Any]]


def fit_egress(
    check: str, lines: list[dict[str, Any]], egress_allow: Sequence[str] = ()
) -> CheckEgress:
    """Return the check's egress entries (forwarded ones folded) and the lines left out.

    Lines are kept in the order the rules care about (``order_egress``): within the cap,
    every line that would make a critical finding goes before the first that would not.
    Over the cap, lines the rules cannot tell apart (same phase, host, method, action
    and route) are folded into one, as forwarded ones always are; what is still over is
    dropped from the least telling end.
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
    return CheckEgress(out, [line for group in entries[MAX_EGRESS:] for line in group])


def egress_for(
    check: str, lines: list[dict[str, Any]], egress_allow: Sequence[str] = ()
) -> tuple[list[Egress], bool]:
    """Return the check's egress entries (``fit_egress``) and whether all fit."""
    entries, dropped = fit_egress(check, lines, egress_allow)
    return entries, not dropped


def _egress_cut(report: Report, dropped: list[dict[str, Any]], expected: list[str]) -> Report:
    """Return ``report`` with the ``report-egress`` cut for the lines that did not fit.

    It hides danger when a dropped line would have made a finding (its rank is above
    ``RANK_EXPECTED``): the rules never saw it. A line only a registry or ``egress_allow``
    host received is one the rules cannot tell from those kept, and hides nothing.
    """
    phases = Counter(str(line.get("phase")) for line in dropped)
    phase = phases.most_common(1)[0][0]
    telling = sum(1 for line in dropped if egress_rank(line, expected) < RANK_EXPECTED)
    return add_cut(
        report,
        "report-egress",
        kept=len(report.egress),
        dropped=len(dropped),
        phase=phase if phase in _PHASES else None,  # type: ignore[arg-type]
        detail=f"{len(dropped)} requests did not fit the report's {MAX_EGRESS} entries even "
        f"after folding ({telling} of them would have made a finding); most during {phase}",
        hides_danger=telling > 0,
    )


def attach_egress(
    report: Report,
    lines: list[dict[str, Any]],
    *,
    proxy_ok: bool,
    bad_lines: int,
    egress_allow: Sequence[str] = (),
) -> Report:
    """Return the report with its egress attached, every limit reached named as a cut,
    and fitted to what the reader accepts (``reportfit.fit_report``)."""
    expected = [*REGISTRY_HOSTS, *egress_allow]
    egress, dropped = fit_egress(report.check, lines, egress_allow)
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
    report = report.model_copy(update={"egress": egress, "observations": observations})
    if dropped:
        report = _egress_cut(report, dropped, expected)
    if not proxy_ok:
        report = add_cut(
            report,
            "harness-process",
            dropped=1,
            detail="the logging proxy was not running at the end of the run: what it would "
            "have logged after it died was not seen",
        )
    if bad_lines:
        report = add_cut(
            report,
            "harness-process",
            dropped=bad_lines,
            kept=len(lines),
            detail=f"{bad_lines} lines of the egress log are not whole records (a harness "
            "process cut off while writing): what they held was not read",
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

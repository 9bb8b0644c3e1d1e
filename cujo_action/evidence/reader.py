"""Read a sandbox bundle folder as untrusted input: capped, validated, bound to its run.

The one way into a bundle, for the relay (``app_relay/runs/bundle_intake.py`` unpacks the
artifact and hands the folder here; the tamper reconciliation, the board and the local
review read it here too) and for the harness's own tests. ``read_bundle`` checks the
manifest and every file's hash, the plan, and the reports bound to the run, or the run's
stated failure, each file capped and the whole in total. A report over one of its caps
whose hash matched is read as far as it fits and says so with a cut
(``reportfit.parse_report``); only what cannot be trusted is refused, as a ``BundleError``
that says why.

What the tamper reconciliation compares is read here as well: the job log's tamper record
(the lines ``ledger.py`` prints), the bundle's capped copy of the egress log and the size
its seal gives, and what that copy makes of each report's egress. The manifest's format
is here, the one the bundler writes (``bundle.py``). File I/O only; no network.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from cujo_action import limits
from cujo_action.evidence.egressdigest import read_egress
from cujo_action.evidence.ledger import DIGEST_CHARS, PREFIX, digest, item_digest
from cujo_action.evidence.reportfit import MAX_REPORT_READ, egress_kept_faithfully, parse_report
from cujo_action.schema import (
    ALL_CHECKS,
    RUN_ID_CHARS,
    SHA_HEX,
    DecoyEvent,
    Egress,
    Failure,
    Observation,
    Plan,
    Report,
    ReportError,
    Sha,
    Short,
)

MiB: Final = 1024 * 1024
# The bundle's total as its files are read (the archive's total as it inflates, too).
MAX_BUNDLE_BYTES: Final = 64 * MiB
MAX_SMALL_FILE: Final = MiB  # manifest.json, plan.json, failure.json
# The bundle's copy of the proxy's and resolver's log, capped as the bundler copies it.
EGRESS_COPY: Final = "evidence/egress.jsonl"
MAX_EVIDENCE_LOG: Final = limits.EGRESS_LOG_COPY
MANIFEST_SCHEMA: Final = "cujo.manifest/1"


# --------------------------------------------------------------------------- the manifest


class ManifestFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Short
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    bytes: int = Field(ge=0)


class EvidenceSeal(ManifestFile):
    """An evidence file as the harness hashed it when its writers had stopped."""

    # The harness processes that wrote it (the proxy and the resolver share one log).
    writers: list[Short] = Field(default_factory=list, max_length=8)


class Manifest(BaseModel):
    schema_: Literal["cujo.manifest/1"] = Field(MANIFEST_SCHEMA, alias="schema")
    run_id: Short
    head_sha: Sha
    base_sha: Sha
    files: list[ManifestFile] = Field(max_length=64)
    # The harness's own logs as sealed on the runner; a bundle's copy of one may be
    # capped, so its entry in `files` can differ. Empty in bundles from before seals.
    evidence: list[EvidenceSeal] = Field(default_factory=list, max_length=16)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- the bundle


class BundleError(ValueError):
    """A bundle that cannot be trusted; the message says which file (or zip entry) and why.

    ``entry`` names the archive entry that was refused, when it was one.
    """

    def __init__(self, message: str, *, entry: str | None = None) -> None:
        super().__init__(message)
        self.entry = entry


@dataclass(frozen=True)
class Bundle:
    """A validated bundle: reports bound to the run, or the run's stated failure."""

    run_id: str
    plan: Plan | None
    reports: tuple[Report, ...]
    failure: Failure | None


def _read(path: Path, cap: int) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise BundleError(f"{path.name} is not a regular file")
    size = path.stat().st_size
    if size > cap:
        raise BundleError(f"{path.name} is {size} bytes, over the cap of {cap}")
    return path.read_bytes()


def _safe_name(name: str) -> bool:
    pure = PurePosixPath(name)
    return not pure.is_absolute() and ".." not in pure.parts and bool(pure.parts)


def read_manifest(folder: Path) -> Manifest:
    """Return the bundle's manifest, read within its cap; raise BundleError with why."""
    try:
        return Manifest.model_validate_json(_read(folder / "manifest.json", MAX_SMALL_FILE))
    except ValidationError as exc:
        raise BundleError(f"manifest.json fails validation: {exc.errors()[0]['msg']}") from None
    except OSError as exc:
        raise BundleError(f"manifest.json cannot be read: {exc.strerror}") from None


def read_bundle(
    folder: Path, *, run_id: str, head_sha: str | None = None, base_sha: str | None = None
) -> Bundle:
    """Validate the bundle in ``folder`` for ``run_id`` (and the SHAs, when known)."""
    if not (folder / "manifest.json").exists():
        raise BundleError("manifest.json is missing: the sandbox wrote no bundle")
    manifest = read_manifest(folder)
    if manifest.run_id != run_id:
        raise BundleError(f"manifest.json is for run {manifest.run_id!r}, not {run_id!r}")
    for entry in manifest.files:
        if not _safe_name(entry.name):
            raise BundleError(f"manifest names an unsafe path {entry.name!r}")
    listed = {f.name: f for f in manifest.files}
    present = {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.name != "manifest.json"
    }
    if extra := sorted(present - set(listed)):
        raise BundleError(f"files not in the manifest: {', '.join(extra[:5])}")
    total = 0
    for entry in manifest.files:
        if entry.name not in present:
            raise BundleError(f"{entry.name} is in the manifest but missing")
        data = _read(folder / entry.name, MAX_BUNDLE_BYTES)
        total += len(data)
        if total > MAX_BUNDLE_BYTES:
            raise BundleError(f"the bundle is over the cap of {MAX_BUNDLE_BYTES} bytes")
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise BundleError(f"{entry.name} does not match its sha256 in the manifest")
    if "failure.json" in listed:
        try:
            failure = Failure.model_validate_json(_read(folder / "failure.json", MAX_SMALL_FILE))
        except ValidationError as exc:
            raise BundleError(f"failure.json fails validation: {exc.errors()[0]['msg']}") from None
        if failure.run_id != run_id:
            raise BundleError(f"failure.json is for run {failure.run_id!r}, not {run_id!r}")
        return Bundle(run_id=run_id, plan=None, reports=(), failure=failure)
    try:
        plan = Plan.model_validate_json(_read(folder / "plan.json", MAX_SMALL_FILE))
    except ValidationError as exc:
        raise BundleError(f"plan.json fails validation: {exc.errors()[0]['msg']}") from None
    except BundleError:
        raise
    except OSError:
        raise BundleError("plan.json is missing") from None
    head = head_sha or plan.head_sha
    base = base_sha or plan.base_sha
    if (plan.run_id, plan.head_sha, plan.base_sha) != (run_id, head, base):
        raise BundleError("plan.json is not bound to this run (run id or commits differ)")
    if plan.policy_from != base:
        raise BundleError("plan.json read its policy from a commit other than base")
    reports = []
    # The head's checks, and the base's run beside them (reference for what head adds).
    for check in ALL_CHECKS:
        name = f"{check}.json"
        if name not in listed:
            continue
        try:
            # Over its budget it is still read (it matched its hash): as far as it fits,
            # with a cut saying what was not (cujo_action/evidence/reportfit.py).
            report = parse_report(
                _read(folder / name, MAX_REPORT_READ),
                run_id=run_id,
                head_sha=head,
                base_sha=base,
            )
        except ReportError as exc:
            raise BundleError(f"{name}: {exc}") from None
        if report.check != check:
            raise BundleError(f"{name} holds the report of check {report.check!r}")
        reports.append(report)
    return Bundle(run_id=run_id, plan=plan, reports=tuple(reports), failure=None)


# --------------------------------------------------------------------------- the record

_HEX = rf"[0-9a-f]{{{DIGEST_CHARS}}}"
_WORD = r"[a-z_-]{1,40}"
# The runner prefixes each line of a job's log with its time (and the text a step printed
# may carry a BOM or \r); anything else before the prefix means it is not our line.
_STAMP = r"(?:\ufeff)?(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z )?"
_LINE = re.compile(
    rf"^{_STAMP}{PREFIX} (?P<run>{RUN_ID_CHARS}) (?P<kind>begin|egress|item|end) "
    r"(?P<rest>[^\r\n]*?)\r?$"
)
_BEGIN = re.compile(rf"^(?P<head>{SHA_HEX}) (?P<base>{SHA_HEX})$")
_EGRESS = re.compile(
    rf"^(?P<offset>\d{{1,12}}) (?P<length>\d{{1,9}}) (?P<digest>{_HEX}) "
    rf"(?P<check>{_WORD}) (?P<route>{_WORD}) (?P<action>{_WORD}) (?P<host>\S{{1,80}})"
    r"(?P<decoy> decoy)?$"
)
_ITEM = re.compile(
    rf"^(?P<id>[a-z]+:(?:decoy|obs):[1-9][0-9]{{0,5}}) (?P<digest>{_HEX}) (?P<what>\S{{1,80}})$"
)
_END = re.compile(r"^(?P<bytes>\d{1,12})$")


@dataclass(frozen=True)
class EgressLine:
    """A line of the egress log as the job's log names it."""

    offset: int
    length: int
    digest: str
    check: str
    host: str
    decoy: bool


@dataclass(frozen=True)
class ItemLine:
    """A decoy event or an observation as the job's log names it."""

    evidence_id: str
    digest: str
    what: str


@dataclass
class Record:
    """What a job's log says one run's harness saw."""

    run_id: str
    begun: bool = False
    head_sha: str | None = None
    base_sha: str | None = None
    egress: list[EgressLine] = field(default_factory=list)
    items: list[ItemLine] = field(default_factory=list)
    ended: bool = False
    egress_bytes: int | None = None
    # Lines that start like ours, for this run, but do not parse: said on the run page.
    malformed: int = 0

    @property
    def events(self) -> int:
        """Return how many evidence events the log names."""
        return len(self.egress) + len(self.items)


def read_record(log: str, run_id: str) -> Record:
    """Return what ``log`` (a job's log, or the harness's stderr) records for ``run_id``.

    Lines of other runs and every other line are ignored; the same line twice counts once.
    """
    record = Record(run_id=run_id)
    seen: set[str] = set()
    for raw in log.splitlines():
        if PREFIX not in raw:
            continue
        m = _LINE.match(raw)
        if m is None or m["run"] != run_id:
            continue
        kind, rest = m["kind"], m["rest"]
        if (key := f"{kind} {rest}") in seen:
            continue
        seen.add(key)
        if not _take(record, kind, rest):
            record.malformed += 1
    return record


def _take(record: Record, kind: str, rest: str) -> bool:
    if kind == "begin":
        if (b := _BEGIN.match(rest)) is None:
            return False
        record.begun, record.head_sha, record.base_sha = True, b["head"], b["base"]
    elif kind == "egress":
        if (e := _EGRESS.match(rest)) is None:
            return False
        record.egress.append(
            EgressLine(
                offset=int(e["offset"]),
                length=int(e["length"]),
                digest=e["digest"],
                check=e["check"],
                host=e["host"],
                decoy=e["decoy"] is not None,
            )
        )
    elif kind == "item":
        if (i := _ITEM.match(rest)) is None:
            return False
        record.items.append(ItemLine(i["id"], i["digest"], i["what"]))
    else:
        if (n := _END.match(rest)) is None:
            return False
        record.ended, record.egress_bytes = True, int(n["bytes"])
    return True


# --------------------------------------------------------------------------- the egress copy


@dataclass(frozen=True)
class EgressCopy:
    """The bundle's copy of the egress log, and the log's size as the harness sealed it."""

    data: bytes | None  # None: the bundle holds no copy
    sealed: int | None  # None: no seal says (a bundle from before seals)

    @property
    def capped(self) -> bool:
        """Return whether the copy reached its cap: the harness read more than it holds."""
        return len(self.data or b"") >= MAX_EVIDENCE_LOG


def read_egress_copy(folder: Path) -> EgressCopy:
    """Return the copy of the egress log in the bundle ``read_bundle`` checked in ``folder``,
    and the size the manifest's seal gives the log."""
    path = folder / EGRESS_COPY
    data = _read(path, MAX_BUNDLE_BYTES) if path.is_file() and not path.is_symlink() else None
    return EgressCopy(data, _sealed_bytes(folder))


def _sealed_bytes(folder: Path) -> int | None:
    try:
        manifest = read_manifest(folder)
    except BundleError:
        return None
    sizes = [s.bytes for s in manifest.evidence if s.name.endswith("egress.jsonl")]
    return sizes[0] if sizes else None


def held_lines(copy: EgressCopy) -> set[str]:
    """Return the digest of each line of the copy, as the record names a line it saw."""
    return {digest(line) for line in (copy.data or b"").splitlines(keepends=True)}


def holds_as_recorded(item: DecoyEvent | Observation, line: ItemLine) -> bool:
    """Return whether a report holds ``item`` as the record's ``line`` names it."""
    return item_digest(item) == line.digest


def egress_as_logged(
    data: bytes, egress_allow: Sequence[str], checks: Iterable[str]
) -> dict[str, list[Egress]]:
    """Return each check's report egress as the harness makes it of the log ``data``
    (the same streamed digest, ``egressdigest.read_egress``)."""
    egress = read_egress(io.BytesIO(data), egress_allow)
    return {check: egress.fit(check).entries for check in checks}


def egress_faithful(expected: Sequence[Egress], report: Report) -> bool:
    """Return whether the report's egress is what the log makes of it, less only what
    fitting the report to its budget may leave out (``reportfit.fit_report``): requests
    that carried no decoy, each left out whole, and said by a ``report-bytes`` cut."""
    if _dump(expected) == _dump(report.egress):
        return True
    trimmed = any(cut.limit == "report-bytes" for cut in report.cuts)
    return trimmed and egress_kept_faithfully(expected, report.egress)


def _dump(items: Sequence[BaseModel]) -> list[object]:
    return [json.loads(item.model_dump_json()) for item in items]

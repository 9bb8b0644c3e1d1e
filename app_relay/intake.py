"""Take in a sandbox bundle as untrusted input: manifest, hashes, reports bound to the run.

Whatever the bundle holds, the answer is a ``Bundle`` of validated models or a
``BundleError`` that says why; the caller turns the error into an ``error`` run, never
``clean``. Reading is capped file by file and in total.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from cujo_action.schema import (
    CHECK_NAMES,
    MAX_REPORT_BYTES,
    Failure,
    Manifest,
    Plan,
    Report,
    ReportError,
    parse_report,
)

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_SMALL_FILE = 1024 * 1024


class BundleError(ValueError):
    """A bundle that cannot be trusted; the message says which file and why."""


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


def read_bundle(
    folder: Path, *, run_id: str, head_sha: str | None = None, base_sha: str | None = None
) -> Bundle:
    """Validate the bundle in ``folder`` for ``run_id`` (and the SHAs, when known)."""
    if not (folder / "manifest.json").exists():
        raise BundleError("manifest.json is missing: the sandbox wrote no bundle")
    try:
        manifest = Manifest.model_validate_json(_read(folder / "manifest.json", MAX_SMALL_FILE))
    except ValidationError as exc:
        raise BundleError(f"manifest.json fails validation: {exc.errors()[0]['msg']}") from None
    except OSError as exc:
        raise BundleError(f"manifest.json cannot be read: {exc.strerror}") from None
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
    for check in CHECK_NAMES:
        name = f"{check}.json"
        if name not in listed:
            continue
        try:
            report = parse_report(
                _read(folder / name, MAX_REPORT_BYTES),
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

"""Audit the CI files of base and head with zizmor, offline; keep what head introduces.

zizmor (https://docs.zizmor.sh) is run on copies of the files written from git objects
into a folder of the harness's own, with ``--offline`` (no audit that asks GitHub),
``--no-config`` and ``--no-ignores`` (a pull request's ``zizmor.yml`` or ``# zizmor:
ignore`` comment silences nothing), its regular persona, and no token in its
environment. A finding is the pull request's when head has it and base does not,
compared by audit id, file and location: the route to the finding (``jobs.build.steps``
…) with each step named as ``workflow/parse.py`` names it, so a line that moved is the same
finding. The hard rules never rest on these findings (``workflow/audit.py`` reads the YAML
itself): they are evidence beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from cujo_action.limits import WORKFLOW_AUDIT_OUTPUT, LimitId
from cujo_action.workflow.parse import ACTION_JOB, Workflow

ARGS = (
    "--offline",
    "--no-config",
    "--no-ignores",
    "--no-exit-codes",
    "--no-progress",
    "--persona=regular",
    "--collect=workflows,actions,dependabot",
    "--format=json-v1",
)


class AuditError(RuntimeError):
    """zizmor could not audit a commit's files; the message says why, ``limit`` which cap."""

    def __init__(self, message: str, limit: LimitId = "workflow-audit") -> None:
        super().__init__(message)
        self.limit: LimitId = limit


@dataclass(frozen=True)
class AuditFinding:
    """One zizmor finding: audit id, file, line, severity, confidence, and what it says."""

    audit: str
    path: str
    line: int
    severity: str
    confidence: str
    says: str
    key: tuple[str, ...]

    def detail(self) -> str:
        """Return the finding as the report states it."""
        return (
            f"zizmor `{self.audit}` (severity {self.severity}, confidence {self.confidence}) "
            f"in {self.path} line {self.line}: {self.says}"
        )


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def zizmor_binary() -> str | None:
    """Return the binary of the zizmor wheel the harness imports beside (where its record
    puts it), else the one beside the harness's Python, else on PATH, else None."""
    try:
        dist = metadata.distribution("zizmor")
    except metadata.PackageNotFoundError:
        dist = None
    for entry in (dist.files or []) if dist is not None else []:
        if entry.name == "zizmor" and "bin" in entry.parts:
            found = Path(str(dist.locate_file(entry))).resolve()  # type: ignore[union-attr]
            if _executable(found):
                return str(found)
    beside = Path(sysconfig.get_path("scripts")) / "zizmor"
    if _executable(beside):
        return str(beside)
    return shutil.which("zizmor")


def _env(home: str) -> dict[str, str]:
    # No token of any kind: offline, and nothing to send if it were not.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "NO_COLOR": "1"}


def version(binary: str) -> str:
    """Return what ``zizmor --version`` says (``zizmor 1.33.1``), or raise AuditError."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False,
            env=_env(tempfile.gettempdir()),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AuditError(f"zizmor could not be started: {exc}") from None
    if done.returncode != 0:
        raise AuditError(f"zizmor --version exited {done.returncode}")
    return done.stdout.strip()


def write_files(folder: Path, texts: Mapping[str, str]) -> None:
    """Write each text at its repository path under ``folder`` (a fresh folder of ours)."""
    for path, text in texts.items():
        rel = PurePosixPath(path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            continue
        dest = folder.joinpath(*rel.parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")


def audit(binary: str, texts: Mapping[str, str], timeout: float) -> list[dict[str, Any]]:
    """Return zizmor's raw findings on ``texts`` (path → text), or raise AuditError."""
    with tempfile.TemporaryDirectory(prefix="audit-") as scratch:
        root = Path(scratch) / "repo"
        root.mkdir()
        write_files(root, texts)
        try:
            done = subprocess.run(
                [binary, *ARGS, "."], cwd=root, capture_output=True, timeout=timeout,
                check=False, stdin=subprocess.DEVNULL, env=_env(scratch),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AuditError(f"zizmor did not finish within {timeout:.0f}s") from None
        except OSError as exc:
            raise AuditError(f"zizmor could not be started: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise AuditError(f"zizmor exited {done.returncode}: {said[0][:300]}")
    if len(done.stdout) > WORKFLOW_AUDIT_OUTPUT:
        raise AuditError(
            f"zizmor wrote over {WORKFLOW_AUDIT_OUTPUT} bytes of findings", "workflow-audit-output"
        )
    try:
        raw = json.loads(done.stdout or b"[]")
    except ValueError:
        raise AuditError("zizmor's output is not JSON") from None
    if not isinstance(raw, list):
        raise AuditError("zizmor's output is not a list of findings")
    return [f for f in raw if isinstance(f, dict)]


def _route(parts: list[Any], workflow: Workflow | None) -> str:
    """Return the route as names: ``jobs/build/steps/<step ident>/run``."""
    names: list[str] = []
    job = ACTION_JOB if workflow is not None and workflow.kind == "action" else ""
    for n, part in enumerate(parts):
        if not isinstance(part, dict) or len(part) != 1:
            continue
        ((kind, value),) = part.items()
        if kind == "Key":
            if n > 0 and names[-1:] == ["jobs"]:
                job = str(value)
            names.append(str(value))
        elif kind == "Index":
            step = None
            if workflow is not None and names[-1:] == ["steps"] and isinstance(value, int):
                found = workflow.job(job)
                if found is not None and 0 <= value < len(found.steps):
                    step = found.steps[value].ident
            names.append(step if step is not None else f"[{value}]")
    return "/".join(names)


def findings(raw: list[dict[str, Any]], workflows: Mapping[str, Workflow]) -> list[AuditFinding]:
    """Return zizmor's findings as ``AuditFinding``s, each keyed by names, not lines."""
    found = []
    for item in raw:
        primary = next(
            (
                loc
                for loc in item.get("locations", [])
                if isinstance(loc, dict) and loc.get("symbolic", {}).get("kind") == "Primary"
            ),
            None,
        )
        if primary is None:
            continue
        symbolic, concrete = primary.get("symbolic", {}), primary.get("concrete", {})
        key = symbolic.get("key", {})
        local = key.get("Local", {}) if isinstance(key, dict) else {}
        path = str(local.get("verbatim_path", "")).removeprefix("./")
        route = symbolic.get("route", {}).get("route", [])
        row = concrete.get("location", {}).get("start_point", {}).get("row", 0)
        determinations = item.get("determinations", {})
        audit_id = str(item.get("ident", "?"))
        annotation = str(symbolic.get("annotation", ""))
        found.append(
            AuditFinding(
                audit=audit_id,
                path=path,
                line=int(row) + 1 if isinstance(row, int) else 1,
                severity=str(determinations.get("severity", "?")),
                confidence=str(determinations.get("confidence", "?")),
                says=f"{item.get('desc', '')}: {annotation}".strip(": "),
                key=(audit_id, path, _route(route, workflows.get(path)), annotation),
            )
        )
    return found


def introduced(base: list[AuditFinding], head: list[AuditFinding]) -> list[AuditFinding]:
    """Return head's findings that base does not have (by key), most severe first."""
    known = {f.key for f in base}
    order = {"High": 0, "Medium": 1, "Low": 2, "Informational": 3}
    new = [f for f in head if f.key not in known]
    return sorted(new, key=lambda f: (order.get(f.severity, 4), f.path, f.line))

"""Probe the changed code: import each changed module, run changed entry points with --help.

First, without running anything, name each added line that compares the clock with a
fixed date (``dategates.py``): a payload waiting for a date would not fire here.
"""

from __future__ import annotations

import json
import shlex
import time
import tomllib
from pathlib import Path, PurePosixPath

from cujo_action import limits
from cujo_action.checks import dategates
from cujo_action.checks.harness import CheckRun, check_main
from cujo_action.schema import DATE_GATE, Plan, Report, clip

MAX_PROBES = limits.PROBE_COUNT
PROBE_TIMEOUT = 60.0


def _module_name(rel: str, head: Path) -> str | None:
    """Return the dotted module of a changed .py file when it is importable, else None."""
    path = PurePosixPath(rel)
    if path.suffix != ".py" or path.name.startswith("test_") or "tests" in path.parts:
        return None
    parts = list(path.with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
        base = head / "src"
    else:
        base = head
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or parts[-1] in {"setup", "conftest", "__main__"}:
        return None
    # Every enclosing directory must be a package, or the name does not import.
    for depth in range(1, len(parts)):
        if not (base.joinpath(*parts[:depth]) / "__init__.py").exists():
            return None
    if not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def changed_modules(plan: Plan) -> list[str]:
    """Return the dotted modules of the changed .py files that import by that name."""
    head = Path(plan.head_dir)
    return sorted({m for rel in set(plan.changed_files) if (m := _module_name(rel, head))})


def _scripts(head: Path) -> dict[str, str]:
    try:
        data = tomllib.loads((head / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    scripts = data.get("project", {}).get("scripts", {})
    return {k: v for k, v in scripts.items() if isinstance(k, str) and isinstance(v, str)}


def probe_commands(plan: Plan) -> list[tuple[str, str]]:
    """Return (command, what it probes) for the changed code, deterministic (the check runs
    the first ``MAX_PROBES``)."""
    head = Path(plan.head_dir)
    probes: list[tuple[str, str]] = []
    changed = sorted(set(plan.changed_files))
    if plan.ecosystem == "python":
        modules = changed_modules(plan)
        for module in modules:
            code = f"import importlib; importlib.import_module({module!r})"
            probes.append((f"python -c {shlex.quote(code)}", f"import {module}"))
        for name, target in sorted(_scripts(head).items()):
            module = target.split(":")[0]
            if "pyproject.toml" in changed or module in modules:
                probes.append((f"{shlex.quote(name)} --help", f"entry point {name}"))
    elif plan.ecosystem == "node":
        for rel in changed:
            if PurePosixPath(rel).suffix in {".js", ".cjs", ".mjs"} and (head / rel).is_file():
                probes.append((f"node --check {shlex.quote(rel)}", f"syntax of {rel}"))
        try:
            manifest = json.loads((head / "package.json").read_text())
            bins = manifest.get("bin") if isinstance(manifest, dict) else None
        except (OSError, ValueError):
            bins = None
        if isinstance(bins, dict) and "package.json" in changed:
            for name, rel in sorted(bins.items()):
                if isinstance(rel, str) and (head / rel).is_file():
                    probes.append((f"node {shlex.quote(rel)} --help", f"bin {name}"))
    return probes


def observe_date_gates(run: CheckRun) -> None:
    """Name each added line that compares the clock with a fixed date (``dategates.py``)."""
    plan = run.plan
    found, unread = dategates.scan(Path(plan.head_dir), Path(plan.base_dir), plan.changed_files)
    for gate in found:
        run.observe(
            DATE_GATE,
            f"{gate.path}:{gate.line} compares the clock with a fixed date: "
            f"`{clip(gate.text, 200)}`",
            path=gate.path,
            line=gate.line,
        )
    for part in unread:
        run.cut(
            "date-gate-read",
            dropped=part.size - limits.DATE_GATE_READ,
            kept=limits.DATE_GATE_READ,
            detail=f"{part.path} searched for date gates in its first "
            f"{limits.DATE_GATE_READ} bytes of {part.size}",
        )


def body(run: CheckRun) -> Report:
    """Run each probe with its own timeout inside the check's overall budget."""
    plan = run.plan
    observe_date_gates(run)
    if plan.ecosystem == "unknown":
        return run.finish("skipped", f"nothing to probe: {plan.unproven_reason}")
    probes = probe_commands(plan)
    if len(probes) > MAX_PROBES:
        run.cut(
            "probe-count",
            dropped=len(probes) - MAX_PROBES,
            kept=MAX_PROBES,
            phase="probe",
            detail=f"{len(probes)} probes of the changed code; the first {MAX_PROBES} ran",
        )
        probes = probes[:MAX_PROBES]
    if not probes:
        run.observe("nothing_to_probe", "no changed module or entry point to probe")
        return run.finish("ok", "no changed module or entry point to probe")
    run.receive_install()
    venv = run.venv if plan.ecosystem == "python" else None
    budget_end = time.monotonic() + plan.policy.timeouts.probes
    failed = []
    for cmd, what in probes:
        left = budget_end - time.monotonic()
        if left <= 1:
            run.observe("probes_out_of_time", f"the probe budget ran out before `{what}`")
            return run.finish("failed", "the probes ran out of time")
        outcome = run.run(
            cmd,
            phase="probe",
            timeout=min(PROBE_TIMEOUT, left),
            cwd=run.src,
            venv=venv,
        )
        if outcome.exit_code != 0:
            failed.append(what)
            run.observe("probe_failed", f"{what}: `{cmd}` exited {outcome.exit_code}")
    if failed:
        return run.finish(
            "failed", f"{len(failed)}/{len(probes)} probes failed: " + "; ".join(failed)
        )
    return run.finish("ok", f"{len(probes)} probes passed: " + "; ".join(w for _c, w in probes))


if __name__ == "__main__":
    raise SystemExit(check_main("probes", body))

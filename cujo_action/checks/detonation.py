"""Install the head's dependencies into a throwaway environment, then import them.

Detonation needs nothing the repository's install produces: it starts first, with a copy
of the head staged for it before any pull-request code ran, installs it (running its build
scripts), then imports every top-level module the install put in place, each in its own
process, watching what they do.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from cujo_action import limits
from cujo_action.checks.harness import CheckRun, check_main
from cujo_action.sandbox.jail import Outcome
from cujo_action.schema import Report

MAX_IMPORTS = limits.DETONATION_IMPORTS
IMPORT_TIMEOUT = 60.0
MAX_SEED = 200  # distributions a new venv holds of its own, at most
_SKIP = {"pip", "setuptools", "wheel", "pkg_resources", "_distutils_hack", "_virtualenv"}

# Runs with the detonation venv's interpreter, twice. Before the install (no argument):
# the distributions the new venv holds of its own (pip, setuptools), as name==version. After
# it (that list as its argument): the top-level modules of every other distribution, each
# name only when its RECORD ships it. Debian's setuptools, for one, names a module
# ``debian`` in its top_level.txt that it does not ship.
LISTER = (
    """
import importlib.metadata as m, json, sys
skip = set(%r)
dists = [d for d in m.distributions(path=[p for p in sys.path if p.startswith(sys.prefix)])]
def key(dist):
    return "%s==%s" % (dist.metadata["Name"] or "", dist.version)
if len(sys.argv) < 2:
    print("CUJO-DISTS " + json.dumps(sorted({key(d) for d in dists})[:%n]))
    raise SystemExit(0)
before = set(json.loads(sys.argv[1]))
mods = set()
def shipped(files):
    found = set()
    for f in files:
        top = f.parts[0]
        if len(f.parts) > 1 and not top.endswith((".dist-info", ".egg-info", ".data")):
            found.add(top)
        elif len(f.parts) == 1 and top.endswith((".py", ".so", ".pyd")):
            found.add(top.split(".")[0])
    return found
for dist in dists:
    if key(dist) in before:
        continue
    text = dist.read_text("top_level.txt")
    names = text.split() if text else []
    # Only a RECORD lists what was installed: an egg-info's files are its SOURCES.txt.
    files = dist.files if dist.read_text("RECORD") is not None else None
    if files is not None:
        ships = shipped(files)
        names = [n for n in names if n in ships]
    if not names:
        for f in files or []:
            parts = f.parts
            if len(parts) == 1 and parts[0].endswith(".py"):
                names.append(parts[0][:-3])
            elif len(parts) > 1 and parts[1] == "__init__.py":
                names.append(parts[0])
    mods.update(n for n in names if n.isidentifier() and n not in skip)
# At most MAX_IMPORTS names (the line must fit the output tail the report keeps), and
# how many there were.
print("CUJO-MODULES " + json.dumps({"names": sorted(mods)[:%d], "total": len(mods)}))
""".replace("%r", repr(sorted(_SKIP)))
    .replace("%d", str(MAX_IMPORTS))
    .replace("%n", str(MAX_SEED))
)


def python_install_command(build_files: list[str]) -> str:
    """Return the detonation install for a Python head (non-editable: build scripts run).

    It runs in the head's checkout (with its ``.git``, so a version taken from git is
    found, as in the repository's own CI).
    """
    if any(f in build_files for f in ("pyproject.toml", "setup.py", "setup.cfg")):
        return "python -m pip install ."
    reqs = [f for f in build_files if f.startswith("requirements") and f.endswith(".txt")]
    return " && ".join(f"python -m pip install -r {shlex.quote(r)}" for r in reqs)


def parse_modules(stdout: str) -> tuple[list[str], int]:
    """Return the module names the lister printed and how many it found (untrusted:
    validated and capped)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("CUJO-MODULES "):
            try:
                said = json.loads(line.removeprefix("CUJO-MODULES "))
            except ValueError:
                return [], 0
            names = said.get("names") if isinstance(said, dict) else None
            if isinstance(names, list):
                kept = [n for n in names if isinstance(n, str) and n.isidentifier()]
                total = said.get("total")
                count = total if isinstance(total, int) and total >= len(kept) else len(kept)
                return kept[:MAX_IMPORTS], count
    return [], 0


def _imports_cut(run: CheckRun, found: int, what: str) -> None:
    """Name the imports left out past MAX_IMPORTS (limits.py: detonation-imports)."""
    if found > MAX_IMPORTS:
        run.cut(
            "detonation-imports",
            dropped=found - MAX_IMPORTS,
            kept=MAX_IMPORTS,
            phase="import",
            detail=f"{found} {what}; the first {MAX_IMPORTS} by name were imported",
        )


def parse_seed(stdout: str) -> list[str]:
    """Return the distributions the lister found in the new venv (validated and capped)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("CUJO-DISTS "):
            try:
                said = json.loads(line.removeprefix("CUJO-DISTS "))
            except ValueError:
                return []
            if isinstance(said, list):
                return [d for d in said if isinstance(d, str) and len(d) < 200][:MAX_SEED]
    return []


def _run_python(run: CheckRun, code: str, venv: str, *args: str) -> Outcome:
    """Run ``python -c code args`` with the venv's interpreter, in the import phase."""
    # Imports run from the scratch folder (under bubblewrap, each command's own empty
    # /tmp): only installed code loads.
    return run.run(
        shlex.join(["python", "-c", code, *args]),
        phase="import",
        timeout=IMPORT_TIMEOUT,
        cwd=run.scratch,
        venv=venv,
    )


def _python(run: CheckRun) -> Report:
    plan = run.plan
    venv = run.venv
    run.make_venv(venv)
    install = python_install_command(plan.build_files)
    if not install:
        return run.finish("skipped", "no Python build or requirements file to detonate")
    # What the new venv holds before any pull-request code runs in it is not the project's.
    seed = parse_seed(_run_python(run, LISTER, venv).stdout_tail)
    outcome = run.run(
        install, phase="install", timeout=plan.policy.timeouts.install, cwd=run.src, venv=venv
    )
    if outcome.exit_code != 0:
        why = "timed out" if outcome.timed_out else f"failed (exit {outcome.exit_code})"
        return run.finish("failed", f"the detonation install {why}")
    listing = _run_python(run, LISTER, venv, json.dumps(seed))
    modules, found = parse_modules(listing.stdout_tail)
    _imports_cut(run, found, "installed top-level modules")
    failed = []
    for module in modules:
        result = _run_python(run, "import " + module, venv)
        if result.exit_code != 0:
            failed.append(module)
    if not modules:
        run.observe("no_modules", "the install put no importable top-level module in place")
    summary = f"installed and imported {len(modules) - len(failed)}/{len(modules)} modules"
    if failed:
        run.observe("import_failed", "modules that failed to import: " + ", ".join(failed))
    return run.finish("ok", summary)


def _node(run: CheckRun) -> Report:
    plan = run.plan
    if shutil.which("npm") is None:
        # The PATH prepare settled with: when it has no npm, the plan says the Node side
        # cannot run, and detonation must not claim otherwise with an npm found elsewhere.
        return run.finish("skipped", "nothing to detonate: npm is not on PATH")
    # Read from the pristine checkout only root has written, never from the sandbox's copy.
    head = Path(plan.head_dir)
    try:
        manifest = json.loads((head / "package.json").read_text())
    except (OSError, ValueError) as exc:
        return run.finish("failed", f"package.json at head cannot be read: {exc}")
    cmd = "npm ci" if (head / "package-lock.json").exists() else "npm install"
    outcome = run.run(
        f"{cmd} --no-audit --no-fund",
        phase="install",
        timeout=plan.policy.timeouts.install,
        cwd=run.src,
    )
    if outcome.exit_code != 0:
        why = "timed out" if outcome.timed_out else f"failed (exit {outcome.exit_code})"
        return run.finish("failed", f"the detonation install {why}")
    deps = manifest.get("dependencies") if isinstance(manifest, dict) else None
    every = [n for n in (deps or {}) if isinstance(n, str)]
    _imports_cut(run, len(every), "dependencies")
    names = every[:MAX_IMPORTS]
    for name in names:
        run.run(
            f"node -e {shlex.quote(f'require({json.dumps(name)})')}",
            phase="import",
            timeout=IMPORT_TIMEOUT,
            cwd=run.src,
        )
    return run.finish("ok", f"installed and required {len(names)} dependencies")


def body(run: CheckRun) -> Report:
    """Copy the head, install it into its own environment, import what it installed."""
    plan = run.plan
    if plan.ecosystem == "unknown":
        return run.finish("skipped", f"nothing to detonate: {plan.unproven_reason}")
    # Its copy of the head was staged by arm, before any pull-request code ran.
    return _node(run) if plan.ecosystem == "node" else _python(run)


if __name__ == "__main__":
    raise SystemExit(check_main("detonation", body))

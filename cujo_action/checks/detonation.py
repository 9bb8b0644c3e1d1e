"""Install the head's dependencies into a throwaway environment, then import them.

Detonation needs nothing the repository's install produces: it starts first, with a copy
of the head staged for it before any pull-request code ran, installs it (running its build
scripts), then imports what the install put in place, each in its own process, watching
what they do: the changed modules first (named from the plan, not from anything the
install printed) and the project's own distribution's modules, all of them up to
``MAX_OWN`` (past it, what is left out may be the danger: ``detonation-own-imports``, the
check is unproven); then the dependencies' by name, up to ``MAX_IMPORTS`` (past it,
named).
Each import runs as a program would: a script file, started by its path, in the
project's working folder (a payload that stays quiet under ``python -c`` in an empty
folder fires there too); only installed code loads (the script's folder is sys.path[0]).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cujo_action import limits
from cujo_action.checks.harness import CheckRun, check_main
from cujo_action.checks.probes import changed_modules
from cujo_action.sandbox.jail import Outcome
from cujo_action.schema import Report

MAX_IMPORTS = limits.DETONATION_IMPORTS
MAX_OWN = limits.DETONATION_OWN_IMPORTS
MAX_LISTED = limits.CHECKOUT_ENTRIES_READ
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
# The top-level names the project's own checkout holds (given by the harness).
ours = set(json.loads(sys.argv[2])) if len(sys.argv) > 2 else set()
mods, own = set(), set()
def local(dist):
    # pip writes direct_url.json with dir_info for a distribution built from a folder:
    # the project's own (`pip install .`), not one fetched from an index.
    try:
        said = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return isinstance(said, dict) and "dir_info" in said
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
    names = [n for n in names if n.isidentifier() and n not in skip]
    mods.update(names)
    own.update(n for n in names if local(dist) or n in ours)
# At most MAX_IMPORTS names of each kind (the line must fit the output tail the report
# keeps), and how many there were.
print("CUJO-MODULES " + json.dumps({"own": sorted(own)[:%o], "names": sorted(mods - own)[:%d],
                                    "total": len(mods), "own_total": len(own)}))
""".replace("%r", repr(sorted(_SKIP)))
    .replace("%d", str(MAX_IMPORTS))
    .replace("%o", str(MAX_OWN))
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


@dataclass(frozen=True)
class Listed:
    """What the lister printed (untrusted: validated and capped)."""

    own: list[str] = field(default_factory=list)  # the project's own distribution's
    others: list[str] = field(default_factory=list)
    total: int = 0  # every top-level module it found
    own_total: int = 0


def _names(value: object, cap: int) -> list[str]:
    if not isinstance(value, list):
        return []
    return [n for n in value if isinstance(n, str) and n.isidentifier()][:cap]


def _count(value: object, at_least: int) -> int:
    return value if isinstance(value, int) and value >= at_least else at_least


def parse_modules(stdout: str) -> Listed:
    """Return the modules the lister printed, own and others, and how many it found."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("CUJO-MODULES "):
            try:
                said = json.loads(line.removeprefix("CUJO-MODULES "))
            except ValueError:
                return Listed()
            if not isinstance(said, dict):
                return Listed()
            own = _names(said.get("own"), MAX_OWN)
            others = [n for n in _names(said.get("names"), MAX_IMPORTS) if n not in own]
            own_total = _count(said.get("own_total"), len(own))
            total = _count(said.get("total"), own_total + len(others))
            return Listed(own, others, total, own_total)
    return Listed()


def import_order(changed: list[str], listed: Listed) -> tuple[list[str], list[str], int]:
    """Return the modules to import: the changed and the project's own (at most
    ``MAX_OWN``), then the dependencies' (at most ``MAX_IMPORTS``); the changed or own ones
    left out; and how many of the dependencies' are left out."""
    first = list(dict.fromkeys([*changed, *listed.own]))
    left_out = first[MAX_OWN:]
    if listed.own_total > len(listed.own):
        left_out.append(f"{listed.own_total - len(listed.own)} more of the project's own")
    others = [m for m in listed.others if m not in first][:MAX_IMPORTS]
    others_total = listed.total - listed.own_total
    return [*first[:MAX_OWN], *others], left_out, max(0, others_total - len(others))


def _imports_cut(run: CheckRun, found: int, what: str) -> None:
    """Name the imports left out past MAX_IMPORTS (limits.py: detonation-imports)."""
    if found > MAX_IMPORTS:
        run.cut(
            "detonation-imports",
            dropped=found - MAX_IMPORTS,
            kept=MAX_IMPORTS,
            phase="import",
            detail=f"{found} {what}; the first {MAX_IMPORTS} were imported",
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


def checkout_names(head: Path) -> tuple[list[str], bool]:
    """Return the top-level modules and packages the pristine checkout holds (at its root
    and under ``src/``), by name: those installed are the project's own; and whether a
    folder had more entries than ``MAX_LISTED`` (the rest unread)."""
    names, cut = set(), False
    for folder in (head, head / "src"):
        # Root-owned and written before any pull-request code ran, but its links are the
        # pull request's: a `src` that is one is not followed.
        if folder.is_symlink():
            continue
        try:
            with os.scandir(folder) as listing:
                entries = list(itertools.islice(listing, MAX_LISTED + 1))
        except OSError:
            continue
        cut |= len(entries) > MAX_LISTED
        entries = entries[:MAX_LISTED]
        for entry in entries:
            stem = entry.name.removesuffix(".py")
            if not stem.isidentifier():
                continue
            if (
                entry.is_file(follow_symlinks=False) and entry.name.endswith(".py")
            ) or entry.is_dir(follow_symlinks=False):
                names.add(stem)
    return sorted(names)[:MAX_OWN], cut


# The importer: a file, as a program is, whose folder (not the project's) is sys.path[0].
IMPORTER = "import importlib, sys\nimportlib.import_module(sys.argv[1])\n"


def _import(run: CheckRun, module: str, venv: str) -> Outcome:
    """Import ``module`` as a program would: a script started by its path, in the project's
    working folder (written and run by the sandbox's own user, never by root)."""
    script = f"{run.scratch}/main.py"
    cmd = f"cat > {shlex.quote(script)} <<'PY'\n{IMPORTER}PY\n"
    cmd += shlex.join(["python", script, module])
    return run.run(cmd, phase="import", timeout=IMPORT_TIMEOUT, cwd=run.src, venv=venv)


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
    names, cut = checkout_names(Path(plan.head_dir))
    if cut:
        run.observe(
            "checkout_listing_cut",
            f"a checkout folder holds more than {MAX_LISTED} entries: the project's own "
            "modules past them were imported as dependencies are (to their cap)",
        )
    ours = json.dumps(names)
    listing = _run_python(run, LISTER, venv, json.dumps(seed), ours)
    changed = changed_modules(plan)
    modules, important, others_left = import_order(changed, parse_modules(listing.stdout_tail))
    if important:
        run.cut(
            "detonation-own-imports",
            dropped=len(important),
            kept=MAX_OWN,
            phase="import",
            detail=f"changed or own modules past the first {MAX_OWN} were not imported: "
            + ", ".join(important[:10]),
        )
    if others_left:
        run.cut(
            "detonation-imports",
            dropped=others_left,
            kept=MAX_IMPORTS,
            phase="import",
            detail=f"{others_left} more of the dependencies' modules were not imported (the "
            f"first {MAX_IMPORTS} by name were, after the project's own)",
        )
    failed = []
    for module in modules:
        result = _import(run, module, venv)
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
    # The package itself first, as its users load it (each entry point), then its
    # dependencies.
    own = entry_points(manifest, head)
    for rel in own[:MAX_OWN]:
        run.run(
            shlex.join(["node", "-e", LOAD_JS, f"./{rel}"]),
            phase="import",
            timeout=IMPORT_TIMEOUT,
            cwd=run.src,
        )
    if len(own) > MAX_OWN:
        run.cut(
            "detonation-own-imports",
            dropped=len(own) - MAX_OWN,
            kept=MAX_OWN,
            phase="import",
            detail=f"{len(own)} entry points of the package; the first {MAX_OWN} were loaded",
        )
    deps = manifest.get("dependencies") if isinstance(manifest, dict) else None
    every = [n for n in (deps or {}) if isinstance(n, str)]
    _imports_cut(run, len(every), "dependencies (in package.json's order)")
    names = every[:MAX_IMPORTS]
    for name in names:
        run.run(
            f"node -e {shlex.quote(f'require({json.dumps(name)})')}",
            phase="import",
            timeout=IMPORT_TIMEOUT,
            cwd=run.src,
        )
    loaded = min(len(own), MAX_OWN)
    return run.finish(
        "ok", f"installed; loaded {loaded} entry points and required {len(names)} dependencies"
    )


# Loads one file of the package as its users do: import() takes CommonJS and ES modules.
LOAD_JS = (
    "import(require('node:url').pathToFileURL(require('node:path').resolve(process.argv[1]))"
    ".href).catch((e) => { console.error(String(e)); process.exit(1); })"
)


def entry_points(manifest: object, head: Path) -> list[str]:
    """Return the package's own entry points (``main``, every file ``exports`` names, else
    ``index.js``), relative, each a regular file of the pristine checkout (no link, no
    pattern, nothing outside it)."""
    if not isinstance(manifest, dict):
        return []
    named: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, str):
            named.append(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(manifest.get("main"))
    walk(manifest.get("exports"))
    if not named:
        named.append("index.js")
    found: list[str] = []
    for target in named:
        rel = PurePosixPath(target.removeprefix("./"))
        if "*" in target or rel.is_absolute() or ".." in rel.parts or not rel.parts:
            continue
        path = head.joinpath(*rel.parts)
        # As node resolves it: a folder is its index.js, a name without one takes `.js`.
        if not path.is_symlink() and path.is_dir():
            rel, path = rel / "index.js", path / "index.js"
        elif not path.exists() and not path.is_symlink() and not rel.suffix:
            rel, path = rel.with_suffix(".js"), path.with_suffix(".js")
        if any(p.is_symlink() for p in (path, *path.parents) if head in p.parents or p == path):
            continue
        if path.is_file() and rel.as_posix() not in found:
            found.append(rel.as_posix())
    return found


def body(run: CheckRun) -> Report:
    """Copy the head, install it into its own environment, import what it installed."""
    plan = run.plan
    if plan.ecosystem == "unknown":
        return run.finish("skipped", f"nothing to detonate: {plan.unproven_reason}")
    # Its copy of the head was staged by arm, before any pull-request code ran.
    return _node(run) if plan.ecosystem == "node" else _python(run)


if __name__ == "__main__":
    raise SystemExit(check_main("detonation", body))

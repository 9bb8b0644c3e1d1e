"""Settle install, test and smoke from head's build files and base's policy (pure).

The files present at head (and their text) plus the policy give the install, test and
smoke commands. Settling rules (the policy's non-empty ``install``/``test``/``smoke`` win
over these):
========  =========================================  ==========================================
side      recognised by (at the repository root)     commands
========  =========================================  ==========================================
python    pyproject.toml, setup.py, setup.cfg,       install ``python -m pip install`` with
          *requirements*.txt, requirements/*.txt     ``-e .`` (plus dev/test extras) when
                                                     buildable, ``-r`` for requirements.txt and
                                                     dev/test requirement files, ``pytest``
                                                     when the project uses pytest.
                                                     test ``python -m pytest -q -p
                                                     no:cacheprovider`` (pytest), else the
                                                     project's own runner as its tox, nox or
                                                     CI runs it (trial, virtue, unittest,
                                                     nose2…: ``python -m MODULE``), else
                                                     ``python -m unittest discover -v [-s D]``
                                                     when there are ``test*.py`` files.
                                                     smoke ``python -m pip wheel`` when
                                                     buildable, else ``python -m compileall``.
node      package.json (+ package-lock.json or       install ``npm ci`` with a lockfile, else
          npm-shrinkwrap.json)                       ``npm install``; test ``npm test`` unless
                                                     the script is absent or npm's placeholder;
                                                     smoke ``npm run build`` or ``npm pack
                                                     --dry-run``.
========  =========================================  ==========================================

The test environment is what the project declares (``testenv.py``): PEP 735 dependency
groups, Poetry's groups, PDM's and uv's development dependencies, Hatch's test
environment (and its ``test`` script), dev/test extras and requirement files; else its
tox or nox test environments, else the ``pip install`` lines of its CI workflows read at
base. pytest runs with the arguments Hatch, tox, nox or CI give it, whole
(``toxcommands.py`` fills tox's substitutions): the pytest plugins those arguments need
are installed where the project names them, as tox would from the deps beside its
command, else their options leave with their values (``pytestargs.py``), said in a note.
The plan's ``test_sources`` and a note say which sources were used.

Buildable means setup.py, or a pyproject.toml with ``[project]`` or ``[build-system]``.
When both sides are present, the side with tests is run (Python when both or neither
have tests), never a side whose tool (npm) is missing. The plan's ``unproven_reason``
says so, as it says when nothing was recognised, a build file is malformed or a build
tool is missing; those reasons are dropped when the policy sets all three commands.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import tomllib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from cujo_action.prepare import pytestargs, testenv, toxcommands
from cujo_action.schema import MAX_SHORT, MAX_TEXT, Policy, clip

__all__ = ["Settled", "Which", "settle"]

Ecosystem = Literal["python", "node", "unknown"]
Which = Callable[[str], str | None]

LOOKED_FOR = (
    "pyproject.toml, setup.py, setup.cfg, requirements*.txt, requirements/*.txt, package.json"
)
FIX_HINT = "Set install, test and smoke in .cujo.yml on the base branch to choose the commands."

PYTEST = "python -m pytest -q -p no:cacheprovider"
UNITTEST = "python -m unittest discover -v"
WHEEL = 'python -m pip wheel --no-deps -w "$RUNNER_TEMP/wheel" .'
COMPILEALL = "python -m compileall -q ."
NPM_CI = "npm ci --no-audit --no-fund"
NPM_INSTALL = "npm install --no-audit --no-fund"
NPM_TEST = "npm test"
NPM_BUILD = "npm run build"
NPM_PACK = "npm pack --dry-run"
NPM_PLACEHOLDER = "Error: no test specified"  # what `npm init` writes as scripts.test

_PYTEST_REQ = re.compile(r"^\s*pytest(?:[-_.][a-z0-9]+)*\s*(?:[\[<>=!~;@(]|$)", re.IGNORECASE)
_PYTEST_QUOTED = re.compile(
    r"[\"']\s*pytest(?:[-_.][a-z0-9]+)*\s*(?:[\[<>=!~;@(\"'])", re.IGNORECASE
)
_PLUGIN_REQ = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(?:[\[<>=!~;]|$)")
_EXTRA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Settled:
    """The commands settled from head's build files and base's policy."""

    ecosystem: Ecosystem
    build_files: tuple[str, ...] = ()
    install: str = ""
    test: str = ""
    smoke: str = ""
    unproven_reason: str = ""
    notes: tuple[str, ...] = ()
    test_sources: tuple[str, ...] = ()  # where the test environment was settled from


@dataclass(frozen=True)
class _Side:
    """What one ecosystem's build files alone settle to."""

    ecosystem: Ecosystem
    build_files: tuple[str, ...]
    install: str
    test: str
    smoke: str
    tool: str | None = None  # the executable its commands need, checked with `which`
    problems: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def settle(
    files: Mapping[str, str],
    policy: Policy,
    *,
    which: Which = shutil.which,
    ci: Mapping[str, str] | None = None,
) -> Settled:
    """Settle install, test and smoke from head's files (path → text) and base's policy.

    ``ci`` holds the repository's CI workflows read at base (path → text): how the
    project runs its own tests, when its build files do not say.
    """
    ci_found = testenv.workflows(ci or {})
    sides = [side for side in (_python_side(files, ci_found), _node_side(files)) if side]
    reasons: list[str] = []
    notes: list[str] = []
    if not sides:
        reasons.append(f"No build files were found at head (looked for {LOOKED_FOR}).")
    runnable = [side for side in sides if side.tool is None or which(side.tool) is not None]
    for side in sides:
        if side not in runnable:
            reasons.append(
                f"{side.tool} is not on PATH, so the {side.ecosystem} project cannot be "
                "installed, tested or built."
            )
    if runnable:
        # Python comes first, so a tie (both or neither have tests) goes to Python.
        chosen = next((side for side in runnable if side.test), runnable[0])
        if len(runnable) == 2:
            # A choice, not a gap: the plan says which side ran, the verdict is not touched.
            notes.append(_both_reason(chosen, next(s for s in runnable if s is not chosen)))
        reasons.extend(chosen.problems)
        notes.extend(chosen.notes)
    elif sides:
        chosen = replace(sides[0], install="", test="", smoke="")
        reasons.extend(chosen.problems)
    else:
        chosen = _Side("unknown", (), "", "", "")
    install, test, smoke = (_set(policy.install), _set(policy.test), _set(policy.smoke))
    if ci_found.env and chosen.test and not test:
        # The CI job that runs the tests sets these for them (colours off, a locale…).
        exports = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(ci_found.env.items()))
        chosen = replace(chosen, test=f"export {exports} && {chosen.test}")
        notes.append(f"The tests run with their CI job's environment: {exports}.")
    if install and test and smoke:
        reasons = []
    elif reasons:
        reasons.append(FIX_HINT)
    build_files = sorted({name for side in sides for name in side.build_files})
    sources = chosen.sources if not (install and test) else ()
    if sources:
        notes.append("The test environment was settled from " + "; ".join(sources) + ".")
    return Settled(
        ecosystem=chosen.ecosystem,
        build_files=tuple(build_files),
        install=install or chosen.install,
        test=test or chosen.test,
        smoke=smoke or chosen.smoke,
        unproven_reason=clip(" ".join(reasons), MAX_TEXT),
        notes=tuple(clip(n, MAX_TEXT) for n in notes),
        test_sources=tuple(clip(source, MAX_SHORT) for source in sources),
    )


def _set(command: str) -> str:
    """Return a policy command, or '' when it is blank (and so left to settling)."""
    return command if command.strip() else ""


def _both_reason(chosen: _Side, other: _Side) -> str:
    why = (
        "only it has tests"
        if chosen.test and not other.test
        else "Python is picked when both or neither have tests"
    )
    return (
        f"Both Python and Node build files are at head ({', '.join(sorted(chosen.build_files))}"
        f" and {', '.join(sorted(other.build_files))}); the {chosen.ecosystem} side was run "
        f"because {why}, so the {other.ecosystem} side is not installed, tested or built."
    )


def _python_side(files: Mapping[str, str], ci: testenv.Found) -> _Side | None:
    paths = list(files)
    requirements = sorted(p for p in paths if _is_requirements(p))
    manifests = [name for name in ("pyproject.toml", "setup.py", "setup.cfg") if name in files]
    if not manifests and not requirements:
        return None
    problems: list[str] = []
    buildable = "setup.py" in files
    uses_pytest = (
        "pytest.ini" in files
        or ".pytest.ini" in files
        or any(p.rpartition("/")[2] == "conftest.py" for p in paths)
    )
    extras: set[str] = set()
    sources: list[str] = []
    notes: list[str] = []
    groups = testenv.Found()
    legacy_tox = ""  # pyproject.toml's [tool.tox] legacy_tox_ini

    if "pyproject.toml" in files:
        text = _text(files, "pyproject.toml")
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            problems.append(
                f"pyproject.toml at head is not valid TOML ({exc}); the commands were settled "
                "from its raw text and the install will likely fail."
            )
            buildable |= bool(re.search(r"(?m)^\s*\[\s*(?:project|build-system)\s*\]", text))
            uses_pytest |= bool(
                re.search(r"(?m)^\s*\[\s*tool\.pytest", text) or _PYTEST_QUOTED.search(text)
            )
        else:
            buildable |= "project" in data or "build-system" in data
            uses_pytest |= _toml_mentions_pytest(data)
            project = data.get("project")
            if isinstance(project, dict):
                optional = project.get("optional-dependencies")
                if isinstance(optional, dict):
                    extras.update(_dev_extras(optional))
            groups = testenv.declared(data)
            legacy = testenv.nested(data, "tool", "tox", "legacy_tox_ini")
            legacy_tox = legacy if isinstance(legacy, str) else ""
            sources += groups.sources
    if "setup.py" in files:
        uses_pytest |= bool(_PYTEST_QUOTED.search(_text(files, "setup.py")))
    if "setup.cfg" in files:
        text = _text(files, "setup.cfg")
        uses_pytest |= _cfg_mentions_pytest(text)
        extras.update(_dev_extras(_cfg_extras(text)))
    if "tox.ini" in files:
        uses_pytest |= bool(re.search(r"\bpy\.?test\b", _text(files, "tox.ini")))
    uses_pytest |= any(_requirements_mention_pytest(_text(files, r)) for r in requirements)
    sources += [f"extra {e} (project metadata)" for e in sorted(extras)]
    chosen_requirements = _requirements_to_install(requirements, buildable=buildable)
    sources += [f"{r}" for r in chosen_requirements if r != "requirements.txt"]

    tox_ini = _text(files, "tox.ini") if "tox.ini" in files else legacy_tox
    # What tox, nox or the CI workflow install is used only when the project's own
    # metadata says nothing of its tests: theirs is how, not what.
    fallback = testenv.Found()
    readers: list[Callable[[], testenv.Found]] = [
        lambda: testenv.tox(tox_ini, ci.tox_envs) if tox_ini else testenv.Found(),
        lambda: (
            testenv.nox(_text(files, "noxfile.py")) if "noxfile.py" in files else testenv.Found()
        ),
        lambda: ci,
    ]
    how: list[str] | None = groups.pytest_args  # Hatch's test script, when it says
    beside = groups  # what the source pytest's arguments came from installs
    uses_pytest |= how is not None
    runner: list[str] | None = None  # the project's own runner (trial, virtue…), if not pytest
    for read in readers:
        found = read()
        notes += found.notes
        if how is None and found.pytest_args is not None:
            how, beside = found.pytest_args, found
            uses_pytest = True
        runner = runner or found.runner
        if not fallback and found and not sources:
            fallback = found
            sources += found.sources
    extras.update(e for e in (*groups.extras, *fallback.extras) if _EXTRA_NAME.fullmatch(e))
    wanted = [*groups.args, *fallback.args]
    uses_pytest |= any(_PYTEST_REQ.match(a) for a in wanted)
    # The plugins pytest's arguments need: installed when the project names them where its
    # install reads, else as tox would (from the deps beside the command), else left out.
    named = _named_text(files, [*wanted, *(a for r in chosen_requirements for a in ("-r", r))])
    plugins: list[str] = []
    for plugin in pytestargs.plugins_used(how):
        if _names(named, plugin):
            plugins.append(plugin)
        elif given := [a for a in beside.args if _names(a, plugin) and _PLUGIN_REQ.match(a)]:
            wanted.append(given[0])
            plugins.append(plugin)

    if how is None and runner is not None:
        # How the project's own tox, nox or CI runs its tests, with the runner it names.
        module = runner[2]
        dist = testenv.RUNNERS.get(module)
        uses_pytest = False
        if dist and not _names(named, dist) and dist not in wanted:
            wanted.append(dist)
    install_args: list[str] = []
    if buildable:
        install_args += ["-e", f".[{','.join(sorted(extras))}]" if extras else "."]
    for name in chosen_requirements:
        install_args += ["-r", name]
    install_args += [a for a in wanted if a not in install_args or a.startswith("-")]
    if uses_pytest and not any(_PYTEST_REQ.match(a) for a in install_args):
        install_args.append("pytest")
    install = shlex.join(["python", "-m", "pip", "install", *install_args]) if install_args else ""

    if uses_pytest:
        pytest = pytestargs.pytest_command(PYTEST, how, plugins)
        test = pytest.command
        if pytest.dropped:
            notes.append(
                "pytest's arguments of plugins the project does not install were left out: "
                + shlex.join(pytest.dropped)
            )
    elif how is None and runner is not None:
        test = " ".join(toxcommands.render(word) for word in runner)
    else:
        test = _unittest_command(paths)
    return _Side(
        ecosystem="python",
        build_files=(*manifests, *requirements),
        install=install,
        test=test,
        smoke=WHEEL if buildable else COMPILEALL,
        problems=tuple(problems),
        sources=tuple(sources),
        notes=tuple(notes),
    )


def _named_text(files: Mapping[str, str], args: Iterable[str]) -> str:
    """Return the text of what the install reads: its arguments, the requirement files they
    name and the project's metadata (where its extras are)."""
    args = list(args)
    named = [a for prev, a in zip(["", *args], args, strict=False) if prev == "-r"]
    named += [a[2:] for a in args if a.startswith("-r") and len(a) > 2]
    texts = [" ".join(args)]
    for name in dict.fromkeys([*named, "pyproject.toml", "setup.cfg", "setup.py"]):
        path = name.removeprefix("./")
        if path in files:
            texts.append(_text(files, path))
    return "\n".join(texts)


def _names(text: str, dist: str) -> bool:
    """Return whether ``text`` names the distribution ``dist`` (any PEP 503 spelling)."""
    spelled = r"[-_.]+".join(re.escape(part) for part in dist.split("-"))
    return re.search(rf"(?<![\w.-]){spelled}(?![\w-]|\.\w)", text, re.IGNORECASE) is not None


def _node_side(files: Mapping[str, str]) -> _Side | None:
    if "package.json" not in files:
        return None
    lockfile = next((n for n in ("package-lock.json", "npm-shrinkwrap.json") if n in files), None)
    build_files = ("package.json", lockfile) if lockfile else ("package.json",)
    install = NPM_CI if lockfile else NPM_INSTALL
    try:
        data = json.loads(_text(files, "package.json"))
    except (ValueError, RecursionError) as exc:
        reason = f"is not valid JSON ({exc})"
    else:
        if isinstance(data, dict):
            scripts = data.get("scripts")
            scripts = scripts if isinstance(scripts, dict) else {}
            test_script, build_script = scripts.get("test"), scripts.get("build")
            has_test = (
                isinstance(test_script, str)
                and bool(test_script.strip())
                and NPM_PLACEHOLDER not in test_script
            )
            has_build = isinstance(build_script, str) and bool(build_script.strip())
            return _Side(
                ecosystem="node",
                build_files=build_files,
                install=install,
                test=NPM_TEST if has_test else "",
                smoke=NPM_BUILD if has_build else NPM_PACK,
                tool="npm",
            )
        reason = "is not a JSON object"
    problem = f"package.json at head {reason}, so its scripts could not be read."
    return _Side("node", build_files, install, "", "", tool="npm", problems=(problem,))


def _text(files: Mapping[str, str], name: str) -> str:
    # A byte-order mark is legal in these files for most tools but not for tomllib/json.
    return files[name].removeprefix("\ufeff")


def _is_requirements(path: str) -> bool:
    folder, _, name = path.rpartition("/")
    if not name.endswith(".txt"):
        return False
    return (folder == "" and "requirements" in name) or folder == "requirements"


def _is_dev_name(name: str) -> bool:
    return any(t.startswith(("dev", "test")) for t in re.split(r"[-_.\s]+", name.lower()))


def _requirements_to_install(requirements: list[str], *, buildable: bool) -> list[str]:
    """Return the requirement files to install: requirements.txt first, then dev/test ones."""
    dev = [r for r in requirements if _is_dev_name(r.rpartition("/")[2].removesuffix(".txt"))]
    chosen = (["requirements.txt"] if "requirements.txt" in requirements else []) + dev
    if not chosen and not buildable:
        # Nothing is named like the usual files, and nothing else says what to install.
        chosen = requirements
    return chosen


def _dev_extras(extras: Iterable[object]) -> set[str]:
    """Return the extras for the tests (``testenv.test_groups``: test ones before dev)."""
    return set(
        testenv.test_groups(e for e in extras if isinstance(e, str) and _EXTRA_NAME.fullmatch(e))
    )


def _toml_mentions_pytest(data: dict[str, object]) -> bool:
    """Say whether pytest is configured or named as a requirement anywhere in the TOML."""
    stack: list[object] = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if _PYTEST_REQ.match(str(key)):
                    return True
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and _PYTEST_REQ.match(node):
            return True
    return False


def _cfg_mentions_pytest(text: str) -> bool:
    return any(
        re.match(r"\s*\[tool:pytest\]", line)
        or _PYTEST_REQ.match(re.sub(r"^\s*[\w.-]+\s*=", "", line))
        for line in text.splitlines()
    )


def _cfg_extras(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    if not parser.has_section("options.extras_require"):
        return []
    return list(parser["options.extras_require"])


def _requirements_mention_pytest(text: str) -> bool:
    return any(_PYTEST_REQ.match(line.split(" #")[0]) for line in text.splitlines())


def _unittest_command(paths: Collection[str]) -> str:
    """Return the unittest command that discovers the most ``test*.py`` files, or ''."""
    packages = {p.rpartition("/")[0] for p in paths if p.rpartition("/")[2] == "__init__.py"}
    starts: dict[str, int] = {}
    for path in paths:
        folder, _, name = path.rpartition("/")
        if not (name.startswith("test") and name.endswith(".py")):
            continue
        # unittest only descends into packages, so start at the first non-package folder.
        while folder and folder in packages:
            folder = folder.rpartition("/")[0]
        starts[folder] = starts.get(folder, 0) + 1
    if not starts:
        return ""
    if "" in starts:
        return UNITTEST
    start = min(starts, key=lambda s: (-starts[s], s))
    return f"{UNITTEST} -s {shlex.quote(start)}"

"""Settle a Python project's test environment from what the project itself declares.

Pure: each reader takes a file's text (or parsed TOML) and returns pip arguments and the
source it used, so ``prepare`` can say where its test dependencies came from. The
sources, in the order they are used:

1. PEP 735 ``[dependency-groups]`` named for tests or development (``test``, ``tests``,
   ``testing``, ``dev``…), ``{include-group = …}`` followed; a group naming the project
   itself (``attrs[tests]``) installs the checkout's extras instead of the index's copy;
   the same from the project's own tool: Poetry's groups (its constraints read by
   poetry-core, as Poetry reads them), PDM's and uv's ``dev-dependencies``, Hatch's test
   environment (``hatch-test``, else one named for tests, else ``default`` with a ``test``
   script: its dependencies, features and how the script runs pytest);
2. ``[project.optional-dependencies]`` / ``extras_require`` extras of those names and
   ``requirements*.txt`` files of those names (``prepare`` reads them);
3. only when neither says anything: ``tox.ini`` test environments (``deps``, ``extras``,
   ``dependency_groups``), then ``noxfile.py`` test sessions' ``session.install`` calls,
   then the ``pip install`` lines of the repository's own CI workflow read at base.

The test command is pytest's or unittest's (``prepare``), with the arguments the
project's own tox (its commands read as tox runs them, ``toxcommands.py``), nox or CI runs
pytest with (``pytestargs.py``).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from cujo_action.prepare import toxcommands, toxenvs

MAX_GROUP_DEPTH = 10
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?")
# A plain command line: no shell operators, no workflow expressions, no variables.
_PLAIN = re.compile(r"^[\w@%+=:,./\[\]<>!~*'\" -]+$")
_PYTHONS = ("python", "python3")


def test_groups(names: Iterable[object]) -> list[str]:
    """Return the groups (or extras) to install for the tests, sorted: those named for
    tests (``test``, ``tests``, ``testing``…) when there are any, else those named for
    development. A ``dev`` group beside a ``tests`` one holds the docs, lint and release
    tools, which need not install where the tests run (nor on the runner's Python)."""
    named = sorted(n for n in names if isinstance(n, str) and is_test_name(n))
    tests = [n for n in named if any(
        t.startswith("test") for t in re.split(r"[-_.\s:]+", n.lower()))]  # fmt: skip
    return tests or named


def is_test_name(name: str) -> bool:
    """Return whether a group, extra, environment or session is for tests or development."""
    return any(t.startswith(("dev", "test")) for t in re.split(r"[-_.\s:]+", name.lower()))


def normalize(name: str) -> str:
    """Return a distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Found:
    """What one source says to install for the tests, and what it is called in the plan."""

    args: list[str] = field(default_factory=list)  # pip install arguments
    extras: list[str] = field(default_factory=list)  # of the project itself
    sources: list[str] = field(default_factory=list)
    pytest_args: list[str] | None = None  # how the project runs pytest, when it says
    env: dict[str, str] = field(default_factory=dict)  # what the CI job's tests run with
    tox_envs: list[str] = field(default_factory=list)  # what the CI jobs run with `tox -e`
    runner: list[str] | None = None  # the project's own test runner, when not pytest
    notes: list[str] = field(default_factory=list)  # what the plan should say of this source

    def __bool__(self) -> bool:
        return bool(self.args or self.extras)


# --------------------------------------------------------------------------- PEP 735


def dependency_groups(pyproject: Mapping[str, Any]) -> Found:
    """Return the requirements of the test and dev dependency groups (PEP 735)."""
    groups = pyproject.get("dependency-groups")
    found = Found()
    if not isinstance(groups, dict):
        return found
    own = _own_name(pyproject)
    by_name = {normalize(str(k)): v for k, v in groups.items()}
    for name in test_groups(groups):
        for req in _expand(normalize(name), by_name, 0):
            _add_requirement(found, req, own)  # the project naming itself: its extras
        found.sources.append(f"dependency group {name} (pyproject.toml)")
    return found


def declared(pyproject: Mapping[str, Any]) -> Found:
    """Return what the project's own tools declare for its tests and development: PEP 735
    groups, Poetry's groups, PDM's and uv's development dependencies, Hatch's test
    environment, in that order."""
    found = Found()
    for part in (
        dependency_groups(pyproject),
        poetry_groups(pyproject),
        pdm_groups(pyproject),
        uv_dev(pyproject),
        hatch_env(pyproject),
    ):
        found.args += [a for a in part.args if a not in found.args]
        found.extras += [e for e in part.extras if e not in found.extras]
        found.sources += part.sources
        if found.pytest_args is None:
            found.pytest_args = part.pytest_args
    return found


def _own_name(pyproject: Mapping[str, Any]) -> str:
    for table in (pyproject.get("project"), nested(pyproject, "tool", "poetry")):
        if isinstance(table, dict) and isinstance(table.get("name"), str):
            return normalize(table["name"])
    return ""


def nested(data: object, *keys: str) -> Any:
    """Return ``data[k1][k2]…``, or None where a level is missing or not a table."""
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data


def _add_requirement(found: Found, req: str, own: str) -> None:
    """Add a PEP 508 requirement; the project naming itself adds its extras instead."""
    match = _NAME.match(req)
    if own and match and normalize(match.group(1)) == own:
        extras = (match.group(2) or "[]").strip("[]")
        found.extras += [
            e for e in (x.strip() for x in extras.split(",")) if e and e not in found.extras
        ]
    elif req not in found.args:
        found.args.append(req)


def poetry_groups(pyproject: Mapping[str, Any]) -> Found:
    """Return Poetry's test and dev groups (``[tool.poetry.group.NAME.dependencies]``, and
    the older ``[tool.poetry.dev-dependencies]``) as PEP 508 requirements, as Poetry itself
    reads its constraints (``^1.2``, ``~1.2``, tables with extras, markers, git)."""
    found = Found()
    poetry = nested(pyproject, "tool", "poetry")
    if not isinstance(poetry, dict):
        return found
    own = _own_name(pyproject)
    tables: list[tuple[str, Any]] = []
    groups = poetry.get("group")
    if isinstance(groups, dict):
        tables += [
            (f"Poetry group {name}", nested(groups[name], "dependencies"))
            for name in test_groups(groups)
        ]
    tables.append(("Poetry dev-dependencies", poetry.get("dev-dependencies")))
    for source, deps in tables:
        if not isinstance(deps, dict) or not deps:
            continue
        for name, spec in deps.items():
            for req in _poetry_requirements(str(name), spec):
                _add_requirement(found, req, own)
        found.sources.append(f"{source} (pyproject.toml)")
    return found


def _poetry_requirements(name: str, spec: Any) -> list[str]:
    """Return one Poetry dependency as PEP 508 requirements ([] when pip cannot get it)."""
    if normalize(name) == "python":
        return []
    specs = spec if isinstance(spec, list) else [spec]
    out: list[str] = []
    for one in specs:
        if isinstance(one, dict) and "path" in one:
            path = str(one["path"])
            # Only a folder of this checkout is there to install; pip reads it from here.
            if path.startswith(("/", "~")) or ".." in path.split("/"):
                continue
            out.append(path if path.startswith(".") else f"./{path}")
            continue
        if not isinstance(one, (str, dict)):
            continue
        try:
            from poetry.core.factory import Factory  # noqa: PLC0415 (only for Poetry projects)

            out.append(Factory.create_dependency(name, one).to_pep_508())
        except Exception:  # noqa: S112 (a constraint Poetry itself would refuse)
            continue
    return out


def pdm_groups(pyproject: Mapping[str, Any]) -> Found:
    """Return PDM's test and dev groups (``[tool.pdm.dev-dependencies]``)."""
    found = Found()
    groups = nested(pyproject, "tool", "pdm", "dev-dependencies")
    if not isinstance(groups, dict):
        return found
    own = _own_name(pyproject)
    for name in test_groups(groups):
        reqs = groups[name]
        for req in reqs if isinstance(reqs, list) else []:
            # PDM's own editable and path forms (``-e file:///${PROJECT_ROOT}/…``) are not pip's.
            if isinstance(req, str) and not req.startswith("-") and "${" not in req:
                _add_requirement(found, req, own)
        found.sources.append(f"PDM dev-dependencies group {name} (pyproject.toml)")
    return found


def uv_dev(pyproject: Mapping[str, Any]) -> Found:
    """Return uv's development dependencies (``[tool.uv] dev-dependencies``)."""
    found = Found()
    reqs = nested(pyproject, "tool", "uv", "dev-dependencies")
    if not isinstance(reqs, list) or not reqs:
        return found
    own = _own_name(pyproject)
    for req in reqs:
        if isinstance(req, str):
            _add_requirement(found, req, own)
    found.sources.append("uv dev-dependencies (pyproject.toml)")
    return found


# Hatch's built-in test environment (``hatch test``) installs these unless told otherwise.
HATCH_TEST_DEFAULTS = ("pytest", "pytest-mock", "pytest-randomly", "pytest-rerunfailures",
                       "pytest-xdist[psutil]", "coverage[toml]")  # fmt: skip


def hatch_env(pyproject: Mapping[str, Any]) -> Found:
    """Return the dependencies and features of Hatch's test environment, and how its
    ``test`` script runs pytest: the environment named ``hatch-test``, else one named for
    tests, else ``default`` when it has a ``test`` script."""
    found = Found()
    envs = nested(pyproject, "tool", "hatch", "envs")
    if not isinstance(envs, dict):
        return found
    names = [n for n in envs if isinstance(n, str) and isinstance(envs[n], dict)]
    default: dict[str, Any] = envs["default"] if isinstance(envs.get("default"), dict) else {}
    chosen = next((n for n in names if n == "hatch-test"), None) or next(
        (n for n in names if is_test_name(n) and not is_side_env(n)), None
    )
    if chosen is None and isinstance(nested(default, "scripts", "test"), (str, list)):
        chosen = "default"
    if chosen is None:
        return found
    env = envs[chosen]
    own = _own_name(pyproject)
    # An environment inherits the default one's dependencies unless it says template = "".
    layers = [env] if env.get("template", "default") != "default" or chosen == "default" else [
        default, env]  # fmt: skip
    if chosen == "hatch-test" and env.get("dependencies") is None:
        found.args += list(HATCH_TEST_DEFAULTS)
    for layer in layers:
        for key in ("dependencies", "extra-dependencies"):
            reqs = layer.get(key)
            for req in reqs if isinstance(reqs, list) else []:
                if isinstance(req, str) and "{" not in req:
                    _add_requirement(found, req, own)
        features = layer.get("features")
        for extra in features if isinstance(features, list) else []:
            if isinstance(extra, str) and extra not in found.extras:
                found.extras.append(extra)
    script = nested(env, "scripts", "test") or nested(default, "scripts", "test")
    lines = [script] if isinstance(script, str) else script if isinstance(script, list) else []
    for line in lines:
        words = _split(re.sub(r"\{args(?::([^}]*))?\}", lambda m: m.group(1) or "", str(line)))
        if (given := pytest_words(words)) is not None:
            found.pytest_args = given
            break
    found.sources.append(f"Hatch environment {chosen} (pyproject.toml)")
    return found


def _expand(name: str, groups: Mapping[str, Any], depth: int) -> list[str]:
    """Return a group's requirements with its included groups' (PEP 735), cycles cut."""
    if depth > MAX_GROUP_DEPTH:
        return []
    out: list[str] = []
    items = groups.get(name)
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
            out += _expand(normalize(item["include-group"]), groups, depth + 1)
    return out


# --------------------------------------------------------------------------- tox, nox


def tox(text: str, ci_envs: Sequence[str] = ()) -> Found:
    """Return what tox's test environment installs, and how it runs pytest: the one
    environment that runs the tests (``toxenvs.choose``: the one CI runs, else the first
    that is not docs, lint, types or notebooks), read as tox 4 reads it."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    found = Found()
    try:
        parser.read_string(text)
    except configparser.Error:
        return found

    def runs_tests(text: str) -> bool:
        # Read as tox runs them: substitutions filled (a `{posargs}` is no shell text).
        return any(
            words is not None
            and (pytest_words(words) is not None or runner_words(words) is not None)
            for words in toxcommands.commands(parser, "testenv", text)
        )

    if toxenvs.names_cut(parser):
        found.notes.append(
            f"tox.ini names more than {toxenvs.MAX_NAMES} environments in one generative"
            f" name: the first {toxenvs.MAX_NAMES} in tox's order were read"
        )
    name = toxenvs.choose(parser, ci_envs, is_side=is_side_env, runs_tests=runs_tests)
    if name is None:
        return found
    section = toxenvs.section_of(parser, name) or "testenv"
    if not parser.has_section(section):
        return found
    for raw in toxenvs.setting(parser, name, "deps").splitlines():
        line = raw.strip().replace("{toxinidir}/", "").replace("{toxinidir}", ".")
        if not line or line.startswith("#") or "{" in line:
            continue
        # One requirement a line (its marker's spaces and all), or pip's options (`-r f`).
        args = _split(line) if line.startswith("-") else [line.split(" #", 1)[0].strip()]
        for arg in args:
            if arg not in found.args or arg.startswith("-"):
                found.args.append(arg)
    extras = toxenvs.setting(parser, name, "extras")
    found.extras += [n for n in re.split(r"[\s,]+", extras) if n]
    listed = toxenvs.setting(parser, name, "commands")
    for words in toxcommands.commands(parser, section, listed):
        if found.pytest_args is None and words is not None:
            found.pytest_args = pytest_words(words)
            if found.runner is None:
                found.runner = runner_words(words)
    found.sources.append(f"tox environment {name} (tox.ini)")
    return found


def nox(text: str) -> Found:
    """Return what noxfile.py's test sessions install (read, never run)."""
    found = Found()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return found
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not is_test_name(node.name):
            continue
        if not any("session" in ast.unparse(d) for d in node.decorator_list):
            continue
        for call in ast.walk(node):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            # String constants only; ``*session.posargs`` and the like are the caller's.
            given = [a for a in call.args if not isinstance(a, ast.Starred)]
            args = [
                a.value for a in given if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            if len(args) != len(given):
                continue
            if call.func.attr == "install":
                found.args += [a for a in args if a not in (".", "-e")]
            elif call.func.attr == "run" and found.pytest_args is None:
                found.pytest_args = pytest_words(args)
                if found.runner is None:
                    found.runner = runner_words(args)
        found.sources.append(f"nox session {node.name} (noxfile.py)")
    return found


# A test runner other than pytest → the distribution that brings it (None: the stdlib's).
RUNNERS: dict[str, str | None] = {
    "twisted.trial": "twisted",
    "virtue": "virtue",
    "unittest": None,
    "nose2": "nose2",
    "green": "green",
    "stestr": "stestr",
    "zope.testrunner": "zope.testrunner",
}
_RUNNER_SCRIPTS = {
    "trial": "twisted.trial",
    "virtue": "virtue",
    "nose2": "nose2",
    "green": "green",
    "stestr": "stestr",
    "zope-testrunner": "zope.testrunner",
}


def runner_words(words: list[str]) -> list[str] | None:
    """Return the project's own test runner's command (trial, virtue, unittest, nose2…) as
    ``python -m MODULE ARGS``, when ``words`` run one (None for pytest or anything else)."""
    words = unwrap_runner(words)
    if words[:2] == ["coverage", "run"] and "-m" in words:
        words = ["python", *words[words.index("-m") :]]  # coverage's own options dropped
    if words[:1] and words[0] in _RUNNER_SCRIPTS:
        return ["python", "-m", _RUNNER_SCRIPTS[words[0]], *words[1:]]
    if len(words) >= 3 and words[0] in _PYTHONS and words[1] == "-m" and words[2] in RUNNERS:
        return ["python", *words[1:]]
    return None


# --------------------------------------------------------------------------- CI


def workflows(files: Mapping[str, str]) -> Found:
    """Return the ``pip install`` arguments, pytest run and environment of the CI jobs
    (at base) that test this project.

    A job tests the project when one of its steps runs a test command (pytest, unittest,
    tox, nox, ``hatch test``) in a workflow that runs on pushes or pull requests; a job
    that installs from outside the checkout (``pkg @ ../pkg``, ``../other``) tests other
    packages against this one, and a release job installs what it built: neither is the
    project's install. The environment is the workflow's, job's and test step's ``env:``
    (plain values only: an expression's value is GitHub's, unknown here)."""
    found = Found()
    for path in sorted(files):
        try:
            data = yaml.safe_load(files[path])
        except yaml.YAMLError:
            continue
        if not isinstance(data, dict) or not _runs_on_changes(data):
            continue
        jobs = data.get("jobs")
        used = False
        for job in jobs.values() if isinstance(jobs, dict) else []:
            steps = job.get("steps") if isinstance(job, dict) else None
            runs = [
                (step["run"], step.get("env"))
                for step in (steps if isinstance(steps, list) else [])
                if isinstance(step, dict) and isinstance(step.get("run"), str)
            ]
            testing = [env for run, env in runs if _runs_tests(run)]
            if not testing or any(_installs_outside(run) for run, _ in runs):
                continue
            if not found.env and not used:
                found.env = {**_plain_env(data.get("env")), **_plain_env(job.get("env")),
                             **_plain_env(testing[0])}  # fmt: skip
            for run, _ in runs:
                used |= _ci_lines(run, found)
        if used:
            found.sources.append(f"CI workflow {path} at base")
    return found


_CHANGE_EVENTS = ("push", "pull_request", "pull_request_target", "merge_group")
_TEST_RUNNERS = ("tox", "nox", "trial", "virtue")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# What the runner and the harness set: a workflow's value never replaces them.
_OWN_ENV = re.compile(r"^(?:PATH|HOME|USER|SHELL|PWD|TMPDIR|CI|(?:GITHUB|RUNNER|ACTIONS)_\w*)$")


def _runs_on_changes(workflow: Mapping[Any, Any]) -> bool:
    """Return whether a workflow runs on pushes to branches or on pull requests."""
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    if isinstance(on, str):
        return on in _CHANGE_EVENTS
    if isinstance(on, list):
        return any(event in _CHANGE_EVENTS for event in on)
    if not isinstance(on, dict):
        return False
    for event in _CHANGE_EVENTS:
        if event not in on:
            continue
        given = on[event]
        # `push: {tags: [...]}` alone is a release, not a change being tested.
        if (
            event == "push"
            and isinstance(given, dict)
            and "tags" in given
            and not ("branches" in given or "branches-ignore" in given or "paths" in given)
        ):
            continue
        return True
    return False


def _script_words(script: str) -> list[list[str]]:
    words = []
    for raw in script.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;", raw):
            line = part.strip()
            if line and _PLAIN.match(line) and (split := _split(line)):
                words.append(unwrap_runner(split))
    return words


def _runs_tests(script: str) -> bool:
    """Return whether a step's script runs the project's tests."""
    for words in _script_words(script):
        if pytest_words(words) is not None or runner_words(words) is not None:
            return True
        if words[:1] in ([r] for r in _TEST_RUNNERS):
            return True
        if words[:2] in (["hatch", "test"], ["npm", "test"], ["npm", "t"], ["yarn", "test"]):
            return True
        if words[:2] == ["npm", "run"] and words[2:3] and words[2].startswith("test"):
            return True
        if len(words) >= 3 and words[0] in _PYTHONS and words[1:3] == ["-m", "unittest"]:
            return True
    return False


def _installs_outside(script: str) -> bool:
    """Return whether a step installs from a path outside the checkout."""
    for words in _script_words(script):
        if "install" in words[:4] and any(re.search(r"(?:^|[@=\s])\.\./", w) for w in words):
            return True
    return False


def _plain_env(env: object) -> dict[str, str]:
    """Return an ``env:`` mapping's plain entries (no expressions, none of the runner's)."""
    if not isinstance(env, dict):
        return {}
    return {
        str(k): str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in env.items()
        if isinstance(k, str)
        and _ENV_NAME.match(k)
        and not _OWN_ENV.match(k)
        and isinstance(v, (str, int, float, bool))
        and "${{" not in str(v)
        and "\n" not in str(v)
    }


def _ci_lines(script: str, found: Found) -> bool:
    used = False
    for raw in script.replace("\\\n", " ").splitlines():
        for part in raw.split("&&"):
            line = part.strip()
            if not line or not _PLAIN.match(line):
                continue
            words = _split(line)
            for prefix in (["pip", "install"], ["python", "-m", "pip", "install"],
                           ["pip3", "install"], ["uv", "pip", "install"]):  # fmt: skip
                if words[: len(prefix)] == prefix:
                    args = [w for w in words[len(prefix) :] if w not in ("-U", "--upgrade")]
                    args = [w for w in args if normalize(w) not in ("pip", "setuptools", "wheel")]
                    # A glob or a built wheel is what a release job made, not a requirement.
                    args = [w for w in args if not re.search(r"[*?]|^dist/", w)]
                    found.args += [a for a in args if a not in (".", "-e")]
                    used = used or bool(args)
            if found.pytest_args is None and (given := pytest_words(words)) is not None:
                found.pytest_args = given
                used = True
            if found.runner is None and (own := runner_words(words)) is not None:
                found.runner = own
                used = True
            found.tox_envs += [e for e in tox_envs(words) if e not in found.tox_envs]
    return used


def tox_envs(words: list[str]) -> list[str]:
    """Return the environments a ``tox -e A,B`` (``tox run -e``, ``python -m tox``) runs."""
    words = unwrap_runner(words)
    if len(words) >= 3 and words[0] in _PYTHONS and words[1:3] == ["-m", "tox"]:
        words = words[2:]
    if words[:1] != ["tox"]:
        return []
    out: list[str] = []
    for prev, word in zip(["", *words], words, strict=False):
        if prev in ("-e", "--env"):
            out += word.split(",")
        elif word.startswith("-e") and len(word) > 2 and not word.startswith("--"):
            out += word[2:].split(",")
        elif word.startswith("--env="):
            out += word.removeprefix("--env=").split(",")
    return [e.strip() for e in out if e.strip()]


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return []


# Tools that run a command in the project's environment: the command is what they run.
_RUNNERS = (("poetry", "run"), ("pdm", "run"), ("hatch", "run"), ("uv", "run"), ("pipenv", "run"),
            ("rye", "run"), ("pipx", "run"))  # fmt: skip
# The runners' options that take the next word as their value (uv, uvx, pdm, poetry).
_RUNNER_VALUE_OPTIONS = frozenset(("--with", "-w", "--from", "--python", "-p", "--group",
    "--extra", "--directory", "--project", "--env-file", "--index", "--index-url",
    "--extra-index-url", "--only-group", "--no-group", "-C", "-G", "-E", "--extras",
    "--with-editable", "--with-requirements", "--venv", "-e", "--env"))  # fmt: skip
# Environments that are not the test suite, whatever else their name says.
_SIDE_ENV = re.compile(
    r"docs?|lint|style|format|fmt|type|types|typing|mypy|pyright|flake8|ruff|pylint|black|"
    r"isort|pre-?commit|notebooks?|nb|nbval|examples?|bench(?:mark)?s?|build|release|"
    r"publish|changelog|spell(?:ing)?|manifest|readme|security|audit|commit|"
    r"report|combine|clean"
)


def is_side_env(name: str) -> bool:
    """Return whether an environment or session is for docs, lint, types, notebooks…"""
    return any(_SIDE_ENV.fullmatch(t) for t in re.split(r"[-_.\s:]+", name.lower()))


def unwrap_runner(words: list[str]) -> list[str]:
    """Return the command a project runner (``poetry run``, ``pdm run -v``, ``hatch run
    test:``…, ``uv run --frozen``) runs, or ``words`` as they are."""
    if words[:1] == ["uvx"]:
        rest = words[1:]
    elif tuple(words[:2]) in _RUNNERS:
        rest = words[2:]
    else:
        return words
    while rest and rest[0].startswith("-"):
        # The runner's own options, with their value when it is the next word.
        rest = rest[2:] if rest[0] in _RUNNER_VALUE_OPTIONS else rest[1:]
    if words[0] == "hatch" and rest and ":" in rest[0]:
        rest = [rest[0].partition(":")[2], *rest[1:]]  # `hatch run ENV:SCRIPT`
    return rest


def pytest_words(words: list[str]) -> list[str] | None:
    """Return pytest's arguments when ``words`` run pytest (as tox, nox or CI write it)."""
    words = unwrap_runner(words)
    if words[:1] in (["pytest"], ["py.test"]):
        return words[1:]
    if len(words) >= 3 and words[0] in _PYTHONS and words[1:3] in (["-m", "pytest"],
                                                                 ["-m", "py.test"]):  # fmt: skip
        return words[3:]
    if words[:2] == ["coverage", "run"] and "-m" in words:
        # Coverage's own options come before `-m`; the tests run all the same without it.
        at = words.index("-m")
        if words[at + 1 : at + 2] == ["pytest"]:
            return words[at + 2 :]
    return None

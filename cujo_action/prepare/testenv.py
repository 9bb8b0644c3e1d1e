"""Settle a Python project's test environment from what the project itself declares.

Pure: each reader takes a file's text (or parsed TOML) and returns pip arguments and the
source it used, so ``prepare`` can say where its test dependencies came from. The
sources, in the order they are used:

1. PEP 735 ``[dependency-groups]`` named for tests or development (``test``, ``tests``,
   ``testing``, ``dev``…), ``{include-group = …}`` followed; a group naming the project
   itself (``attrs[tests]``) installs the checkout's extras instead of the index's copy;
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cujo_action.prepare import toxcommands

MAX_GROUP_DEPTH = 10
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?")
# A plain command line: no shell operators, no workflow expressions, no variables.
_PLAIN = re.compile(r"^[\w@%+=:,./\[\]<>!~*'\" -]+$")
_PYTHONS = ("python", "python3")


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

    def __bool__(self) -> bool:
        return bool(self.args or self.extras)


# --------------------------------------------------------------------------- PEP 735


def dependency_groups(pyproject: Mapping[str, Any]) -> Found:
    """Return the requirements of the test and dev dependency groups (PEP 735)."""
    groups = pyproject.get("dependency-groups")
    found = Found()
    if not isinstance(groups, dict):
        return found
    project = pyproject.get("project")
    own = normalize(str(project.get("name", ""))) if isinstance(project, dict) else ""
    by_name = {normalize(str(k)): v for k, v in groups.items()}
    for name in sorted(k for k in groups if isinstance(k, str) and is_test_name(k)):
        for req in _expand(normalize(name), by_name, 0):
            match = _NAME.match(req)
            if own and match and normalize(match.group(1)) == own:
                # The project naming itself: its extras, from the checkout.
                extras = (match.group(2) or "[]").strip("[]")
                found.extras += [
                    e for e in (x.strip() for x in extras.split(",")) if e and e not in found.extras
                ]
            elif req not in found.args:
                found.args.append(req)
        found.sources.append(f"dependency group {name} (pyproject.toml)")
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


def _is_test_env(section: str) -> bool:
    if section == "testenv":
        return True
    name = section.removeprefix("testenv:")
    return name != section and (is_test_name(name) or re.fullmatch(r"py\d*", name) is not None)


def tox(text: str) -> Found:
    """Return what tox's test environments install, and how they run pytest."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    found = Found()
    try:
        parser.read_string(text)
    except configparser.Error:
        return found
    sections = [s for s in parser.sections() if _is_test_env(s)]
    for section in sections:
        env = parser[section]
        for raw in env.get("deps", "").splitlines():
            line = raw.strip().replace("{toxinidir}/", "").replace("{toxinidir}", ".")
            if not line or line.startswith("#") or "{" in line:
                continue
            for arg in _split(line):
                if arg not in found.args or arg.startswith("-"):
                    found.args.append(arg)
        found.extras += [n for n in re.split(r"[\s,]+", env.get("extras", "")) if n]
        for words in toxcommands.commands(parser, section):
            if found.pytest_args is None and words is not None:
                found.pytest_args = pytest_words(words)
        found.sources.append(f"tox environment [{section}] (tox.ini)")
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
            elif call.func.attr == "run" and args[:1] == ["pytest"] and found.pytest_args is None:
                found.pytest_args = [str(a) for a in args[1:]]
        found.sources.append(f"nox session {node.name} (noxfile.py)")
    return found


# --------------------------------------------------------------------------- CI


def workflows(files: Mapping[str, str]) -> Found:
    """Return the ``pip install`` arguments and pytest run of the CI workflows (at base)."""
    found = Found()
    for path in sorted(files):
        try:
            data = yaml.safe_load(files[path])
        except yaml.YAMLError:
            continue
        jobs = data.get("jobs") if isinstance(data, dict) else None
        used = False
        for job in jobs.values() if isinstance(jobs, dict) else []:
            steps = job.get("steps") if isinstance(job, dict) else None
            for step in steps if isinstance(steps, list) else []:
                run = step.get("run") if isinstance(step, dict) else None
                if isinstance(run, str):
                    used |= _ci_lines(run, found)
        if used:
            found.sources.append(f"CI workflow {path} at base")
    return found


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
                    found.args += [a for a in args if a not in (".", "-e")]
                    used = used or bool(args)
            if found.pytest_args is None and (given := pytest_words(words)) is not None:
                found.pytest_args = given
                used = True
    return used


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return []


def pytest_words(words: list[str]) -> list[str] | None:
    """Return pytest's arguments when ``words`` run pytest (as tox, nox or CI write it)."""
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

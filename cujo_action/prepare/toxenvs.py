"""Choose the tox environment that runs a project's tests, and read it as tox 4 does (pure).

A tox.ini names many environments: the test suite on several Pythons, and docs, lint,
type checks, notebooks. The one chosen is the one the base's CI runs with ``tox -e``
when that is a test environment, else the first of ``env_list`` (then of the
``[testenv:…]`` sections) that is not a side environment (docs, lint, types, notebooks,
release…: ``testenv.is_side_env``), preferring one whose commands run tests.

Read as tox 4 reads it:

- generative names expand: ``py3{11,12}-{a,b}`` is four names, ``3.1{0-3}`` four;
- an environment's settings are its ``[testenv:NAME]`` section's (a section may itself be
  generative), key by key falling back to ``[testenv]``;
- a line of a setting that starts with a factor condition (``tests: pytest``,
  ``py311,py312: x``, ``a-b: x`` both, ``!win: x`` not) is kept only when the
  environment's factors (its name split at ``-``) meet it.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Callable, Sequence

from cujo_action import limits

__all__ = ["choose", "env_names", "expand", "keep_lines", "names_cut", "section_of", "setting"]

MAX_NAMES = limits.TOX_ENV_NAMES  # a generative list past this is cut (the first kept)
_GROUP = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)-(\d+)$")
# A factor condition: factors joined by `-` (all) and `,` (any), each maybe negated.
_CONDITION = re.compile(r"^\s*(!?[\w.]+(?:[-,]!?[\w.]+)*)\s*:(?:\s+|$)(.*)$")


def expand(pattern: str) -> list[str]:
    """Return the names a generative name stands for, in tox's order."""
    match = _GROUP.search(pattern)
    if match is None:
        return [pattern] if pattern else []
    choices: list[str] = []
    for raw in match.group(1).split(","):
        part = raw.strip()
        if ranged := _RANGE.match(part):
            low, high = int(ranged.group(1)), int(ranged.group(2))
            choices += [str(n) for n in range(low, min(high, low + MAX_NAMES) + 1)]
        else:
            choices.append(part)
    out: list[str] = []
    for choice in choices:
        for rest in expand(pattern[: match.start()] + choice + pattern[match.end() :]):
            if len(out) >= MAX_NAMES:
                return out
            out.append(rest)
    return out


def _listed(text: str) -> list[str]:
    """Split an ``env_list`` value (commas and lines; braces kept whole) and expand it."""
    names: list[str] = []
    depth, word = 0, ""
    for char in text + ",":
        depth += char == "{"
        depth -= char == "}"
        if depth <= 0 and char in ",\n":
            word = word.split("#", maxsplit=1)[0].strip()
            names += expand(word)
            word = ""
        else:
            word += char
    return names


def env_names(parser: configparser.ConfigParser) -> list[str]:
    """Return every environment named: ``env_list`` first, then the sections'."""
    names: list[str] = []
    if parser.has_section("tox"):
        tox = parser["tox"]
        names += _listed(tox.get("env_list", tox.get("envlist", "")))
    for section in parser.sections():
        if section.startswith("testenv:"):
            names += expand(section.removeprefix("testenv:"))
    return list(dict.fromkeys(n for n in names if n))


def names_cut(parser: configparser.ConfigParser) -> bool:
    """Return whether a generative name stood for more environments than ``MAX_NAMES``
    (only the first that many, in tox's order, were read)."""
    patterns = [n for n in _patterns(parser) if _GROUP.search(n)]
    return any(len(expand(p)) >= MAX_NAMES for p in patterns)


def _patterns(parser: configparser.ConfigParser) -> list[str]:
    found: list[str] = []
    if parser.has_section("tox"):
        tox = parser["tox"]
        found += re.split(r",(?![^{]*\})|\n", tox.get("env_list", tox.get("envlist", "")))
    found += [s.removeprefix("testenv:") for s in parser.sections() if s.startswith("testenv:")]
    return [p.split("#", 1)[0].strip() for p in found]


def section_of(parser: configparser.ConfigParser, name: str) -> str | None:
    """Return the ``[testenv:…]`` section that configures ``name``, if one does."""
    for section in parser.sections():
        if section.startswith("testenv:") and name in expand(section.removeprefix("testenv:")):
            return section
    return None


def _meets(condition: str, factors: set[str]) -> bool:
    for alternative in condition.split(","):
        if all(
            (f[1:] not in factors) if f.startswith("!") else (f in factors)
            for f in alternative.split("-")
        ):
            return True
    return False


def keep_lines(text: str, name: str) -> str:
    """Return a setting's lines for environment ``name``, factor conditions applied."""
    factors = set(name.split("-"))
    kept = []
    for line in text.splitlines():
        match = _CONDITION.match(line)
        if match is None:
            kept.append(line)
        elif _meets(match.group(1), factors):
            kept.append(match.group(2))
    return "\n".join(kept)


def setting(parser: configparser.ConfigParser, name: str, key: str) -> str:
    """Return environment ``name``'s ``key`` as tox 4 reads it (falling back to
    ``[testenv]``), factor conditions applied."""
    for section in (section_of(parser, name), "testenv"):
        if section and parser.has_section(section) and parser.has_option(section, key):
            return keep_lines(parser[section].get(key, ""), name)
    return ""


def choose(
    parser: configparser.ConfigParser,
    ci_envs: Sequence[str],
    *,
    is_side: Callable[[str], bool],
    runs_tests: Callable[[str], bool],
) -> str | None:
    """Return the environment that runs the tests (None when tox names none).

    ``is_side`` says whether a name is a docs, lint, types… environment; ``runs_tests``
    whether a ``commands`` text runs tests.
    """
    names = env_names(parser)
    if not names and parser.has_section("testenv"):
        names = ["py"]
    candidates = [n for n in names if not is_side(n)]
    for wanted in ci_envs:
        if wanted in candidates:
            return wanted
    for name in candidates:
        if runs_tests(setting(parser, name, "commands")):
            return name
    return candidates[0] if candidates else None

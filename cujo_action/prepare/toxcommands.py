"""Read a tox environment's ``commands`` as tox would run them (pure).

Lines are joined where they end in ``\\``, ``-``/``!`` prefixes are read, and tox's
substitutions are filled in before the line is split into words as tox splits it:

- ``{posargs}`` is empty and ``{posargs:DEFAULT}`` is its default (no arguments are given);
- ``{toxinidir}`` is ``.`` (commands run at the repository root, where tox.ini is),
  ``{envpython}`` ``python``, ``{envname}`` the environment's name, ``{/}`` and ``{:}``
  the separators, ``{env:KEY:DEFAULT}`` its default (empty without one), ``{tty:ON:OFF}``
  its OFF, ``{[section]key}`` that key's value;
- the environment's folders are where the sandbox has them: ``{envtmpdir}`` (and
  ``{envlogdir}``) a writable folder of the command's own temporary folder, ``{envdir}``,
  ``{envbindir}`` and ``{envsitepackagesdir}`` the venv's, ``{homedir}`` ``$HOME``. Those are
  shell words, kept in the command's words as markers that ``render`` turns into them.

A line with a substitution none of these fills is not used (None).
"""

from __future__ import annotations

import configparser
import re
import shlex
from collections.abc import Iterable

__all__ = ["ENVTMPDIR", "commands", "render", "uses_envtmpdir"]

MAX_DEPTH = 5

# Markers for the folders only the sandbox knows, private-use characters a tox.ini's own
# text is stripped of.
_OPEN, _CLOSE = "\ue000", "\ue001"
_MARKER = re.compile(f"{_OPEN}([a-z]+){_CLOSE}")
ENVTMPDIR = '"${TMPDIR:-/tmp}/envtmp"'
_SHELL = {
    "envtmpdir": ENVTMPDIR,
    "envdir": "\"$(python -c 'import sys; print(sys.prefix)')\"",
    "envbindir": "\"$(python -c 'import os, sys; print(os.path.dirname(sys.executable))')\"",
    "envsitepackagesdir": "\"$(python -c 'import site; print(site.getsitepackages()[0])')\"",
    "homedir": '"$HOME"',
}
_PLAIN = {"toxinidir": ".", "toxworkdir": ".tox", "envpython": "python", "/": "/", ":": ":"}
_IN_SANDBOX = {"envlogdir": "envtmpdir", **{name: name for name in _SHELL}}


class _Unfilled(Exception):
    """A substitution tox would fill from something this reading does not have."""


def commands(
    parser: configparser.ConfigParser, section: str, text: str | None = None
) -> list[list[str] | None]:
    """Return each command of ``section`` (or ``text``, its commands as one environment
    reads them: ``toxenvs.setting``) as words (None for a line that cannot be read)."""
    out: list[list[str] | None] = []
    pending = ""
    given = parser[section].get("commands", "") if text is None else text
    for raw in given.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            continue  # a command that must fail is not how the suite passes
        line = line.removeprefix("-").strip()  # tox ignores that command's exit code
        try:
            text = _fill(line.translate({ord(_OPEN): None, ord(_CLOSE): None}),
                         parser, section, 0)  # fmt: skip
            out.append(shlex.split(text, comments=True))
        except (_Unfilled, ValueError):
            out.append(None)
    return out


def _fill(text: str, parser: configparser.ConfigParser, section: str, depth: int) -> str:
    """Return ``text`` with its ``{…}`` substitutions filled, innermost first."""
    if depth > MAX_DEPTH:
        raise _Unfilled(text)
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] in ("{", "}"):
            out.append(text[i + 1])
            i += 2
            continue
        if char != "{":
            out.append(char)
            i += 1
            continue
        end, level = i + 1, 1
        while end < len(text) and level:
            level += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        if level:
            raise _Unfilled(text)  # an unclosed brace
        inner = _fill(text[i + 1 : end - 1], parser, section, depth + 1)
        out.append(_one(inner, parser, section, depth))
        i = end
    return "".join(out)


def _one(inner: str, parser: configparser.ConfigParser, section: str, depth: int) -> str:
    """Return what one substitution (its braces' content, already filled) stands for."""
    name, colon, rest = inner.partition(":")
    if inner in _PLAIN:
        return _PLAIN[inner]
    if inner in _IN_SANDBOX:
        return f"{_OPEN}{_IN_SANDBOX[inner]}{_CLOSE}"
    if inner == "envname":
        return section.removeprefix("testenv").removeprefix(":") or "py"
    if name == "posargs":
        return rest if colon else ""
    if name == "env" and colon:
        return rest.partition(":")[2]
    if name == "tty" and colon:
        return rest.partition(":")[2]
    match = re.fullmatch(r"\[([^\]]*)\](\S+)", inner)
    if match:
        other = match.group(1) or section
        if parser.has_option(other, match.group(2)):
            value = parser.get(other, match.group(2))
            return _fill(" ".join(value.splitlines()), parser, other, depth + 1)
    raise _Unfilled(inner)


def uses_envtmpdir(words: Iterable[str]) -> bool:
    """Return whether any word names the environment's temporary folder."""
    return any(f"{_OPEN}envtmpdir{_CLOSE}" in word for word in words)


def render(word: str) -> str:
    """Return one word as a shell word: quoted, its sandbox folders as shell expansions."""
    parts: list[str] = []
    last = 0
    for match in _MARKER.finditer(word):
        if match.start() > last:
            parts.append(shlex.quote(word[last : match.start()]))
        parts.append(_SHELL.get(match.group(1), shlex.quote(match.group(0))))
        last = match.end()
    if last < len(word) or not parts:
        parts.append(shlex.quote(word[last:]))
    return "".join(parts)

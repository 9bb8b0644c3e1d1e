"""pytest's command with the project's own arguments, kept whole (pure).

The arguments tox, nox or CI give pytest are kept as they are, each option with its
value. Only the options of the common plugins below, when the plugin is not installed,
are left out, each with its value (``--cov-report term-missing``, ``-n auto``), since
pytest would stop on them before any test ran. Which options take a value is pytest's
parsers' say; the table copies what each plugin's ``addoption`` declares.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from cujo_action.prepare import toxcommands

__all__ = ["PLUGINS", "PytestCommand", "plugins_used", "pytest_command"]

Takes = Literal["value", "flag", "optional"]  # optional: argparse's nargs="?"

# Distribution → its options and whether each takes a value.
PLUGINS: dict[str, dict[str, Takes]] = {
    "pytest-cov": {
        "--cov": "optional", "--cov-report": "value", "--cov-config": "value",
        "--cov-fail-under": "value", "--cov-append": "flag", "--cov-branch": "flag",
        "--no-cov": "flag", "--no-cov-on-fail": "flag", "--cov-context": "value",
        "--cov-precision": "value",
    },
    "pytest-xdist": {
        "-n": "value", "--numprocesses": "value", "--dist": "value", "--maxprocesses": "value",
        "--max-worker-restart": "value", "--tx": "value", "--rsyncdir": "value",
        "--rsyncignore": "value", "--looponfail": "flag",
    },
    "pytest-benchmark": {
        "--benchmark-skip": "flag", "--benchmark-only": "flag", "--benchmark-disable": "flag",
        "--benchmark-enable": "flag", "--benchmark-autosave": "flag",
        "--benchmark-disable-gc": "flag", "--benchmark-verbose": "flag",
        "--benchmark-quiet": "flag", "--benchmark-save-data": "flag",
        "--benchmark-warmup": "optional", "--benchmark-compare": "optional",
        "--benchmark-histogram": "optional",
        # Every other --benchmark-* option takes a value (below).
    },
    "pytest-html": {"--html": "value", "--self-contained-html": "flag", "--css": "value"},
    "pytest-timeout": {
        "--timeout": "value", "--timeout-method": "value", "--timeout_method": "value",
        "--session-timeout": "value",
    },
    "pytest-rerunfailures": {
        "--reruns": "value", "--reruns-delay": "value", "--only-rerun": "value",
    },
    "pytest-randomly": {
        "--randomly-seed": "value", "--randomly-dont-reset-seed": "flag",
        "--randomly-dont-reorganize": "flag",
    },
    "pytest-asyncio": {"--asyncio-mode": "value", "--asyncio-debug": "flag"},
    "nbval": {
        "--nbval": "flag", "--nbval-lax": "flag", "--nbval-current-env": "flag",
        "--nbval-kernel-name": "value", "--nbval-cell-timeout": "value",
        "--nbval-sanitize-with": "value", "--sanitize-with": "value",
    },
    "pytest-django": {"--ds": "value", "--reuse-db": "flag", "--create-db": "flag",
                      "--nomigrations": "flag", "--migrations": "flag"},
    "pytest-socket": {"--disable-socket": "flag", "--allow-hosts": "value",
                      "--allow-unix-socket": "flag"},
    "pytest-mypy": {"--mypy": "flag", "--mypy-ignore-missing-imports": "flag"},
    "pytest-memray": {"--memray": "flag", "--most-allocations": "value"},
}  # fmt: skip
_OPTIONS = {opt: (dist, takes) for dist, opts in PLUGINS.items() for opt, takes in opts.items()}


@dataclass(frozen=True)
class PytestCommand:
    """pytest's settled command, and the plugin options it left out."""

    command: str
    dropped: tuple[str, ...] = ()


def _plugin_option(arg: str) -> tuple[str, Takes, bool] | None:
    """Return (plugin, what it takes, whether the value is in ``arg``) for a plugin option."""
    if arg.startswith("--"):
        name, eq, _ = arg.partition("=")
        hit = _OPTIONS.get(name)
        if hit is None and name.startswith("--benchmark-"):
            hit = ("pytest-benchmark", "value")
        return (*hit, bool(eq)) if hit else None
    if re.match(r"-[A-Za-z]", arg):
        hit = _OPTIONS.get(arg[:2])
        return (*hit, len(arg) > 2) if hit else None  # -nauto: the value is attached
    return None


def _words(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Group ``args`` into (plugin or '', its words): each plugin option with its value."""
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            out += [("", [a]) for a in args[i - 1 :]]
            break
        hit = _plugin_option(arg)
        if hit is None:
            out.append(("", [arg]))
            continue
        dist, takes, attached = hit
        words = [arg]
        follows = not attached and i < len(args) and args[i] != "--"
        if follows and (takes == "value" or (takes == "optional" and args[i][:1] != "-")):
            words.append(args[i])
            i += 1
        out.append((dist, words))
    return out


def plugins_used(args: Sequence[str] | None) -> list[str]:
    """Return the plugins (distributions) whose options ``args`` give, in order."""
    return list(dict.fromkeys(dist for dist, _ in _words(args or []) if dist))


def pytest_command(
    base: str, args: Sequence[str] | None, installed: Collection[str] = ()
) -> PytestCommand:
    """Return ``base`` with the project's arguments, but the options of plugins not in
    ``installed`` (distribution names, as ``PLUGINS`` spells them)."""
    kept: list[str] = []
    dropped: list[str] = []
    for dist, words in _words(args or []):
        (dropped if dist and dist not in installed else kept).extend(words)
    if not kept:
        return PytestCommand(base, tuple(dropped))
    command = base + " " + " ".join(toxcommands.render(word) for word in kept)
    if toxcommands.uses_envtmpdir(kept):
        # tox makes the folder before the commands run; pytest's --basetemp wants its parent.
        command = f"mkdir -p {toxcommands.ENVTMPDIR} && {command}"
    return PytestCommand(command, tuple(dropped))

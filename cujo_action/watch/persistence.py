"""Name every place where a write makes code run later, and judge what a change there did.

A check fingerprints these places before its commands run and after (``harness.py``,
through ``boundary``: no link followed) and keeps the text of the few whose meaning is
in their content. ``changes`` compares the two: pure, so each judgement is tested on
plain values. Each kind of place is one observation kind and one hard rule
(``app_relay/decide/persistence_rules.py``):

==========================  ==============================================================
kind                        places (HOME-relative unless absolute)
==========================  ==============================================================
shell_profile_write         shell rc and profile files, fish's config, /etc/profile.d
python_startup_write        ``.pth``, ``sitecustomize.py``, ``usercustomize.py`` in the
                            user site-packages (``~/.local/lib/python*/site-packages``)
systemd_unit_write          systemd user units
autostart_write             desktop autostart entries
cron_write                  crontab spools and /etc/cron.d; ``crontab``/``at`` executed
git_hook_write              hooks in the checkout and in git templates; git configs
                            (global, the checkout's) gaining a key that runs a program
                            (``core.hooksPath``, ``core.fsmonitor``, ``core.sshCommand``…)
ssh_access_write            ``authorized_keys``, ``~/.ssh/rc``, ``~/.ssh/config`` commands
package_index_write         npm, yarn, pip, uv and poetry configs (user's, the venv's)
                            pointing at an index that is not a public registry
tool_config_write           the same configs, the checkout's own and bun's, gaining a key
                            whose value is a program, a shell, a module preloaded into
                            every process or a file of more config (``script-shell``,
                            ``node-options``, ``yarnPath``, ``plugins``, ``preload``…)
==========================  ==============================================================

The step's own file commands (``GITHUB_ENV``, ``GITHUB_PATH``: ``workflow_command_write``)
are read after each command, not only at the end (``filecommands.py``).
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import yaml

from cujo_action.limits import PERSISTENCE_TEXT
from cujo_action.schema import (
    AUTOSTART_WRITE,
    CRON_WRITE,
    GIT_HOOK_WRITE,
    PACKAGE_INDEX_WRITE,
    PERSISTENCE_WRITE,
    PYTHON_STARTUP_WRITE,
    SHELL_PROFILE_WRITE,
    SSH_ACCESS_WRITE,
    SYSTEMD_UNIT_WRITE,
    TOOL_CONFIG_WRITE,
)

# Executables whose mere run schedules code for later.
SCHEDULERS: dict[str, str] = {"/usr/bin/crontab": CRON_WRITE, "/usr/bin/at": CRON_WRITE,
                              "/usr/bin/batch": CRON_WRITE}  # fmt: skip

TEXT_CAP = PERSISTENCE_TEXT  # of a file judged by its content
# What every Python runs at start from a site folder (site(7)): .pth files, and the
# customize modules in any form Python imports (a .py, a .pyc, a package, an extension).
STARTUP_NAMES = ("*.pth", "sitecustomize*", "usercustomize*")
PUBLIC_INDEXES = frozenset(
    {"pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com"}
)
# Git keys whose value is a program git runs (or a file of more config): git-config(1).
_GIT_EXEC_KEYS = re.compile(
    r"^(core\.(hookspath|fsmonitor|sshcommand|pager|editor|askpass|gitproxy)"
    r"|sequence\.editor|diff\.external|gpg\.(program|\w+\.program)|credential\.helper"
    r"|credential\..+\.helper|filter\..+\.(clean|smudge|process)|diff\..+\.(command|textconv)"
    r"|merge\..+\.driver|uploadpack\.packobjectshook|include\.path|includeif\..+\.path"
    r"|alias\..+|pager\..+|web\.browser|browser\..+\.cmd|interactive\.difffilter)$"
)
# Keys of a package manager's config whose value names a program, a shell, a module every
# process preloads, or a file of more config: npm and pnpm (.npmrc: npm-config(7), pnpm's
# settings), yarn 1 (.yarnrc), yarn 2+ (.yarnrc.yml: yarnrc(5)), bun (bunfig.toml). Matched
# on the last part of a key, case-insensitively (``test.preload``, ``yarnPath``).
_TOOL_EXEC_KEYS = re.compile(
    r"^(script-shell|shell|node-options|git|editor|browser|viewer|onload-script|init-module"
    r"|node-gyp|pnpmfile|global-pnpmfile|globalconfig|userconfig|yarn-path|yarnpath|plugins"
    r"|injectenvironmentfiles|preload)$",
    re.IGNORECASE,
)
_SSH_COMMANDS = re.compile(r"^\s*(ProxyCommand|LocalCommand|KnownHostsCommand|Match\s+exec)\b",
                           re.IGNORECASE | re.MULTILINE)  # fmt: skip


@dataclass(frozen=True)
class Place:
    """Where to look (HOME-relative, or absolute), what a change there is, and how judged."""

    kind: str
    paths: tuple[str, ...]
    # The execution points under ``paths``: each folder on the way listed in full and
    # only these names fingerprinted, never capped (``boundary.matching``). None: the
    # place is walked whole, no deeper than ``depth`` folders below (None: all the way),
    # within the generic walk's cap (``limits.PERSISTENCE_WALK``).
    names: tuple[str, ...] = ()
    depth: int | None = None
    # A virtual environment's site folder: a file an installed distribution's RECORD
    # lists (setuptools' distutils-precedence.pth, an editable install's .pth) is that
    # install's, not a write of the code that ran.
    installs: bool = False
    # Judged by content: (before text or None, after text or None) → why it counts, or
    # None when the change is harmless (a git config gaining only user.name).
    judge: Callable[[str | None, str | None], str | None] | None = None
    # More judges of the same files, each of its own kind: (kind, judge).
    also: tuple[tuple[str, Callable[[str | None, str | None], str | None]], ...] = ()


@dataclass(frozen=True)
class Entry:
    """One file as snapshotted: its fingerprint, and its text when judged by content."""

    print: str
    text: str | None = None


@dataclass(frozen=True)
class Change:
    """One change at a persistence place, as an observation reports it."""

    kind: str
    path: str
    detail: str


# --------------------------------------------------------------------------- judges


def _git_config(text: str | None) -> dict[str, list[str]]:
    """Return a git config's keys (section.subsection.name, lower case) → values."""
    keys: dict[str, list[str]] = {}
    section = ""
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        head = re.match(r'^\[\s*([^\]\s"]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$', line)
        if head:
            name, sub = head.group(1), head.group(2)
            if "." in name and sub is None:  # [section.subsection], the old form
                name, _, sub = name.partition(".")
            section = name.lower() + (f".{sub}" if sub is not None else "")
            line = head.group(3).strip()
            if not line:
                continue
        key, eq, value = line.partition("=")
        full = f"{section}.{key.strip().lower()}"
        keys.setdefault(full, []).append(value.strip() if eq else "true")
    return keys


def _gained(old: Mapping[str, object], new: Mapping[str, object], runs: Callable[[str], object],
            shown: Callable[[object], str]) -> str | None:  # fmt: skip
    """Say which keys ``runs`` picks were added or changed between two configs."""
    gained = sorted(
        f"{key} = {shown(value)}"
        for key, value in new.items()
        if runs(key) and old.get(key) != value
    )
    return "gained " + "; ".join(gained) if gained else None


def git_config_runs(before: str | None, after: str | None) -> str | None:
    """Return the keys a git config gained that make git run a program, if any."""
    last = lambda values: values[-1]  # noqa: E731 (git takes a key's last value)
    return _gained(_git_config(before), _git_config(after), _GIT_EXEC_KEYS.match, last)


def _index_hosts(text: str | None) -> set[str]:
    """Return the hosts an npm/yarn/pip/uv/poetry config names as package indexes."""
    hosts: set[str] = ini_hosts(text or "") | toml_hosts(text or "")
    for match in re.finditer(
        r"(?im)^\s*(?:[\w@/.:-]*registry|npmRegistryServer|(?:extra-)?index[-_]url|find[-_]links"
        r"|url|repository)\s*[=:]\s*[\"']?([a-z][a-z0-9+.-]*://[^\s\"']+)",
        text or "",
    ):
        host = (urlsplit(match.group(1)).hostname or "").lower()
        if host:
            hosts.add(host)
    return hosts


def index_redirect(before: str | None, after: str | None) -> str | None:
    """Return the non-public indexes a package manager config newly points at, if any."""
    new = _index_hosts(after) - _index_hosts(before) - PUBLIC_INDEXES
    return "now points at " + ", ".join(sorted(new)) if new else None


def _tool_keys(text: str | None) -> dict[str, str]:
    """Return a config's keys (lower case; a TOML or YAML table's path joined by dots) →
    the value as text, read as TOML or YAML when it is a table, else line by line
    (``key=value``, ``key value``: .npmrc, .yarnrc)."""
    data: object = None
    try:
        data = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError:
        try:
            data = yaml.safe_load(text or "")
        except yaml.YAMLError:
            data = None
    keys: dict[str, str] = {}
    if isinstance(data, dict) and data:

        def walk(node: dict[object, object], prefix: str) -> None:
            for key, value in node.items():
                name = f"{prefix}{str(key).lower()}"
                if isinstance(value, dict):
                    walk(value, name + ".")
                else:
                    keys[name] = json.dumps(value, sort_keys=True, default=str)

        walk(data, "")
        return keys
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;[":
            continue
        match = re.match(r'^["\']?([^\s=:"\']+)["\']?\s*(?:=|\s)\s*(.*)$', line)
        if match:
            keys[match.group(1).lower()] = match.group(2).strip()
    return keys


def tool_config_runs(before: str | None, after: str | None) -> str | None:
    """Return the keys a package manager's config gained that name a program to run."""
    runs = lambda key: _TOOL_EXEC_KEYS.match(key.rsplit(".", 1)[-1])  # noqa: E731
    return _gained(_tool_keys(before), _tool_keys(after), runs, str)


def ssh_commands(before: str | None, after: str | None) -> str | None:
    """Return the command directives an ssh config newly holds, if any."""
    new = {m.group(1).lower() for m in _SSH_COMMANDS.finditer(after or "")}
    old = {m.group(1).lower() for m in _SSH_COMMANDS.finditer(before or "")}
    return "gained " + ", ".join(sorted(new - old)) if new - old else None


def site_place(root: str, *, installs: bool) -> Place:
    """Return the startup files of the site folders of a Python whose ``lib`` is ``root``."""
    names = tuple(f"python*/site-packages/{name}" for name in STARTUP_NAMES)
    return Place(PYTHON_STARTUP_WRITE, (root,), names=names, installs=installs)


def places(workspace: str) -> list[Place]:
    """Return every persistence place of a check whose checkout is ``workspace`` (HOME-rel)."""
    return [
        Place(
            SHELL_PROFILE_WRITE,
            (
                ".bashrc",
                ".bash_profile",
                ".bash_login",
                ".bash_logout",
                ".bash_aliases",
                ".profile",
                ".zshrc",
                ".zprofile",
                ".zshenv",
                ".zlogin",
                "/etc/bash.bashrc",
                "/etc/profile",
            ),
        ),
        Place(SHELL_PROFILE_WRITE, (".config/fish", "/etc/profile.d"), names=("*", "*/*")),
        # The user site of every Python, and the check's own venv (later checks run it).
        site_place(".local/lib", installs=False),
        site_place("work/venv/lib", installs=True),
        # The host's Pythons, should the host be writable (partial isolation).
        Place(
            PYTHON_STARTUP_WRITE,
            ("/usr/local/lib", "/usr/lib"),
            names=tuple(
                f"python*/{d}/{n}"
                for d in ("site-packages", "dist-packages")
                for n in STARTUP_NAMES
            ),
            installs=True,
        ),
        Place(
            SYSTEMD_UNIT_WRITE,
            (".config/systemd/user", ".local/share/systemd/user"),
            names=("*", "*/*"),
        ),
        Place(AUTOSTART_WRITE, (".config/autostart",), names=("*",)),
        Place(CRON_WRITE, ("/var/spool/cron", "/etc/cron.d", "/etc/crontab"), names=("*", "*/*")),
        # Root's own config, should the host be writable (partial isolation).
        Place(PERSISTENCE_WRITE, ("/etc/sudoers.d",), names=("*",)),
        Place(GIT_HOOK_WRITE, (f"{workspace}/.git/hooks", ".config/git/hooks"), names=("*",)),
        # Templates copied into every new repository: walked whole (the generic walk).
        Place(GIT_HOOK_WRITE, (".git-templates",)),
        Place(
            GIT_HOOK_WRITE,
            (".gitconfig", ".config/git/config", f"{workspace}/.git/config"),
            judge=git_config_runs,
        ),
        Place(
            SSH_ACCESS_WRITE,
            (".ssh/authorized_keys", ".ssh/authorized_keys2", ".ssh/rc", ".ssh/environment"),
        ),
        Place(SSH_ACCESS_WRITE, (".ssh/config",), judge=ssh_commands),
        Place(
            PACKAGE_INDEX_WRITE,
            (
                ".npmrc",
                ".yarnrc",
                ".yarnrc.yml",
                ".bunfig.toml",
                ".config/pnpm/rc",
                ".config/pip/pip.conf",
                ".pip/pip.conf",
                ".pydistutils.cfg",
                ".config/uv/uv.toml",
                ".config/pypoetry/config.toml",
                "work/venv/pip.conf",
                # The checkout's own, which npm, yarn, pnpm and bun read first when run there.
                f"{workspace}/.npmrc",
                f"{workspace}/.yarnrc",
                f"{workspace}/.yarnrc.yml",
                f"{workspace}/bunfig.toml",
            ),
            judge=index_redirect,
            also=((TOOL_CONFIG_WRITE, tool_config_runs),),
        ),
    ]


def counts(place: Place, rel: str, root: str) -> bool:
    """Return whether ``rel`` (found under ``root``, one of ``place.paths``) is watched.

    The place's own path counts, and so does anything on the way to one of its names (a
    link where a folder of the pattern is: what runs later is wherever it points).
    """
    if not place.names or rel == root:
        return True
    below = rel.removeprefix(root).lstrip("/").split("/")
    # Folder by folder: a pattern's "*" never spans a "/".
    return any(
        len(below) <= len(parts)
        and all(fnmatch.fnmatchcase(name, part) for name, part in zip(below, parts, strict=False))
        for parts in (pattern.split("/") for pattern in place.names)
    )


def changes(
    before: Mapping[str, Entry], after: Mapping[str, Entry], found_in: Iterable[Place]
) -> list[Change]:
    """Return what changed at each place between two snapshots, judged, in path order.

    Snapshot keys are the paths as reported (``~/.bashrc``, ``/etc/cron.d/x``), each
    snapshotted under the place it was found in (``owner``).
    """
    owners = list(found_in)
    out: list[Change] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new or (old is not None and new is not None and old.print == new.print):
            continue
        place = owner(path, owners)
        if place is None:
            continue
        what = "created" if old is None else "deleted" if new is None else "changed"
        if place.judge is None:
            out.append(Change(place.kind, path, f"{path} was {what}"))
            continue
        for kind, judge in ((place.kind, place.judge), *place.also):
            why = judge(old.text if old else None, new.text if new else None)
            if why is not None:
                out.append(Change(kind, path, f"{path} was {what}: {why}"))
    return out


def owner(path: str, found_in: Iterable[Place]) -> Place | None:
    """Return the place a reported path belongs to (the most specific one)."""
    best: tuple[int, Place] | None = None
    for place in found_in:
        for root in place.paths:
            shown = root if root.startswith("/") else f"~/{root}"
            if (
                (path == shown or path.startswith(shown.rstrip("/") + "/"))
                and counts(place, path, shown)
                and (best is None or len(shown) > best[0])
            ):
                best = (len(shown), place)
    return best[1] if best is not None else None


def toml_hosts(text: str) -> set[str]:
    """Return every URL host a TOML config (uv, poetry) names."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return set()
    hosts: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and "://" in node:
            host = (urlsplit(node).hostname or "").lower()
            if host:
                hosts.add(host)

    walk(data)
    return hosts


def ini_hosts(text: str) -> set[str]:
    """Return index hosts a pip/distutils INI config names."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return set()
    hosts: set[str] = set()
    for section in parser.sections():
        for key in ("index-url", "index_url", "extra-index-url", "extra_index_url", "find-links"):
            for value in (parser.get(section, key, fallback="") or "").split():
                host = (urlsplit(value).hostname or "").lower()
                if host:
                    hosts.add(host)
    return hosts

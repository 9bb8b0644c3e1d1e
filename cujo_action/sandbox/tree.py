"""What a sandbox's file tree shows beside the read-only host: no Cujo names, the image's folders.

The sandbox sees the host's root read-only, with an empty tmpfs over each folder it must
not see (``jail.ALWAYS_HIDDEN`` and the harness's own paths). Code that checks where it
runs reads two things from that tree: the mount table, where each tmpfs shows its path,
and the folders a hosted runner's image has.

* A hidden folder whose path names Cujo (the harness's install on a developer's machine,
  ``…/cujo_action``) is covered from the deepest folder above it that names nothing,
  unless that folder is one of the system's (``/usr``, ``/opt``, …): then its own path
  shows, and ``docs/limits.md`` says so.
* The image's folders (``runner_profile.json``, ``folders``; the probe's ``FOLDERS``):
  where the host has one, it shows through the read-only root, as on a hosted runner.
  Those under a folder the sandbox covers are made here: ``/home/linuxbrew`` from the host
  (read-only) or empty; ``/run/systemd`` always as empty folders, never the host's (it
  holds live sockets: journald, resolved, userdb, which a read-only bind leaves
  connectable); docker's socket as an empty file, never the host's (it is root on the
  host). Where the host lacks one outside a covered folder (``/opt/hostedtoolcache`` on a
  machine that is not a runner), nothing is made: the root is read-only, and a folder
  there would take a mount over its parent, a tell of its own.

Pure: the caller says what exists on the host.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable

# A word that must not be in any path the mount table shows.
NAME = "cujo"
# Top-level folders never covered whole: what the sandbox runs needs them.
SYSTEM_TOPS = frozenset(
    {"usr", "etc", "opt", "var", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "boot",
     "snap", "sys", "proc", "dev"}
)  # fmt: skip
# Bound read-only from the host where it has them; else an empty folder (the second path).
FROM_HOST = (("/home/linuxbrew", "/home/linuxbrew/.linuxbrew/bin"),)
# Never the host's: the folders systemd keeps on a hosted runner (Ubuntu 24.04), empty.
SYSTEMD = tuple(
    f"/run/systemd/{name}"
    for name in ("journal", "netif", "resolve", "seats", "sessions", "system", "timesync", "users")
)
# Docker's socket: an empty file at its path (connecting to it is refused, as when the
# daemon is down), never the host's.
DOCKER_SOCKET = "/var/run/docker.sock"
DOCKER_SOCKET_MODE = "0660"


def under(path: str, folder: str) -> bool:
    """Return whether ``path`` is ``folder`` or lies below it."""
    top = folder.rstrip("/")
    return path == top or path.startswith(top + "/")


def neutral_cover(path: str) -> str:
    """Return the folder to cover so that ``path`` is hidden and its name is not shown.

    ``path`` itself when it names nothing; else the deepest folder above the first part
    that names Cujo, when that folder is not a system one; else ``path`` (the name shows).
    """
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        if NAME in part.lower():
            above = parts[:i]
            if above and above[0] not in SYSTEM_TOPS:
                return "/" + "/".join(above)
            return path
    return path


def covered(paths: Iterable[str]) -> list[str]:
    """Return the folders to cover with a tmpfs: sorted, none under another."""
    out: list[str] = []
    for path in sorted(set(paths)):
        if not any(under(path, c) for c in out):
            out.append(path)
    return out


def image_args(
    cover: list[str],
    has: Callable[[str], bool],
    real_folder: Callable[[str], str],
    empty_fd: int,
) -> tuple[list[str], list[str]]:
    """Return bubblewrap's arguments that make the image's folders under ``cover``, and
    the host paths they bind from.

    ``has`` says whether the host has a folder; ``real_folder`` resolves a host folder's
    links (``/var/run`` is ``/run``); ``empty_fd`` is read for the empty socket file
    (none made when negative). Call after the ``--tmpfs`` of ``cover``.
    """
    args: list[str] = []
    sources: list[str] = []
    for folder, skeleton in FROM_HOST:
        if not any(under(folder, c) for c in cover):
            continue  # shown through the root, where the host has it
        if has(folder):
            args += ["--ro-bind", folder, folder]
            sources.append(folder)
        else:
            args += ["--dir", skeleton]
    for folder in SYSTEMD:
        if any(under(folder, c) for c in cover):
            args += ["--dir", folder]
    socket = posixpath.join(real_folder(posixpath.dirname(DOCKER_SOCKET)), "docker.sock")
    if empty_fd >= 0 and any(under(socket, c) and socket != c for c in cover):
        args += ["--perms", DOCKER_SOCKET_MODE, "--file", str(empty_fd), socket]
    return args, sources

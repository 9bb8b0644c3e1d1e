"""Join and empty a phase's network namespace: root's (``ip netns``) or rootless.

``net/ns/`` makes, guards and removes the namespaces; the jail and the reaper only run
commands in one and kill what is left in it, and ask here. A rootless namespace is named
``userns:<holder pid>`` (``is_rootless``), a root one by ``ip netns``. A rootless one is
joined as its owner (``join_argv``: ``nsenter --user --net`` into the holder's
namespaces, which the user that made them may enter); see ``net/ns/rootless.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

PREFIX = "userns:"
_SYSTEM_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
_KILL_WAIT_S = 5.0


class NetnsError(RuntimeError):
    """A namespace, link or ruleset command failed, with its stderr."""


def is_rootless(name: str) -> bool:
    """Return whether ``name`` names a rootless phase namespace (``userns:<pid>``)."""
    return name.startswith(PREFIX)


def holder_pid(name: str) -> int:
    """Return the pid of the holder of rootless namespace ``name``."""
    pid = name.removeprefix(PREFIX)
    if not is_rootless(name) or not pid.isdigit():
        raise NetnsError(f"{name!r} is not a rootless namespace")
    return int(pid)


def tool_path(name: str) -> str:
    """Return the system's ``name`` (nsenter, nft, unshare), by its full path where found."""
    for folder in _SYSTEM_DIRS:
        if os.access(f"{folder}/{name}", os.X_OK):
            return f"{folder}/{name}"
    return name


def join_argv(name: str) -> list[str]:
    """Return the prefix that runs a command in rootless namespace ``name`` as its owner."""
    pid = holder_pid(name)
    # Credentials kept: the harness's user is root in the holder's namespace (mapped so),
    # with the capabilities setns gives there, which bubblewrap then drops for the command.
    return [
        tool_path("nsenter"), f"--target={pid}", "--user", "--net", "--preserve-credentials", "--"
    ]  # fmt: skip


def namespace_inode(name: str) -> int | None:
    """Return the inode of rootless namespace ``name``'s network namespace (None: gone)."""
    try:
        return os.stat(f"/proc/{holder_pid(name)}/ns/net").st_ino
    except (OSError, NetnsError):
        return None


def _kill_rootless(name: str) -> None:
    """Kill every process in rootless namespace ``name`` but its holder; wait until gone."""
    holder = holder_pid(name)
    inode = namespace_inode(name)
    if inode is None:
        return
    deadline = time.monotonic() + _KILL_WAIT_S
    while time.monotonic() < deadline:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != holder:
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                        found.append(int(entry))
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _kill_namespace_pids(name: str) -> None:
    """Kill every process left in ``ip netns`` namespace ``name`` and wait until none is."""
    deadline = time.monotonic() + _KILL_WAIT_S
    pause = 0.002  # a sandbox's PID namespace, killed whole, is gone in a few milliseconds
    while True:
        argv = ["ip", "netns", "pids", name]
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        pids = [int(p) for p in out.split() if p.isdigit()]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause)
        pause = min(2 * pause, 0.02)


def kill_all_in(name: str) -> None:
    """Kill every process in namespace ``name``: what a phase started cannot leave it."""
    if is_rootless(name):
        _kill_rootless(name)
        return
    _kill_namespace_pids(name)

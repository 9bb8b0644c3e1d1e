"""Name a sandbox process the way a maintainer can check: executable, command line, parents.

Read from /proc by the harness (root, the host's PID namespace), never from anything a
process says of itself but what the kernel shows. ``describe`` names a pid (the decoy
watcher's events carry one); ``socket_owner`` finds which sandbox process holds the TCP
connection the proxy sees from an address and port (its own, inside its network
namespace), so an opaque channel is named too. Processes of the harness (uid 0) and of
anyone outside the run's sandbox uids are never looked at.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field

from cujo_action.sandbox.uids import UID_BASE
from cujo_action.schema import clip

MAX_PARENTS = 8
_CMDLINE_CAP = 400
# What a process is named by in a report, each capped in bytes of its JSON encoding: a
# pull request chooses its executable's name and its arguments (a run of control
# characters costs six bytes each), and every decoy event and request repeats them.
EXE_BYTES = 512
CMDLINE_BYTES = 1_000
PARENT_BYTES = 200
ORIGIN_BYTES = 200


@dataclass(frozen=True)
class Proc:
    """A process as the kernel shows it: its pid, executable, command line and parents."""

    pid: int
    exe: str | None = None
    cmdline: str = ""
    # Its parents, nearest first, as "pid executable" (the sandbox's pid 1 ends them).
    parents: tuple[str, ...] = field(default_factory=tuple)
    # What started it, where the harness can tell (an npm script, a package's build, the
    # test suite, an import): read from its and its parents' command lines and settings.
    origin: str = ""

    def fields(self) -> dict[str, object]:
        """Return it as the evidence records it (egress and decoy events)."""
        return {"pid": self.pid, "exe": self.exe, "cmdline": self.cmdline,
                "parents": list(self.parents), "origin": self.origin}  # fmt: skip

    @property
    def lineage(self) -> tuple[int, ...]:
        """Return this pid and its parents' pids, nearest first."""
        return (self.pid, *(int(p.split(" ", 1)[0]) for p in self.parents))


def _read(path: str, cap: int = 4096) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(cap)
    except OSError:
        return b""


def _parent(pid: int) -> int:
    """Return ``pid``'s parent, or 0 when it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat.rpartition(b")")[2].split()[1])
    except (IndexError, ValueError):
        return 0


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _uid(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return 0


def _sandbox_uid(uid: int) -> bool:
    return uid >= UID_BASE


def describe(pid: int) -> Proc:
    """Return what the kernel shows of ``pid`` and its parents (up to the sandbox's)."""
    cmdline = _cmdline(pid)
    parents: list[str] = []
    origin = origin_of(pid, _cmdline(pid, 1 << 16))
    current = pid
    for _ in range(MAX_PARENTS):
        current = _parent(current)
        # The chain ends where the sandbox does: a root process is the harness's.
        if current <= 1 or not _sandbox_uid(_uid(current)):
            break
        parents.append(clip(f"{current} {_exe(current) or '?'}", PARENT_BYTES))
        origin = origin or origin_of(current, _cmdline(current, 1 << 16))
    exe = _exe(pid)
    return Proc(
        pid,
        clip(exe, EXE_BYTES) if exe is not None else None,
        clip(cmdline, CMDLINE_BYTES),
        tuple(parents),
        clip(origin, ORIGIN_BYTES),
    )


def parent_pids(pid: int) -> tuple[int, ...]:
    """Return ``pid``'s parents' pids, nearest first, up to the sandbox's (cheap: stat only)."""
    found: list[int] = []
    current = pid
    for _ in range(MAX_PARENTS):
        current = _parent(current)
        if current <= 1 or not _sandbox_uid(_uid(current)):
            break
        found.append(current)
    return tuple(found)


def _cmdline(pid: int, cap: int = _CMDLINE_CAP) -> str:
    raw = _read(f"/proc/{pid}/cmdline", cap)
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def _environ(pid: int) -> dict[str, str]:
    found = {}
    for entry in _read(f"/proc/{pid}/environ", 1 << 20).split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key in _ORIGIN_VARIABLES:
            found[key.decode()] = value.decode("utf-8", "replace")[:100]
    return found


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


_ORIGIN_VARIABLES = frozenset({b"npm_lifecycle_event", b"npm_package_name", b"PYTEST_CURRENT_TEST"})


def origin_of(pid: int, cmdline: str) -> str:
    """Return what started one process, when its command line or settings say (else '')."""
    env = _environ(pid)
    if "npm_lifecycle_event" in env:
        package = env.get("npm_package_name") or os.path.basename(_cwd(pid)) or "a package"
        return f"the npm {env['npm_lifecycle_event']} script of {package}"
    if "PYTEST_CURRENT_TEST" in env:
        return f"the test {env['PYTEST_CURRENT_TEST'].removesuffix(' (call)')}"
    words = cmdline.split()
    if any(mark in cmdline for mark in ("_in_process.py", "setup.py", "pip-setuptools-caller")):
        # pip's build hooks (PEP 517) and setup.py run in the package's folder.
        where = os.path.basename(_cwd(pid).rstrip("/"))
        return f"the build of {where} (setup.py or its build backend)" if where else "a build"
    if "pytest" in words or ("-m" in words and "pytest" in words[words.index("-m") + 1 :][:1]):
        return "the test suite (pytest)"
    if len(words) >= 3 and words[1] == "-c" and words[2].startswith("import "):
        return f"importing {words[3] if len(words) > 3 else words[2].split()[-1]}"
    return ""


def _sockets(pid: int) -> set[int]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _inodes(pid: int, address: str, port: int, protocol: str) -> set[int] | None:
    """Return the inodes of sockets bound to ``address:port`` in ``pid``'s namespace, or
    None when ``pid`` is gone (its namespace's table cannot be read through it)."""
    want = f"{socket.inet_aton(address)[::-1].hex().upper()}:{port:04X}"
    found = set()
    table = _read(f"/proc/{pid}/net/{protocol}", 1 << 20).decode("ascii", "replace")
    if not table:
        return None
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[1] == want:
            found.add(int(fields[9]))
    return found


def sandbox_namespaces() -> dict[int, list[int]]:
    """Return the sandbox's processes by network namespace (its inode), newest first.

    One pass over /proc, which every address ``socket_owner`` tries for one query can
    share (``among``): on a machine of a thousand processes the pass is what costs.
    """
    groups: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if not _sandbox_uid(_uid(pid)):
            continue
        try:
            namespace = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        groups.setdefault(namespace, []).append(pid)
    for pids in groups.values():
        # The asker is most often the newest: a runner's tree of a hundred, made before
        # the step, is looked at last.
        pids.sort(reverse=True)
    return groups


def socket_owner(
    address: str,
    port: int,
    protocol: str = "tcp",
    among: dict[int, list[int]] | None = None,
) -> Proc | None:
    """Return the sandbox process holding the socket ``address:port`` (``tcp``, ``udp``).

    ``among`` is a ``sandbox_namespaces()`` already read; without it /proc is read now.
    """
    try:
        socket.inet_aton(address)
    except OSError:
        return None
    groups = sandbox_namespaces() if among is None else among
    for pids in groups.values():
        held: set[int] | None = None
        for pid in pids:
            if held is None:
                # Any member reads its namespace's table; one gone meanwhile, the next.
                held = _inodes(pid, address, port, protocol)
                if held is None:
                    continue
            # Only a namespace where the socket is bound has its holder: the others'
            # processes (a runner's tree of a hundred in each sandbox) are not opened.
            if not held:
                break
            if held & _sockets(pid):
                return describe(pid)
    return None
    by_namespace: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not _sandbox_uid(_uid(int(entry))):
            continue
        pid = int(entry)
        try:
            namespace = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        if namespace not in by_namespace:
            by_namespace[namespace] = _inodes(pid, address, port, protocol)
        # Only a namespace where the socket is bound has its holder: the others' processes
        # (a runner's tree of a hundred in each sandbox) are not opened one by one.
        held = by_namespace[namespace]
        if held and held & _sockets(pid):
            return describe(pid)
    return None

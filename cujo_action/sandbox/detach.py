"""Detach the host mounts a sandbox would only see as names, then start the sandbox.

bubblewrap binds the host's root recursively, so every mount under it enters the
sandbox's mount table, even where an empty tmpfs then covers it: the phase namespaces'
files under ``/run/netns``, whatever another program mounted under ``/tmp`` or ``/run``.
The kernel lists a covered mount in ``/proc/self/mountinfo`` all the same, and its path
tells a pull request where it runs.

Root runs this file between ``ip netns exec`` and ``setpriv`` (``jail.py``). In a mount
namespace of its own, a slave of the host's (nothing detached here is detached for the
host), it detaches every mount at or under a folder the sandbox covers with a tmpfs,
except one that holds a path bubblewrap still binds from. Then it execs the command.
It reads only the kernel's list of mounts, never a path a pull request could write.

Standard library only, run as ``python -I -S detach.py --cover DIR... --keep PATH... --
COMMAND...``.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
# Stacked mounts (two on one folder) take one round each; more than this is not a
# machine anyone runs, and the sandbox still starts.
ROUNDS = 8
FAILED = 125  # the jail reads this status as "the sandbox could not be set up"


def unescape(field: bytes) -> bytes:
    """Return a mountinfo path field with its octal escapes (space, tab, newline, \\) undone."""
    out = bytearray()
    i = 0
    while i < len(field):
        digits = field[i + 1 : i + 4]
        if field[i : i + 1] == b"\\" and len(digits) == 3 and all(48 <= d <= 55 for d in digits):
            out.append(int(digits, 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def mount_points(mountinfo: bytes) -> list[bytes]:
    """Return the mount point of each line of ``/proc/self/mountinfo``."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(b" ")
        if len(fields) > 4:
            points.append(unescape(fields[4]))
    return points


def under(path: bytes, folder: bytes) -> bool:
    """Return whether ``path`` is ``folder`` or lies below it."""
    top = folder.rstrip(b"/")
    return path == top or path.startswith(top + b"/")


def to_detach(points: list[bytes], cover: list[bytes], keep: list[bytes]) -> list[bytes]:
    """Return the mount points to detach, deepest first.

    Those at or under a covered folder, but not one that holds a kept path: bubblewrap
    still binds from there.
    """
    chosen = {
        p for p in points if any(under(p, c) for c in cover) and not any(under(k, p) for k in keep)
    }
    return sorted(chosen, key=lambda p: (-p.count(b"/"), p))


def split_args(argv: list[str]) -> tuple[list[bytes], list[bytes], list[str]]:
    """Return (covered folders, kept paths, command) from this program's arguments."""
    if "--" not in argv:
        raise ValueError("no command after --")
    end = argv.index("--")
    cover: list[bytes] = []
    keep: list[bytes] = []
    into = cover
    for arg in argv[:end]:
        if arg == "--cover":
            into = cover
        elif arg == "--keep":
            into = keep
        elif arg.startswith("/"):
            into.append(os.fsencode(arg))
        else:
            raise ValueError(f"not an absolute path: {arg!r}")
    command = argv[end + 1 :]
    if not command:
        raise ValueError("no command after --")
    return cover, keep, command


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.mount.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p,
    ]  # fmt: skip
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def detach(libc: ctypes.CDLL, cover: list[bytes], keep: list[bytes]) -> None:
    """Detach what ``to_detach`` names, round after round, until nothing is left."""
    for _ in range(ROUNDS):
        with open("/proc/self/mountinfo", "rb") as handle:
            targets = to_detach(mount_points(handle.read()), cover, keep)
        if not targets:
            return
        # One that cannot be detached (gone already) is left; the next round reads again.
        done = [p for p in targets if libc.umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) == 0]
        if not done:
            return


def main(argv: list[str]) -> int:
    """Detach, in a mount namespace of this process's own, then exec the command."""
    try:
        cover, keep, command = split_args(argv)
    except ValueError as exc:
        print(f"detach: {exc}", file=sys.stderr)
        return FAILED
    libc = _libc()
    # Nothing is detached unless this namespace is our own and receives nothing back.
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None):
        print(f"detach: no mount namespace of its own: {os.strerror(ctypes.get_errno())}",
              file=sys.stderr)  # fmt: skip
        return FAILED
    detach(libc, cover, keep)
    try:
        os.execv(command[0], command)  # noqa: S606 (the command the jail built)
    except OSError as exc:
        print(f"detach: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
    return FAILED


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

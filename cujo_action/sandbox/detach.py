"""Detach the host mounts a sandbox would only see as names, before it starts.

bubblewrap binds the host's root recursively, so every mount under it enters the
sandbox's mount table, even where an empty tmpfs then covers it: the phase namespaces'
files under ``/run/netns``, whatever another program mounted under ``/tmp`` or ``/run``.
The kernel lists a covered mount in ``/proc/self/mountinfo`` all the same, and its path
tells a pull request where it runs.

Root runs ``prefix``'s commands between ``ip netns exec`` and ``setpriv`` (``jail.py``),
in a mount namespace of its own that is a slave of the host's (``ip netns exec`` makes
one, else ``unshare`` does): nothing detached there is detached for the host. There,
``umount --recursive --lazy`` takes each mount at or under a folder the sandbox covers,
but never one that holds, or has below it, a mount that holds a path bubblewrap still
binds from. Then the command runs. The mounts come from the kernel's list, never from a
path a pull request could write; ``umount`` is told not to canonicalize them.

Which mounts is pure (``to_detach``); the caller reads the list.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

# Detach each mount named in $1 (one a line), then run the rest. A mount that cannot be
# detached (gone already) is left: only its name would show.
SCRIPT = "set -f; IFS='\n'; umount --recursive --lazy --no-canonicalize -- $1 2>/dev/null; "
SCRIPT += 'shift; exec "$@"'


def unescape(field: str) -> str:
    """Return a mountinfo path field with its octal escapes (space, tab, newline, \\) undone."""
    out = []
    i = 0
    while i < len(field):
        digits = field[i + 1 : i + 4]
        if field[i] == "\\" and len(digits) == 3 and all(d in "01234567" for d in digits):
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo: str) -> list[str]:
    """Return the mount point of each line of ``/proc/self/mountinfo``, in its order."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(unescape(fields[4]))
    return points


def under(path: str, folder: str) -> bool:
    """Return whether ``path`` is ``folder`` or lies below it."""
    top = folder.rstrip("/")
    return path == top or path.startswith(top + "/")


def to_detach(points: Sequence[str], cover: Sequence[str], keep: Sequence[str]) -> list[str]:
    """Return the mounts to detach recursively, each as often as mounts are stacked there.

    Those at or under a covered folder, but not one holding a kept path (bubblewrap binds
    from there), nor one with such a mount below it (its other mounts are named instead),
    nor one below another named.
    """
    candidates = [p for p in points if any(under(p, c) for c in cover)]
    held = {p for p in candidates if any(under(k, p) for k in keep)}
    free = sorted({p for p in candidates if not any(under(h, p) for h in held)})
    top: list[str] = []
    for path in free:
        if not any(under(path, t) for t in top):
            top.append(path)
    stacked = Counter(candidates)
    return [path for path in top for _ in range(stacked[path])]


def prefix(targets: Sequence[str], unshare: str | None) -> list[str]:
    """Return the argv that detaches ``targets``, then runs what follows it (nothing when
    there is nothing to detach).

    ``unshare`` makes the mount namespace of its own; None when the caller runs in one
    already (``ip netns exec`` makes one, a slave of the host's, before it execs).
    """
    if not targets:
        return []
    own = [unshare, "--mount", "--propagation", "slave", "--"] if unshare else []
    return [*own, "/bin/sh", "-c", SCRIPT, "sh", "\n".join(targets)]

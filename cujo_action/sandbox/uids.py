"""Hand each run a block of sandbox uids no other run on this machine holds."""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.sandbox.jail import JailError

# Per-run uids (no passwd entry, no sudo, no group): a block of UID_BLOCK from UID_BASE,
# held with a lock file while the run lives, so concurrent runs never share one.
UID_BASE = 1_900_000_000
UID_BLOCK = 8
UID_SLOTS = 4096
UID_LOCKS = Path("/run/cujo/uids")


class UidBlock:
    """A block of uids no other run on this machine holds, released with ``release``."""

    def __init__(self, first: int, fd: int) -> None:
        self.first, self._fd = first, fd

    def uid(self, index: int) -> int:
        """Return the ``index``-th uid of the block."""
        if not 0 <= index < UID_BLOCK:
            raise JailError(f"uid index {index} is outside the block of {UID_BLOCK}")
        return self.first + index

    def release(self) -> None:
        """Let another run take the block."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def allocate_uids(locks: Path = UID_LOCKS) -> UidBlock:
    """Take a free block of per-run uids (flock on a file per block, root only)."""
    locks.mkdir(mode=0o700, parents=True, exist_ok=True)
    if locks.is_symlink() or locks.stat().st_uid != 0:
        raise JailError(f"{locks} is not root's own folder")
    start = secrets.randbelow(UID_SLOTS)
    for step in range(UID_SLOTS):
        slot = (start + step) % UID_SLOTS
        fd = open_no_follow(locks / f"{slot}.lock", "lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return UidBlock(UID_BASE + slot * UID_BLOCK, fd)
    raise JailError("every block of sandbox uids is held by another run")

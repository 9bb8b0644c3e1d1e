"""<linux/fanotify.h> as Cujo uses it: the constants, the event structs and libc's calls.

Two groups read it: the decoy watcher (``watcher.py``, a notification group on the decoys
and the privilege tools) and the exec guard (``execguard.py``, a permission group that holds a
privilege tool's exec until it knows whose it is).
"""

from __future__ import annotations

import ctypes
import functools
import struct
from typing import Final

# Events (the mask of a mark, and of an event).
ACCESS: Final = 0x01
MODIFY: Final = 0x02
CLOSE_WRITE: Final = 0x08
OPEN: Final = 0x20
OPEN_EXEC: Final = 0x1000
Q_OVERFLOW: Final = 0x4000
OPEN_EXEC_PERM: Final = 0x0004_0000
# Events on a directory itself (a listing is FAN_ACCESS on it) are reported only with this.
ONDIR: Final = 0x4000_0000
# fanotify_init flags: the group's class, and how its fd behaves.
CLOEXEC: Final = 0x01
NONBLOCK: Final = 0x02
CLASS_NOTIF: Final = 0x00
CLASS_CONTENT: Final = 0x04
# fanotify_mark flags, and a permission event's answer.
MARK_ADD: Final = 0x01
MARK_DONT_FOLLOW: Final = 0x04
MARK_ONLYDIR: Final = 0x08
ALLOW: Final = 0x01
AT_FDCWD: Final = -100
METADATA_VERSION: Final = 3
# struct fanotify_event_metadata: event_len, vers, reserved, metadata_len, mask, fd, pid;
# struct fanotify_response: fd, response.
METADATA: Final = struct.Struct("=IBBHQii")
RESPONSE: Final = struct.Struct("=iI")


@functools.cache
def fanotify_libc() -> ctypes.CDLL:
    """Return the C library with fanotify_init and fanotify_mark typed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    libc.fanotify_init.restype = ctypes.c_int
    libc.fanotify_mark.argtypes = [
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint64,
        ctypes.c_int,
        ctypes.c_char_p,
    ]
    libc.fanotify_mark.restype = ctypes.c_int
    return libc

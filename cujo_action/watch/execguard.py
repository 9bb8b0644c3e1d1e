"""Name whoever runs sudo (or su, pkexec, doas) from a check, holding the exec until known."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cujo_action.watch import fanotify as fan

# A permission-class fanotify group (fanotify.py) whose FAN_OPEN_EXEC_PERM events hold
# the exec until the group answers.
_CMDLINE_CAP = 300


@dataclass(frozen=True)
class PrivilegedExec:
    """One exec of a privilege tool by a process of the check that is guarded."""

    path: str  # the tool
    pid: int
    phase: str
    exe: str | None  # what the process ran before the exec (the caller)
    cmdline: str  # the caller's command line


def _check(rc: int, what: str) -> int:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def _descends(pid: int, root: int) -> bool:
    """Return whether ``pid`` runs below ``root`` (its parent chain reaches it)."""
    for _ in range(256):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                pid = int(fh.read().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == root:
            return True
        if pid <= 1:
            return False
    return False


class ExecGuard:
    """Name every process of one check that executes sudo (or su, pkexec, …).

    A notification of the exec comes too late to name anyone: ``sudo`` refused by
    ``no_new_privs`` exits within milliseconds, and every watcher on the machine sees
    every exec. So this is a fanotify *permission* group: the kernel holds the exec until
    the guard answers, which it does once it has read who the caller is. The check's
    processes are those in its phases' network namespaces (full isolation; the namespace
    names the phase) or, without namespaces, those below ``descendants_of`` (the phase is
    ``phase()`` then). An exec by anyone else (the harness, the machine, another check or
    run) is let through unrecorded; every exec is let through (under full isolation the
    tool is already powerless). If the guard stops, the kernel lets everything pass.
    """

    def __init__(
        self,
        tools: Iterable[Path],
        namespaces: Mapping[int, str],
        *,
        descendants_of: int | None = None,
        phase: Callable[[], str] = lambda: "?",
    ) -> None:
        """Prepare to guard ``tools`` for namespaces (inode → phase) or a process tree."""
        self._tools = [Path(t) for t in tools]
        self._namespaces = dict(namespaces)
        self._root = descendants_of
        self._phase = phase
        self._fd = -1
        self._wake_r = self._wake_w = -1
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._events: list[PrivilegedExec] = []
        self.complete = True

    def start(self) -> None:
        """Mark the tools that exist and start answering; raise OSError when it cannot."""
        libc = fan.fanotify_libc()
        self._fd = _check(
            libc.fanotify_init(
                fan.CLASS_CONTENT | fan.CLOEXEC | fan.NONBLOCK,
                os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC,
            ),
            "fanotify_init",
        )
        try:
            for tool in self._tools:
                if tool.exists():
                    _check(
                        libc.fanotify_mark(
                            self._fd, fan.MARK_ADD, fan.OPEN_EXEC_PERM, fan.AT_FDCWD, bytes(tool)
                        ),
                        f"fanotify_mark {tool}",
                    )
        except OSError:
            os.close(self._fd)
            self._fd = -1
            raise
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="cujo-exec-guard", daemon=True)
        self._thread.start()

    def stop(self) -> list[PrivilegedExec]:
        """Stop guarding (anything still held is let through) and return the execs seen."""
        if self._thread is not None:
            os.write(self._wake_w, b"s")
            self._thread.join()
            self._thread = None
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
        if self._fd >= 0:
            with contextlib.suppress(BlockingIOError):
                self._answer_all()
            os.close(self._fd)
            self._fd = -1
        return self.events()

    def events(self) -> list[PrivilegedExec]:
        """Return the execs recorded so far."""
        with self._lock:
            return list(self._events)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    return
                with contextlib.suppress(BlockingIOError):
                    self._answer_all()
        except Exception:
            # Closing the group lets every held exec go on; the evidence is incomplete.
            self.complete = False
            raise

    def _answer_all(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 4096)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    # The kernel could not hand out the event's fd and has answered it.
                    self.complete = False
                    return
                raise
            if not data:
                return
            offset = 0
            while offset + fan.METADATA.size <= len(data):
                event_len, vers, _, _, mask, fd, pid = fan.METADATA.unpack_from(data, offset)
                if vers != fan.METADATA_VERSION or event_len < fan.METADATA.size:
                    raise RuntimeError(f"unknown fanotify event layout (version {vers})")
                offset += event_len
                if mask & fan.Q_OVERFLOW:
                    self.complete = False
                if fd < 0:
                    continue
                try:
                    self._note(fd, pid)
                finally:
                    # Answer first, whatever happened: the caller waits on it.
                    with contextlib.suppress(OSError):
                        os.write(self._fd, fan.RESPONSE.pack(fd, fan.ALLOW))
                    os.close(fd)

    def _note(self, fd: int, pid: int) -> None:
        try:
            inode = os.stat(f"/proc/{pid}/ns/net").st_ino
            tool = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # gone, or outside this pid namespace: not a process of ours
        phase = self._namespaces.get(inode)
        if phase is None and self._root is not None and _descends(pid, self._root):
            phase = self._phase()
        if phase is None:
            return
        try:
            exe: str | None = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            exe = None
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:_CMDLINE_CAP]
            cmdline = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            cmdline = ""
        with self._lock:
            self._events.append(PrivilegedExec(tool, pid, phase, exe, cmdline))

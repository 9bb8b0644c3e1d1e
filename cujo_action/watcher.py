"""Watch decoy files for opens, reads, writes and deletes, attributing each to a phase."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from inotify_simple import INotify
from inotify_simple import flags as in_flags

EventKind = Literal["open", "read", "write", "delete"]

# Moving a decoy away removes it from where code looks for it, as deleting does.
_KINDS: tuple[tuple[int, EventKind], ...] = (
    (in_flags.OPEN, "open"),
    (in_flags.ACCESS, "read"),
    (in_flags.MODIFY, "write"),
    (in_flags.DELETE_SELF, "delete"),
    (in_flags.MOVE_SELF, "delete"),
)
_MASK = 0
for _flag, _ in _KINDS:
    _MASK |= _flag


@dataclass(frozen=True)
class WatchEvent:
    """One access to a decoy file; pid and exe stay None until a source can name them."""

    ts: float
    path: str
    event: EventKind
    phase: str
    pid: int | None = None
    exe: str | None = None


class DecoyWatcher:
    """Record accesses to decoy files from a background thread, one event per kind and phase."""

    def __init__(self, paths: Iterable[Path], phase: Callable[[], str]) -> None:
        """Prepare to watch ``paths``; ``phase`` names the phase an event falls in."""
        self._paths = [Path(p) for p in paths]
        self._phase = phase
        self._events: list[WatchEvent] = []
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        # Serializes reading the inotify queue between the thread and sync()/stop().
        self._read_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._inotify: INotify | None = None
        self._wake_r = self._wake_w = -1
        self._wd_paths: dict[int, str] = {}
        self.complete = True
        """False once the kernel queue overflowed or the reader failed: events were lost."""

    def start(self) -> None:
        """Watch every path (each must exist) and start reading events in a thread."""
        if self._inotify is not None:
            raise RuntimeError("watcher already started")
        inotify = INotify()
        try:
            for path in self._paths:
                self._wd_paths[inotify.add_watch(path, _MASK)] = str(path)
        except OSError:
            inotify.close()
            raise
        self._inotify = inotify
        # A self-pipe wakes the thread for stop, so it blocks in select instead of
        # polling on a timer.
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="cujo-decoy-watcher", daemon=True)
        self._thread.start()

    def sync(self) -> None:
        """Record every event that happened before this call, in the current phase."""
        # Call before changing phase, so earlier accesses keep the phase they happened
        # in. It reads the queue itself: nothing depends on when the thread runs.
        if self._inotify is not None:
            self._drain()

    def stop(self) -> list[WatchEvent]:
        """Record the events already queued, stop watching, and return every event."""
        if self._inotify is not None:
            assert self._thread is not None
            os.write(self._wake_w, b"s")
            self._thread.join()
            self._drain()
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._inotify.close()
            self._inotify = None
            self._thread = None
        return self.events

    @property
    def events(self) -> list[WatchEvent]:
        """Return the events recorded so far."""
        with self._lock:
            return list(self._events)

    def _record(
        self, path: str, kind: EventKind, pid: int | None = None, exe: str | None = None
    ) -> None:
        """Record one access unless the same path, kind and phase is already recorded."""
        # The seam for a fanotify source: it calls this with the pid and exe it knows.
        phase = self._phase()
        key = (path, kind, phase)
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            self._events.append(WatchEvent(time.time(), path, kind, phase, pid, exe))

    def _drain(self) -> None:
        """Record every event in the inotify queue, without blocking."""
        with self._read_lock:
            assert self._inotify is not None
            while batch := self._inotify.read(timeout=0):
                for ev in batch:
                    if ev.mask & in_flags.Q_OVERFLOW:
                        self.complete = False
                        continue
                    path = self._wd_paths.get(ev.wd)
                    if path is None:
                        continue
                    for flag, kind in _KINDS:
                        if ev.mask & flag:
                            self._record(path, kind)

    def _run(self) -> None:
        assert self._inotify is not None
        try:
            while True:
                ready, _, _ = select.select([self._inotify.fileno(), self._wake_r], [], [])
                if self._wake_r in ready:
                    return  # stop() drains what is left, after joining this thread
                self._drain()
        except Exception:
            self.complete = False
            raise

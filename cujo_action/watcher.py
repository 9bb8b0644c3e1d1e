"""Watch decoy files for opens, reads, writes and deletes, attributing each to a phase."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, SimpleQueue
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
        self._requests: SimpleQueue[threading.Event] = SimpleQueue()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._inotify: INotify | None = None
        self._wake_r = self._wake_w = -1
        self._wd_paths: dict[int, str] = {}
        self.complete = True
        """False once the kernel queue overflowed or the reader failed: events were lost."""

    def start(self) -> None:
        """Watch every path (each must exist) and start reading events in a thread."""
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        inotify = INotify()
        try:
            for path in self._paths:
                self._wd_paths[inotify.add_watch(path, _MASK)] = str(path)
        except OSError:
            inotify.close()
            raise
        self._inotify = inotify
        # A self-pipe wakes the reader for sync and stop, so it blocks in select
        # instead of polling on a timer.
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="cujo-decoy-watcher", daemon=True)
        self._thread.start()

    def sync(self, timeout: float = 10.0) -> None:
        """Return once every event that happened before this call has been recorded."""
        # Call before changing phase, so earlier accesses keep the phase they happened in.
        if self._thread is None or not self._thread.is_alive():
            return
        done = threading.Event()
        self._requests.put(done)
        os.write(self._wake_w, b"y")
        if not done.wait(timeout):
            raise TimeoutError(f"decoy watcher did not sync within {timeout}s")

    def stop(self) -> list[WatchEvent]:
        """Record the events already queued, stop watching, and return every event."""
        thread = self._thread
        if thread is not None:
            self._stopping = True
            os.write(self._wake_w, b"s")
            thread.join()
            self._thread = None
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            if self._inotify is not None:
                self._inotify.close()
                self._inotify = None
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
                if self._wake_r not in ready:
                    self._drain()
                    continue
                os.read(self._wake_r, 4096)
                # Take the pending requests before draining: each was made after the
                # events it must see, so one drain afterwards covers them all.
                pending = []
                while True:
                    try:
                        pending.append(self._requests.get_nowait())
                    except Empty:
                        break
                self._drain()
                for done in pending:
                    done.set()
                if self._stopping:
                    return
        except Exception:
            self.complete = False
            raise
        finally:
            # Never leave a sync() caller waiting on a reader that is gone.
            while True:
                try:
                    self._requests.get_nowait().set()
                except Empty:
                    break

"""Watch decoy files, their folders and watched tools, naming each access's phase and process."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import select
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar

from inotify_simple import INotify
from inotify_simple import flags as in_flags

from cujo_action.limits import DECOY_READERS
from cujo_action.watch import fanotify as fan
from cujo_action.watch.procinfo import describe, parent_pids

# Two kernel sources, one picked per watcher (``backend``):
#
# * fanotify (root with CAP_SYS_ADMIN): a notification-class group with per-inode marks,
#   FAN_OPEN | FAN_ACCESS | FAN_MODIFY | FAN_CLOSE_WRITE on each decoy and FAN_OPEN_EXEC
#   on each privilege tool. Every event names the pid; the executable is read from
#   /proc/<pid>/exe when the event is read, so a process that already exited gives None,
#   and for an exec event the image is the caller's if it is read before the exec
#   finishes and the tool's after. Each event carries an fd of the file: its inode names
#   the decoy as the caller spelled it (a read through a hard link or another mount still
#   names the decoy; /proc/self/fd/N is only the fallback), and every fd is closed.
#   Deletes and renames come from an inotify watch alongside: fanotify reports
#   FAN_DELETE_SELF / FAN_MOVE_SELF only to FAN_REPORT_FID groups, whose events carry a
#   file handle instead of an fd, and whose delete is reported when the last reference
#   goes, by whoever drops it, not always the unlinker. Deletes therefore have no pid.
#   Each decoy folder (``sandbox_probing.py``) has a mark of its own, FAN_ACCESS | FAN_ONDIR:
#   listing it (getdents) is the event ``list``. Opening it is not recorded (path walks
#   and ``openat`` users open folders for their own reasons), nor is anything inside it
#   (the decoys have their own marks).
# * inotify (everywhere else): the same kinds with no pid or exe, so nothing can be
#   ignored as the harness's own. Execs cannot be told from reads: an IN_OPEN of a tool by
#   anything (an exec, but also `cat /usr/bin/sudo`) is recorded as an exec. A folder's
#   watch reports its own listing (an IN_ACCESS without a name); events of the files in it
#   carry a name and are left to their own watches.
#
# Events are recorded by a thread and by sync()/stop(), which read the queues themselves:
# both kernels queue an event before the accessing syscall returns, so once a child has
# exited, sync() records what it did in the current phase without waiting on anything.

DecoyKind = Literal["open", "read", "write", "delete", "list"]
ExecKind = Literal["exec"]
EventKind = Literal[DecoyKind, ExecKind]
Backend = Literal["fanotify", "inotify"]
KindT = TypeVar("KindT", DecoyKind, ExecKind)


# Accesses are described in full (command line, parents, origin) once per file, kind,
# phase and process, for this many processes of each file, kind and phase (a loop of
# readers is one behaviour); every reading process is still kept as a ``Reader``.
PROCESSES_PER_KIND = 16

# Moving a decoy away removes it from where code looks for it, as deleting does.
_GONE_KINDS: tuple[tuple[int, DecoyKind], ...] = (
    (in_flags.DELETE_SELF, "delete"),
    (in_flags.MOVE_SELF, "delete"),
)
_IN_DECOY_KINDS: tuple[tuple[int, EventKind], ...] = (
    (in_flags.OPEN, "open"),
    (in_flags.ACCESS, "read"),
    (in_flags.MODIFY, "write"),
    *_GONE_KINDS,
)
_IN_EXEC_KINDS: tuple[tuple[int, EventKind], ...] = ((in_flags.OPEN, "exec"),)
_IN_FOLDER_KINDS: tuple[tuple[int, EventKind], ...] = ((in_flags.ACCESS, "list"),)

# Closing a file opened for writing counts as a write even when nothing was written:
# opening a decoy to write it is tampering whatever came of it.
_FAN_KINDS: tuple[tuple[int, EventKind], ...] = (
    (fan.OPEN, "open"),
    (fan.ACCESS, "read"),
    (fan.MODIFY, "write"),
    (fan.CLOSE_WRITE, "write"),
    (fan.OPEN_EXEC, "exec"),
)
_FAN_DECOY_MASK = fan.OPEN | fan.ACCESS | fan.MODIFY | fan.CLOSE_WRITE
# On a folder, only a listing is recorded.
_FAN_FOLDER_KINDS: tuple[tuple[int, EventKind], ...] = ((fan.ACCESS, "list"),)

# Errors that say a path is wrong rather than that fanotify cannot work here.
_PATH_ERRORS = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP, errno.ENAMETOOLONG}
)


def _mask(kinds: Iterable[tuple[int, object]]) -> int:
    """Return the union of the flags in ``kinds``."""
    return functools.reduce(lambda acc, kind: acc | kind[0], kinds, 0)


@dataclass(frozen=True)
class WatchEvent(Generic[KindT]):
    """One access to a watched file; pid and exe stay None where the source cannot name them."""

    ts: float
    path: str
    event: KindT
    phase: str
    pid: int | None = None
    exe: str | None = None
    cmdline: str | None = None
    parents: tuple[str, ...] = ()  # "pid executable", nearest first (procinfo.py)
    origin: str = ""


@dataclass(frozen=True)
class Reader:
    """A process that opened or read a decoy: kept for every one, however many there are."""

    pid: int
    path: str
    phase: str
    ts: float
    parents: tuple[int, ...] = ()  # nearest first, up to the sandbox's


def _fanotify_init() -> int:
    """Open a notification-class fanotify group and return its fd."""
    try:
        init = fan.fanotify_libc().fanotify_init
    except (OSError, AttributeError) as exc:
        raise OSError(errno.ENOSYS, "the C library has no fanotify_init") from exc
    # The event fds only feed fstat and readlink: read-only, and never inherited.
    fd: int = init(
        fan.CLASS_NOTIF | fan.CLOEXEC | fan.NONBLOCK,
        os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC,
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def _fanotify_mark(group: int, mask: int, path: Path, flags: int = 0) -> None:
    """Add ``mask`` to the inode mark of ``path`` in ``group`` (symlinks followed unless
    ``flags`` holds FAN_MARK_DONT_FOLLOW)."""
    rc: int = fan.fanotify_libc().fanotify_mark(
        group, fan.MARK_ADD | flags, mask, fan.AT_FDCWD, os.fsencode(path)
    )
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(path))


def fanotify_unavailable() -> str | None:
    """Return why fanotify cannot be used here, or None when it can."""
    try:
        fd = _fanotify_init()
    except OSError as exc:
        return f"fanotify_init failed: {exc.strerror} (needs root with CAP_SYS_ADMIN)"
    os.close(fd)
    return None


def _inode(path: Path) -> tuple[int, int]:
    """Return the device and inode ``path`` names, following symlinks."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _exe(pid: int | None) -> str | None:
    """Return the executable ``pid`` runs, or None when it is gone or hidden."""
    if pid is None:
        return None
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _fd_path(fd: int) -> str:
    """Return the path an fd of this process was opened at."""
    return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")


class DecoyWatcher:
    """Record accesses to decoys and execs of tools from a thread, once per kind and phase."""

    def __init__(
        self,
        paths: Iterable[Path],
        phase: Callable[[], str],
        *,
        exec_watch: Iterable[Path] = (),
        folders: Iterable[Path] = (),
        ignore_pids: Callable[[int], bool] | AbstractSet[int] | None = None,
        backend: Literal["auto", "fanotify", "inotify"] = "auto",
        on_event: Callable[[int, WatchEvent[DecoyKind]], None] | None = None,
        readers_cap: int = DECOY_READERS,
    ) -> None:
        """Prepare to watch ``paths``, ``exec_watch`` and ``folders``; ``phase`` names the phase.

        A folder is watched for listings only, and never through a symlink: a folder
        that is one is an error at start, as a missing decoy is.

        ``on_event`` is called with each decoy event as it is recorded and its number
        (1, 2, … in the order of ``events``), from the thread that recorded it.
        """
        self._on_event = on_event
        # ignore_pids is consulted per event, so a set the caller grows later (a proxy
        # started after the watcher) still counts. This process is always ignored.
        self._paths = [Path(p) for p in paths]
        self._exec_paths = [Path(p) for p in exec_watch]
        self._folders = [Path(p) for p in folders]
        self._phase = phase
        self._ignore: Callable[[int], bool]
        if ignore_pids is None:
            self._ignore = lambda pid: False
        elif isinstance(ignore_pids, AbstractSet):
            self._ignore = ignore_pids.__contains__
        else:
            self._ignore = ignore_pids
        self._requested = backend
        self._backend: Backend
        if backend == "auto":
            self._backend = "fanotify" if fanotify_unavailable() is None else "inotify"
        else:
            self._backend = backend
        self._events: list[WatchEvent[DecoyKind]] = []
        self._execs: list[WatchEvent[ExecKind]] = []
        self._seen: set[tuple[str, str, str, int | None]] = set()
        self._per_kind: dict[tuple[str, str, str], int] = {}
        self._readers: list[Reader] = []
        self._reader_keys: set[tuple[int, str, str]] = set()
        self._readers_cap = readers_cap
        self.readers_dropped = 0
        """Readers past ``readers_cap``: counted, not kept (the check cuts decoy-readers)."""
        self.coalesced = 0
        """Accesses past ``PROCESSES_PER_KIND`` of one file, kind and phase: not described."""
        self._lock = threading.Lock()
        # Serializes reading the kernel queues between the thread and sync()/stop().
        self._read_lock = threading.Lock()
        # Set while the harness itself looks at HOME (``own_work``): inotify events dropped.
        self._own = False
        self._thread: threading.Thread | None = None
        self._fanotify = -1
        self._names: dict[tuple[int, int], str] = {}
        self._folder_inodes: set[tuple[int, int]] = set()
        self._inotify: INotify | None = None
        self._wd_paths: dict[int, tuple[str, tuple[tuple[int, EventKind], ...]]] = {}
        self._wake_r = self._wake_w = -1
        self.complete = True
        """False once events were lost: a queue overflowed, an fd ran out, or the reader failed."""

    @property
    def backend(self) -> Backend:
        """Return the kernel source in use, or the one start() will try first."""
        return self._backend

    def start(self) -> None:
        """Watch every path (each decoy must exist) and start reading events in a thread."""
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        if self._backend == "fanotify":
            try:
                self._open_fanotify()
            except OSError as exc:
                self._close_sources()
                if self._requested == "fanotify" or exc.errno in _PATH_ERRORS:
                    raise
                # The kernel refused a mark (an old kernel without FAN_OPEN_EXEC, say):
                # inotify still sees the decoys, without the process.
                self._backend = "inotify"
        if self._backend == "inotify":
            try:
                self._open_inotify()
            except OSError:
                self._close_sources()
                raise
        # A self-pipe wakes the thread for stop, so it blocks in poll instead of
        # polling on a timer.
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="cujo-decoy-watcher", daemon=True)
        self._thread.start()

    def sync(self) -> None:
        """Record every event that happened before this call, in the current phase."""
        # Call before changing phase, so earlier accesses keep the phase they happened
        # in. It reads the queues itself: nothing depends on when the thread runs.
        if self._thread is not None:
            self._drain()

    @contextlib.contextmanager
    def own_work(self) -> Iterator[None]:
        """Within: the harness's own look at HOME (unpacking the install, scanning), while
        no command of this check runs and no other check can reach this HOME. inotify
        cannot tell whose an access was, so what it sees then is dropped; fanotify names
        the process, and the harness's own are ignored there as always."""
        self.sync()
        self._own = True
        try:
            yield
        finally:
            # inotify queues an event when the access happens: all of ours are in by now.
            self.sync()
            self._own = False

    def stop(self) -> list[WatchEvent[DecoyKind]]:
        """Record the events already queued, stop watching, and return the decoy events."""
        if self._thread is not None:
            os.write(self._wake_w, b"s")
            self._thread.join()
            try:
                self._drain()
            finally:
                for fd in (self._wake_r, self._wake_w):
                    os.close(fd)
                self._close_sources()
                self._thread = None
        return self.events

    @property
    def events(self) -> list[WatchEvent[DecoyKind]]:
        """Return the decoy events recorded so far."""
        with self._lock:
            return list(self._events)

    @property
    def readers(self) -> list[Reader]:
        """Return every process seen opening or reading a decoy, once per file and phase."""
        with self._lock:
            return list(self._readers)

    def exec_events(self) -> list[WatchEvent[ExecKind]]:
        """Return the execs of watched tools recorded so far."""
        with self._lock:
            return list(self._execs)

    def _open_fanotify(self) -> None:
        """Mark the decoys and tools in a new fanotify group, and watch decoys for deletes."""
        self._fanotify = _fanotify_init()
        for path in self._paths:
            _fanotify_mark(self._fanotify, _FAN_DECOY_MASK, path)
            self._names[_inode(path)] = str(path)
        for path in self._exec_paths:
            try:
                _fanotify_mark(self._fanotify, fan.OPEN_EXEC, path)
                self._names.setdefault(_inode(path), str(path))
            except FileNotFoundError:
                continue
        for folder in self._folders:
            # The mark is on the folder's inode; a link in its place is refused (ENOTDIR).
            _fanotify_mark(self._fanotify, fan.ACCESS | fan.ONDIR, folder,
                           fan.MARK_DONT_FOLLOW | fan.MARK_ONLYDIR)  # fmt: skip
            st = os.lstat(folder)
            self._folder_inodes.add((st.st_dev, st.st_ino))
            self._names[(st.st_dev, st.st_ino)] = str(folder)
        self._inotify = INotify()
        for path in self._paths:
            wd = self._inotify.add_watch(path, _mask(_GONE_KINDS))
            self._wd_paths[wd] = (str(path), _GONE_KINDS)

    def _open_inotify(self) -> None:
        """Watch the decoys for every kind and the tools for opens."""
        self._inotify = INotify()
        for path in self._paths:
            wd = self._inotify.add_watch(path, _mask(_IN_DECOY_KINDS))
            self._wd_paths[wd] = (str(path), _IN_DECOY_KINDS)
        for path in self._exec_paths:
            try:
                wd = self._inotify.add_watch(path, _mask(_IN_EXEC_KINDS))
            except FileNotFoundError:
                continue
            self._wd_paths[wd] = (str(path), _IN_EXEC_KINDS)
        for folder in self._folders:
            mask = _mask(_IN_FOLDER_KINDS) | in_flags.DONT_FOLLOW | in_flags.ONLYDIR
            wd = self._inotify.add_watch(folder, mask)
            self._wd_paths[wd] = (str(folder), _IN_FOLDER_KINDS)

    def _close_sources(self) -> None:
        """Close whichever kernel sources are open."""
        if self._fanotify >= 0:
            os.close(self._fanotify)
            self._fanotify = -1
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._names.clear()
        self._folder_inodes.clear()
        self._wd_paths.clear()

    def _record(
        self, path: str, kind: EventKind, pid: int | None = None, exe: str | None = None
    ) -> None:
        """Record one access unless the same path, kind, phase and process is recorded."""
        ts = time.time()  # before anything slower: a reader's time bounds what it did next
        phase = self._phase()
        key = (path, kind, phase, pid)
        if pid is not None and kind in ("open", "read"):
            self._note_reader(pid, path, phase, ts)
        with self._lock:
            if key in self._seen:
                return
            if self._per_kind.get(key[:3], 0) >= PROCESSES_PER_KIND:
                self._seen.add(key)
                self.coalesced += 1
                return
            self._seen.add(key)
            self._per_kind[key[:3]] = self._per_kind.get(key[:3], 0) + 1
        # Named while it may still run: its command line and parents are the kernel's.
        who = describe(pid) if pid is not None and kind != "exec" else None
        event_args = (path, kind, phase, pid, exe, who.cmdline if who else None,
                      who.parents if who else (), who.origin if who else "")  # fmt: skip
        with self._lock:
            if kind == "exec":
                self._execs.append(WatchEvent(ts, *event_args))  # type: ignore[arg-type]
            else:
                event: WatchEvent[DecoyKind] = WatchEvent(ts, *event_args)  # type: ignore[arg-type]
                self._events.append(event)
                if self._on_event is not None:
                    # Under the lock: the numbers follow the order of `events`.
                    self._on_event(len(self._events), event)

    def _note_reader(self, pid: int, path: str, phase: str, ts: float) -> None:
        """Keep ``pid`` as a reader of ``path`` in ``phase`` (once), or count it past the cap."""
        key = (pid, path, phase)
        with self._lock:
            if key in self._reader_keys:
                return
            self._reader_keys.add(key)
            if len(self._readers) >= self._readers_cap:
                self.readers_dropped += 1
                return
        # Only the parents' pids, from /proc/<pid>/stat: cheap enough for every reader.
        reader = Reader(pid, path, phase, ts, parent_pids(pid))
        with self._lock:
            self._readers.append(reader)

    def _drain(self) -> None:
        """Record every queued event, without blocking."""
        with self._read_lock:
            # fanotify first: in one drain, reads of a decoy come before its delete.
            if self._fanotify >= 0:
                self._drain_fanotify()
            if self._inotify is not None:
                self._drain_inotify()

    def _drain_fanotify(self) -> None:
        """Record every event in the fanotify queue."""
        while True:
            try:
                # One event per read: the kernel opens an fd for each event it hands
                # out, and if it cannot (EMFILE) it drops that event, saying so only
                # when it is the first of the read.
                data = os.read(self._fanotify, fan.METADATA.size)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                self.complete = False
                continue
            if not data:
                return
            self._handle_fanotify(data)

    def _handle_fanotify(self, data: bytes) -> None:
        """Record the fanotify events in ``data`` and close every fd they carry."""
        records: list[tuple[int, int, int]] = []
        offset = 0
        while offset + fan.METADATA.size <= len(data):
            event_len, vers, _, _, mask, fd, pid = fan.METADATA.unpack_from(data, offset)
            if vers != fan.METADATA_VERSION or event_len < fan.METADATA.size:
                raise RuntimeError(f"unknown fanotify event layout (version {vers})")
            records.append((mask, fd, pid))
            offset += event_len
        try:
            for mask, fd, pid in records:
                self._fanotify_event(mask, fd, pid)
        finally:
            for _, fd, _ in records:
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def _fanotify_event(self, mask: int, fd: int, pid: int) -> None:
        """Record one fanotify event unless its process is ignored."""
        if mask & fan.Q_OVERFLOW:
            self.complete = False
            return
        if fd < 0:
            return
        # pid 0: a process outside this pid namespace, which cannot be the harness.
        who = pid if pid > 0 else None
        if who is not None and (who == os.getpid() or self._ignore(who)):
            return
        st = os.fstat(fd)
        inode = (st.st_dev, st.st_ino)
        path = self._names.get(inode) or _fd_path(fd)
        kinds = _FAN_KINDS
        if stat.S_ISDIR(st.st_mode):
            if inode not in self._folder_inodes:
                return
            kinds = _FAN_FOLDER_KINDS
        exe = _exe(who)
        for flag, kind in kinds:
            if mask & flag:
                self._record(path, kind, who, exe)

    def _drain_inotify(self) -> None:
        """Record every event in the inotify queue."""
        assert self._inotify is not None
        while batch := self._inotify.read(timeout=0):
            for ev in batch:
                if ev.mask & in_flags.Q_OVERFLOW:
                    self.complete = False
                    continue
                watched = self._wd_paths.get(ev.wd)
                if watched is None or ev.name or self._own:
                    # A name: a file inside a watched folder, which has its own watch.
                    continue
                path, kinds = watched
                for flag, kind in kinds:
                    if ev.mask & flag:
                        self._record(path, kind)

    def _run(self) -> None:
        poller = select.poll()
        for fd in (self._fanotify, self._inotify.fileno() if self._inotify else -1):
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    return  # stop() drains what is left, after joining this thread
                self._drain()
        except Exception:
            self.complete = False
            raise

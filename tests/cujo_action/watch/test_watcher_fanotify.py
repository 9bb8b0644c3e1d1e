"""The fanotify source: which process touched a decoy or ran a privilege tool."""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_watcher import OPEN, READ, PhaseClock, kinds, needs_fanotify, tool_copy, touch

from cujo_action.watch import watcher as watcher_module
from cujo_action.watch.sandbox_probing import PRIVILEGE_TOOLS
from cujo_action.watch.watcher import PROCESSES_PER_KIND, DecoyWatcher, WatchEvent

pytestmark = needs_fanotify

PYTHON = os.path.realpath(sys.executable)


def which(name: str) -> str:
    """Return the real path of an installed program, as /proc/<pid>/exe shows it."""
    found = shutil.which(name)
    assert found is not None, f"`{name}` is not installed"
    return os.path.realpath(found)


def spawn(code: str, *args: Path) -> int:
    """Run Python code in a child that must succeed, and return its pid."""
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)])
    assert proc.wait() == 0
    return proc.pid


@contextmanager
def cat_alive(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Have `cat` read ``path`` and then wait on stdin, so its /proc entry outlives the read."""
    content = f"secret in {path.name}\n".encode()
    proc = subprocess.Popen(["cat", str(path), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        # cat has read the decoy once its content comes out; the kernel queued the open
        # and the read before read(2) returned in cat.
        assert proc.stdout.read(len(content)) == content
        yield proc
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def who(events: list[WatchEvent[Any]]) -> list[tuple[str, str, str, int | None]]:
    return [(Path(e.path).name, e.event, e.phase, e.pid) for e in events]


def test_auto_picks_fanotify_here(tmp_path: Path) -> None:
    (creds,) = touch(tmp_path, "credentials")
    assert DecoyWatcher([creds], PhaseClock("install")).backend == "fanotify"


def test_a_cat_of_a_decoy_names_the_pid_and_the_executable(tmp_path: Path) -> None:
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    watcher.start()
    with cat_alive(creds) as cat:
        watcher.sync()
        events = watcher.events
    watcher.stop()
    assert who(events) == [
        ("credentials", "open", "install", cat.pid),
        ("credentials", "read", "install", cat.pid),
    ]
    assert {e.exe for e in events} == {which("cat")}
    assert {e.path for e in events} == {str(creds)}


def test_writes_deletes_and_renames_are_seen_and_phases_follow_sync(tmp_path: Path) -> None:
    creds, npmrc, key, hosts = touch(tmp_path, "credentials", ".npmrc", "id_ed25519", "hosts.yml")
    clock = PhaseClock("install")
    watcher = DecoyWatcher([creds, npmrc, key, hosts], clock, backend="fanotify")
    watcher.start()
    reader = spawn(READ, creds)
    watcher.sync()
    clock.phase = "import"
    writer = spawn("import sys; open(sys.argv[1], 'a').write('more')", npmrc)
    # Opening to write and writing nothing still counts: FAN_CLOSE_WRITE.
    opener = spawn("import sys; open(sys.argv[1], 'r+').close()", creds)
    watcher.sync()
    clock.phase = "test"
    spawn("import os, sys; os.unlink(sys.argv[1])", key)
    spawn("import os, sys; os.rename(sys.argv[1], sys.argv[1] + '.bak')", hosts)
    events = watcher.stop()

    assert who(events) == [
        ("credentials", "open", "install", reader),
        ("credentials", "read", "install", reader),
        (".npmrc", "open", "import", writer),
        (".npmrc", "write", "import", writer),
        ("credentials", "open", "import", opener),
        ("credentials", "write", "import", opener),
        # Deletes and renames come from inotify: no process.
        ("id_ed25519", "delete", "test", None),
        ("hosts.yml", "delete", "test", None),
    ]
    assert {e.exe for e in events if e.pid is not None} <= {PYTHON, None}
    assert watcher.complete


def test_the_watchers_own_reads_and_ignored_pids_are_dropped(tmp_path: Path) -> None:
    creds, npmrc = touch(tmp_path, "credentials", ".npmrc")
    harness: set[int] = set()
    watcher = DecoyWatcher(
        [creds, npmrc], PhaseClock("install"), ignore_pids=harness, backend="fanotify"
    )
    watcher.start()
    creds.read_text()
    npmrc.write_text("rewritten by the harness\n")
    # A harness helper started after the watcher: the caller adds its pid before it acts.
    helper = subprocess.Popen(
        [sys.executable, "-c", "import sys; input(); open(sys.argv[1]).read()", str(creds)],
        stdin=subprocess.PIPE,
    )
    harness.add(helper.pid)
    helper.communicate(b"go\n")
    assert helper.returncode == 0
    watcher.sync()
    assert watcher.events == []
    outsider = spawn(OPEN, npmrc)
    assert who(watcher.stop()) == [(".npmrc", "open", "install", outsider)]


def test_an_ignore_predicate_is_asked_about_each_process(tmp_path: Path) -> None:
    (creds,) = touch(tmp_path, "credentials")
    asked: list[int] = []

    def ignore(pid: int) -> bool:
        asked.append(pid)
        return True

    watcher = DecoyWatcher([creds], PhaseClock("install"), ignore_pids=ignore, backend="fanotify")
    watcher.start()
    child = spawn(READ, creds)
    assert watcher.stop() == []
    assert set(asked) == {child}


def test_a_read_through_a_hard_link_names_the_decoy(tmp_path: Path) -> None:
    (creds,) = touch(tmp_path, "credentials")
    alias = tmp_path / "innocent.txt"
    os.link(creds, alias)
    watcher = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    watcher.start()
    spawn(READ, alias)
    assert kinds(watcher.stop()) == [
        ("credentials", "open", "install"),
        ("credentials", "read", "install"),
    ]


def test_every_event_fd_is_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (creds,) = touch(tmp_path, "credentials")
    before_start = open_fds()
    watcher = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    handled: list[int] = []
    handle = watcher._fanotify_event

    def counting(mask: int, fd: int, pid: int) -> None:
        handled.append(fd)
        handle(mask, fd, pid)

    monkeypatch.setattr(watcher, "_fanotify_event", counting)
    watcher.start()
    watcher.sync()
    running = open_fds()
    # 300 processes: events of different processes never merge in the kernel queue, so
    # each one reaches the watcher with an fd of its own.
    subprocess.run(
        ["sh", "-c", 'for i in $(seq 300); do cat "$1"; done', "sh", str(creds)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    watcher.sync()
    assert open_fds() == running
    assert len(handled) >= 300
    assert all(fd >= 0 for fd in handled)
    # One event per process, for a few processes of each kind: 300 readers are not 600.
    seen = kinds(watcher.stop())
    assert sorted(set(seen)) == [
        ("credentials", "open", "install"),
        ("credentials", "read", "install"),
    ]
    assert seen.count(("credentials", "open", "install")) == PROCESSES_PER_KIND
    assert open_fds() == before_start


def test_an_exec_of_a_privilege_tool_names_the_process(tmp_path: Path) -> None:
    (creds,) = touch(tmp_path, "credentials")
    tool = tool_copy(tmp_path, "sudo", of="cat")
    clock = PhaseClock("install")
    watcher = DecoyWatcher([creds], clock, exec_watch=[tool], backend="fanotify")
    watcher.start()
    # Reading the tool is not running it.
    spawn("import sys; open(sys.argv[1], 'rb').read()", tool)
    watcher.sync()
    clock.phase = "test"
    proc = subprocess.Popen([tool, "-"], stdin=subprocess.PIPE)
    # Popen returns once the exec succeeded; the tool now waits on stdin, alive.
    watcher.sync()
    proc.communicate(b"")
    events = watcher.exec_events()
    assert who(events) == [("sudo", "exec", "test", proc.pid)]
    # The image is read when the event is: the caller's before the exec completes,
    # the tool's after.
    assert events[0].exe in {PYTHON, str(tool)}
    assert watcher.stop() == []


def test_a_listing_of_a_decoy_folder_names_the_process(tmp_path: Path) -> None:
    creds, other = touch(tmp_path, ".ssh/id_ed25519", "elsewhere/README")
    watcher = DecoyWatcher([creds], PhaseClock("test"), folders=[creds.parent], backend="fanotify")
    watcher.start()
    spawn("import os, sys; os.listdir(sys.argv[1])", other.parent)
    # The lister lists, says so, and waits on stdin: alive while it is named.
    code = "import os, sys; os.listdir(sys.argv[1]); print('listed', flush=True); sys.stdin.read()"
    lister = subprocess.Popen(
        [sys.executable, "-c", code, str(creds.parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert lister.stdout is not None
    try:
        assert lister.stdout.readline() == b"listed\n"
        watcher.sync()
        events = watcher.events
    finally:
        lister.communicate(b"")
    watcher.stop()

    assert who(events) == [(".ssh", "list", "test", lister.pid)]
    assert events[0].exe == PYTHON
    assert events[0].cmdline is not None
    assert "listdir" in events[0].cmdline


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        pytest.param(Path("/usr/bin/sudo"), ["-n", "true"], id="sudo"),
        pytest.param(Path("/usr/bin/su"), ["root", "-c", "true"], id="su"),
    ],
)
def test_a_real_privilege_tool_is_seen(tmp_path: Path, tool: Path, args: list[str]) -> None:
    if not tool.exists():
        pytest.skip(f"{tool} is not installed")
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher(
        [creds], PhaseClock("install"), exec_watch=PRIVILEGE_TOOLS, backend="fanotify"
    )
    watcher.start()
    # Whether the tool lets root through does not matter: running it is the evidence.
    proc = subprocess.Popen(
        [tool, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proc.wait()
    watcher.stop()
    assert who(watcher.exec_events()) == [(tool.name, "exec", "install", proc.pid)]


def test_a_refused_mark_falls_back_to_inotify_without_leaking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (creds,) = touch(tmp_path, "credentials")

    def refused(group: int, mask: int, path: Path) -> None:
        raise OSError(errno.EINVAL, "Invalid argument", str(path))

    monkeypatch.setattr(watcher_module, "_fanotify_mark", refused)
    before = open_fds()
    watcher = DecoyWatcher([creds], PhaseClock("install"))
    watcher.start()
    assert watcher.backend == "inotify"
    spawn(OPEN, creds)
    assert who(watcher.stop()) == [("credentials", "open", "install", None)]
    assert open_fds() == before
    forced = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    with pytest.raises(OSError, match="Invalid argument"):
        forced.start()
    assert open_fds() == before


@pytest.fixture
def many_files_dir(tmp_path: Path) -> Iterator[Path]:
    """Return a directory on tmpfs where there is one: 16k files on a disk take seconds."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="cujo-test-") as name:
        yield Path(name)


def test_a_queue_overflow_marks_the_evidence_incomplete(many_files_dir: Path) -> None:
    limit = int(Path("/proc/sys/fs/fanotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"the fanotify queue holds {limit} events: too many files to overflow it")
    # Events on different files never merge: one more file than the queue holds.
    paths = [many_files_dir / f"{n:05}" for n in range(limit + 1)]
    for path in paths:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    watcher = DecoyWatcher(paths, PhaseClock("install"), backend="fanotify")
    watcher.start()
    # Holding the read lock stands in for a reader the scheduler has not run while the
    # queue filled: the thread waits on it instead of reading.
    with watcher._read_lock:
        spawn(
            "import os, sys\nfor e in os.scandir(sys.argv[1]): open(e.path).close()",
            many_files_dir,
        )
        assert watcher.complete
    watcher.sync()
    assert not watcher.complete
    events = watcher.stop()
    assert len(events) == limit
    assert {e.event for e in events} == {"open"}


def test_an_event_the_kernel_cannot_give_an_fd_marks_the_evidence_incomplete(
    tmp_path: Path,
) -> None:
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    watcher.start()
    code = "import sys; input(); open(sys.argv[1]).read(); print('done')"
    reader = subprocess.Popen(
        [sys.executable, "-c", code, str(creds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert reader.stdin is not None
    assert reader.stdout is not None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.close(lowest_free)
    # With no fd number left, the kernel cannot open the decoy for the watcher and drops
    # the event: the watcher must say events were lost.
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        reader.stdin.write(b"go\n")
        reader.stdin.flush()
        assert reader.stdout.readline() == b"done\n"
        watcher.sync()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    reader.stdin.close()
    reader.stdout.close()
    assert reader.wait() == 0
    assert not watcher.complete
    assert watcher.stop() == []


def test_every_process_that_reads_a_decoy_is_kept_as_a_reader(tmp_path: Path) -> None:
    # Twenty-four readers: past the few described in full, each still a reader with its
    # own pid, so a sender among the last is never lost.
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    watcher.start()
    pids = [spawn(READ, creds) for _ in range(PROCESSES_PER_KIND + 8)]
    watcher.sync()
    events = watcher.stop()
    readers = watcher.readers
    assert [r.pid for r in readers] == pids
    assert {(Path(r.path).name, r.phase) for r in readers} == {("credentials", "install")}
    assert all(r.ts > 0 for r in readers)
    assert len({e.pid for e in events}) == PROCESSES_PER_KIND
    assert watcher.coalesced >= 8
    assert watcher.readers_dropped == 0


def test_readers_past_the_cap_are_counted(tmp_path: Path) -> None:
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher([creds], PhaseClock("test"), backend="fanotify", readers_cap=3)
    watcher.start()
    pids = [spawn(READ, creds) for _ in range(5)]
    watcher.stop()
    assert [r.pid for r in watcher.readers] == pids[:3]
    assert watcher.readers_dropped == 2

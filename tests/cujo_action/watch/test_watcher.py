"""The decoy watcher on real files touched by real subprocesses."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from cujo_action.watch import watcher as watcher_module
from cujo_action.watch.watcher import DecoyWatcher, WatchEvent, fanotify_unavailable

Backend = Literal["inotify", "fanotify"]
FANOTIFY = fanotify_unavailable()
needs_fanotify = [
    pytest.mark.root,
    pytest.mark.skipif(FANOTIFY is not None, reason=f"fanotify unavailable: {FANOTIFY}"),
]


@pytest.fixture(params=["inotify", pytest.param("fanotify", marks=needs_fanotify)])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Run a test once per kernel source: every guarantee here holds for both."""
    choice: Backend = request.param
    return choice


class PhaseClock:
    """Hold the current phase the way arm.py does: a value a callable reads."""

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def __call__(self) -> str:
        return self.phase


def touch(tmp_path: Path, *names: str) -> list[Path]:
    paths = []
    for name in names:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"secret in {name}\n")
        paths.append(path)
    return paths


def run(code: str, *args: Path) -> None:
    """Run Python code in a child process that must succeed."""
    subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True)


READ = "import sys; open(sys.argv[1]).read()"
OPEN = "import sys; open(sys.argv[1]).close()"
WRITE = "import sys; open(sys.argv[1], 'a').write('more')"
UNLINK = "import os, sys; os.unlink(sys.argv[1])"


def kinds(events: list[WatchEvent[Any]]) -> list[tuple[str, str, str]]:
    return [(Path(e.path).name, e.event, e.phase) for e in events]


def test_open_read_write_delete_are_seen_in_the_phase_they_happen_in(
    tmp_path: Path, backend: Backend
) -> None:
    creds, npmrc, key = touch(tmp_path, "credentials", ".npmrc", "id_ed25519")
    clock = PhaseClock("install")
    watcher = DecoyWatcher([creds, npmrc, key], clock, backend=backend)
    watcher.start()
    run(READ, creds)
    watcher.sync()
    clock.phase = "import"
    run(WRITE, npmrc)
    run(READ, creds)
    watcher.sync()
    clock.phase = "test"
    run(UNLINK, key)
    events = watcher.stop()

    assert kinds(events) == [
        ("credentials", "open", "install"),
        ("credentials", "read", "install"),
        (".npmrc", "open", "import"),
        (".npmrc", "write", "import"),
        ("credentials", "open", "import"),
        ("credentials", "read", "import"),
        ("id_ed25519", "delete", "test"),
    ]
    assert {e.path for e in events} == {str(creds), str(npmrc), str(key)}
    # inotify names no process; fanotify names one for everything but deletes.
    assert all((e.pid is None) == (backend == "inotify" or e.event == "delete") for e in events)
    assert all(e.exe is None for e in events if e.pid is None)
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert watcher.complete


def test_repeated_reads_coalesce_into_one_event_per_kind_and_phase(
    tmp_path: Path, backend: Backend
) -> None:
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher([creds], PhaseClock("test"), backend=backend)
    watcher.start()
    run("import sys\nfor _ in range(200): open(sys.argv[1]).read()", creds)
    events = watcher.stop()
    assert kinds(events) == [("credentials", "open", "test"), ("credentials", "read", "test")]


def test_stop_returns_an_open_done_just_before_it(tmp_path: Path, backend: Backend) -> None:
    # The open is complete (the child exited) before stop() is called, so the kernel has
    # queued it: stop() must drain it every time, not only when the thread was quick.
    (creds,) = touch(tmp_path, "credentials")
    for _ in range(20):
        watcher = DecoyWatcher([creds], PhaseClock("install"), backend=backend)
        watcher.start()
        run(OPEN, creds)
        assert kinds(watcher.stop()) == [("credentials", "open", "install")]


def test_sync_and_stop_record_what_a_lagging_reader_has_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: Backend
) -> None:
    (creds,) = touch(tmp_path, "credentials")
    clock = PhaseClock("install")
    watcher = DecoyWatcher([creds], clock, backend=backend)
    drain = watcher._drain

    def lagging() -> None:
        # Stand in for a reader thread the scheduler has not run since the access.
        if threading.current_thread() is not watcher._thread:
            drain()

    monkeypatch.setattr(watcher, "_drain", lagging)
    watcher.start()
    run(OPEN, creds)
    assert watcher.events == []
    watcher.sync()
    clock.phase = "import"
    run(OPEN, creds)
    assert kinds(watcher.events) == [("credentials", "open", "install")]
    assert kinds(watcher.stop()) == [
        ("credentials", "open", "install"),
        ("credentials", "open", "import"),
    ]


def test_untouched_files_and_other_files_give_no_events(tmp_path: Path, backend: Backend) -> None:
    creds, other = touch(tmp_path, "credentials", "README")
    watcher = DecoyWatcher([creds], PhaseClock("install"), backend=backend)
    watcher.start()
    run(READ, other)
    run("import os, sys; os.stat(sys.argv[1])", creds)
    assert watcher.stop() == []


def test_events_are_readable_while_running_and_stop_is_idempotent(
    tmp_path: Path, backend: Backend
) -> None:
    (creds,) = touch(tmp_path, "credentials")
    watcher = DecoyWatcher([creds], PhaseClock("smoke"), backend=backend)
    watcher.start()
    run(OPEN, creds)
    watcher.sync()
    assert kinds(watcher.events) == [("credentials", "open", "smoke")]
    assert kinds(watcher.stop()) == kinds(watcher.stop())


def test_a_missing_decoy_file_is_an_error_at_start(tmp_path: Path, backend: Backend) -> None:
    watcher = DecoyWatcher([tmp_path / "absent"], PhaseClock("install"), backend=backend)
    with pytest.raises(FileNotFoundError):
        watcher.start()
    assert watcher.stop() == []


LIST = "import os, sys; os.listdir(sys.argv[1])"


def test_a_listing_of_a_decoy_folder_is_the_event_list(tmp_path: Path, backend: Backend) -> None:
    creds, config = touch(tmp_path, ".aws/credentials", ".aws/config")
    folder = creds.parent
    clock = PhaseClock("install")
    watcher = DecoyWatcher([creds], clock, folders=[folder], backend=backend)
    watcher.start()
    # Walking through it, opening it and reading the files in it are no listing.
    run(READ, creds)
    run(READ, config)
    run("import os, sys; os.close(os.open(sys.argv[1], os.O_RDONLY))", folder)
    run("import os, sys; os.stat(sys.argv[1])", folder)
    watcher.sync()
    clock.phase = "test"
    run(LIST, folder)
    events = watcher.stop()

    assert kinds(events) == [
        ("credentials", "open", "install"),
        ("credentials", "read", "install"),
        (".aws", "list", "test"),
    ]
    assert events[-1].path == str(folder)
    # A listing is no reader of a decoy.
    assert {r.path for r in watcher.readers} <= {str(creds)}


def test_the_harness_own_look_at_home_is_no_listing_under_inotify(tmp_path: Path) -> None:
    # Without root (inotify, no pid) the harness unpacking the install into HOME would
    # otherwise list the decoy folders as if the pull request had probed them.
    creds = touch(tmp_path, ".aws/credentials")[0]
    watcher = DecoyWatcher([creds], PhaseClock("test"), folders=[creds.parent], backend="inotify")
    watcher.start()
    with watcher.own_work():
        run(LIST, creds.parent)
        run(READ, creds)
    run(LIST, creds.parent)  # the command's, after: seen
    events = watcher.stop()
    assert kinds(events) == [(".aws", "list", "test")]


def test_a_decoy_folder_that_is_a_symlink_is_refused_and_its_target_not_marked(
    tmp_path: Path, backend: Backend
) -> None:
    # Attack: the folder swapped for a link to a folder of the host's. The watcher never
    # follows it to put a mark (or a watch) on the target.
    (creds,) = touch(tmp_path, "credentials")
    target = tmp_path / "host-folder"
    target.mkdir()
    link = tmp_path / ".ssh"
    link.symlink_to(target)
    watcher = DecoyWatcher([creds], PhaseClock("install"), folders=[link], backend=backend)
    with pytest.raises(NotADirectoryError):
        watcher.start()
    assert watcher.stop() == []


def tool_copy(tmp_path: Path, name: str = "sudo", of: str = "true") -> Path:
    """Copy a harmless binary to stand in for a privilege tool."""
    source = shutil.which(of)
    assert source is not None, f"`{of}` is not installed"
    tool = tmp_path / "bin" / name
    tool.parent.mkdir(exist_ok=True)
    shutil.copy2(source, tool)
    return tool


def test_execs_of_watched_tools_are_kept_apart_from_decoy_events(
    tmp_path: Path, backend: Backend
) -> None:
    # inotify cannot tell an exec from a read and names no process: an open of the tool
    # is recorded as an exec with pid None. fanotify names the pid (its own tests).
    (creds,) = touch(tmp_path, "credentials")
    tool = tool_copy(tmp_path)
    clock = PhaseClock("install")
    watcher = DecoyWatcher(
        [creds], clock, exec_watch=[tool, tmp_path / "not-installed"], backend=backend
    )
    watcher.start()
    subprocess.run([tool], check=True)
    watcher.sync()
    clock.phase = "test"
    subprocess.run([tool], check=True)
    run(OPEN, creds)
    assert kinds(watcher.stop()) == [("credentials", "open", "test")]
    execs = watcher.exec_events()
    assert kinds(execs) == [("sudo", "exec", "install"), ("sudo", "exec", "test")]
    assert {e.path for e in execs} == {str(tool)}
    if backend == "inotify":
        assert all(e.pid is None and e.exe is None for e in execs)
    else:
        assert all(e.pid is not None for e in execs)


def test_the_backend_can_be_forced_and_auto_falls_back_when_fanotify_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (creds,) = touch(tmp_path, "credentials")
    assert DecoyWatcher([creds], PhaseClock("install"), backend="inotify").backend == "inotify"

    def refused() -> int:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(watcher_module, "_fanotify_init", refused)
    assert fanotify_unavailable() is not None
    watcher = DecoyWatcher([creds], PhaseClock("install"))
    assert watcher.backend == "inotify"
    watcher.start()
    run(OPEN, creds)
    assert kinds(watcher.stop()) == [("credentials", "open", "install")]

    forced = DecoyWatcher([creds], PhaseClock("install"), backend="fanotify")
    with pytest.raises(PermissionError):
        forced.start()
    assert forced.stop() == []


# --------------------------------------------------------------------------- the report's share


def test_a_crowd_of_readers_never_pushes_a_write_out_of_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cujo_action.checks.decoy_record import DecoyRecord

    record = DecoyRecord("tests", "run-1", tmp_path, cap=10)
    creds = str(tmp_path / ".aws" / "credentials")
    # A flood of readers in the order the watcher records them: first of its kind, then
    # repeats by other processes, then the write that matters, then a new file's read.
    for pid in range(100, 140):
        record.admit(WatchEvent(1.0 + pid, creds, "read", "test", pid=pid))
    record.admit(WatchEvent(200.0, creds, "write", "test", pid=7))
    record.admit(WatchEvent(201.0, str(tmp_path / ".npmrc"), "open", "test", pid=8))

    kept = [(e.event, e.path, e.pid) for e in record.kept]
    assert ("write", "~/.aws/credentials", 7) in kept
    assert ("open", "~/.npmrc", 8) in kept
    assert kept[0] == ("read", "~/.aws/credentials", 100)  # the first reader
    assert len(record.kept) == record.repeats_room + 2
    assert record.dropped == 40 + 2 - len(record.kept)
    # The tamper record prints exactly what the report keeps, with its ids.
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == len(record.kept)
    assert [e.id for e in record.kept] == [f"tests:decoy:{n}" for n in range(1, 8)]
    assert all(e.id in line for e, line in zip(record.kept, printed, strict=True))

"""A harness process is waited for until its ready file names it, it exits, or its deadline."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cujo_action.sandbox.helper_processes import (
    KILLED,
    NotReady,
    Spawned,
    Starting,
    StopClock,
    cpu_seconds,
    harness_stop,
)


class Script(Spawned):
    """A stand-in harness process: a Python one-liner told ``go`` like the real ones."""

    def __init__(self, code: str) -> None:  # no super().__init__: no module to run
        self.process = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.readline();" + code],
            stdin=subprocess.PIPE,
        )


def writes_ready(path: Path, pid: str = "__import__('os').getpid()") -> str:
    """Return code that writes a ready file naming ``pid`` (this process, by default)."""
    ready = f"{{'pid': {pid}, 'ports': {{}}}}"
    return f"import json; open({str(path)!r}, 'w').write(json.dumps({ready}))"


def test_a_process_that_writes_its_ready_file_is_ready(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"pid": 1, "ports": {}}))  # a stale one: cleared first
    starting = Starting(Script(writes_ready(ready) + "; import time; time.sleep(30)"), ready, 10)
    try:
        found = starting.ready()
        assert found == {"pid": starting.process.pid, "ports": {}}
        assert starting.process.poll() is None
    finally:
        starting.cancel()
    assert starting.process.returncode is not None


def test_a_ready_file_of_another_pid_is_not_taken(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    starting = Starting(Script(writes_ready(ready, "1") + "; raise SystemExit(3)"), ready, 10)
    with pytest.raises(NotReady) as caught:
        starting.ready()
    assert (caught.value.code, caught.value.timed_out) == (3, False)


def test_a_process_blocked_past_the_hang_deadline_is_killed(tmp_path: Path) -> None:
    # It spends no CPU: the clock's deadline (HANG_S, here 0.3 s) is what stops it.
    starting = Starting(
        Script("import time; time.sleep(60)"), tmp_path / "ready.json", 10, hang_s=0.3
    )
    began = time.monotonic()
    with pytest.raises(NotReady) as caught:
        starting.ready()
    assert caught.value.timed_out
    assert caught.value.code == starting.process.returncode == -9
    assert time.monotonic() - began < 10


def test_a_process_spinning_past_its_cpu_budget_is_killed(tmp_path: Path) -> None:
    # Busy and never ready: stopped once it has spent its 0.3 s of CPU, long before the
    # clock's deadline.
    spinning = Script("exec('while True: pass')")
    starting = Starting(spinning, tmp_path / "ready.json", 0.3, hang_s=120)
    began = time.monotonic()
    with pytest.raises(NotReady) as caught:
        starting.ready()
    assert caught.value.timed_out
    assert caught.value.code == -9
    assert time.monotonic() - began < 60


def test_a_start_that_waits_for_the_cores_is_not_charged_the_wait(tmp_path: Path) -> None:
    """On a busy machine a start takes longer by the clock: only its own CPU counts."""
    ready = tmp_path / "ready.json"
    # Two seconds of waiting (a stand-in for waiting its turn), then ready at once: by
    # the clock it took far more than its 0.5 s budget, of its own CPU far less.
    code = "import time; time.sleep(2); " + writes_ready(ready) + "; time.sleep(30)"
    starting = Starting(Script(code), ready, 0.5, hang_s=120)
    try:
        began = time.monotonic()
        assert starting.ready()["pid"] == starting.process.pid
        assert time.monotonic() - began >= 2
    finally:
        starting.cancel()


def test_the_cpu_a_process_spent_is_read_and_none_once_it_is_gone() -> None:
    spinner = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
         "while time.process_time() < end: pass\ninput()"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while (cpu_seconds(spinner.pid) or 0) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (cpu_seconds(spinner.pid) or 0) >= 0.5
    finally:
        spinner.kill()
        spinner.wait()
        assert spinner.stdin is not None
        spinner.stdin.close()
    assert cpu_seconds(spinner.pid) is None


def test_exit_now_leaves_at_once_with_what_python_buffered_written(tmp_path: Path) -> None:
    # What logging and print hold in Python's buffers reaches the files; the exit code is
    # the one asked for; and no teardown runs (an atexit hook would write "torn down").
    script = (
        "import atexit, logging, sys\n"
        "from cujo_action.sandbox.helper_processes import exit_now\n"
        "logging.basicConfig(stream=open(sys.argv[1], 'w', buffering=1 << 16))\n"
        "logging.warning('the last line')\n"
        "print('said on stdout', end='')\n"
        "atexit.register(lambda: print(' torn down'))\n"
        "exit_now(3)\n"
    )
    log = tmp_path / "log"
    done = subprocess.run(
        [sys.executable, "-c", script, str(log)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout == "said on stdout"
    assert "the last line" in log.read_text()


def _ignoring_term(then: str) -> subprocess.Popen[bytes]:
    """Start a process that ignores SIGTERM, says it did on stdout, then runs ``then``."""
    code = (
        "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True);"
    )
    process = subprocess.Popen([sys.executable, "-c", code + then], stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline() == b"1\n"  # its handler is set: the stop can begin
    return process


def test_a_stopping_process_that_still_works_is_waited_for_not_killed() -> None:
    # It spends 1.5 s of CPU after the stop; sitting idle 0.5 s would get it killed.
    spin = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.5: pass"
    process = _ignoring_term(spin)
    with process.stdout:  # type: ignore[union-attr]
        assert harness_stop(process, idle_s=0.5) == 0


def test_a_stopping_process_that_sits_idle_is_killed_and_said_so() -> None:
    process = _ignoring_term("import time; time.sleep(60)")
    started = time.monotonic()
    with process.stdout:  # type: ignore[union-attr]
        assert harness_stop(process, idle_s=0.5) == KILLED
    assert time.monotonic() - started < 30  # the idle bound, not the sleep's minute


# Work at a third of a core, or tick: 15 ms of CPU every 0.35 s (a few percent), never
# idle for the half second the idle rule waits.
SLOW_WORK = (
    "import time\nend = time.monotonic() + 2.5\nwhile time.monotonic() < end:\n"
    "    t = time.process_time()\n    while time.process_time() - t < 0.03: pass\n"
    "    time.sleep(0.06)\n"
)
TICKS = (
    "import time\nwhile True:\n    t = time.process_time()\n"
    "    while time.process_time() - t < 0.015: pass\n    time.sleep(0.35)\n"
)


def test_a_stopping_process_that_works_slowly_is_waited_for_past_the_window() -> None:
    # A search under way on a loaded machine: a third of a core, longer than the window.
    process = _ignoring_term(SLOW_WORK)
    clock = StopClock(process.pid, idle_s=1.0, window_s=0.6, share=0.10, hang_s=60)
    with process.stdout:  # type: ignore[union-attr]
        assert harness_stop(process, idle_s=1.0, clock=clock) == 0


def test_a_stopping_process_that_only_ticks_is_killed_after_the_window() -> None:
    # Never idle long enough for the idle rule, and far from its CPU budget: it spends
    # under a tenth of a core over the window, so it is not working, and is killed.
    process = _ignoring_term(TICKS)
    clock = StopClock(process.pid, idle_s=1.0, window_s=1.5, share=0.10, hang_s=120)
    started = time.monotonic()
    with process.stdout:  # type: ignore[union-attr]
        assert harness_stop(process, idle_s=1.0, clock=clock) == KILLED
    assert time.monotonic() - started < 30  # the window's rule, not the two-minute clock

"""Start, wait for, watch and stop the harness's own child processes (the proxy, the resolver)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

from cujo_action import limits

PR_SET_PDEATHSIG = 1
# How often a starting process's ready file is looked for.
READY_POLL_S = 0.02


@dataclass
class HarnessProcess:
    """A running harness process (proxy, resolver): its ports by label, how to stop it."""

    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    log_path: Path
    stderr_path: Path
    pid: int = field(init=False)

    def __post_init__(self) -> None:
        self.pid = self.process.pid

    def alive(self) -> bool:
        """Return whether the process is still running."""
        return harness_alive(self.process)

    def stop(self, timeout: float = 5.0) -> int:
        """Terminate the process, kill it once it sits ``timeout`` seconds without working
        (``harness_stop``); return its exit code (``KILLED`` when it had to be killed)."""
        return harness_stop(self.process, timeout)


def harness_alive(process: subprocess.Popen[bytes]) -> bool:
    """Return whether a harness process (proxy, resolver) is still running."""
    return process.poll() is None


KILLED: Final = -signal.SIGKILL
# A harness process told to stop finishes what it holds first (the proxy writes the lines
# of the searches under way): it is waited for while it works, by its own CPU, and killed
# once it has spent STOP_CPU_S, or sat ``idle_s`` without spending any, or spent under
# STOP_SHARE of a core over the last STOP_WINDOW_S (it ticks but does not work), or
# outlived STOP_HANG_S: never by the clock alone while it works (limits.py, harness-stop).
STOP_CPU_S: Final = float(limits.HARNESS_STOP_CPU)
STOP_WINDOW_S: Final = float(limits.HARNESS_STOP_WINDOW)
STOP_SHARE: Final = limits.HARNESS_STOP_SHARE_PERCENT / 100
STOP_HANG_S: Final = float(limits.HARNESS_STOP_CLOCK)
_STOP_POLL_S: Final = 0.25


class StopClock:
    """Whether a stopping process is past its due: no CPU spent for ``idle_s``, or
    ``cpu_s`` spent since the stop, or less than ``share`` of a core over the last
    ``window_s``, or ``hang_s`` by the clock."""

    def __init__(
        self,
        pid: int,
        idle_s: float,
        cpu_s: float = STOP_CPU_S,
        *,
        window_s: float = STOP_WINDOW_S,
        share: float = STOP_SHARE,
        hang_s: float = STOP_HANG_S,
    ) -> None:
        self.pid, self.idle_s, self.cpu_s = pid, idle_s, cpu_s
        self.window_s, self.share = window_s, share
        self._start = self._last = cpu_seconds(pid) or 0.0
        now = time.monotonic()
        self._progress_at, self._hang_at = now, now + max(hang_s, idle_s)
        self._seen: list[tuple[float, float]] = [(now, self._start)]  # (when, CPU spent)

    def over(self) -> bool:
        spent, now = cpu_seconds(self.pid), time.monotonic()
        if spent is None:
            return False  # gone: its exit is what the caller waits for
        if spent > self._last:
            self._last, self._progress_at = spent, now
        return (
            spent - self._start > self.cpu_s
            or now - self._progress_at > self.idle_s
            or self._ticks_only(now, spent)
            or now > self._hang_at
        )

    def _ticks_only(self, now: float, spent: float) -> bool:
        """Say whether, over the last ``window_s``, it spent less than ``share`` of a core."""
        self._seen.append((now, spent))
        while len(self._seen) > 2 and now - self._seen[1][0] >= self.window_s:
            self._seen.pop(0)  # the oldest sample still a whole window back stays first
        then, spent_then = self._seen[0]
        return now - then >= self.window_s and spent - spent_then < self.share * (now - then)


def harness_stop(
    process: subprocess.Popen[bytes], idle_s: float, *, clock: StopClock | None = None
) -> int:
    """Terminate a harness process and wait while it works; kill it once it sits
    ``idle_s`` without working (``StopClock``, or ``clock``). Return its exit code."""
    if process.poll() is None:
        process.terminate()
        clock = clock or StopClock(process.pid, idle_s)
        while True:
            try:
                return process.wait(_STOP_POLL_S)
            except subprocess.TimeoutExpired:
                if clock.over():
                    process.kill()
                    break
    return process.wait()


def exit_now(code: int) -> NoReturn:
    """End a harness process whose work is done: flush what Python buffers, then leave
    without tearing its heap down.

    The proxy's teardown of mitmproxy's objects took 0.3-0.4 s after its last line was
    written, and the run waits for its exit before it seals the log. Nothing is lost:
    each evidence log is written a whole line per ``write()`` on a raw descriptor and
    closed before this is called (the proxy's addon ``done``, the resolver's ``close``).
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def die_with_parent() -> None:
    """Ask the kernel to stop a harness process when the run that started it dies.

    The kernel sends the signal when the *thread* that forked the child ends, not the
    process: start harness processes from the run's main thread, never a worker thread.
    """
    import ctypes  # noqa: PLC0415 - only in the forked child

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Spawned:
    """A harness process (proxy, resolver): ``python -m module --config PATH --wait``, its
    output to ``stderr_path``. It spends its start-up importing, then waits on its standard
    input for ``go`` before it reads its config; one told nothing (its standard input
    closed) exits without reading it. Started early (while prepare clones) or just before
    ``go``: one way either way.

    Spawn from the thread that outlives it (the run's main thread): see ``die_with_parent``.
    """

    def __init__(self, module: str, config_path: Path, stderr_path: Path) -> None:
        self.config_path, self.stderr_path = config_path, stderr_path
        env = dict(os.environ)
        # The child imports this package from wherever this process did.
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        with open(stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                # -I: the harness imports only itself, never a `cujo_action` from the cwd.
                [sys.executable, "-I", "-m", module, "--config", str(config_path), "--wait"],
                stdin=subprocess.PIPE,
                stdout=err,
                stderr=err,
                env=env,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only a prctl before exec
            )

    def go(self) -> subprocess.Popen[bytes]:
        """Tell the process its config is written (at ``config_path``); return it."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):  # it died: its caller sees it exit
                stdin.write(b"go\n")
                stdin.close()
        return self.process

    def cancel(self) -> None:
        """Stop the process, whatever it was doing."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()


def wait_for_go() -> bool:
    """In a process started with ``--wait``: block until told ``go`` (True) or until the
    harness closed the pipe without (False: exit, nothing to do)."""
    return sys.stdin.buffer.readline().strip() == b"go"


def read_ready(path: Path, pid: int) -> dict[str, Any] | None:
    """Return the ready file a harness process ``pid`` wrote, or None while it has not."""
    try:
        ready = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return ready if isinstance(ready, dict) and ready.get("pid") == pid else None


class NotReady(Exception):
    """A harness process that exited, or outlived its deadline, before it was ready."""

    def __init__(self, code: int | None, *, timed_out: bool) -> None:
        """Keep its exit code and whether the deadline passed (it was killed then)."""
        super().__init__(f"not ready (exit {code})")
        self.code = code
        self.timed_out = timed_out


# A harness process's start is charged the CPU it spends, not the time that passes: on a
# machine other work keeps busy (a laptop, a shared runner) it waits its turn for the
# cores, which is no fault. One that spins without getting ready spends its budget of CPU
# and is stopped; one that blocks (and spends none) meets this, however long it waited.
HANG_S = 180.0
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """Return the CPU (user and system) process ``pid`` has spent, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


class StartClock:
    """Whether a starting process is past its budget: ``cpu_s`` of its own CPU from now,
    or ``hang_s`` from now by the clock."""

    def __init__(self, pid: int, cpu_s: float, hang_s: float = HANG_S) -> None:
        self.pid, self.cpu_s = pid, cpu_s
        self._spent_before = cpu_seconds(pid) or 0.0
        self._hang_at = time.monotonic() + hang_s

    def over(self) -> bool:
        """Say whether the process spent its CPU budget or outlived the hang deadline."""
        spent = cpu_seconds(self.pid)
        if spent is not None and spent - self._spent_before > self.cpu_s:
            return True
        return time.monotonic() > self._hang_at


class Starting:
    """A harness process set going, not yet known to be ready: ``ready`` waits for it.

    The one "start and wait until ready" of the harness's processes: the ready file at
    ``ready_path`` is cleared, the process told ``go`` (``Spawned.go``), and from then it
    has ``timeout`` seconds of its own CPU (``hang_s`` by the clock) to write that file
    with its pid.
    """

    def __init__(
        self, spawned: Spawned, ready_path: Path, timeout: float, *, hang_s: float = HANG_S
    ) -> None:
        """Clear the ready file and tell the process to go; do not wait for it."""
        Path(ready_path).unlink(missing_ok=True)
        self.spawned = spawned
        self.ready_path = Path(ready_path)
        self.process = spawned.go()
        self.clock = StartClock(self.process.pid, timeout, hang_s)

    def ready(self) -> dict[str, Any]:
        """Return the ready file the process wrote, or raise NotReady: it exited first,
        or it was still not ready at the deadline (and is killed)."""
        while True:
            found = read_ready(self.ready_path, self.process.pid)
            if found is not None:
                return found
            code = self.process.poll()
            if code is not None:
                raise NotReady(code, timed_out=False)
            if self.clock.over():
                self.cancel()
                raise NotReady(self.process.returncode, timed_out=True)
            time.sleep(READY_POLL_S)

    def cancel(self) -> None:
        """Stop the process whether or not it got ready."""
        self.spawned.cancel()

"""The relay's worker processes, as the webhook process starts, wakes, watches and stops them
(``Children``), and as each of them reads its wake-ups (``StdinWaker``), shares its
metrics and steps back from the webhook's process (``give_way``).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from app_relay.observe import metrics
from app_relay.webhook.health import health_file, read_health

# How long a stop lets the work in hand finish when no grace is given (the relay passes
# CUJO_STOP_GRACE_S).
STOP_TIMEOUT_S = 60.0
# A worker process outstaying its own stop by this much is terminated.
CHILD_MARGIN_S = 15.0


class Children:
    """The worker processes a webhook process started, woken through their stdin."""

    def __init__(
        self, count: int, workers: int, *, health: Path | None = None, grace_s: float = 0.0
    ) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._health = health  # where each reports its pool's health (the metrics folder)
        self._grace_s = grace_s or STOP_TIMEOUT_S
        # -P: the relay's own modules, whatever folder it was started in.
        module = [sys.executable, "-P", "-m", "app_relay"]
        command = [*module, "relay", "work", "--workers", str(workers)]
        for _ in range(count):
            # Same process group: a relay killed as a whole takes its workers with it.
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=os.environ.copy())
            assert proc.stdin is not None
            os.set_blocking(proc.stdin.fileno(), False)
            self._procs.append(proc)

    def wake(self) -> None:
        """Tell every worker process a delivery was recorded (never blocks the intake)."""
        with self._lock:
            for proc in self._procs:
                stdin = proc.stdin
                if stdin is None:
                    continue
                # A full pipe already holds a wake-up; a gone worker is the stop's business.
                with contextlib.suppress(BlockingIOError, BrokenPipeError, ValueError):
                    os.write(stdin.fileno(), b"\n")

    def alive(self) -> bool:
        """Say whether every worker process still runs."""
        return all(proc.poll() is None for proc in self._procs)

    def health(self) -> list[str]:
        """Name each worker process that stopped, is silent, or reports a part not working."""
        problems = []
        for proc in self._procs:
            code = proc.poll()
            if code is not None:
                problems.append(f"worker process {proc.pid} exited with status {code}")
            elif self._health is not None:
                problems.extend(read_health(self._health, proc.pid))
        return problems

    def stop(self) -> bool:
        """Close their input (they stop claiming and drain), wait; False if one did not.

        The end of their input is the stop: a signal on top could land after a worker
        has put its handlers back, and kill it mid-drain. One that outstays the drain's
        own deadline gets SIGTERM, then SIGKILL.
        """
        with self._lock:
            for proc in self._procs:
                if proc.stdin is not None:
                    with contextlib.suppress(OSError):
                        proc.stdin.close()
        clean = True
        for proc in self._procs:
            try:
                clean &= proc.wait(self._grace_s + CHILD_MARGIN_S) == 0
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                clean = False
            metrics.process_gone(proc.pid)
            if self._health is not None:
                health_file(self._health, proc.pid).unlink(missing_ok=True)
        return clean


class StdinWaker:
    """Wake the pool once per line on a file descriptor; the end of it means stop.

    Read with ``os.read`` beside a pipe of its own, so ``stop`` ends the thread at once
    and joins it: nothing is left blocked in ``sys.stdin``'s buffered reader, whose lock
    a daemon thread held at interpreter shutdown (Python then aborts the process with
    "Fatal Python error: could not acquire lock for <stdin>").
    """

    def __init__(self, fd: int, wake: Callable[[], None], ended: threading.Event) -> None:
        self._fd = fd
        self._wake = wake
        self._ended = ended
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="cujo-wake")

    def start(self) -> None:
        """Start reading."""
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._fd, self._stop_r], [], [])
            except (OSError, ValueError):  # the descriptor is closed or was never there
                self._ended.set()
                return
            if self._stop_r in ready:
                return
            try:
                data = os.read(self._fd, 4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                self._ended.set()  # the webhook process is gone (or closed our input)
                return
            self._wake()

    def stop(self) -> None:
        """Stop reading and wait for the thread to end."""
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b".")
        self._thread.join()
        for fd in (self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def stdin_fd() -> int:
    """Return the standard input's descriptor (-1 when there is none)."""
    try:
        return sys.stdin.fileno() if sys.stdin is not None else -1
    except (OSError, ValueError):
        return -1


def share_metrics(*, fresh: bool) -> tuple[Path | None, bool]:
    """Put this process's metrics in the folder the relay's processes share.

    Return the folder and whether it is this process's to delete at its stop. The
    webhook process (``fresh``) makes it: ``PROMETHEUS_MULTIPROC_DIR`` when set (then
    emptied at start and kept), else a new temporary folder (the image's /tmp is a
    tmpfs); its worker processes find it in that variable.
    """
    given = os.environ.get(metrics.MULTIPROC_ENV, "").strip()
    if not given and not fresh:
        return None, False
    folder = Path(given) if given else Path(tempfile.mkdtemp(prefix="cujo-metrics-"))
    metrics.share_across_processes(folder, fresh=fresh)
    return folder, fresh and not given


# How far a worker process steps back from the webhook's: GitHub waits for the answer (and
# gives up at 10 s), while a delivery in the queue waits safely. On a machine both keep
# busy, the kernel gives the webhook's process the cores first (CFS weights 1024 to 110).
WORKER_NICENESS = 10


def give_way() -> None:
    """Lower this process's priority below the webhook's (``WORKER_NICENESS`` steps)."""
    with contextlib.suppress(OSError):  # a container that refuses it: the old priority
        os.nice(WORKER_NICENESS)

"""Run one pull-request command confined: own process group, wall timeout, capped output.

This is the seam the isolation issue fills in (unprivileged user, network namespace,
cgroup limits). Today a command runs in its own session and process group, with a
scrubbed environment handed in by the caller, resource limits, a wall timeout that kills
the whole group, and output kept as a bounded tail while a flood is cut off.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# A command that writes more than this is cut off: its output is not evidence worth
# keeping, and a flood must not fill the runner's disk or memory.
FLOOD_BYTES = 64 * 1024 * 1024
TAIL_BYTES = 8_000
FILE_SIZE_LIMIT = 2 * 1024 * 1024 * 1024
GRACE_S = 2.0


@dataclass(frozen=True)
class Outcome:
    """What one confined command did."""

    exit_code: int | None  # None when it was killed before finishing
    timed_out: bool
    flooded: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    stdout_bytes: int
    stderr_bytes: int


class _Tail:
    """Drain a pipe, keeping the last bytes and counting all of them."""

    def __init__(self, pipe: object, on_flood: threading.Event) -> None:
        self._pipe = pipe
        self._on_flood = on_flood
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        read = self._pipe.read1  # type: ignore[attr-defined]
        while chunk := read(65536):
            self.total += len(chunk)
            self.tail += chunk
            if len(self.tail) > 2 * TAIL_BYTES:
                del self.tail[: len(self.tail) - TAIL_BYTES]
            if self.total > FLOOD_BYTES:
                self._on_flood.set()
        self._pipe.close()  # type: ignore[attr-defined]

    def text(self) -> str:
        return bytes(self.tail[-TAIL_BYTES:]).decode("utf-8", "replace")[-TAIL_BYTES:]


def _limits() -> None:
    """Set resource limits in the child before it runs the command."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def _kill_group(pgid: int, leader: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        if sig is signal.SIGTERM:
            # Give well-behaved children a moment; a deadline, not a sleep in a loop.
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline:
                leader.poll()  # reap the leader, or the group looks alive while it is a zombie
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.05)


def run_confined(cmd: str, *, cwd: Path, env: Mapping[str, str], timeout: float) -> Outcome:
    """Run ``cmd`` with bash in ``cwd``; kill its whole group on timeout, flood or exit."""
    flood = threading.Event()
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/bin/bash", "-c", cmd],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_limits,  # noqa: PLW1509 - no threads in the child before exec
    )
    out, err = _Tail(proc.stdout, flood), _Tail(proc.stderr, flood)
    timed_out = False
    deadline = started + timeout
    while True:
        try:
            proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if flood.is_set():
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
    # Whatever the command left behind in its group goes too: nothing outlives a phase.
    _kill_group(proc.pid, proc)
    exit_code = proc.wait()
    out.thread.join(5)
    err.thread.join(5)
    killed = timed_out or flood.is_set()
    return Outcome(
        exit_code=None if killed else exit_code,
        timed_out=timed_out,
        flooded=flood.is_set(),
        duration_s=round(time.monotonic() - started, 3),
        stdout_tail=out.text(),
        stderr_tail=err.text(),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
    )

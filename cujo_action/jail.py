"""Run one pull-request command confined: its own user, network, limits and deadline.

With a ``Confinement`` (full isolation, root needed, as on an Actions runner) a command
runs inside its phase's network namespace (``netns.py``: the only way out is the logging
harness) as the unprivileged sandbox user, with no capabilities and ``no_new_privs`` (so
``sudo`` and every setuid binary are powerless), a scrubbed environment handed in by the
caller, and resource limits (processes, open files, file size, core dumps). When the
command ends, times out or floods its output, everything left in its namespace is
killed: a process can leave its process group, but not its network namespace.

Without one (partial isolation), the command runs in its own session and process group
with the same environment, limits, deadline and output cap.
"""

from __future__ import annotations

import os
import pwd
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cujo_action.netns import kill_all_in

# A command that writes more than this is cut off: its output is not evidence worth
# keeping, and a flood must not fill the runner's disk or memory.
FLOOD_BYTES = 64 * 1024 * 1024
TAIL_BYTES = 8_000
FILE_SIZE_LIMIT = 2 * 1024 * 1024 * 1024
GRACE_S = 2.0
# Processes the sandbox user may have at once, across the run's concurrent phases. A test
# suite rarely needs a few dozen; a fork bomb meets this wall and is reported.
NPROC_LIMIT = 1024
NOFILE_LIMIT = 8192
# A phase that reaches this share of the process limit is flooding the process table.
FLOOD_SHARE = 0.9
SANDBOX_USER = "cujo-sandbox"
_POLL_S = 0.2


class JailError(RuntimeError):
    """The jail could not be set up (no such user and none could be made, …)."""


@dataclass(frozen=True)
class Confinement:
    """Where and as whom a command runs under full isolation."""

    netns: str  # the phase's network namespace (``cujo-<id>``)
    uid: int
    gid: int
    nproc: int = NPROC_LIMIT

    def argv(self, cmd: str) -> list[str]:
        """Return the argv that runs ``cmd`` in the namespace as the sandbox user."""
        return [
            "ip", "netns", "exec", self.netns,
            "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
            "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all",
            "--", "/bin/bash", "-c", cmd,
        ]  # fmt: skip


def sandbox_user(name: str = SANDBOX_USER) -> tuple[int, int]:
    """Return (uid, gid) of the sandbox user, creating it (no home, no sudo) if missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = None
    if entry is None:
        done = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode not in (0, 9):  # 9: made meanwhile by a concurrent run
            raise JailError(f"cannot create the sandbox user {name}: {done.stderr.strip()}")
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise JailError(f"the sandbox user {name} has uid 0; it must be unprivileged")
    return entry.pw_uid, entry.pw_gid


def _namespace_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def count_in_namespace(inode: int) -> int:
    """Return how many processes live in the network namespace with this inode."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    count += 1
            except OSError:
                continue
    return count


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
    # The most processes seen at once in the command's namespace (0 when not measured),
    # and whether that came near the process limit (a fork bomb, or something like one).
    peak_processes: int = 0
    process_flood: bool = False


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


def _limits(nproc: int | None) -> Callable[[], None]:
    def apply() -> None:
        """Set resource limits in the child before it runs the command."""
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))
        if nproc is not None:
            # Counted against the real uid once setpriv has switched to the sandbox user.
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


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


def run_confined(
    cmd: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    confinement: Confinement | None = None,
) -> Outcome:
    """Run ``cmd`` with bash in ``cwd``; kill all it started on timeout, flood or exit."""
    flood = threading.Event()
    started = time.monotonic()
    inode = _namespace_inode(confinement.netns) if confinement else None
    if confinement is not None and inode is None:
        raise JailError(f"network namespace {confinement.netns} does not exist")
    proc = subprocess.Popen(
        confinement.argv(cmd) if confinement else ["/bin/bash", "-c", cmd],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_limits(confinement.nproc if confinement else None),  # noqa: PLW1509
    )
    out, err = _Tail(proc.stdout, flood), _Tail(proc.stderr, flood)
    timed_out = False
    peak = 0
    deadline = started + timeout
    while True:
        try:
            proc.wait(timeout=_POLL_S)
            break
        except subprocess.TimeoutExpired:
            if inode is not None:
                peak = max(peak, count_in_namespace(inode))
            if flood.is_set():
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
    # Whatever the command left behind in its group goes too: nothing outlives a phase.
    _kill_group(proc.pid, proc)
    if confinement is not None:
        # setsid() leaves a process group, never the namespace: sweep that as well.
        kill_all_in(confinement.netns)
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
        peak_processes=peak,
        process_flood=confinement is not None and peak >= FLOOD_SHARE * confinement.nproc,
    )

"""Start each check from a process that has imported the harness already (a zygote).

A check used to start as ``python -I -m cujo_action.checks.NAME``: a fresh interpreter
importing the harness (pydantic, the schema, the sandbox, the watchers) paid about a
quarter of a second of CPU for it, seven or eight times a run, all at once when the
checks start together. The zygote is started once per run, before any pull-request code
runs, as ``python -I -m cujo_action.checks.zygote``: it imports what the checks import,
freezes that memory out of the garbage collector's sight, says ``ready`` and waits for
requests on its stdin, a pipe only the run holds (no socket: nobody else can ask).

For each request (one JSON line: a check module and its arguments) it forks twice. The
check runs in the grandchild, a copy of the zygote's memory, which holds nothing of any
run: it becomes ``python -I -m MODULE ARGS`` (``runpy``, as ``-m`` does), in a session of
its own with stdin and stdout on /dev/null and stderr the run's, as ``CheckProcess``
started them. The middle process exits at once, so the kernel hands the check to the
nearest child subreaper, the run (``run.py`` is one), which waits for it as for any
child of its own: ``Forked`` is the little of ``Popen`` the run uses. The zygote answers
the check's pid only once the middle process is reaped, so the check is the run's child
by then. Where the run is no subreaper, or the zygote cannot start or dies, each check
starts as a fresh interpreter as before (``start_check``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence

from cujo_action.checks.modules import CHECK_MODULES

_PR_GET_CHILD_SUBREAPER = 37
_READY = b"ready\n"
# How long the zygote may take to import the harness (it does so while prepare clones).
_READY_S = 60.0
_CLOSE_S = 5.0


class ZygoteError(Exception):
    """The zygote could not start a check (the caller starts it the usual way)."""


class Forked:
    """A check the zygote started, the run's child: ``pid``, ``poll``, ``wait``, ``returncode``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Return the exit code once the check has ended (a signal's is its negative)."""
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                # Not ours to wait for (reaped elsewhere): it has ended, its code unknown.
                self.returncode = 255
                return self.returncode
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the check to end; raise ``subprocess.TimeoutExpired`` after ``timeout``."""
        if self.poll() is not None:
            assert self.returncode is not None
            return self.returncode
        if timeout is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.returncode = 255
            return self.returncode
        deadline = time.monotonic() + timeout
        try:
            ended = os.pidfd_open(self.pid)
        except OSError:
            ended = -1  # gone already, or no pidfd: poll below
        try:
            while self.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(f"check pid {self.pid}", timeout)
                if ended >= 0:
                    select.select([ended], [], [], left)
                else:
                    time.sleep(min(left, 0.05))
        finally:
            if ended >= 0:
                os.close(ended)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """The run's zygote: started early, asked for each check, closed at the run's end."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "cujo_action.checks.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self._ready = False
        self.broken = ""

    @staticmethod
    def usable() -> bool:
        """Return whether a check the zygote starts would become this process's child."""
        try:
            import ctypes  # noqa: PLC0415  (Linux only: prctl)

            flag = ctypes.c_int(0)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
                return False
            return flag.value == 1
        except (OSError, AttributeError):
            return False

    def start(self, argv: Sequence[str]) -> Forked:
        """Start ``python -I -m argv[0] argv[1:]`` from the zygote; raise ZygoteError."""
        if self.broken:
            raise ZygoteError(self.broken)
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        try:
            if not self._ready:
                self._await_ready()
            self.proc.stdin.write(json.dumps(list(argv)).encode() + b"\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
        except (OSError, ValueError) as exc:
            self.broken = f"the zygote stopped answering: {exc}"
            raise ZygoteError(self.broken) from exc
        if not answer.strip().isdigit():
            self.broken = f"the zygote answered {answer[:200]!r}"
            raise ZygoteError(self.broken)
        return Forked(int(answer))

    def _await_ready(self) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], _READY_S)
        line = self.proc.stdout.readline() if ready else b""
        if line != _READY:
            self.broken = f"the zygote did not start (said {line[:200]!r})"
            raise ZygoteError(self.broken)
        self._ready = True

    def close(self) -> None:
        """End the zygote: its stdin closes, it exits; killed if it does not."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(_CLOSE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# --------------------------------------------------------------------------- the zygote


def _preload() -> None:
    """Import every check module, then forget the check modules themselves: their
    imports stay, and each check runs its module afresh as ``__main__`` (as ``-m`` does)."""
    for module in CHECK_MODULES.values():
        importlib.import_module(module)
    for module in CHECK_MODULES.values():
        sys.modules.pop(module, None)
    gc.collect()
    gc.freeze()  # the imported objects stay out of every collection: fewer pages copied


def _become(argv: list[str]) -> None:
    """In the grandchild: become ``python -I -m argv[0] argv[1:]``; never return."""
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        sys.argv = ["-m", *argv[1:]]
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _fork(argv: list[str]) -> int:
    """Start ``argv`` in a grandchild whose parent has exited; return its pid."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read)
            pid = os.fork()
            if pid == 0:
                os.close(write)
                _become(argv)
            os.write(write, f"{pid}\n".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        answer = said.read()
    os.waitpid(middle, 0)  # reaped: the grandchild is the run's (the subreaper's) now
    return int(answer)


def main() -> int:
    _preload()
    modules = set(CHECK_MODULES.values())
    out = sys.stdout.buffer
    out.write(_READY)
    out.flush()
    for line in sys.stdin.buffer:
        try:
            argv = json.loads(line)
            if not (
                isinstance(argv, list)
                and argv
                and all(isinstance(a, str) for a in argv)
                and argv[0] in modules
            ):
                raise ValueError("not a check module and its arguments")
            out.write(f"{_fork(argv)}\n".encode())
        except (ValueError, OSError) as exc:
            out.write(f"error {exc}\n".encode())
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Run a step's process, report how it ended, and keep the job it belongs to."""

# This file is not imported by the harness. ``actionsjob.worker_source`` appends the
# job's MESSAGE to it and ``jail`` a call to ``main`` with the step; the sandbox's pid 1
# runs it from a file named ``spawnclient`` (removed at once) with the system Python
# bound at Runner.Worker's path, so its command line, executable and name are the
# runner worker's. It holds the job message the way the real worker does (UTF-8 from the
# wire, UTF-16 in .NET strings), readable through /proc/<pid>/mem by the sandbox's own
# user, as on a runner (PR_SET_PTRACER_ANY lets a sibling read it under Yama's
# ptrace_scope 1, as sudo does on a hosted runner). Everything it needs is in the
# standard library: it runs outside the harness's environment. Comments are not kept
# in memory once compiled; names and strings are, so none of them says what this is.

import contextlib
import ctypes
import os
import signal
import sys
from typing import Any

MESSAGE = b""
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = (1 << 64) - 1
_HELD: list[object] = []


def _let_readers_in() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _start(argv: list[str], cwd: str, env: dict[str, str], status_fd: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        os.close(status_fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(cwd)
        os.execve(argv[0], argv, env)  # noqa: S606 (the step's own shell)
    except BaseException as exc:  # the child must never return to the caller's code
        os.write(2, f"{argv[0]}: {exc}\n".encode())
    os._exit(127)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(step: dict[str, Any]) -> None:
    """Start the step, say how it ended on the status descriptor, then reap until killed."""
    status_fd = int(step["status_fd"])
    with contextlib.suppress(OSError):
        os.unlink(sys.argv[0])
    os.closerange(3, status_fd)
    os.closerange(status_fd + 1, 1 << 16)
    _let_readers_in()
    _HELD.extend([bytearray(MESSAGE), MESSAGE.decode().encode("utf-16-le")])
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    main_pid = _start(list(step["argv"]), str(step["cwd"]), dict(step["env"]), status_fd)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == main_pid:
            break
    os.write(status_fd, f"{_exit_code(status)}\n".encode())
    os.close(status_fd)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            signal.sigtimedwait([signal.SIGCHLD], 3600)

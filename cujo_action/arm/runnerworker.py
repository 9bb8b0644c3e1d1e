"""Start a runner's processes, run a step's process, report how it ended, keep the job."""

# This file is not imported by the harness. ``actionsjob.worker_source`` appends the
# runner's process TREE (``runnertree.py``), its SCRIPTS folder and a call to ``main`` to
# it, and ``arm`` compiles that once per run with the interpreter that runs it
# (``host.worker_program``). The sandbox's pid 1 runs the compiled program from a file
# named ``spawnclient`` with the system Python bound at Runner.Worker's path, and reads
# the step, with the job's message, from a file named by its first handle (``107``),
# marshalled by ``jail``; both are removed at once.
#
# pid 1 names itself ``systemd`` (/sbin/init) and starts the tree below it: kthreadd and
# the kernel threads it stands in for, the image's services, and the provisioner, the
# listener and the worker, whose child is the step's shell (``bash -e`` on the step's
# script, as a runner runs it). A process names itself with PR_SET_NAME and points its
# command line at a buffer of its own with PR_SET_MM_MAP (no privilege needed while the
# executable is left alone). A leaf does nothing but wait: it is a clone that runs
# libc's ``pause`` on a small stack, never Python, made while its parent shows the
# leaf's name and command line (a clone takes both from its parent); kernel threads
# share kthreadd's memory, a service gets a copy. Every leaf shares its parent's
# descriptor table, so what the parent closes is closed for the leaf as well. Only the
# worker and the chain above it ever hold the status descriptor.
#
# Everything but the worker is not dumpable, so its executable, memory, environment and
# descriptors are closed to the step, as a root process's are on a runner. The worker
# is the runner's user's own: it holds the job message the way the real worker does
# (UTF-8 from the wire, UTF-16 in .NET strings), readable through /proc/<pid>/mem by the
# step, as on a runner (PR_SET_PTRACER_ANY lets a sibling read it under Yama's
# ptrace_scope 1, as sudo does on a hosted runner). The message comes in hex, so the
# step's text (freed once read) holds no copy of it. When the kernel refuses PR_SET_MM_MAP
# pid 1 is the worker and nothing else is made, so only the worker's command line ever
# says Runner.Worker.
#
# Everything it needs is in the standard library: it runs outside the harness's
# environment. Comments are not kept in memory once compiled; names and strings are, so
# none of them says what this is. It starts for every command, so it imports as little
# as it can: no typing or contextlib, and signal's C module without its enums.

from __future__ import annotations

import ctypes
import gc
import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from typing import Any, NoReturn
else:
    import _signal as signal

# (name, argv, children), nested; pid 1 first. An argv of None is the worker's own.
TREE: tuple[object, ...] = ()
SCRIPTS = ""
_PR_SET_DUMPABLE = 4
_PR_SET_NAME = 15
_PR_SET_MM = 35
_PR_SET_MM_MAP = 14
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = (1 << 64) - 1
_CLONE_VM = 0x100
_CLONE_FILES = 0x400
_STACK = 4096
_HELD: list[object] = []
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
_LIBC.sbrk.argtypes = [ctypes.c_ssize_t]
_LIBC.sbrk.restype = ctypes.c_void_p
_LIBC.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_LIBC.clone.restype = ctypes.c_int
_WAIT = ctypes.cast(_LIBC.pause, ctypes.c_void_p).value
_KEPT = (signal.SIGKILL, signal.SIGSTOP)
_QUIET = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)

Node = tuple[str, "tuple[str, ...] | None", "tuple[Node, ...]"]


class _Map(ctypes.Structure):
    _fields_ = [
        *(
            (field, ctypes.c_uint64)
            for field in (
                "start_code", "end_code", "start_data", "end_data", "start_brk", "brk",
                "start_stack", "arg_start", "arg_end", "env_start", "env_end", "auxv",
            )
        ),
        ("auxv_size", ctypes.c_uint32),
        ("exe_fd", ctypes.c_uint32),
    ]  # fmt: skip


class _Shown:
    """What /proc shows of this process (its name and command line), and changing it."""

    def __init__(self) -> None:
        with open("/proc/self/stat", "rb") as fh:
            raw = fh.read()
        fields = raw[raw.rindex(b")") + 2 :].split()

        def at(number: int) -> int:
            return int(fields[number - 3])

        self.map = _Map(
            start_code=at(26), end_code=at(27), start_data=at(45), end_data=at(46),
            start_brk=at(47), start_stack=at(28), arg_start=at(48), arg_end=at(49),
            env_start=at(50), env_end=at(51), exe_fd=0xFFFFFFFF,
        )  # fmt: skip
        self.started = (int(self.map.arg_start), int(self.map.arg_end))
        self.shown: tuple[str, tuple[str, ...] | None] = ("", None)

    def show(self, name: str, argv: tuple[str, ...] | None) -> bool:
        """Show as ``name`` running ``argv`` (None: as started); False if refused."""
        start, end = self.started
        if argv is not None:
            end = start
        if argv:
            text = "\0".join(argv).encode() + b"\0"
            held = ctypes.create_string_buffer(text, len(text))
            _HELD.append(held)
            start = ctypes.addressof(held)
            end = start + len(text)
        self.map.arg_start, self.map.arg_end = start, end
        self.map.brk = _LIBC.sbrk(0) or 0
        shown = _prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.addressof(self.map), ctypes.sizeof(_Map))
        _prctl(_PR_SET_NAME, ctypes.addressof(_name(name)))
        self.shown = (name, argv)
        return shown == 0


def _name(name: str) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(name.encode()[:15])


def _prctl(option: int, *args: int) -> int:
    padded = [*args, 0, 0, 0, 0][:4]
    return int(_LIBC.prctl(option, *padded))


def _let_readers_in() -> None:
    try:
        _prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY)
    except (OSError, AttributeError):
        pass


def _stack() -> int:
    block = ctypes.create_string_buffer(_STACK)
    _HELD.append(block)
    return (ctypes.addressof(block) + _STACK - 64) & ~15


def _leaves(shown: _Shown, leaves: list[Node], argv: tuple[str, ...] | None) -> None:
    """Clone processes that wait in ``pause``, each named and showing its command line.

    A clone takes both from its parent, so this process shows as each in turn (and as
    itself again after). Everything is prepared first: between clones this process
    writes as little memory as it can, as every page it writes then is copied.
    """
    shared = _stack()
    made: list[tuple[_Map | None, int, int, int]] = []
    for name, child_argv, _ in leaves:
        label = _name(name)
        _HELD.append(label)
        if child_argv == argv:
            # Kernel threads share kthreadd's memory (and so its command line).
            flags = int(signal.SIGCHLD) | _CLONE_FILES | _CLONE_VM
            made.append((None, ctypes.addressof(label), _stack(), flags))
            continue
        mapped = _Map.from_buffer_copy(shown.map)
        mapped.arg_end = mapped.arg_start
        if child_argv:
            text = "\0".join(child_argv).encode() + b"\0"
            held = ctypes.create_string_buffer(text, len(text))
            mapped.arg_start = ctypes.addressof(held)
            mapped.arg_end = mapped.arg_start + len(text)
            _HELD.append(held)
        _HELD.append(mapped)
        made.append((mapped, ctypes.addressof(label), shared, int(signal.SIGCHLD) | _CLONE_FILES))
    size = ctypes.sizeof(_Map)
    prctl, sbrk, clone = _LIBC.prctl, _LIBC.sbrk, _LIBC.clone
    try:
        for target, label_at, stack, flags in made:
            if target is not None:
                target.brk = sbrk(0) or 0
                prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.addressof(target), size, 0)
            prctl(_PR_SET_NAME, label_at, 0, 0, 0)
            if clone(_WAIT, stack, flags, None) < 0:
                raise OSError(ctypes.get_errno(), "clone")
    finally:
        shown.show(*shown.shown)


def _holds_worker(node: Node) -> bool:
    return node[1] is None or any(_holds_worker(child) for child in node[2])


def _keep_only(*fds: int) -> None:
    """Close every descriptor but 0-2 and ``fds`` (what an ancestor left open)."""
    low = 3
    for fd in sorted(fd for fd in fds if fd >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _grow(shown: _Shown, node: Node, step: dict[str, Any], status_fd: int) -> None:
    """Start ``node``'s children from this process, which shows as ``node``.

    Past a refused clone (a process limit) only the line to the worker is still made;
    if that is refused too, this process runs the step itself.
    """
    argv = node[1]
    leaves: list[Node] = []
    short = False
    for child in (*node[2], None):
        if child is not None and not child[2] and child[1] is not None and not short:
            leaves.append(child)  # made together, when the next one is not a leaf
            continue
        try:
            if leaves:
                _leaves(shown, leaves, argv)
        except OSError:
            short = True
        leaves = []
        if child is None or (short and not _holds_worker(child)):
            continue
        try:
            if child[1] is None:
                if os.fork() == 0:
                    _worker(shown, step, status_fd)
            else:
                _node(shown, child, step, status_fd)
        except OSError:
            if _holds_worker(child):
                _worker(shown, step, status_fd)
            short = True


def _node(shown: _Shown, node: Node, step: dict[str, Any], status_fd: int) -> None:
    """Fork a process that shows as ``node`` and starts its children; wait for them.

    Only the line to the worker keeps the status descriptor, and is not waited for.
    """
    chain = _holds_worker(node)
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        try:
            _keep_only(ready_w, *((status_fd,) if chain else ()))
            shown.show(node[0], node[1])
            if node[1] == ():
                # A kernel thread takes no signal; neither do the ones it stands in for.
                for sig in signal.valid_signals():
                    if sig not in _KEPT:
                        try:
                            signal.signal(sig, signal.SIG_IGN)
                        except (OSError, ValueError):
                            pass
            _grow(shown, node, step, status_fd)
            _keep_only()
        except BaseException:
            os._exit(70)
        _stay()
    os.close(ready_w)
    if not chain:
        os.read(ready_r, 1)  # empty once the child and its children are all there
    os.close(ready_r)


def _stay() -> NoReturn:
    """Reap this process's children, then wait until killed."""
    try:
        while True:
            os.waitpid(-1, 0)
    except ChildProcessError:
        pass
    while True:
        signal.pause()


def _start(exe: str, argv: list[str], cwd: str, env: dict[str, str], status_fd: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        os.close(status_fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *_QUIET):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(cwd)
        os.execve(exe, argv, env)  # noqa: S606 (the step's own shell)
    except BaseException as exc:  # the child must never return to the caller's code
        os.write(2, f"{argv[0]}: {exc}\n".encode())
    os._exit(127)


def _script(argv: list[str]) -> tuple[list[str], str]:
    """Return the step's argv as a runner's ``bash -e <script>``, and the script's path.

    The script is the command after ``set +e``, so it runs as ``bash -c`` would. Where no
    script can be written, the argv is kept and the path is empty.
    """
    if not SCRIPTS or len(argv) != 3 or argv[1] != "-c":
        return argv, ""
    raw = os.urandom(16).hex()
    variant = "89ab"[int(raw[16], 16) % 4]
    path = f"{SCRIPTS}/{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-{variant}{raw[17:20]}-{raw[20:]}.sh"
    try:
        os.makedirs(SCRIPTS, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"set +e\n{argv[2]}\n")
    except OSError:
        return argv, ""
    return ["/usr/bin/bash", "-e", path], path


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _worker(shown: _Shown, step: dict[str, Any], status_fd: int) -> NoReturn:
    """Be the worker: hold the job, run the step, say how it ended, then stay."""
    _keep_only(status_fd)
    shown.show("Runner.Worker", None)
    _prctl(_PR_SET_DUMPABLE, 1)
    _let_readers_in()
    for sig in _QUIET:
        signal.signal(sig, signal.SIG_IGN)
    # Copies made in place: a temporary copy, once freed, is left half overwritten in
    # the heap, where a scraper would find a mangled secret beside the real ones.
    message = bytes.fromhex(step["message"])
    wide = bytearray(2 * len(message))
    wide[::2] = message  # UTF-16LE of the ASCII JSON the runner receives
    _HELD.extend([message, bytearray(message), wide])
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    given = [str(arg) for arg in step["argv"]]
    argv, script = _script(given)
    env = {str(k): str(v) for k, v in step["env"].items()}
    main_pid = _start(given[0], argv, str(step["cwd"]), env, status_fd)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == main_pid:
            break
    if script:
        # Gone before the harness hears the step ended (it looks at HOME right after).
        try:
            os.unlink(script)
        except OSError:
            pass
    os.write(status_fd, f"{_exit_code(status)}\n".encode())
    os.close(status_fd)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            signal.sigtimedwait([signal.SIGCHLD], 3600)


def _step() -> dict[str, Any]:
    """Read the step from the file named by the first handle; remove it and the program."""
    with open(sys.argv[1], "rb") as fh:
        step: dict[str, Any] = marshal.loads(fh.read())  # noqa: S302 (jail's, as root)
    for name in sys.argv[:2]:
        try:
            os.unlink(name)
        except OSError:
            pass
    return step


def main() -> NoReturn:
    """Start the runner's tree and the step, say how it ended, then reap until killed."""
    step = _step()
    status_fd = int(step["status_fd"])
    os.closerange(3, status_fd)
    os.closerange(status_fd + 1, 1 << 16)
    # Forked copies share this process's memory until written: no collector writes it.
    gc.disable()
    gc.freeze()
    shown = _Shown()
    root: Node = TREE  # type: ignore[assignment]
    if not root or not shown.show(root[0], root[1]):
        _worker(shown, step, status_fd)
    _prctl(_PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _grow(shown, root, step, status_fd)
    if not _holds_worker(root):
        _worker(shown, step, status_fd)
    os.close(status_fd)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            signal.sigtimedwait([signal.SIGCHLD], 3600)

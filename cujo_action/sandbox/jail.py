"""Run one pull-request command confined: its own user, network, limits and deadline.

With a ``Confinement`` (full isolation, root needed, as on an Actions runner) a command
runs inside its phase's network namespace (``netns.py``: the only way out is the logging
harness) as the unprivileged sandbox user, with no capabilities and ``no_new_privs`` (so
``sudo`` and every setuid binary are powerless), a scrubbed environment handed in by the
caller, and resource limits (processes, open files, file size, core dumps). When the
command ends, times out or floods its output, everything left in its namespace is
killed: a process can leave its process group, but not its network namespace. A command
that returns at once leaving a growing crowd behind (``:(){ :|:& };:``) is watched a
moment longer, so a fork bomb is reported and not only killed; the caller adopts the
orphans (a child subreaper) and the jail reaps the sandbox user's, so their zombies do
not hold the process limit for the rest of the run.

What a command leaves behind is counted, reaped and killed by ``reaper.py``; its uid comes
from the run's block (``uids.py``). ``execguard.ExecGuard`` names whoever runs ``sudo``
(or ``su``, ``pkexec``, ``doas``) from a check's namespaces, holding the exec (a fanotify
permission event) until it knows. What the sandbox's tree shows (a mount table that names
nothing of Cujo, the hosted image's folders) is ``tree.py``'s; root detaches the host's
covered mounts just before ``setpriv`` (``detach.py``).

Without one (partial isolation), the command runs in its own session and process group
with the same environment, limits, deadline and output cap.
"""

from __future__ import annotations

import json
import marshal
import os
import re
import resource
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from cujo_action.sandbox.cgroups import Limits
from cujo_action.sandbox.detach import mount_points, to_detach
from cujo_action.sandbox.detach import prefix as detach_prefix
from cujo_action.sandbox.output import (
    Capture,
    LineKeeper,
    Matcher,
    OutputSearch,
    Printed,
    Stream,
)
from cujo_action.sandbox.phase_namespace import is_rootless, join_argv, kill_all_in
from cujo_action.sandbox.reaper import (
    Census,
    Growth,
    Reaper,
    become_subreaper,
    census,
    census_of,
    kill_group,
    namespace_inode,
    watch_growth,
)
from cujo_action.sandbox.resolvconf import ResolvFile, resolv_files
from cujo_action.sandbox.tree import covered, image_args, neutral_cover

FILE_SIZE_LIMIT = 2 * 1024 * 1024 * 1024
# Processes the sandbox user may have at once, across the run's concurrent phases. A test
# suite rarely needs a few dozen; a fork bomb meets this wall and is reported.
NPROC_LIMIT = 1024
NOFILE_LIMIT = 8192
# A phase that reaches this share of the process limit is flooding the process table: the
# share of what the limit leaves the command, once the sandbox's own processes (the
# runner-shaped tree, ~100 on two CPUs, more on larger runners) hold their part of it.
FLOOD_SHARE = 0.75
SANDBOX_USER = "cujo-sandbox"
MOUNTINFO = Path("/proc/self/mountinfo")
_POLL_S = 0.2


class JailError(RuntimeError):
    """The jail could not be set up (no such user and none could be made, …)."""


# Inside the sandbox (bubblewrap), every check sees the same ordinary CI layout; where
# that lives on the host differs per check (``arm/staging.py``).
INSIDE_HOME = "/home/runner"
INSIDE_WORK = "/home/runner/work"
INSIDE_UID = 1001
# Host paths always hidden from pull-request commands (the runner's own files, the
# harness's state, host services' sockets): each gets an empty tmpfs.
ALWAYS_HIDDEN = ("/home", "/root", "/tmp", "/var/tmp", "/run", "/mnt", "/media", "/srv")  # noqa: S108
_SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# The sandbox's pid 1: runs the command, tells the harness its exit status on fd 3, then
# stays (reaping) so what the command left behind can be watched before it is killed.
INIT = (
    # The command gets the real stdin (a background job's would be /dev/null) and never
    # the status descriptor: only pid 1 may say how the command ended.
    'fd=$1; shift; eval \'"$@" <&0 \'"$fd"\'>&- &\'; main=$!; wait "$main"; rc=$?; '
    'printf "%d\\n" "$rc" >&"$fd"; eval "exec $fd>&-"; '
    "while :; do sleep 3600 & wait $!; done"
)


@dataclass(frozen=True)
class Worker:
    """A program that is the sandbox's pid 1 in place of the shell, and starts the command.

    It runs as the sandbox user with ``python`` (a host interpreter, bound read-only at
    ``exe``) from a file named ``argv[0]`` in ``exe``'s folder on a tmpfs at ``mount``:
    ``program``, compiled for that interpreter once per run (the bytes of a ``.pyc``,
    which Python runs as it is, whatever the file's name). The command, its folder, its
    environment, the status descriptor and the ``message`` it holds (in hex: what is left
    of the step's text in memory must not read as a secret) come in a file named
    ``argv[1]`` beside it (``step``); it removes both once read. It tells how the command
    ended on the status descriptor, as ``INIT`` does, and reaps until killed. It may start
    processes of its own before the command: ``processes`` in all, pid 1 included, which
    are not counted as the command's.
    """

    python: str
    exe: str
    argv: tuple[str, ...]
    mount: str
    env: tuple[tuple[str, str], ...]  # its own environment (not the command's)
    program: bytes
    processes: int = 1
    message: bytes = b""

    def step(self, cmd: str, cwd: str, env: Mapping[str, str], status_fd: int) -> bytes:
        """Return the step file that has the program run ``cmd`` in ``cwd`` with ``env``."""
        # Marshalled, not JSON nor a literal: the program neither imports a parser nor
        # compiles anything. Format 4 is read by every Python since 3.4.
        config = {"argv": ["/bin/bash", "-c", cmd], "cwd": cwd, "env": dict(env),
                  "status_fd": status_fd, "message": self.message.hex()}  # fmt: skip
        return marshal.dumps(config, 4)


@dataclass(frozen=True)
class View:
    """What a command sees of the filesystem under bubblewrap (host paths → inside)."""

    bwrap: str  # the bubblewrap executable
    binds: tuple[tuple[str, str], ...]  # read-write: (host, inside)
    ro_binds: tuple[tuple[str, str], ...]  # read-only: (host, inside)
    hidden: tuple[str, ...]  # host paths replaced by an empty tmpfs
    worker: Worker | None = None  # the sandbox's pid 1, when not the plain shell

    def covered(self) -> list[str]:
        """Return the folders an empty tmpfs covers: none under another, none named Cujo."""
        hidden = (neutral_cover(path) for path in self.hidden)
        return covered({*ALWAYS_HIDDEN, *hidden, "/dev/shm"})  # noqa: S108

    def detach_argv(self, *, in_netns: bool) -> list[str]:
        """Return the root-side step that runs before ``setpriv`` (``detach.py``): in a
        mount namespace of its own (``ip netns exec``'s, when ``in_netns``), the host's
        mounts under the covered folders go."""
        # What bubblewrap binds from, and /tmp, where it makes its own root's mount point.
        keep = [host for host, _ in (*self.binds, *self.ro_binds)]
        keep += [*self.image()[1], "/tmp"]  # noqa: S108
        if self.worker is not None:
            keep.append(self.worker.python)
        try:
            points = mount_points(MOUNTINFO.read_text(errors="replace"))
        except OSError:
            return []  # nothing known to detach: only names would show
        unshare = None if in_netns else system_tool("unshare")
        return detach_prefix(to_detach(points, self.covered(), keep), unshare)

    def image(self, empty_fd: int = -1) -> tuple[list[str], list[str]]:
        """Return the arguments that make the image's folders (``tree.py``), and the host
        paths they bind from."""
        return image_args(self.covered(), os.path.isdir, os.path.realpath, empty_fd)

    def args(
        self,
        cwd: str,
        *,
        user_ns: bool = True,
        program_fd: int = -1,
        empty_fd: int = -1,
        resolv: Sequence[tuple[int, ResolvFile]] = (),
        info_fd: int = -1,
        step_fd: int = -1,
    ) -> list[str]:
        """Return bubblewrap's arguments up to (not including) the command.

        ``empty_fd`` is read to make docker's socket as an empty file (none when negative).
        ``resolv``: the resolver files and the descriptors holding them (``_resolv_fds``).
        ``info_fd``: where bubblewrap writes the pid of the sandbox's pid 1 (none when
        negative). ``program_fd`` and ``step_fd`` hold the worker's files (``Worker``).
        """
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if info_fd >= 0:
            args += ["--info-fd", str(info_fd)]
        for path in self.covered():
            args += ["--tmpfs", path]
        args += self.image(empty_fd)[0]
        for host, inside in self.ro_binds:
            args += ["--ro-bind", host, inside]
        for host, inside in self.binds:
            args += ["--bind", host, inside]
        for fd, placed in resolv:
            # A runner's resolver files (sandbox/resolvconf.py): written into the sandbox's own
            # /run, or bound over the host's /etc/resolv.conf where that is a plain file.
            how = "--ro-bind-data" if placed.bind else "--file"
            args += ["--perms", "0644", how, str(fd), placed.path]
        if self.worker is not None and program_fd >= 0:
            # On a tmpfs of its own over the HOME bind: nothing of it lands in HOME.
            folder = self.worker.exe.rsplit("/", 1)[0]
            args += ["--tmpfs", self.worker.mount, "--ro-bind", self.worker.python]
            args += [self.worker.exe, "--perms", "0600", "--file", str(program_fd)]
            args.append(f"{folder}/{self.worker.argv[0]}")
            args += ["--perms", "0600", "--file", str(step_fd), f"{folder}/{self.worker.argv[1]}"]
            cwd = folder
        if user_ns:
            args += [
                "--unshare-user", "--disable-userns",
                "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID),
            ]  # fmt: skip
        args += [
            # The UTS namespace keeps the machine's name (a runner's own on Actions).
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--as-pid-1", "--die-with-parent", "--new-session",
            "--chdir", cwd,
        ]  # fmt: skip
        return args


@dataclass(frozen=True)
class Confinement:
    """Where, as whom and in what view a command runs.

    ``uid`` is set whenever the harness is root: no pull-request command runs as uid 0,
    in any isolation mode. ``netns`` is set under full isolation, ``view`` wherever
    bubblewrap works; without a view the command sees the host (partial isolation).
    """

    netns: str | None
    uid: int | None
    gid: int | None
    view: View | None = None
    limits: Limits | None = None
    nproc: int = NPROC_LIMIT
    # Scheduling niceness (0: as the harness): work off the review's critical path yields.
    nice: int = 0

    def __post_init__(self) -> None:
        if os.geteuid() == 0 and not self.uid:
            raise JailError("refusing to run a pull-request command as root (no sandbox uid)")

    def argv(
        self,
        cmd: str,
        cwd: str,
        status_fd: int = -1,
        program_fd: int = -1,
        empty_fd: int = -1,
        resolv: Sequence[tuple[int, ResolvFile]] = (),
        info_fd: int = -1,
        step_fd: int = -1,
    ) -> list[str]:
        """Return the argv that runs ``cmd`` (in ``cwd``, as the command sees it) confined.

        Under a view, the sandbox's pid 1 writes the command's exit status to
        ``status_fd`` (which the caller passes down) and stays until it is killed. With a
        worker, pid 1 is the worker, its program read from ``program_fd`` and the command
        from ``step_fd``. bubblewrap reads ``empty_fd`` for an empty file, ``resolv`` are
        the resolver files the view writes, and ``info_fd`` is where it says which pid its
        pid 1 has (``View.args``).
        """
        argv: list[str] = []
        if self.netns is not None and is_rootless(self.netns):
            # Without root: into the holder's user and network namespaces, as their owner.
            argv += join_argv(self.netns)
        elif self.netns is not None:
            argv += [system_tool("ip"), "netns", "exec", self.netns]
        if self.view is not None and self.uid is not None:
            # Root, before it gives up its rights: the host's mounts the sandbox would
            # only see as names (/run/netns, …) are detached in a namespace of its own.
            argv += self.view.detach_argv(in_netns=self.netns is not None)
        if self.uid is not None and self.gid is not None:
            argv += [
                system_tool("setpriv"), f"--reuid={self.uid}", f"--regid={self.gid}",
                "--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
            ]  # fmt: skip
        if self.view is not None and self.view.worker is not None and program_fd >= 0:
            worker = self.view.worker
            view = self.view.args(
                cwd, program_fd=program_fd, empty_fd=empty_fd, resolv=resolv, info_fd=info_fd,
                step_fd=step_fd,
            )  # fmt: skip
            return [*argv, *view, "--", worker.exe, *worker.argv]
        if self.view is not None:
            view = self.view.args(cwd, empty_fd=empty_fd, resolv=resolv, info_fd=info_fd)
            argv += [*view, "--", "/bin/bash", "-c", INIT, "bash"]
            argv.append(str(status_fd))
        return [*argv, "/bin/bash", "-c", cmd]


def system_tool(name: str) -> str:
    """Return the absolute path of a tool the harness runs, found whatever PATH says."""
    where = os.pathsep.join([os.environ.get("PATH", ""), *_SYSTEM_DIRS])
    return shutil.which(name, path=where) or name


def bwrap_unavailable(uid: int | None, gid: int | None) -> str | None:
    """Return why bubblewrap cannot build a sandbox here (as ``uid``), or None if it can."""
    found = shutil.which("bwrap", path=os.pathsep.join(_SYSTEM_DIRS)) or shutil.which("bwrap")
    if found is None:
        return "`bwrap` is not installed (bubblewrap)"
    view = View(found, (), (), ())
    try:
        outcome = run_confined(
            "exit 0", cwd=Path("/"), env={"PATH": "/usr/bin:/bin"}, timeout=30,
            confinement=Confinement(None, uid, gid, view),
        )  # fmt: skip
    except (OSError, JailError) as exc:
        return f"bubblewrap could not be started: {exc}"
    if outcome.exit_code != 0:
        err = outcome.stderr_tail.strip().splitlines()
        return (
            "bubblewrap cannot make a sandbox here (unprivileged user namespaces are "
            f"restricted?): {err[-1] if err else f'exit {outcome.exit_code}'}"
        )
    return None


def _resolv_fds(view: View) -> list[tuple[int, ResolvFile]]:
    """Return a descriptor holding each resolver file of the sandbox, for bubblewrap."""
    return [
        (_memfd("resolv", placed.content), placed)
        for placed in resolv_files((*ALWAYS_HIDDEN, *view.hidden))
    ]


def _memfd(name: str, content: bytes) -> int:
    """Return a descriptor (close-on-exec) that reads ``content``, for bubblewrap to copy."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# The pid, outside, of each sandbox's pid 1 this process adopted and has not reaped.
# bubblewrap's monitor is killed first, so pid 1 ends adopted here (the subreaper), a zombie
# until reaped: holding one of the user's processes (the check's limit counts it), and
# read as a leftover of the next command (the leftover watch would wait on it).
_ADOPTED: set[int] = set()
_ADOPTED_WAIT_S = 2.0


def _adopt(info_r: int) -> int | None:
    """Note the sandbox's pid 1 that bubblewrap named on ``info_r`` (closed here) if this
    process adopted it, and reap it if it has ended; return that pid (None: not said)."""
    try:
        os.set_blocking(info_r, False)  # written before the sandbox was set up, if at all
        said = json.loads(os.read(info_r, 4096) or b"{}")
        pid = said.get("child-pid") if isinstance(said, dict) else None
    except (OSError, ValueError):
        pid = None
    finally:
        os.close(info_r)
    if isinstance(pid, int) and _parent_of(pid) == os.getpid():
        _ADOPTED.add(pid)  # this process's child: nobody else can reap it, nor reuse its pid
    _reap_adopted()
    return pid if isinstance(pid, int) else None


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _reap_adopted(wait_s: float = 0.0) -> None:
    """Reap each adopted pid 1 (``_ADOPTED``) that has ended, and nothing else, waiting up
    to ``wait_s`` for those still ending (killed with their monitor, they end at once, but
    only once the kernel has emptied their PID namespace)."""
    end = time.monotonic() + wait_s
    pause = 0.001
    while True:
        for pid in list(_ADOPTED):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by another thread's call
                done = pid
            if done:
                _ADOPTED.discard(pid)
        if not _ADOPTED or time.monotonic() >= end:
            return
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


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
    # The most processes the command had at once (0 when not measured; the sandbox's own
    # are not counted), and whether that came near the process limit (a fork bomb, or
    # something like one).
    peak_processes: int = 0
    process_flood: bool = False
    refused_forks: int = 0  # forks the check's process limit refused (cgroups only)
    # Whether the peak came near what the limit leaves the command (the sandbox's own
    # processes, the runner-shaped tree, hold the rest of it).
    near_limit: bool = False
    made_after_return: int = 0  # processes its leftovers made after the command returned
    oom_kills: int = 0  # processes its memory limit killed (cgroups only)
    # Decoys found in what it printed (``output.py``; only when asked to search), and
    # the bytes of output whose decoding ran out of budget (searched only in part).
    printed: tuple[Printed, ...] = ()
    output_unsearched: int = 0
    # The lines a ``keep`` pattern asked for, from the whole of stdout then stderr (a test
    # runner's failing tests), and how many more matched than were kept.
    kept_lines: tuple[str, ...] = ()
    kept_dropped: int = 0
    # The sandbox's pid 1 (bubblewrap's --as-pid-1 child, in the host's numbering): every
    # process of the command descends from it, orphans too (None: no view, or not said).
    sandbox_pid: int | None = None


def _limits(nproc: int | None, limits: Limits | None, nice: int = 0) -> Callable[[], None]:
    def apply() -> None:
        """Join the check's cgroups and set resource limits in the child before it execs."""
        if limits is not None:
            limits.join()
        if nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))
        if nproc is not None:
            # Counted against the real uid once setpriv has switched to the sandbox user.
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _counted(confinement: Confinement) -> bool:
    """Return whether a command's processes are limited and counted: as a uid of its own
    (root), or in a rootless namespace, where bubblewrap's user namespace counts them
    apart (RLIMIT_NPROC is kept per user namespace, set before bubblewrap makes it)."""
    rootless = confinement.netns is not None and is_rootless(confinement.netns)
    return bool(confinement.uid) or rootless


def _look(inode: int | None, holder: int, limits: Limits | None) -> Census:
    """Return the census of the command's processes: its check's cgroup when it has one
    (exact), else its network namespace's, without the rootless namespace's holder."""
    if limits is not None and limits.kind != "rlimits":
        seen = census_of(limits.members())
        return Census(limits.current(), seen.busy, seen.newest)
    if inode is None:
        return Census()
    seen = census(inode)
    return Census(max(0, seen.live - holder), seen.busy, seen.newest)


def _room(nproc: int, own: int) -> int:
    """Return how many processes the limit leaves a command beside the sandbox's own."""
    return max(1, nproc - own)


def _read_status(fd: int) -> tuple[bool, int | None]:
    """Read the sandbox's pid 1 report: (ended, the command's exit status or None)."""
    try:
        data = os.read(fd, 64)
    except OSError:
        return True, None
    text = data.decode(errors="replace").strip()
    return True, int(text) if text.isdigit() else None


def run_confined(
    cmd: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    confinement: Confinement,
    stdin_fd: int | None = None,
    stdout_fd: int | None = None,
    search: Matcher | None = None,
    keep: re.Pattern[bytes] | None = None,
) -> Outcome:
    """Run ``cmd`` with bash in ``cwd``; kill all it started on timeout, flood or exit.

    ``cwd`` is the folder as the command sees it (inside the view, if there is one).
    ``stdin_fd`` / ``stdout_fd`` replace /dev/null and the captured stdout. With
    ``search``, everything the command prints is searched for decoys (``output.py``);
    with ``keep``, the lines of its output that match are kept (``Outcome.kept_lines``).
    """
    if os.geteuid() == 0 and not confinement.uid:
        raise JailError("refusing to run a pull-request command as root")
    flood = threading.Event()
    started = time.monotonic()
    netns = confinement.netns
    inode = namespace_inode(netns) if netns else None
    if netns is not None and inode is None:
        raise JailError(f"network namespace {netns} does not exist")
    limits = confinement.limits
    forks_before = limits.refused_forks() if limits else 0
    ooms_before = limits.oom_kills() if limits else 0
    view = confinement.view
    status_r, status_w = os.pipe() if view is not None else (-1, -1)
    # Where bubblewrap says which pid the sandbox's pid 1 has (``_adopted``).
    info_r, info_w = os.pipe() if view is not None else (-1, -1)
    # What bubblewrap copies into docker's socket path: nothing.
    empty_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) if view is not None else -1
    # In its namespace, the sandbox reads a runner's resolv.conf, naming the stub address
    # that leads to its resolver (ns/dnsstub.py); without one, the host's resolver is its.
    resolv = _resolv_fds(view) if view is not None and netns is not None else []
    program_fd = step_fd = -1
    outer_env = dict(env)
    if view is not None and view.worker is not None:
        # The worker is pid 1 and gets its own environment; the command's goes in its
        # step, which bubblewrap copies from a descriptor into the sandbox, as its program.
        program_fd = _memfd("step", view.worker.program)
        step_fd = _memfd("step", view.worker.step(cmd, str(cwd), env, status_w))
        outer_env = dict(view.worker.env)
    resolved = [fd for fd, _ in resolv]
    if confinement.uid is not None:
        become_subreaper()
    # The last command's pid 1 is not counted as this one's (nor held against its limit).
    _reap_adopted(_ADOPTED_WAIT_S)
    try:
        argv = confinement.argv(
            cmd, str(cwd), status_w, program_fd, empty_fd, resolv, info_fd=info_w, step_fd=step_fd
        )
        proc = subprocess.Popen(
            argv,
            cwd="/" if view is not None else cwd,
            env=outer_env,
            stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL,
            stdout=stdout_fd if stdout_fd is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(
                fd for fd in (status_w, info_w, program_fd, step_fd, empty_fd, *resolved) if fd >= 0
            ),
            preexec_fn=_limits(  # noqa: PLW1509
                confinement.nproc if _counted(confinement) else None, limits, confinement.nice
            ),
        )
    finally:
        for fd in (status_w, info_w, program_fd, step_fd, empty_fd, *resolved):
            if fd >= 0:
                os.close(fd)
    try:
        outcome = _follow(proc, confinement, inode, status_r, flood, started, timeout,
                          forks_before, ooms_before, search, keep)  # fmt: skip
    finally:
        if status_r >= 0:
            os.close(status_r)
        sandbox_pid = _adopt(info_r) if info_r >= 0 else None
    return replace(outcome, sandbox_pid=sandbox_pid)


def _follow(
    proc: subprocess.Popen[bytes],
    confinement: Confinement,
    inode: int | None,
    status_r: int,
    flood: threading.Event,
    started: float,
    timeout: float,
    forks_before: int,
    ooms_before: int,
    search: Matcher | None,
    keep: re.Pattern[bytes] | None = None,
) -> Outcome:
    lock = threading.Lock()

    def searching(stream: Stream) -> OutputSearch | None:
        return OutputSearch(search, stream, lock) if search is not None else None

    def keeping() -> LineKeeper | None:
        return LineKeeper(keep) if keep is not None else None

    out = (
        Capture(proc.stdout, flood, searching("stdout"), keeping())
        if proc.stdout is not None
        else None
    )
    err = Capture(proc.stderr, flood, searching("stderr"), keeping())
    uid = confinement.uid
    reaper = Reaper(uid, proc.pid) if uid is not None and confinement.view is None else None
    # How many processes the command has: its cgroup knows exactly, else its namespace;
    # the namespace also says which are busy and how many its pid namespace has made.
    limits = confinement.limits
    grouped = limits is not None and limits.kind != "rlimits"
    look: Callable[[], Census] | None = None
    if inode is not None or grouped:
        holder = 1 if confinement.netns is not None and is_rootless(confinement.netns) else 0
        look = partial(_look, inode, holder, limits)
    timed_out = False
    ended = False
    status: int | None = None
    peak = 0
    # The sandbox's own processes: bubblewrap's monitor outside it, and inside the
    # worker's, or the shell and its sleep.
    own = 0
    if confinement.view is not None:
        worker = confinement.view.worker
        own = 1 + (worker.processes if worker is not None else 2)
    # The flood bar is a share of what the limit leaves the command: with ~100 of the
    # sandbox's own holding their slots, a bomb at the wall reads as ~900, and a census of
    # a thousand churning processes on a loaded machine sees most but not all of them.
    counted = _counted(confinement)
    bar = FLOOD_SHARE * _room(confinement.nproc, own)
    deadline = started + timeout
    while True:
        if status_r >= 0:
            ready, _, _ = select.select([status_r], [], [], _POLL_S)
            if ready:
                ended, status = _read_status(status_r)
                break
            if proc.poll() is not None:
                break
        else:
            try:
                proc.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
        if grouped and limits is not None:
            peak = max(peak, limits.current())
        elif look is not None:
            peak = max(peak, look().live)
        if flood.is_set():
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
    growth = Growth(0, 0, still_growing=False)
    if look is not None and not timed_out and not flood.is_set():
        # A command may return at once and leave its work running: `:(){ :|:& };:` is
        # gone in a millisecond while what it started multiplies. Watch what it left for
        # as long as that is busy, so a fork bomb is seen before it is killed, however
        # fast its parent returned and however loaded the machine is.
        growth = watch_growth(look, deadline, bar + own, own=own)
        peak = max(peak, growth.peak)
    peak = max(0, peak - own)
    # Whatever the command left behind goes too: nothing outlives a phase. Killing the
    # outer bubblewrap kills the sandbox's pid 1, and with it the whole pid namespace.
    kill_group(proc.pid, proc)
    if confinement.netns is not None:
        # setsid() leaves a process group, never the namespace: sweep that as well.
        kill_all_in(confinement.netns)
    code = proc.wait()
    if reaper is not None:
        reaper.finish()
    if out is not None:
        out.thread.join(5)
    err.thread.join(5)
    if status_r >= 0 and not ended and not timed_out and not flood.is_set():
        # pid 1 never reported: the sandbox could not be built (or was killed whole).
        said = err.text().strip()
        if said.startswith("bwrap:") or "setpriv:" in said or code in (125, 126, 127):
            raise JailError(f"the sandbox could not be set up: {said[-500:] or f'exit {code}'}")
    if status_r >= 0:
        code = status if status is not None else code
    killed = timed_out or flood.is_set()
    captures = [c for c in (out, err) if c is not None]
    searches = [c.search for c in captures if c.search is not None]
    # A stream still being drained (a leftover outside the namespace holds the pipe) was
    # not searched to its end: what is left is counted, never passed over in silence.
    behind = sum(c.total - c.search.searched for c in captures if c.search and c.thread.is_alive())
    refused = (limits.refused_forks() - forks_before) if limits else 0
    ooms = (limits.oom_kills() - ooms_before) if limits else 0
    return Outcome(
        exit_code=None if killed else code,
        timed_out=timed_out,
        flooded=flood.is_set(),
        duration_s=round(time.monotonic() - started, 3),
        stdout_tail=out.text() if out is not None else "",
        stderr_tail=err.text(),
        stdout_bytes=out.total if out is not None else 0,
        stderr_bytes=err.total,
        peak_processes=peak,
        process_flood=counted
        and (peak >= bar or refused > 0 or growth.made >= bar or growth.still_growing),
        refused_forks=refused,
        near_limit=counted and peak >= bar,
        made_after_return=growth.made,
        oom_kills=ooms,
        printed=tuple(p for s in searches for p in s.printed()),
        output_unsearched=sum(s.unsearched for s in searches) + behind,
        kept_lines=tuple(line for c in captures if c.keep for line in c.keep.lines),
        kept_dropped=sum(c.keep.dropped for c in captures if c.keep),
    )

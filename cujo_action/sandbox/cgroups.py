"""Give each check of a run its own process and memory limits, through cgroups where root can.

cgroup v2 (GitHub's runners): one group per check below the root, with ``pids.max`` and
``memory.max`` (no swap). cgroup v1 (``pids`` and ``memory`` hierarchies mounted, as on
some build machines): one group per check below this process's own group in each. A
machine where root can write neither keeps the per-uid rlimits the jail always sets (each
check has a uid of its own, so those are per run too) and has no memory limit; the
report says which applied. A command joins its check's groups before it execs.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_MEMORY_MB = 4096
_RMDIR_WAIT_S = 5.0


def memory_limit_mb() -> int:
    """Return the memory a check may use, in MiB (``CUJO_CHECK_MEMORY_MB`` overrides)."""
    raw = os.environ.get("CUJO_CHECK_MEMORY_MB", "")
    if raw.strip().isdigit() and int(raw) >= 16:
        return int(raw)
    return DEFAULT_MEMORY_MB


@dataclass(frozen=True)
class Limits:
    """One check's cgroups (empty under rlimits only) and what they enforce."""

    kind: str  # "cgroup v2" | "cgroup v1" | "rlimits"
    pids_max: int
    memory_mb: int | None
    dirs: tuple[str, ...] = ()
    note: str = ""  # why cgroups could not be used (rlimits only)
    # One of each controller's files, by role: where to join, and what to read back.
    procs: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """Return a one-line statement of the limits, for the report."""
        memory = f"memory {self.memory_mb} MiB" if self.memory_mb else "no memory limit"
        text = f"{self.kind}: {self.pids_max} processes, {memory}"
        return f"{text} ({self.note})" if self.note else text

    def join(self) -> None:
        """Move the calling process into the check's groups (call in the child, pre-exec)."""
        for procs in self.procs:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))

    def current(self) -> int:
        """Return how many processes the check has now (cgroups only; 0 otherwise)."""
        path = self._file("pids.current")
        try:
            return int(path.read_text()) if path is not None else 0
        except (OSError, ValueError):
            return 0

    def members(self) -> list[int]:
        """Return the pids of the check's processes (cgroups only; none otherwise)."""
        path = self._file("cgroup.procs")
        try:
            text = path.read_text() if path is not None else ""
        except OSError:
            return []
        return [int(line) for line in text.split() if line.isdigit()]

    def refused_forks(self) -> int:
        """Return how many forks the process limit refused so far (cgroups only)."""
        return _event(self._file("pids.events"), "max")

    def oom_kills(self) -> int:
        """Return how many processes the memory limit killed so far (cgroups only)."""
        if self.kind == "cgroup v2":
            return _event(self._file("memory.events"), "oom_kill")
        return _event(self._file("memory.oom_control"), "oom_kill")

    def _file(self, name: str) -> Path | None:
        for d in self.dirs:
            if (Path(d) / name).exists():
                return Path(d) / name
        return None

    def remove(self) -> None:
        """Remove the groups once their processes are gone (waits a little for exits)."""
        end = time.monotonic() + _RMDIR_WAIT_S
        for d in self.dirs:
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > end:
                        break
                    time.sleep(0.05)


def _event(path: Path | None, key: str) -> int:
    if path is None:
        return 0
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        return 0
    return 0


def _own_v1_path(controller: str) -> str | None:
    """Return this process's group in a v1 hierarchy (``/proc/self/cgroup``)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path
    return None


def _v2(name: str, pids: int, memory_mb: int) -> Limits | None:
    root = CGROUP_ROOT
    if not (root / "cgroup.controllers").exists():
        return None
    wanted = {"pids", "memory"}
    if not wanted <= set((root / "cgroup.controllers").read_text().split()):
        return None
    enabled = set((root / "cgroup.subtree_control").read_text().split())
    if not wanted <= enabled:
        (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted - enabled))
    group = root / name
    group.mkdir(mode=0o755)
    (group / "pids.max").write_text(str(pids))
    (group / "memory.max").write_text(str(memory_mb * 1024 * 1024))
    with contextlib.suppress(OSError):
        (group / "memory.swap.max").write_text("0")
    return Limits("cgroup v2", pids, memory_mb, (str(group),), procs=(str(group / "cgroup.procs"),))


def _v1(name: str, pids: int, memory_mb: int) -> Limits | None:
    made: list[Path] = []
    try:
        for controller in ("pids", "memory"):
            mount = CGROUP_ROOT / controller
            own = _own_v1_path(controller)
            if own is None or not (mount / "cgroup.procs").exists():
                return None
            group = mount / own.lstrip("/") / name
            group.mkdir(mode=0o755)
            made.append(group)
        pid_dir, mem_dir = made
        (pid_dir / "pids.max").write_text(str(pids))
        limit = str(memory_mb * 1024 * 1024)
        (mem_dir / "memory.limit_in_bytes").write_text(limit)
        with contextlib.suppress(OSError):
            (mem_dir / "memory.memsw.limit_in_bytes").write_text(limit)
    except BaseException:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise
    return Limits(
        "cgroup v1",
        pids,
        memory_mb,
        tuple(str(d) for d in made),
        procs=tuple(str(d / "cgroup.procs") for d in made),
    )


def make_limits(name: str, pids: int) -> Limits:
    """Create the groups of one check (``name`` unique per run and check), else rlimits."""
    memory_mb = memory_limit_mb()
    if os.geteuid() != 0:
        return Limits("rlimits", pids, None, note="not root: no cgroup can be made")
    errors = []
    for make in (_v2, _v1):
        try:
            made = make(name, pids, memory_mb)
        except OSError as exc:
            errors.append(f"{exc.strerror or exc} ({exc.filename or make.__name__})")
            continue
        if made is not None:
            return made
    why = "; ".join(errors) or "neither a v2 nor a v1 pids+memory hierarchy is mounted"
    return Limits("rlimits", pids, None, note=f"cgroups unavailable: {why}")

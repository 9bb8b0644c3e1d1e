"""Count, reap and kill what a confined command leaves behind: nothing outlives a phase."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cujo_action.sandbox.phase_namespace import is_rootless
from cujo_action.sandbox.phase_namespace import namespace_inode as rootless_inode

GRACE_S = 2.0
# A command that returns leaving this many processes behind is watched for up to
# LEFTOVER_WATCH_S before they are killed, to tell a fork bomb from a few leftovers.
LEFTOVER_CROWD = 64
LEFTOVER_WATCH_S = 5.0
_GROWTH_POLL_S = 0.05
_PR_SET_CHILD_SUBREAPER = 36
_REAP_POLL_S = 0.005


def namespace_inode(name: str) -> int | None:
    """Return the inode of phase namespace ``name`` (``ip netns``'s or rootless), None if gone."""
    if is_rootless(name):
        return rootless_inode(name)
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def count_in_namespace(inode: int) -> int:
    """Return how many processes live in the network namespace with this inode."""
    return census(inode).live


@dataclass(frozen=True)
class Census:
    """What a network namespace holds at one look, read from the kernel's /proc."""

    live: int = 0  # processes in it
    busy: int = 0  # of those in a nested pid namespace, the ones not idle (state R or D)
    # The highest pid handed out so far in the nested pid namespace (the sandbox's: pids
    # there are given in order from 1), so processes made and gone between two looks
    # are counted as well.
    newest: int = 0


def _own_pid_depth() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return len(line.split()) - 1
    except OSError:
        pass
    return 1


def census(inode: int) -> Census:
    """Return what the network namespace with this inode holds (``Census``), its members'
    unreaped children included.

    A zombie has no namespaces left to read, yet holds its process slot until its parent
    reaps it: a fork bomb at its process limit is up to half zombies (each bash waits in
    `fork: retry` before reaping), so a count of the living alone swung between half the
    limit and all of it with the machine's load, and a bomb at the limit could read as a
    few hundred processes. A zombie whose parent is in the namespace is counted.
    """
    members: list[int] = []
    unreadable: list[int] = []  # gone, or a zombie (ENOENT): another uid's is EACCES
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    members.append(int(entry))
            except FileNotFoundError:
                unreadable.append(int(entry))
            except OSError:
                continue
    inside = set(members)
    members += [pid for pid in unreadable if _zombie_parent(pid) in inside]
    return census_of(members)


def _status(pid: int) -> dict[str, str] | None:
    """Return the fields of /proc/PID/status, or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return dict(line.split(":", 1) for line in fh if ":" in line)
    except (OSError, ValueError):
        return None


def _zombie_parent(pid: int) -> int | None:
    """Return the parent of ``pid`` when it is a zombie, else None."""
    fields = _status(pid)
    if fields is None or fields.get("State", "").split()[:1] != ["Z"]:
        return None
    parent = fields.get("PPid", "").strip()
    return int(parent) if parent.isdigit() else None


def census_of(pids: Iterable[int]) -> Census:
    """Return the census of these processes (those gone meanwhile are not counted)."""
    depth = _own_pid_depth()
    live = busy = newest = 0
    for pid in pids:
        fields = _status(pid)
        if fields is None:
            continue
        live += 1
        inner = fields.get("NSpid", "").split()
        if len(inner) > depth and inner[-1].isdigit():
            newest = max(newest, int(inner[-1]))
            # Runnable, or inside the kernel (a fork in progress): not idle.
            busy += fields.get("State", "").split()[:1] in (["R"], ["D"])
    return Census(live, busy, newest)


def kill_group(pgid: int, leader: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        if sig is signal.SIGTERM:
            # Give well-behaved children a moment; a deadline, not a sleep in a loop.
            deadline = time.monotonic() + GRACE_S
            pause = 0.001  # most groups are gone in a millisecond (bubblewrap's is)
            while time.monotonic() < deadline:
                leader.poll()  # reap the leader, or the group looks alive while it is a zombie
                _reap_group(pgid, leader.pid)
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                time.sleep(pause)
                pause = min(2 * pause, 0.05)


def _reap_group(pgid: int, leader: int) -> None:
    """Reap the group's members that died as orphans adopted here (the subreaper), so a
    zombie does not keep the group alive for ``GRACE_S``.

    When the outer bubblewrap dies on SIGTERM before it reaps its own child (the
    sandbox's pid 1 seen from outside), that child is orphaned to this process, dies with
    its pid namespace and stays a zombie in the group until someone reaps it: every
    command run in a network namespace waited two seconds for it. The leader is left to
    Popen (its exit status is the command's).
    """
    while True:
        try:
            info = os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == leader:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, info.si_pid, os.WEXITED | os.WNOHANG)


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux), so that it can reap them."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap(uid: int, leader: int) -> int:
    """Reap the exited children of the sandbox user but ``leader``; return how many."""
    # A process whose parent is gone is adopted here (the subreaper) and, once it exits,
    # holds one of the sandbox user's process slots until it is reaped: a fork bomb's
    # orphans would fill RLIMIT_NPROC with zombies for the rest of the run. The leader is
    # left to Popen, and the harness's own children (root) to whoever started them.
    reaped = 0
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if info is None or info.si_pid == leader or info.si_uid != uid:
            return reaped
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, info.si_pid, os.WEXITED | os.WNOHANG)
        reaped += 1


def _children_of(uid: int) -> int:
    """Return how many children of this process (live or not) belong to ``uid``."""
    me, count = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _status(int(entry))
            if fields is None:
                continue
            if int(fields.get("PPid", 0)) == me and int(fields["Uid"].split()[0]) == uid:
                count += 1
    return count


class Reaper:
    """Reap the sandbox user's orphans while a confined command runs."""

    def __init__(self, uid: int, leader: int) -> None:
        self.uid, self.leader = uid, leader
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cujo-reaper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_REAP_POLL_S):
            _reap(self.uid, self.leader)

    def finish(self, wait_s: float = GRACE_S) -> None:
        """Stop the thread, then reap what the kills left until none is left (or wait_s)."""
        self._stop.set()
        self._thread.join()
        end = time.monotonic() + wait_s
        while True:
            _reap(self.uid, self.leader)
            if not _children_of(self.uid) or time.monotonic() > end:
                return
            time.sleep(0.01)


@dataclass(frozen=True)
class Growth:
    """What a command left behind did while it was watched."""

    peak: int  # the most processes seen at once (the sandbox's own included)
    made: int  # processes made after the command returned (its pid namespace's count)
    still_growing: bool  # the watch ended on its time limit with a crowd still multiplying


def watch_growth(
    look: Callable[[], Census], deadline: float, flood_at: float, *, own: int = 0
) -> Growth:
    """Watch what the command left behind until it is gone, idle, or a flood.

    ``own`` processes are the sandbox's own (its pid 1 and what that waits on). The watch
    does not depend on how fast the machine is: it stops early only when nothing is left
    or when what is left is idle (none of it runnable, no process made since the last
    look, no more of them than at the last look). A fork bomb starved of the CPU is
    runnable, so it is watched until it floods, until the watch's time is up, or until
    the limit holds it; a few leftovers that stay put (a daemon, a stray sleep) are let
    go at once.
    """
    end = min(deadline, time.monotonic() + LEFTOVER_WATCH_S)
    first = last = look()
    peak, idle = first.live, False
    # ``own`` is a count, not a list: just after the command returns, one of the sandbox's
    # own may not be there yet (the shell's idle sleep) while a leftover already is. So a
    # look at no more than ``own`` ends the watch only when nothing in it is busy.
    while (last.live > own or last.busy) and peak < flood_at:
        if time.monotonic() >= end:
            # A crowd that was still making processes when time ran out is multiplying.
            growing = not idle and last.live - own >= LEFTOVER_CROWD
            return Growth(peak, last.newest - first.newest, still_growing=growing)
        time.sleep(_GROWTH_POLL_S)
        now = look()
        peak = max(peak, now.live)
        idle = now.busy == 0 and now.newest <= last.newest and now.live <= last.live
        last = Census(now.live, now.busy, max(now.newest, last.newest))
        if idle and now.live - own < LEFTOVER_CROWD:
            break
    return Growth(peak, last.newest - first.newest, still_growing=False)

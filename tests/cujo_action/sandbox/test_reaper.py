"""Watching what a command leaves behind: the kernel's counts, not the machine's speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cujo_action.checks.harness import flood_detail
from cujo_action.sandbox.jail import Outcome
from cujo_action.sandbox.reaper import LEFTOVER_CROWD, Census, census, watch_growth

OWN = 3
OUR_NET = os.stat("/proc/self/ns/net").st_ino


class Scripted:
    """Answer each look with the next census, then the last one for ever; count looks."""

    def __init__(self, looks: list[Census]) -> None:
        self.looks: Iterator[Census] = iter(looks)
        self.last = looks[-1]
        self.calls = 0

    def __call__(self) -> Census:
        self.calls += 1
        self.last = next(self.looks, self.last)
        return self.last


def scripted(looks: list[Census]) -> Callable[[], Census]:
    return Scripted(looks)


def test_a_starved_bomb_that_has_not_forked_yet_is_watched_until_it_floods() -> None:
    # Between two looks nothing new was made, but the leftover is runnable: a loaded
    # machine has not scheduled it yet. Stopping there let a fork bomb through.
    waiting = [Census(OWN + 1, busy=1, newest=5)] * 4
    growing = [Census(OWN + n, busy=n, newest=5 + n) for n in (2, 8, 64, 400, 800)]
    growth = watch_growth(scripted(waiting + growing), time.monotonic() + 60, 768 + OWN, own=OWN)
    assert growth.peak == OWN + 800
    assert growth.made == 800


def test_idle_leftovers_are_let_go_at_the_next_look() -> None:
    sleepers = Scripted([Census(OWN + 2, busy=0, newest=9)])
    growth = watch_growth(sleepers, time.monotonic() + 60, 768 + OWN, own=OWN)
    assert growth.peak == OWN + 2
    assert (growth.made, growth.still_growing) == (0, False)
    assert sleepers.calls == 2  # the first look, and one that shows them idle


def test_nothing_left_is_not_watched() -> None:
    growth = watch_growth(scripted([Census(OWN, 0, 4)]), time.monotonic() + 60, 100, own=OWN)
    assert growth == type(growth)(OWN, 0, still_growing=False)


def test_a_busy_leftover_is_watched_while_one_of_the_sandbox_s_own_is_not_there_yet() -> None:
    # Just after the command returned, the shell's idle sleep is not there yet and the
    # leftover is: the count equals ``own`` while something in it is computing. Taking
    # that for "nothing left" let a bomb slow to start go unreported.
    racing = [Census(OWN, busy=1, newest=3)] * 3
    growing = [Census(OWN + n, busy=n, newest=4 + n) for n in (1, 50, 900)]
    looks = Scripted(racing + growing)
    growth = watch_growth(looks, time.monotonic() + 60, 768 + OWN, own=OWN)
    assert growth.peak == OWN + 900
    assert looks.calls == 6


def test_processes_made_and_gone_between_looks_are_counted() -> None:
    # A chain that forks and exits: never more than two alive, hundreds made, then it stops.
    churn = [Census(OWN + 2, busy=2, newest=10 + 300 * n) for n in range(4)]
    stopped = Census(OWN + 2, busy=0, newest=910)
    growth = watch_growth(scripted([*churn, stopped]), time.monotonic() + 60, 768 + OWN, own=OWN)
    assert growth.peak == OWN + 2
    assert growth.made == 900
    assert not growth.still_growing


def test_a_crowd_still_multiplying_when_the_watch_ends_is_said_to_grow() -> None:
    crowd = [Census(OWN + LEFTOVER_CROWD + n, busy=10, newest=100 + n) for n in range(1000)]
    growth = watch_growth(scripted(crowd), time.monotonic() + 0.3, 10_000, own=OWN)
    assert growth.still_growing
    assert growth.peak < OWN + LEFTOVER_CROWD + 1000


def test_an_idle_crowd_is_watched_to_the_end_but_does_not_grow() -> None:
    crowd = Census(OWN + LEFTOVER_CROWD + 5, busy=0, newest=200)
    growth = watch_growth(scripted([crowd]), time.monotonic() + 0.3, 10_000, own=OWN)
    assert not growth.still_growing
    assert growth.made == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="makes namespaces: root only")
def test_the_census_counts_the_nested_pid_namespace_its_busy_processes_and_pids_made() -> None:
    # A network namespace holding a pid namespace of its own (as a phase's namespace holds
    # the pid namespace bubblewrap makes per command): its pid 1 spins, after making and
    # reaping 20 processes and starting a sleeper.
    spin = "for i in {1..20}; do /bin/true; done; sleep 60 & while :; do :; done"
    nested = subprocess.Popen(
        ["unshare", "--net", "--pid", "--fork", "--kill-child", "bash", "-c", spin]
    )
    try:
        deadline = time.monotonic() + 60
        while (inode := os.stat(f"/proc/{nested.pid}/ns/net").st_ino) == OUR_NET:
            assert time.monotonic() < deadline, "unshare made no network namespace"
            time.sleep(0.01)
        # Until the sleeper sleeps: then only the spinning shell is busy (unshare waits).
        while (now := census(inode)).newest < 22 or now.busy != 1:
            assert time.monotonic() < deadline, now
            time.sleep(0.01)
        # unshare itself, pid 1 (bash) and the sleeper live; 22 pids were handed out.
        assert (now.live, now.newest) == (3, 22)
        assert census(OUR_NET).live > 3
    finally:
        nested.kill()
        nested.wait()


def test_the_census_counts_the_unreaped_children_of_the_namespace_s_processes() -> None:
    # A fork bomb at its limit is half zombies: each bash sleeps in `fork: retry` before
    # reaping. A zombie has no namespace left to read, yet holds its process slot; here
    # pid 1 starts five children that exit at once and never reaps them, so the
    # namespace holds unshare, pid 1 and five zombies.
    script = (
        "import os, time\n"
        "for _ in range(5):\n"
        "    if os.fork() == 0:\n"
        "        os._exit(0)\n"
        "time.sleep(60)\n"
    )
    nested = subprocess.Popen(
        ["unshare", "--net", "--pid", "--fork", "--kill-child", sys.executable, "-c", script]
    )
    try:
        deadline = time.monotonic() + 60
        while (inode := os.stat(f"/proc/{nested.pid}/ns/net").st_ino) == OUR_NET:
            assert time.monotonic() < deadline, "unshare made no network namespace"
            time.sleep(0.01)
        # Until the five have exited (pids 2..6).
        while _zombies_in(nested.pid) < 5:
            assert time.monotonic() < deadline, "pid 1's children did not exit"
            time.sleep(0.01)
        now = census(inode)
        assert now.live == 7, now  # unshare, pid 1, five zombies
    finally:
        nested.kill()
        nested.wait()


def _fields(pid: str) -> dict[str, str]:
    """Return /proc/PID/status's fields ({} when the process is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in status.splitlines() if ":" in line)


def _zombies_in(unshare_pid: int) -> int:
    """Count the zombie grandchildren of ``unshare_pid`` (its pid 1's unreaped children)."""
    count = 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = _fields(entry)
        if fields.get("State", "").split()[:1] == ["Z"]:
            grand = _fields(fields["PPid"].strip()).get("PPid", "").strip()
            count += grand == str(unshare_pid)
    return count


def test_a_flood_says_whether_it_was_seen_at_the_limit_or_multiplying_on() -> None:
    at_limit = Outcome(0, False, False, 1.0, "", "", 0, 0, peak_processes=1010, process_flood=True)
    assert flood_detail("bomb", at_limit).startswith("`bomb` ran 1010 processes at once, near")
    # Near what the limit leaves the command once the runner-shaped tree holds its part.
    room = Outcome(0, False, False, 1.0, "", "", 0, 0, peak_processes=700, near_limit=True)
    assert flood_detail("bomb", room).startswith("`bomb` ran 700 processes at once, near")
    refused = Outcome(0, False, False, 1.0, "", "", 0, 0, peak_processes=40, refused_forks=7)
    assert "ran 40 processes at once" in flood_detail("bomb", refused)
    churn = Outcome(0, False, False, 1.0, "", "", 0, 0, peak_processes=3, made_after_return=900)
    said = flood_detail("bomb", churn)
    assert "900 processes made after it returned, up to 3 at once" in said


ORPHAN_SCRIPT = """
import json, os, subprocess, sys
from cujo_action.sandbox.reaper import become_subreaper, kill_group

become_subreaper()
# The leader starts a child and becomes `sleep`: SIGTERM kills both, and the child, whose
# parent is gone, is adopted here and stays a zombie in the group until it is reaped.
leader = subprocess.Popen(
    ["sh", "-c", "sleep 1000 & echo $!; exec sleep 1000"],
    stdout=subprocess.PIPE, start_new_session=True,
)
child = int(leader.stdout.readline())
kill_group(leader.pid, leader)
try:
    os.killpg(leader.pid, 0)
    group_left = True
except ProcessLookupError:
    group_left = False
try:
    os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG)
    child_unreaped = True
except ChildProcessError:
    child_unreaped = False
print(json.dumps({"group_left": group_left, "child_unreaped": child_unreaped,
                  "leader": leader.wait()}))
"""


def test_killing_a_group_reaps_the_orphan_it_left_here_and_nothing_of_it_is_left() -> None:
    # The outer bubblewrap dies on SIGTERM before reaping its own child; that child,
    # adopted by the harness (the subreaper), was a zombie that kept the group "alive"
    # for the two seconds of grace: every command run in a network namespace paid them.
    # Once kill_group returns, the group is gone and the orphan reaped; the leader's own
    # status is still Popen's to read.
    done = subprocess.run(
        [sys.executable, "-c", ORPHAN_SCRIPT], capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    said = json.loads(done.stdout)
    assert said == {"group_left": False, "child_unreaped": False, "leader": -15}, said

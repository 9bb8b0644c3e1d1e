"""Start each check as a process of its own, hold it to its deadline, collect its report.

A check runs as ``python -I -m cujo_action.checks.<name>`` in a session of its own (forked
from the run's zygote, ``zygote.py``, which imported the harness once); past
its budget (plus the slack to set up and report) it is killed with every command it
started (``kill_tree``, which the run also uses to end whatever is left below it). A
check that wrote no valid report gets an error report in its place.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

from cujo_action.checks.modules import CHECK_MODULES
from cujo_action.checks.zygote import Forked, Zygote, ZygoteError
from cujo_action.evidence.bundle import report_path
from cujo_action.evidence.recorder import emit
from cujo_action.evidence.timing import Timeline
from cujo_action.schema import CheckName, Plan, Report, stage_mark, utcnow

# Beyond a check's own command timeouts, how long its process may take to set up and report.
PROCESS_SLACK_S = 180.0
# Rounds of stop-and-rescan before a tree is killed; each round catches the last forks.
_SWEEPS = 100


def _children() -> dict[int, list[int]]:
    """Return the live children of every process, read from /proc (zombies left out)."""
    tree: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return tree
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                # "pid (comm) state ppid …": comm may hold spaces and parentheses.
                fields = fh.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[0] != b"Z":
            tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def descendants(root: int, spare: Collection[int] = ()) -> set[int]:
    """Return every live process below ``root``, but ``spare`` and what runs below them."""
    tree, found, stack = _children(), set[int](), [root]
    while stack:
        for child in tree.get(stack.pop(), []):
            if child not in found and child not in spare:
                found.add(child)
                stack.append(child)
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return


def kill_tree(root: int, *, include_root: bool = True, spare: Collection[int] = ()) -> int:
    """SIGKILL every process below ``root`` (and ``root``); return how many were signalled.

    Each round stops what it finds, so nothing found can fork again, and looks again for
    children forked before the stop; then everything stopped is killed at once. Processes
    in ``spare``, and what runs below them, are left alone.
    """
    stopped: set[int] = set()
    for _ in range(_SWEEPS):
        found = descendants(root, spare) | ({root} if include_root else set())
        found.discard(os.getpid())
        new = found - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)  # a stopped process dies of it all the same
    return len(stopped)


class CheckProcess:
    """A check process and its deadline."""

    def __init__(
        self,
        name: CheckName,
        context: Path,
        out: Path,
        budget: float,
        zygote: Zygote | None = None,
    ) -> None:
        """Start the check: from the run's ``zygote`` when there is one that answers
        (``zygote.py``: no interpreter to start, the harness imported once), else as
        ``python -I -m``; the same process either way, the run's child."""
        self.name = name
        self.out = report_path(out, name)
        self.timings = out / f".{name}.timings"  # the check's own spans, gathered by the run
        self.started = time.monotonic()
        self.ended: float | None = None
        self.deadline = self.started + budget + PROCESS_SLACK_S
        argv = [CHECK_MODULES[name], "--context", str(context), "--out", str(self.out)]
        argv += ["--timings", str(self.timings)]
        self.proc: subprocess.Popen[bytes] | Forked = self._start(argv, zygote)
        emit(stage_mark(name, "began"))  # on stderr, for the workflow step (``stages.py``)

    @staticmethod
    def _start(argv: list[str], zygote: Zygote | None) -> subprocess.Popen[bytes] | Forked:
        if zygote is not None:
            try:
                return zygote.start(argv)
            except ZygoteError as exc:
                emit(f"cujo: {exc}; the check starts as a fresh interpreter")
        return subprocess.Popen(
            # -I: the harness imports only itself, never a `cujo_action` from the cwd.
            [sys.executable, "-I", "-m", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wait(self) -> None:
        """Wait for the process until its deadline; kill it past the deadline."""
        try:
            self.proc.wait(timeout=max(self.deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            self.stop()
        self.ended = self.ended or time.monotonic()
        emit(stage_mark(self.name, "ended", f"exit {self.proc.returncode}"))

    def timed(self, timeline: Timeline) -> None:
        """Add the check's process and its own spans to the run's timeline."""
        timeline.add(f"check/{self.name}", self.started, self.ended or time.monotonic())
        timeline.extend(self.timings, f"check/{self.name}/")
        self.timings.unlink(missing_ok=True)

    def stop(self) -> None:
        """Kill the check and every command it started (they run in sessions of their own)."""
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait()


def placeholder_report(plan: Plan, check: CheckName, status: str, summary: str) -> Report:
    """Return a report in a check's place: one not run (skipped), or one that wrote none."""
    now = utcnow()
    return Report.model_validate(
        {
            "run_id": plan.run_id,
            "check": check,
            "head_sha": plan.head_sha,
            "base_sha": plan.base_sha,
            "status": status,
            "summary": summary,
            "started_at": now,
            "finished_at": now,
            "isolation": "partial",
            "evidence_complete": status == "skipped",
        }
    )


def collect_report(check: CheckProcess, plan: Plan) -> Report:
    """Return the check's report, or an error report when it wrote none or a bad one."""
    try:
        return Report.model_validate_json(check.out.read_bytes())
    except (OSError, ValueError) as exc:
        code = check.proc.returncode
        return placeholder_report(
            plan,
            check.name,
            "error",
            f"the {check.name} check process ended (exit {code}) without a valid report: "
            f"{type(exc).__name__}",
        )

"""One workflow step per stage: the run in the background, each step following its stage.

GitHub shows a job's progress step by step (the jobs API lists each step's status, and the
board polls it), but a composite action, or one long command, is one step. So on Actions
the sandbox runs detached (``python -m cujo_action run … --detach STATE``): its output —
progress and the tamper record (``ledger.py``) — goes to ``STATE/log``, a folder only root
can read, and each step of the reusable workflow runs ``python -m cujo_action follow
--state STATE --until STAGE``, which prints that log on from where the last step stopped
until the stage has ended (or been skipped, or the run is over). Everything the run
prints still reaches the job's log within a tenth of a second, through whichever step is
running.

The run marks its stages with lines of their own (``schema.stage_mark``: the stage names
and the line are a contract with the relay, which reads them from a local run)::

    cujo-stage <stage> began
    cujo-stage <stage> ended <status>
    cujo-stage <stage> skipped <why>
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TextIO

from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.schema import STAGES, read_stage_mark

LOG: Final = "log"
EXIT: Final = "exit"
_OFFSET: Final = "followed"
_POLL_S: Final = 0.1


def done_with(line: str, stage: str) -> bool:
    """Return whether ``line`` says ``stage`` is over (ended or skipped)."""
    m = read_stage_mark(line)
    return m is not None and m.stage == stage and m.what != "began"


def exit_code(state: Path) -> int | None:
    """Return the detached run's exit code once it has ended, else None."""
    try:
        text = (state / EXIT).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.lstrip("-").isdigit() else 3


class Follower:
    """Print a detached run's log from where the last follower stopped."""

    def __init__(
        self,
        state: Path,
        out: TextIO = sys.stdout,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.state, self.out, self._sleep = Path(state), out, sleep

    def until(self, stage: str | None, deadline_s: float = 6 * 3600) -> int | None:
        """Print the log until ``stage`` is over (None: until the run ends); return the
        run's exit code if it has ended by then."""
        if stage is not None and stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
        offset = self._offset()
        if stage is not None and self._over_before(stage, offset):
            return exit_code(self.state)  # printed while an earlier step was following
        pending = b""
        started = time.monotonic()
        fd = self._open(offset)
        try:
            while True:
                ended = exit_code(self.state)  # read before the log: nothing after it is lost
                chunk = self._read(fd)
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                for raw in lines:
                    offset += len(raw) + 1
                    text = raw.decode("utf-8", errors="replace")
                    self.out.write(text + "\n")
                    if stage is not None and done_with(text, stage):
                        self.out.flush()
                        self._save(offset)
                        return exit_code(self.state)
                self.out.flush()
                if ended is not None and not chunk:
                    if pending:  # a last line without its newline
                        offset += len(pending)
                        self.out.write(pending.decode("utf-8", errors="replace") + "\n")
                    self._save(offset)
                    return ended
                if time.monotonic() - started > deadline_s:
                    self._save(offset)
                    return None
                if not chunk:
                    self._sleep(_POLL_S)
        finally:
            os.close(fd)

    def _open(self, offset: int) -> int:
        # The state folder is root's (0700); never through a link.
        fd = open_no_follow(self.state / LOG, "read")
        os.lseek(fd, offset, os.SEEK_SET)
        return fd

    def _over_before(self, stage: str, offset: int) -> bool:
        """Return whether the part of the log already printed says ``stage`` is over."""
        fd = open_no_follow(self.state / LOG, "read")
        with os.fdopen(fd, "rb") as fh:
            printed = fh.read(offset)
        return any(
            done_with(line.decode("utf-8", errors="replace"), stage)
            for line in printed.split(b"\n")
        )

    @staticmethod
    def _read(fd: int) -> bytes:
        return os.read(fd, 1 << 16)

    def _offset(self) -> int:
        try:
            return int((self.state / _OFFSET).read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def _save(self, offset: int) -> None:
        tmp = self.state / f".{_OFFSET}"
        fd = open_no_follow(tmp, "replace")
        with os.fdopen(fd, "w") as fh:
            fh.write(str(offset))
        os.replace(tmp, self.state / _OFFSET)


def detach(state: Path, run: Callable[[], int]) -> int:
    """Start ``run`` in a process of its own, writing to ``state``; return at once.

    ``state`` is made here (0700; it must not exist). The child leaves the caller's
    session and terminal, writes everything it prints to ``state/log``, and ``state/exit``
    holds its exit code once it ends. Returns 0 in the caller once the child has started.
    """
    os.mkdir(state, 0o700)
    log = open_no_follow(state / LOG, "create")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(log)
        return 0
    code = 3
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        code = run()
    except BaseException as exc:
        print(f"cujo: the detached run fell over: {exc!r}", file=sys.stderr, flush=True)
    finally:
        try:
            tmp = state / f".{EXIT}"
            tmp.write_text(f"{code}\n")
            os.replace(tmp, state / EXIT)
        finally:
            os._exit(code)
    return code  # pragma: no cover - the child never gets here

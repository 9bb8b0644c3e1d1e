"""Run the sandbox on this machine: ``python -m cujo_action run`` as a subprocess.

The embedded default (``cujo review``), and the relay's runner when there is no Actions.
Light on purpose (the standard library alone): ``cujo review`` starts the sandbox before
it loads the record, the verdict and their libraries, which then load while the sandbox
prepares and arms (half a second of the review's fixed cost).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

# As many record lines as a local run keeps (a flood of requests is capped by the harness).
MAX_RECORD_LINES: Final = 500_000
# The sandbox's tamper-record lines start with this (cujo_action/evidence/ledger.py PREFIX; that
# module loads pydantic, which the sandbox need not wait for).
RECORD_PREFIX: Final = "cujo-evidence "
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalRunner:
    """Run the sandbox as a local subprocess; its progress goes to this process's stderr."""

    python: str = sys.executable
    deadline_s: float = 4 * 3600
    grace_s: float = 30.0

    def start(
        self,
        *,
        repo: str,
        base: str,
        head: str,
        run_id: str,
        out: Path,
        record: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        detail: Callable[[str], object] | None = None,
        upstream: str = "",
        base_branch: str = "",
    ) -> LocalRun:
        """Start the sandbox and return at once (``LocalRun.wait`` for its end).

        With ``record``, the sandbox's standard error is read here: its tamper-record
        lines (``cujo_action/evidence/ledger.py``) are kept in ``record`` and its stage marks
        (``cujo_action/schema.py``, ``stage_mark``) go to the ``on_step`` given to ``wait``
        (held until then), rather than shown; everything else goes on to this process's stderr,
        or to ``detail`` when given. ``env``: the sandbox's environment (default: this one's).
        ``upstream`` (``OWNER/NAME``) and ``base_branch`` name the repository and branch the
        pull request merges into, where ``repo`` (a throwaway clone) cannot say.
        """
        out.mkdir(parents=True, exist_ok=True)
        # -P: the working folder is not searched for modules. `cujo review` is run inside
        # clones, even of the pull request's branch, whose own `cujo_action/` would
        # otherwise be the harness that ran, outside every sandbox.
        argv = [self.python, "-P", "-m", "cujo_action", "run", "--repo", repo, "--base", base]
        argv += ["--head", head, "--run-id", run_id, "--out", str(out)]
        if upstream:
            argv += ["--upstream", upstream]
        if base_branch:
            argv += ["--base-branch", base_branch]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if record is not None else None,
            env=None if env is None else dict(env),
        )
        return LocalRun(self, proc, record, detail)


class LocalRun:
    """A sandbox started by ``LocalRunner.start``; ``wait`` runs it to its end."""

    def __init__(
        self,
        runner: LocalRunner,
        proc: subprocess.Popen[bytes],
        record: list[str] | None,
        detail: Callable[[str], object] | None = None,
    ) -> None:
        self.runner, self.proc, self.record = runner, proc, record
        self._lock = threading.Lock()
        self._on_step: Callable[[str], object] | None = None
        self._held: list[str] | None = []  # steps before ``wait`` said where they go
        self._reader: threading.Thread | None = None
        if record is not None and proc.stderr is not None:
            self._reader = threading.Thread(
                target=_split_record,
                args=(proc.stderr, record, self._step, detail or _to_stderr),
                name="cujo-record",
                daemon=True,
            )
            self._reader.start()

    def _step(self, step: str) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(step)
                return
            on_step = self._on_step
        _tell(on_step, step)

    def wait(self, on_step: Callable[[str], object] | None = None) -> int:
        """Hand the stage marks to ``on_step`` (those held first), wait for the sandbox
        and return its exit code; past the runner's deadline stop it and return 124."""
        with self._lock:
            held, self._held, self._on_step = self._held or [], None, on_step
            for step in held:  # under the lock: none printed later overtakes them
                _tell(on_step, step)
        try:
            return self.proc.wait(timeout=self.runner.deadline_s)
        except subprocess.TimeoutExpired:
            self.stop()
            return 124
        except BaseException:
            self.stop()
            raise
        finally:
            self._close()

    def _close(self) -> None:
        if self._reader is not None:
            # The run kills what it started before it exits; a straggler holding the
            # pipe open does not keep the review waiting.
            self._reader.join(timeout=10.0)
        stderr = self.proc.stderr
        if stderr is not None and not (self._reader and self._reader.is_alive()):
            stderr.close()

    def stop(self) -> None:
        """Ask the sandbox to stop (it cleans up on SIGTERM), then kill it past a grace."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.runner.grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _tell(on_step: Callable[[str], object] | None, step: str) -> None:
    if on_step is None:
        return
    try:
        on_step(step)
    except Exception as exc:
        log.info("a step of the local run could not be recorded: %s", exc)


def step_line(stage: str, what: str, why: str | None) -> str:
    """Return a stage mark as a step of the run's timeline (``"tests: completed (success)"``,
    as the relay records the job's steps)."""
    if what == "began":
        return f"{stage}: in_progress"
    if what == "skipped":
        return f"{stage}: completed (skipped)"
    ok = (why or "") in ("ok", "exit 0") or (why or "").startswith("isolation ")
    return f"{stage}: completed ({'success' if ok else 'failure'})"


def _to_stderr(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()


def _split_record(
    stream: IO[bytes],
    record: list[str],
    on_step: Callable[[str], None],
    detail: Callable[[str], object],
) -> None:
    """Keep the sandbox's tamper-record lines in ``record``, hand its stage marks to
    ``on_step``; pass the rest to ``detail``."""
    # The stage marks are the sandbox's contract (cujo_action.schema), which loads
    # pydantic: read here, in this thread, once the sandbox has started, so that import
    # overlaps the sandbox's start.
    from cujo_action.schema import STAGES, read_stage_mark  # noqa: PLC0415

    for raw in stream:
        line = raw.decode("utf-8", errors="replace")
        if len(record) < MAX_RECORD_LINES and line.startswith(RECORD_PREFIX):
            record.append(line.rstrip("\n"))
            continue
        if (mark := read_stage_mark(line)) is not None and mark.stage in STAGES:
            on_step(step_line(mark.stage, mark.what, mark.why))
            continue
        try:
            detail(line)
        except Exception as exc:  # the reader must go on, or the sandbox blocks on its pipe
            log.info("a line of the local run could not be shown: %s", exc)

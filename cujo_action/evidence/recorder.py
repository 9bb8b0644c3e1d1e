"""Print the tamper record (``ledger``) to the job's log: the root harness's side.

The proxy and the resolver append to the egress log in a folder only root can see; a
thread of the orchestrator follows that file and prints a line for each whole line
appended, within a tenth of a second, so the record of a request reaches GitHub before
anything the request led to could rewrite the log. Decoy events and observations are
printed by the check processes themselves as they record them (``checks/harness.py``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from cujo_action.evidence.ledger import begin_line, egress_line, end_line
from cujo_action.sandbox.boundary import open_no_follow

_INTERVAL_S = 0.1
_CHUNK = 1 << 16
_lock = threading.Lock()


def emit(line: str) -> None:
    """Write one line of the record to standard error (the job's log) and flush it."""
    with _lock:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class EgressTail:
    """Follow the egress log from a thread, printing a record line per whole log line."""

    def __init__(self, run_id: str, path: Path, *, write: Callable[[str], None] = emit) -> None:
        self.run_id, self.path, self._write = run_id, Path(path), write
        self.offset = 0  # bytes of the log already printed (whole lines only)
        self._pending = b""
        self._fd = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why the log could not be followed, if it could not

    def start(self) -> None:
        """Start following (the log need not exist yet)."""
        self._thread = threading.Thread(target=self._run, name="cujo-egress-tail", daemon=True)
        self._thread.start()

    def stop(self) -> int:
        """Print what is left (its writers have stopped), print the end line; return bytes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._read()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        # A last line without its newline is not a whole line: the bundle drops it too.
        self._write(end_line(self.run_id, self.offset))
        return self.offset

    def _run(self) -> None:
        while not self._stop.wait(_INTERVAL_S):
            self._read()

    def _open(self) -> bool:
        if self._fd >= 0:
            return True
        try:
            # Root reads a root-only folder here; still never through a link.
            self._fd = open_no_follow(self.path, "read")
        except FileNotFoundError:
            return False
        except OSError as exc:
            self.error = f"{self.path.name}: {exc.strerror}"
            return False
        return True

    def _read(self) -> None:
        if not self._open():
            return
        while True:
            try:
                chunk = os.read(self._fd, _CHUNK)
            except OSError as exc:
                self.error = f"{self.path.name}: {exc.strerror}"
                return
            if not chunk:
                return
            self._pending += chunk
            while (cut := self._pending.find(b"\n")) >= 0:
                raw, self._pending = self._pending[: cut + 1], self._pending[cut + 1 :]
                self._write(egress_line(self.run_id, self.offset, raw))
                self.offset += len(raw)


def record_begin(run_id: str, head_sha: str, base_sha: str) -> None:
    """Print the line that opens the run's record."""
    emit(begin_line(run_id, head_sha, base_sha))

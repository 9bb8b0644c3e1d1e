"""Run the sandbox somewhere and hand back its bundle folder.

``LocalRunner`` runs ``python -m cujo_action run`` as a subprocess on this machine: the
embedded default, and the relay's runner when there is no Actions. ``ActionsRunner``
(dispatch on GitHub Actions, fetch the artifact) joins it with the relay.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalRunner:
    """Run the sandbox as a local subprocess; its progress goes to this process's stderr."""

    python: str = sys.executable
    deadline_s: float = 4 * 3600
    grace_s: float = 30.0

    def run(self, *, repo: str, base: str, head: str, run_id: str, out: Path) -> int:
        """Run the sandbox to completion and return its exit code (0 reports, 3 failure)."""
        out.mkdir(parents=True, exist_ok=True)
        argv = [self.python, "-m", "cujo_action", "run", "--repo", repo, "--base", base]
        argv += ["--head", head, "--run-id", run_id, "--out", str(out)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            return proc.wait(timeout=self.deadline_s)
        except subprocess.TimeoutExpired:
            self.stop(proc)
            return 124
        except BaseException:
            self.stop(proc)
            raise

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Ask the sandbox to stop (it cleans up on SIGTERM), then kill it past a grace."""
        proc.terminate()
        try:
            proc.wait(timeout=self.grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

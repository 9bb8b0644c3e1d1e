"""Run the real `cujo review` command in tests and read what it left: verdict, bundle, record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app_relay.store import RunRecord, Store

# The console script `pip install -e .` put beside this interpreter: what a user runs.
CUJO = Path(sys.executable).with_name("cujo")
# A review that has not finished by then is stuck, which is itself the failure to report.
REVIEW_TIMEOUT_S = 600.0


def cujo_relay(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    """Run `cujo relay ARGS` over the record at ``database_url`` with a made-up App."""
    from fakegithub import make_key

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "CUJO_APP_ID": "1",
        "CUJO_PRIVATE_KEY": make_key().private_pem,
        "CUJO_WEBHOOK_SECRET": "relay-cli-test-secret",
        "CUJO_DATABASE_URL": database_url,
    }
    return subprocess.run(
        [str(CUJO), "relay", *args], env=env, capture_output=True, text=True, timeout=120
    )


@dataclass(frozen=True)
class Review:
    """One finished `cujo review`: its exit code, output and where its record and bundle are."""

    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    elapsed: float
    data_dir: Path

    def __str__(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.code} after {self.elapsed:.1f}s\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )

    @property
    def verdict(self) -> dict[str, Any]:
        """Return the `--json` object."""
        try:
            obj = json.loads(self.stdout)
        except ValueError:
            raise AssertionError(f"no JSON verdict on stdout:\n{self}") from None
        assert isinstance(obj, dict), self
        return obj

    @property
    def run_id(self) -> str:
        return str(self.verdict["run_id"])

    @property
    def bundle(self) -> Path:
        """Return the folder the sandbox wrote its reports to."""
        return self.data_dir / "runs" / self.run_id

    def report(self, check: str) -> dict[str, Any]:
        """Return one check's report from the bundle."""
        data = json.loads((self.bundle / f"{check}.json").read_text())
        assert isinstance(data, dict)
        return data

    def record(self) -> RunRecord:
        """Return the run as the local record holds it."""
        with Store(f"sqlite:///{self.data_dir / 'cujo.db'}") as store:
            return store.get_run(self.run_id)


class Pending:
    """A `cujo review` under way; its output goes to files, so two can run at once."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        out: Path,
        data: Path,
        cwd: Path | None = None,
    ) -> None:
        self.argv, self.data_dir = tuple(argv), data
        self._stdout, self._stderr = out / "stdout", out / "stderr"
        self._started = time.monotonic()
        with self._stdout.open("wb") as stdout, self._stderr.open("wb") as stderr:
            # Its own process group, like a command in a terminal: Ctrl-C reaches all of it.
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=dict(env),
                cwd=cwd,
                process_group=0,
            )

    def wait_for(self, text: str, timeout: float = REVIEW_TIMEOUT_S) -> str:
        """Wait until ``text`` shows on stderr (the review's progress); return stderr so far."""
        deadline = time.monotonic() + timeout
        while True:
            said = self._stderr.read_text(errors="replace")
            if text in said:
                return said
            if self._proc.poll() is not None:
                pytest.fail(f"the review ended before saying {text!r}:\n{said[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the review did not say {text!r} within {timeout:.0f}s")
            time.sleep(0.1)

    def interrupt(self) -> None:
        """Press Ctrl-C: SIGINT to the review's whole process group."""
        os.killpg(self._proc.pid, signal.SIGINT)

    def terminate(self) -> None:
        """Send SIGTERM to the command alone, as a supervisor cancelling a job does."""
        self._proc.terminate()

    def wait(self) -> Review:
        """Wait for the review; fail the test if it hangs or prints a traceback."""
        try:
            code = self._proc.wait(timeout=REVIEW_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            pytest.fail(f"`{' '.join(self.argv)}` did not finish in {REVIEW_TIMEOUT_S:.0f}s")
        review = Review(
            argv=self.argv,
            code=code,
            stdout=self._stdout.read_text(errors="replace"),
            stderr=self._stderr.read_text(errors="replace"),
            elapsed=time.monotonic() - self._started,
            data_dir=self.data_dir,
        )
        # Whatever the verdict, Cujo never falls over with a traceback.
        assert "Traceback" not in review.stderr, review
        assert "Traceback" not in review.stdout, review
        return review


class Cujo:
    """Run the real `cujo review` command against repositories on disk."""

    def __init__(self, data_dir: Path, scratch: Callable[[str], Path]) -> None:
        self.data_dir = data_dir
        self._scratch = scratch

    def start(
        self,
        repo: Path | str,
        *,
        base: str = "main",
        head: str = "pr",
        as_json: bool = True,
        path: str | None = None,
        tmpdir: Path | None = None,
        verbose: bool = False,
    ) -> Pending:
        """Start `cujo review`; ``path`` replaces PATH (to hide a build tool), ``tmpdir``
        is where its temporary folders go (TMPDIR); ``verbose`` shows the sandbox's detail
        on stderr as it runs (-v)."""
        argv = [str(CUJO), "review", "--repo", str(repo), "--base", base, "--head", head]
        argv += ["--data-dir", str(self.data_dir)]
        if as_json:
            argv.append("--json")
        if verbose:
            argv.append("-v")
        # Nothing of this machine's Cujo settings leaks in: the record is the test's own.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUJO_")}
        if path is not None:
            env["PATH"] = path
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        return Pending(argv, env, self._scratch("review"), self.data_dir)

    def start_sandbox(
        self, repo: Path | str, run_id: str, out: Path, tmpdir: Path | None = None
    ) -> Pending:
        """Start the sandbox entry (`python -m cujo_action run`) for base main, head pr."""
        argv = [sys.executable, "-m", "cujo_action", "run", "--repo", str(repo)]
        argv += ["--base", "main", "--head", "pr", "--run-id", run_id, "--out", str(out)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUJO_")}
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        return Pending(argv, env, self._scratch("sandbox"), self.data_dir)

    def review(self, repo: Path | str, **kwargs: Any) -> Review:
        """Run `cujo review` to the end."""
        return self.start(repo, **kwargs).wait()


def private_tmpdir() -> Path:
    """Return a fresh folder for TMPDIR that a sandbox uid may pass through (0711, in the
    temporary folder itself: pytest's own folders are root's 0700)."""
    made = Path(tempfile.mkdtemp())
    made.chmod(0o711)
    return made


def run_folders_left(tmpdir: Path) -> list[Path]:
    """Return the run work folders left in ``tmpdir`` (a run's holds run/ or checkout/)."""
    return [p for p in tmpdir.iterdir() if (p / "run").exists() or (p / "checkout").exists()]


def running_with(marker: str, timeout_s: float = 60.0) -> list[str]:
    """Wait until a live process carries ``marker`` (the sandbox starts it a little after
    it says so); return the command lines found, empty at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not (found := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def processes_with(marker: str) -> list[str]:
    """Return the command lines of live processes that carry ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline}")
    return found

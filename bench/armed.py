"""The cost of arming: the same install + test commands, bare and in the armed sandbox.

Both sides clone the repository, start with an empty pip cache and a fresh HOME, and run
the same two commands. The bare side makes its venv with ``python -m venv``; the armed
side uses root's venv template as a review does (kept from an earlier run, or made for
this one: the "first run" line), and also prepares the plan, starts the proxy, the
resolver, a network namespace per phase and the decoy watcher, stages each check's area,
and runs the commands as the checks' uids in bubblewrap through the proxy, the install's
tree handed to the tests' uid. The base is not staged (``CUJO_BASE=off``): its run beside
the head is measured apart (bench/base.py). The last line sets the armed side against
the bare commands without their venv: what the sandbox costs whatever its venv costs.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cujo_action.arm.arming import arm
from cujo_action.arm.host import base_python, isolation_unavailable
from cujo_action.arm.venvs import CACHE_ENV
from cujo_action.checks.harness import CheckRun
from cujo_action.prepare.plan import prepare
from cujo_action.schema import Phase

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.test",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.test",
}


def library_repo(root: Path, name: str = "more-itertools", version: str = "10.5.0") -> Path:
    """Make a git repository of a real pure-Python library's sdist (tests included)."""
    dl = root / "dl"
    subprocess.run(
        ["python3", "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         f"{name}=={version}", "-d", str(dl)],
        check=True,
    )  # fmt: skip
    archive = next(dl.glob("*.tar.gz"))
    shutil.unpack_archive(archive, root)
    repo = next(p for p in root.iterdir() if p.is_dir() and p.name.startswith(name))
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "import"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    return repo


def bare(repo: Path, install: str, test: str, python: str) -> float:
    """Clone, make a venv, run install and test as they are, with no sandbox; return how
    long making the venv took (a part the armed side shares or makes another way)."""
    work = Path(tempfile.mkdtemp(prefix="cujo-bench-bare-"))
    try:
        src = work / "src"
        subprocess.run(["git", "clone", "-q", str(repo), str(src)], check=True)
        venv_started = time.perf_counter()
        subprocess.run([python, "-m", "venv", str(work / "venv")], check=True)
        venv_took = time.perf_counter() - venv_started
        env = {
            "PATH": f"{work / 'venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(work / "home"),
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        for cmd in (install, test):
            subprocess.run(["bash", "-c", cmd], cwd=src, env=env, check=True,
                           capture_output=True)  # fmt: skip
        return venv_took
    finally:
        shutil.rmtree(work, ignore_errors=True)


def armed(repo: Path, install: str, test: str) -> str:
    """Prepare, arm, and run install and test confined and watched, as the install and
    tests checks do (the same two commands as the bare side); return the isolation."""
    work = Path(tempfile.mkdtemp(prefix="cujo-bench-armed-"))
    # The base's checkout and venv are not staged: its run beside the head is measured
    # apart (bench/base.py), as the review's bench does.
    was = os.environ.get("CUJO_BASE")
    os.environ["CUJO_BASE"] = "off"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            plan = prepare(str(repo), "main", "main", f"bench-{secrets.token_hex(4)}",
                           work / "checkout")  # fmt: skip
            work.chmod(0o711)
            (work / "checkout").chmod(0o700)
            context, harness = arm(plan, work / "run", hide=[work])
            try:
                # As the checks do it: install in the install's area, its tree handed to
                # the tests' uid, the tests there.
                setup = CheckRun("install", context, plan)
                setup.make_venv(setup.venv)  # nothing to do where arm staged the template
                _confined(setup, install, "install")
                setup.pack_install()
                setup.finish("ok", "")
                harness.staged()  # the tests' area, finished while the install ran
                tests = CheckRun("tests", context, plan)
                tests.receive_install()
                _confined(tests, test, "test")
                tests.finish("ok", "")
            finally:
                harness.stop()
        return context.isolation
    finally:
        if was is None:
            del os.environ["CUJO_BASE"]
        else:
            os.environ["CUJO_BASE"] = was
        shutil.rmtree(work, ignore_errors=True)


def _confined(run: CheckRun, cmd: str, phase: Phase) -> None:
    outcome = run.run(cmd, phase=phase, timeout=600, cwd=run.src, venv=run.venv)
    if outcome.exit_code != 0:
        raise SystemExit(f"bench: `{cmd}` failed armed:\n{outcome.stderr_tail}")


def compare(label: str, repo: Path, install: str, test: str, rounds: int) -> None:
    """Print bare and armed wall times of the same commands, interleaved, best of N.

    The armed side twice: with the venv template root kept from an earlier run, and on a
    first run (an empty template cache, as on a hosted runner)."""
    python = base_python(for_sandbox_user=isolation_unavailable() is None)
    best_bare = best_armed = best_first = best_no_venv = float("inf")
    isolation = "?"
    for _ in range(rounds):
        start = time.perf_counter()
        venv_took = bare(repo, install, test, python)
        took = time.perf_counter() - start
        best_bare, best_no_venv = min(best_bare, took), min(best_no_venv, took - venv_took)
        start = time.perf_counter()
        isolation = armed(repo, install, test)
        best_armed = min(best_armed, time.perf_counter() - start)
        with tempfile.TemporaryDirectory(prefix="cujo-bench-cache-") as empty:
            kept = os.environ.get(CACHE_ENV)
            os.environ[CACHE_ENV] = empty
            try:
                best_first = min(best_first, _timed(lambda: armed(repo, install, test)))
            finally:
                if kept is None:
                    del os.environ[CACHE_ENV]
                else:
                    os.environ[CACHE_ENV] = kept
    print(f"{label}: install `{install}`, test `{test}` — best of {rounds}")
    print(f"  bare (clone, venv, install, test)       : {best_bare:7.2f} s   (baseline)")
    print(f"  armed, isolation {isolation:<7} (same + arm)  : {best_armed:7.2f} s   "
          f"ratio {best_armed / best_bare:.2f}x   (target <= 1.15x)")  # fmt: skip
    print(f"  the same, first run (no template kept)  : {best_first:7.2f} s   "
          f"ratio {best_first / best_bare:.2f}x   (target <= 1.15x)")  # fmt: skip
    # What the sandbox costs beyond the commands, whatever its venv costs: against the bare
    # side less its `python -m venv` (which the armed side shares, or makes another way).
    print(f"  bare without making its venv            : {best_no_venv:7.2f} s   "
          f"armed {best_armed - best_no_venv:+.2f} s, first run "
          f"{best_first - best_no_venv:+.2f} s beyond it")  # fmt: skip


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start

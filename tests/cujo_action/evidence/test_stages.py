"""A detached run and the steps that follow it stage by stage (cujo_action/evidence/stages.py)."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cujo_action.__main__ import main
from cujo_action.evidence.stages import EXIT, LOG, Follower, detach, done_with, exit_code
from cujo_action.schema import stage_mark


def state_with(tmp_path: Path, *lines: str, code: int | None = None) -> Path:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / LOG).write_text("".join(f"{line}\n" for line in lines))
    if code is not None:
        (state / EXIT).write_text(f"{code}\n")
    return state


def test_marks_say_which_stage_is_over() -> None:
    assert stage_mark("tests", "ended", "exit 0") == "cujo-stage tests ended exit 0"
    assert stage_mark("base", "skipped", "CUJO_BASE=off\nsecond line") == (
        "cujo-stage base skipped CUJO_BASE=off second line"
    )
    assert done_with("cujo-stage tests ended exit 1", "tests")
    assert done_with("cujo-stage tests skipped the install failed\r\n", "tests")
    assert not done_with("cujo-stage tests began", "tests")
    assert not done_with("cujo-stage tests ended", "probes")
    assert not done_with("cujo: tests: cujo-stage tests ended", "tests")
    with pytest.raises(ValueError, match="unknown stage"):
        stage_mark("deploy", "began")


def test_each_follower_prints_on_from_where_the_last_one_stopped(tmp_path: Path) -> None:
    state = state_with(
        tmp_path,
        "cujo-stage prepare began",
        "cujo: plan (python)",
        "cujo-stage prepare ended ok",
        "cujo-stage arm began",
        "cujo-stage install began",
        "cujo-stage detonation began",
        "cujo-stage detonation ended exit 0",  # before the install: printed by its step
        "cujo-stage install ended exit 0",
        "cujo-evidence run-1 end 0",
        code=0,
    )
    steps = {}
    for stage in ("prepare", "install", "detonation", "tests"):
        out = io.StringIO()
        steps[stage] = (Follower(state, out).until(stage), out.getvalue())

    assert steps["prepare"] == (
        0,
        "cujo-stage prepare began\ncujo: plan (python)\ncujo-stage prepare ended ok\n",
    )
    assert steps["install"][1].splitlines() == [
        "cujo-stage arm began",
        "cujo-stage install began",
        "cujo-stage detonation began",
        "cujo-stage detonation ended exit 0",
        "cujo-stage install ended exit 0",
    ]
    # Detonation was over before its step began: nothing to print, no waiting.
    assert steps["detonation"] == (0, "")
    # Tests never ran and the run is over: the rest of the log, then the exit code.
    assert steps["tests"] == (0, "cujo-evidence run-1 end 0\n")


def test_a_follower_waits_for_the_stage_as_the_run_writes(tmp_path: Path) -> None:
    state = state_with(tmp_path, "cujo-stage tests began")
    slept = threading.Event()
    out = io.StringIO()

    def sleep(_: float) -> None:
        # The run goes on while the follower waits: the stage ends on its second wait.
        if slept.is_set():
            with (state / LOG).open("a") as fh:
                fh.write("cujo: tests: ok\ncujo-stage tests ended exit 0\ncujo: later\n")
        slept.set()

    assert Follower(state, out, sleep=sleep).until("tests") is None

    assert out.getvalue().splitlines() == [
        "cujo-stage tests began",
        "cujo: tests: ok",
        "cujo-stage tests ended exit 0",
    ]
    later = io.StringIO()
    (state / EXIT).write_text("3\n")
    assert Follower(state, later).until(None) == 3
    assert later.getvalue() == "cujo: later\n"


def test_a_follower_never_reads_through_a_link(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("cujo-stage tests ended exit 0\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / LOG).symlink_to(secret)

    with pytest.raises(OSError, match="link"):
        Follower(state, io.StringIO()).until("tests")
    assert main(["follow", "--state", str(state), "--until", "tests"]) == 3


def test_detach_runs_in_a_session_of_its_own_and_records_its_exit(tmp_path: Path) -> None:
    """The real fork, in a child process of the test (the fork must not run pytest on)."""
    state = tmp_path / "state"
    code = f"""
import os, sys
from pathlib import Path
from cujo_action.evidence.stages import detach

def run():
    print("cujo: running in session", os.getsid(0) == os.getpid(), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    return 3

sys.exit(detach(Path({str(state)!r}), run))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0
    assert done.stdout == ""  # nothing of the run on the caller's output

    out = io.StringIO()
    assert Follower(state, out).until(None, deadline_s=60) == 3
    assert out.getvalue().splitlines() == ["cujo: running in session True", "to stderr"]
    assert exit_code(state) == 3
    assert oct((state).stat().st_mode & 0o777) == "0o700"
    # A second run into the same folder is refused: it must be new.
    with pytest.raises(FileExistsError):
        detach(state, lambda: 0)

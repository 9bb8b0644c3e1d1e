"""A stop (SIGTERM, Ctrl-C) that reaches the run at any moment ends it in order.

`cujo review` stops its sandbox with SIGTERM when it cannot open the record, a runner
cancelling a job does the same, and on a busy machine the signal can land anywhere: in
the run, in its error handling, or in the sweep that ends it. Each case here runs
`run_sandbox` in a process of its own (it makes its process a subreaper), with the run's
body replaced and the signal sent from exactly the moment under test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = """
import os, signal, sys
from pathlib import Path
import cujo_action.run as run

def stop_now():
    os.kill(os.getpid(), signal.SIGTERM)

{patch}

out = Path(sys.argv[1])
code = run.run_sandbox("repo", "main", "pr", "run-1", out, workdir=out / "work")
print("code", code)
"""

# The run's body finished (the bundle is whole); the stop comes during the sweep.
IN_THE_SWEEP = """
def body(*args, **kwargs):
    return 0

real_kill_tree = run.kill_tree
def kill_tree(*args, **kwargs):
    stop_now()
    return real_kill_tree(*args, **kwargs)

run._run = body
run.kill_tree = kill_tree
"""

# The run's body fell over; the stop comes while its failure is being written.
IN_THE_ERROR_HANDLING = """
def body(*args, **kwargs):
    raise RuntimeError("the body fell over")

real_write = run.write_failure
def write_failure(out, failure):
    stop_now()
    real_write(out, failure)

run._run = body
run.write_failure = write_failure
"""

# The stop comes in the run itself: the bundle says so.
IN_THE_RUN = """
def body(*args, **kwargs):
    stop_now()
    return 0

run._run = body
"""


def stopped(tmp_path: Path, patch: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "work").mkdir()
    script = SCRIPT.format(patch=textwrap.dedent(patch))
    return subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("patch", "code", "said"),
    [
        (IN_THE_SWEEP, "code 0", None),
        (IN_THE_ERROR_HANDLING, "code 3", "interrupted (SIGTERM) as the run ended"),
        (IN_THE_RUN, "code 3", "interrupted (SIGTERM); stopping everything"),
    ],
    ids=["in-the-sweep", "in-the-error-handling", "in-the-run"],
)
def test_a_stop_at_any_moment_ends_the_run_in_order_without_a_traceback(
    tmp_path: Path, patch: str, code: str, said: str | None
) -> None:
    done = stopped(tmp_path, patch)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() == code, done.stdout + done.stderr
    if said is not None:
        assert said in done.stderr, done.stderr


def test_a_stop_during_the_sweep_does_not_cut_it_short(tmp_path: Path) -> None:
    # A child the run left is killed although the stop came as the sweep began.
    patch = IN_THE_SWEEP.replace(
        "def body(*args, **kwargs):\n    return 0",
        "def body(*args, **kwargs):\n"
        "    import subprocess\n"
        "    child = subprocess.Popen(['sleep', '600'])\n"
        "    (out / 'child').write_text(str(child.pid))\n"
        "    return 0",
    )
    done = stopped(tmp_path, patch)
    assert "Traceback" not in done.stderr, done.stderr
    assert "killed 1 process(es) left running" in done.stderr, done.stderr
    pid = int((tmp_path / "child").read_text())
    state = Path(f"/proc/{pid}/stat")
    assert not state.exists() or state.read_text().rpartition(")")[2].split()[0] == "Z"

"""Checks forked from the run's zygote are the processes ``python -I -m`` made, the run's own.

The scenario runs in a process of its own that becomes a child subreaper, as ``run.py``
does (making the test's worker one would hand it every orphan of every other test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCENARIO = r"""
import ctypes, json, os, subprocess, sys, time
from pathlib import Path
from cujo_action.checks.zygote import Zygote, ZygoteError
from cujo_action.checks.processes import CheckProcess

seen = {"usable_before": Zygote.usable()}
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as run.py
seen["usable"] = Zygote.usable()
where = Path(sys.argv[1])
zygote = Zygote()

# No arguments: argparse's usage on stderr and exit 2, as `python -I -m` gives.
seen["no_args"] = zygote.start(["cujo_action.checks.tests"]).wait(60)

# A context that is not there: the traceback on stderr, exit 1.
out = where / "tests.json"
missing = ["--context", str(where / "none.json"), "--out", str(out)]
seen["missing"] = zygote.start(["cujo_action.checks.tests", *missing]).wait(60)

# A context that is a FIFO nobody writes: the check blocks reading it, and is looked at.
fifo = where / "context.fifo"
os.mkfifo(fifo)
held = zygote.start(["cujo_action.checks.smoke", "--context", str(fifo), "--out", str(out)])
for _ in range(6000):  # until it waits in openat(2) on the FIFO: the module has run
    if Path(f"/proc/{held.pid}/syscall").read_text().startswith("257 "):
        break
    time.sleep(0.01)
status = dict(
    line.split(":", 1) for line in Path(f"/proc/{held.pid}/status").read_text().splitlines()
)
seen["blocked_on_fifo"] = Path(f"/proc/{held.pid}/syscall").read_text().startswith("257 ")
seen["parent_is_run"] = int(status["PPid"]) == os.getpid()
seen["own_session"] = os.getsid(held.pid) == held.pid
seen["stdin"] = os.readlink(f"/proc/{held.pid}/fd/0")
seen["stdout"] = os.readlink(f"/proc/{held.pid}/fd/1")
seen["stderr_is_runs"] = os.readlink(f"/proc/{held.pid}/fd/2") == os.readlink("/proc/self/fd/2")
argv = Path(f"/proc/{held.pid}/cmdline").read_bytes().split(b"\0")
seen["isolated"] = b"-I" in argv
seen["forked"] = b"cujo_action.checks.zygote" in argv  # the zygote's image, not a new python
try:
    held.wait(0.2)
    seen["timed_out"] = False
except subprocess.TimeoutExpired:
    seen["timed_out"] = True
os.kill(held.pid, 9)
seen["killed"] = held.wait(30)
seen["poll_after"] = held.poll()

# Anything but a check module is refused; the run then starts checks the usual way.
try:
    zygote.start(["os", "--help"])
    seen["refused"] = False
except ZygoteError as exc:
    seen["refused"] = str(exc)
fallback = CheckProcess("tests", where / "none.json", where, 60, zygote)
seen["fallback_is_popen"] = isinstance(fallback.proc, subprocess.Popen)
fallback.wait()
seen["fallback_code"] = fallback.proc.returncode
zygote.close()
seen["zygote_code"] = zygote.proc.returncode
print(json.dumps(seen))
"""


def test_a_check_from_the_zygote_is_the_runs_child_as_python_m_started_it(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["usable_before"] is False  # not a subreaper: checks start as before
    assert seen["usable"] is True
    assert seen["no_args"] == 2
    assert "usage: " in done.stderr
    assert seen["missing"] == 1
    assert "FileNotFoundError" in done.stderr
    assert seen["blocked_on_fifo"] is True
    assert seen["parent_is_run"] is True
    assert seen["own_session"] is True
    assert seen["stdin"] == seen["stdout"] == "/dev/null"
    assert seen["stderr_is_runs"] is True
    assert seen["isolated"] is True
    assert seen["forked"] is True
    assert seen["timed_out"] is True
    assert seen["killed"] == -9
    assert seen["poll_after"] == -9
    assert "error" in seen["refused"]
    assert seen["fallback_is_popen"] is True
    assert seen["fallback_code"] == 1
    assert seen["zygote_code"] == 0

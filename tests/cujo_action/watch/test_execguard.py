"""The exec guard names whoever runs a watched tool: sudo, and the environment probes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cujo_action.watch.execguard import ExecGuard
from cujo_action.watch.watcher import fanotify_unavailable

FANOTIFY = fanotify_unavailable()
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(FANOTIFY is not None, reason=f"fanotify unavailable: {FANOTIFY}"),
]


def stand_in(tmp_path: Path, name: str) -> Path:
    """Copy `true` under a probe's name: running it is what is watched."""
    source = shutil.which("true")
    assert source is not None
    tool = tmp_path / name
    shutil.copy2(source, tool)
    return tool


def test_a_probe_run_below_the_check_is_named_with_its_caller(tmp_path: Path) -> None:
    probe = stand_in(tmp_path, "systemd-detect-virt")
    guard = ExecGuard([probe], {}, descendants_of=os.getpid(), phase=lambda: "install")
    guard.start()
    try:
        caller = subprocess.run(
            [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.argv[1]])",
             str(probe)],
            check=True,
        )  # fmt: skip
        assert caller.returncode == 0
    finally:
        seen = guard.stop()
    assert guard.complete
    (ran,) = seen
    assert (ran.path, ran.phase) == (str(probe), "install")
    # Named while the exec waited: the caller's image and command line, not the probe's.
    assert ran.exe == os.path.realpath(sys.executable)
    assert "subprocess.run" in ran.cmdline


def test_a_probe_run_by_anyone_else_is_let_through_unrecorded(tmp_path: Path) -> None:
    probe = stand_in(tmp_path, "dmidecode")
    # A check whose processes are below a pid that is not this test's ancestor.
    guard = ExecGuard([probe], {}, descendants_of=1 << 22, phase=lambda: "install")
    guard.start()
    try:
        assert subprocess.run([probe]).returncode == 0
    finally:
        seen = guard.stop()
    assert seen == []

"""The jail seam: process group, wall timeout, output cap, flood cut-off, real subprocesses."""

from __future__ import annotations

import os
from pathlib import Path

from cujo_action.jail import FLOOD_BYTES, TAIL_BYTES, run_confined

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def test_exit_code_and_output(tmp_path: Path) -> None:
    out = run_confined("echo hello; echo oops >&2; exit 7", cwd=tmp_path, env=ENV, timeout=30)
    assert out.exit_code == 7
    assert not out.timed_out
    assert out.stdout_tail == "hello\n"
    assert out.stderr_tail == "oops\n"


def test_environment_is_only_what_was_given(tmp_path: Path) -> None:
    os.environ["CUJO_TEST_LEAK"] = "harness-secret"
    try:
        out = run_confined("env", cwd=tmp_path, env=ENV, timeout=30)
    finally:
        del os.environ["CUJO_TEST_LEAK"]
    assert "harness-secret" not in out.stdout_tail
    assert "HOME=/nonexistent" in out.stdout_tail


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # A background grandchild that would outlive a naive kill of the shell.
    cmd = f"sleep 300 & echo $! > {pidfile}; wait"
    out = run_confined(cmd, cwd=tmp_path, env=ENV, timeout=1)
    assert out.timed_out
    assert out.exit_code is None
    pid = int(pidfile.read_text())
    assert (
        not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def test_leftover_background_process_is_killed_when_the_command_exits(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    out = run_confined(
        f"(sleep 300 >/dev/null 2>&1 &  echo $! > {pidfile})", cwd=tmp_path, env=ENV, timeout=30
    )
    assert out.exit_code == 0
    pid = int(pidfile.read_text())
    assert (
        not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def test_output_keeps_only_the_tail(tmp_path: Path) -> None:
    out = run_confined("seq 1 100000", cwd=tmp_path, env=ENV, timeout=30)
    assert out.exit_code == 0
    assert out.stdout_tail.endswith("100000\n")
    assert len(out.stdout_tail) <= TAIL_BYTES
    assert out.stdout_bytes > TAIL_BYTES


def test_flood_is_cut_off(tmp_path: Path) -> None:
    # 1 GiB of zeros: the jail must stop it near the cap instead of draining it all.
    out = run_confined("head -c 1073741824 /dev/zero", cwd=tmp_path, env=ENV, timeout=120)
    assert out.flooded
    assert out.exit_code is None
    assert FLOOD_BYTES < out.stdout_bytes < 1073741824 // 2

"""Arming a run: what the sandbox probe decides, asked while the namespaces are made."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gitrepo import GitRepo

from cujo_action.arm import arming
from cujo_action.arm.arming import arm
from cujo_action.prepare.plan import prepare
from cujo_action.schema import Plan

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, uids")


@pytest.fixture
def work() -> Iterator[Path]:
    # The checks' uids pass through the run's folder, as a real run's.
    top = Path(tempfile.mkdtemp())
    top.chmod(0o711)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def plan_in(work: Path, monkeypatch: pytest.MonkeyPatch) -> Plan:
    monkeypatch.setenv("CUJO_BASE", "off")
    repo = GitRepo(work / "src" / "octo" / "app")
    repo.write({"app.py": "x = 1\n"}).commit("one")
    plan = prepare(str(repo.path), "main", "main", "run-1", work / "checkout")
    (work / "checkout").chmod(0o700)
    return plan


@root_only
def test_the_worker_found_by_the_probe_is_kept_compiled_where_only_root_reads_it(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed, harness = arm(plan_in(work, monkeypatch), work / "run", hide=[work])
    try:
        if not armed.worker_python:
            pytest.skip("no interpreter starts as the runner worker here")
        program = Path(armed.worker_program)
        assert program.parent == work / "run"
        assert program.stat().st_mode & 0o777 == 0o600
        # Compiled by the interpreter that runs it: its magic number.
        magic = subprocess.run(
            [armed.worker_python, "-c", "import importlib.util as u, sys; "
             "sys.stdout.buffer.write(u.MAGIC_NUMBER)"],
            capture_output=True, check=True,
        ).stdout  # fmt: skip
        assert program.read_bytes()[:4] == magic
        assert armed.isolation == "full", armed.isolation_reason
    finally:
        harness.stop()


@root_only
def test_a_sandbox_that_cannot_be_made_leaves_the_run_partial_and_without_namespaces(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The namespaces are made while the probe runs; they go when it says no.
    monkeypatch.setattr(arming, "_sandbox_probe", lambda *_: ("", b"", "bwrap: no"))
    dropped: list[str] = []
    drop = arming._drop_namespaces

    def spied(harness: arming.Harness) -> None:
        dropped.extend(ns.name for ns in harness.namespaces)
        drop(harness)

    monkeypatch.setattr(arming, "_drop_namespaces", spied)
    armed, harness = arm(plan_in(work, monkeypatch), work / "run", hide=[work])
    try:
        assert armed.isolation == "partial"
        assert armed.isolation_reason == "bubblewrap is needed for full isolation: bwrap: no"
        assert (armed.netns, armed.proxy_hosts, harness.namespaces) == ({}, {}, [])
        assert (armed.bwrap, armed.worker_python, armed.worker_program) == ("", "", "")
    finally:
        harness.stop()
    assert dropped, "the namespaces were made beside the probe"
    assert not [name for name in dropped if Path("/run/netns", name).exists()]

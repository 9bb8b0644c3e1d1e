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
from cujo_action.net.proxy.process import ProxyError
from cujo_action.prepare.plan import prepare
from cujo_action.sandbox.helper_processes import Spawned
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


@root_only
def test_a_proxy_that_cannot_start_lets_go_of_the_uids_limits_and_staging_made_beside_it(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The uids, the limits and the checks' areas are made while the proxy starts: when it
    # cannot, arm waits for the staging thread, then gives back what it took.
    made: list[arming.Limits] = []
    make = arming.make_limits

    def spied_limits(name: str, nproc: int) -> arming.Limits:
        made.append(make(name, nproc))
        return made[-1]

    staged: list[str] = []
    stage_areas = arming._stage_areas

    def spied_stage(*args: object) -> object:
        result = stage_areas(*args)  # type: ignore[arg-type]
        staged.append("done")
        return result

    released: list[int] = []
    allocate = arming.allocate_uids

    def spied_uids() -> object:
        block = allocate()
        release = block.release

        def give_back() -> None:
            released.append(block.first)
            release()

        block.release = give_back  # type: ignore[method-assign]
        return block

    def refused(*_: object, warm: Spawned | None = None, **__: object) -> object:
        if warm is not None:  # as start_proxy does when its process cannot start
            warm.cancel()
        raise ProxyError("the proxy could not start: refused here")

    monkeypatch.setattr(arming, "make_limits", spied_limits)
    monkeypatch.setattr(arming, "_stage_areas", spied_stage)
    monkeypatch.setattr(arming, "allocate_uids", spied_uids)
    monkeypatch.setattr(arming, "start_proxy", refused)
    with pytest.raises(ProxyError, match="refused here"):
        arm(plan_in(work, monkeypatch), work / "run", hide=[work])
    assert staged == ["done"], "arm raised while the areas were still being staged"
    assert len(released) == 1
    assert made
    assert all(not Path(d).exists() for limits in made for d in limits.dirs), made

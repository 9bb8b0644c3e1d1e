"""Without root each check runs its own copy of each watched tool (sudo, crontab, the
environment probes), so inotify, which cannot name a process, still knows whose exec it
saw (issue 25)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cujo_action.arm import arming
from cujo_action.sandbox.boundary import BoundaryError
from cujo_action.schema import ALL_CHECKS
from cujo_action.watch.persistence import SCHEDULERS
from cujo_action.watch.sandbox_probing import SCHEDULER_TOOLS, WATCHED_TOOLS


@pytest.fixture
def tools(tmp_path: Path) -> list[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    made = []
    for name in ("sudo", "su"):
        tool = bin_dir / name
        tool.write_bytes(b"\x7fELF " + name.encode())
        tool.chmod(0o4755)
        made.append(tool)
    return made


def _copies(corners: Path, tools: list[Path]) -> dict[str, list[tuple[str, str]]]:
    bin_dir = tools[0].parent
    # A tool the machine does not have is left out, as the watcher leaves it out; a path
    # that leads to a tool already copied (/bin → /usr/bin) is the same copy.
    (bin_dir / "sbin").mkdir()
    os.symlink(tools[0], bin_dir / "sbin" / "sudo")
    return arming.tool_copies(corners, tools=(*tools, bin_dir / "doas", bin_dir / "sbin" / "sudo"))


def _corners(tmp_path: Path) -> Path:
    corners = tmp_path / "checks"
    for check in ALL_CHECKS:
        (corners / check).mkdir(parents=True)
    return corners


def test_each_check_gets_a_copy_of_its_own_of_each_tool(tmp_path: Path, tools: list[Path]) -> None:
    copies = _copies(_corners(tmp_path), tools)
    assert set(copies) == set(ALL_CHECKS)
    inodes = set()
    for check, pairs in copies.items():
        assert [inside for _, inside in pairs] == [str(t) for t in tools]
        for copy, inside in pairs:
            path = Path(copy)
            assert path.parent == tmp_path / "checks" / check / "tools"
            assert path.read_bytes() == Path(inside).read_bytes()
            assert path.stat().st_mode & 0o7777 == 0o755  # no set-uid bit
            inodes.add(path.stat().st_ino)
    # A file of its own per check and tool: an open of one is that check's alone.
    assert len(inodes) == len(ALL_CHECKS) * len(tools)
    assert not inodes & {t.stat().st_ino for t in tools}


def test_a_tools_folder_already_there_stops_the_run(tmp_path: Path, tools: list[Path]) -> None:
    corners = _corners(tmp_path)
    os.symlink(tmp_path / "elsewhere", corners / ALL_CHECKS[0] / "tools")
    with pytest.raises(BoundaryError):
        _copies(corners, tools)
    assert not (tmp_path / "elsewhere").exists()


def test_every_scheduler_the_persistence_rules_name_is_watched() -> None:
    assert {str(t) for t in SCHEDULER_TOOLS} == set(SCHEDULERS)
    assert set(SCHEDULER_TOOLS) <= set(WATCHED_TOOLS)

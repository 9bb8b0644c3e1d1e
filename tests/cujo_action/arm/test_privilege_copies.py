"""Without root each check runs its own copy of each privilege tool, so inotify, which
cannot name a process, still knows whose exec it saw (issue 25)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cujo_action.arm import arming
from cujo_action.sandbox.boundary import BoundaryError
from cujo_action.schema import ALL_CHECKS


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    made = []
    for name in ("sudo", "su"):
        tool = bin_dir / name
        tool.write_bytes(b"\x7fELF " + name.encode())
        tool.chmod(0o4755)
        made.append(tool)
    # A tool the machine does not have is left out, as the watcher leaves it out.
    monkeypatch.setattr(arming, "PRIVILEGE_TOOLS", (*made, bin_dir / "doas"))
    return made


def _corners(tmp_path: Path) -> Path:
    corners = tmp_path / "checks"
    for check in ALL_CHECKS:
        (corners / check).mkdir(parents=True)
    return corners


def test_each_check_gets_a_copy_of_its_own_of_each_tool(tmp_path: Path, tools: list[Path]) -> None:
    copies = arming.privilege_copies(_corners(tmp_path))
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
        arming.privilege_copies(corners)
    assert not (tmp_path / "elsewhere").exists()

"""Root reads a file the sandbox could have written (``boundary.read_file_below``).

After pull-request code ran, whatever stands at the path may have been planted: a link
to a file only root may read, a fifo that would block a plain open for ever, a hard link
to another file, a link in place of a folder on the way, a file far too big. Each is
named for what it is and never read through; a big file is read only to the cap.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cujo_action.sandbox.boundary import BoundaryError, read_file_below

REL = "work/_temp/_runner_file_commands/set_env_1"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / REL).parent.mkdir(parents=True)
    return home


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    secret = tmp_path / "root-only"
    secret.write_text("GIT_PAGER=/x\nroot's secret\n")
    secret.chmod(0o600)
    return secret


def test_a_regular_file_is_read_with_its_size_and_a_stamp_that_moves_when_written(
    home: Path,
) -> None:
    (home / REL).write_text("VERSION=1\n")
    first = read_file_below(home, REL, 1024)
    assert first is not None
    assert (first.data, first.size, first.not_regular) == (b"VERSION=1\n", 10, "")
    assert read_file_below(home, REL, 1024) == first  # left alone: the same stamp
    with (home / REL).open("a") as out:
        out.write("A=2\n")
    again = read_file_below(home, REL, 1024)
    assert again is not None
    assert again.stamp != first.stamp
    assert again.data == b"VERSION=1\nA=2\n"


def test_a_link_to_a_root_only_file_is_named_and_never_read(home: Path, secret: Path) -> None:
    (home / REL).symlink_to(secret)
    read = read_file_below(home, REL, 1024)
    assert read is not None
    assert (read.not_regular, read.data, read.size) == ("a symbolic link", b"", 0)


def test_a_fifo_is_named_at_once_without_waiting_for_a_writer(home: Path) -> None:
    os.mkfifo(home / REL)
    read = read_file_below(home, REL, 1024)
    assert read is not None
    assert (read.not_regular, read.data) == ("a fifo", b"")


def test_a_hard_link_to_another_file_is_named_and_never_read(home: Path, secret: Path) -> None:
    os.link(secret, home / REL)
    read = read_file_below(home, REL, 1024)
    assert read is not None
    assert read.not_regular == "a file with 1 other name(s)"
    assert read.data == b""


def test_a_folder_where_the_file_was_is_named(home: Path) -> None:
    (home / REL).mkdir()
    read = read_file_below(home, REL, 1024)
    assert read is not None
    assert read.not_regular == "a folder"


def test_a_link_in_place_of_a_folder_on_the_way_is_named_and_not_entered(
    home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "set_env_1").write_text("GIT_PAGER=/x\n")
    folder = home / "work" / "_temp" / "_runner_file_commands"
    folder.rmdir()
    folder.symlink_to(elsewhere)
    read = read_file_below(home, REL, 1024)
    assert read is not None
    assert read.not_regular == "work/_temp/_runner_file_commands is a symbolic link, not a folder"
    assert read.data == b""


def test_an_oversized_file_is_read_only_to_the_cap(home: Path) -> None:
    with (home / REL).open("w") as out:
        out.write("VERSION=1\n")
        out.truncate(1 << 34)  # 16 GiB, sparse
    read = read_file_below(home, REL, 4096)
    assert read is not None
    assert read.size == 1 << 34
    assert len(read.data) == 4096
    assert read.data.startswith(b"VERSION=1\n")


def test_nothing_there_is_none_and_only_plain_relative_paths_are_taken(home: Path) -> None:
    assert read_file_below(home, REL, 10) is None
    assert read_file_below(home, "work/nothing/here", 10) is None
    with pytest.raises(ValueError, match="relative"):
        read_file_below(home, "../root-only", 10)
    with pytest.raises(BoundaryError):
        read_file_below(home / "missing", REL, 10)

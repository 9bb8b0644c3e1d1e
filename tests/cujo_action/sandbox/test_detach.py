"""Before a sandbox starts, root detaches the host mounts it would only see as names.

The choice is pure (which mount points, in which order); the detaching is tried for real
as root, inside a mount namespace the test makes, so the host's own mounts never move:
what `detach.py` detaches is gone for the command it starts and for nobody else.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cujo_action.sandbox.detach import (
    FAILED,
    mount_points,
    split_args,
    to_detach,
    unescape,
)
from cujo_action.sandbox.jail import DETACH

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts")

MOUNTINFO = (
    b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    b"42 27 254:0 /run/netns /run/netns rw shared:1 - ext4 /dev/vda rw\n"
    b"43 42 0:4 net:[4026532] /run/netns/ns-a1b2c3 rw shared:1 - nsfs nsfs rw\n"
    b"44 27 0:25 / /mnt/with\\040space ro - tmpfs tmpfs ro\n"
    b"45 27 0:26 / /tmp rw - tmpfs tmpfs rw\n"
    b"46 27 0:27 / /usr/lib/x rw - tmpfs tmpfs rw\n"
    b"47 27 0:28 / /run rw - tmpfs tmpfs rw\n"
)


def test_mount_points_are_read_with_their_escapes_undone() -> None:
    assert unescape(b"/mnt/a\\040b\\011c\\134d") == b"/mnt/a b\tc\\d"
    assert unescape(b"/no\\escape\\99") == b"/no\\escape\\99"
    assert mount_points(MOUNTINFO)[3] == b"/mnt/with space"


def test_mounts_under_covered_folders_go_deepest_first_but_not_one_a_bind_needs() -> None:
    points = mount_points(MOUNTINFO)
    chosen = to_detach(points, [b"/run", b"/mnt", b"/tmp"], keep=[b"/tmp/tmpab/home"])
    # /tmp holds a folder bubblewrap still binds from: it stays; /usr is not covered.
    assert chosen == [b"/run/netns/ns-a1b2c3", b"/mnt/with space", b"/run/netns", b"/run"]
    assert to_detach(points, [b"/run/netns/"], keep=[]) == [b"/run/netns/ns-a1b2c3", b"/run/netns"]
    # A folder whose name only starts like a covered one is not under it.
    assert to_detach([b"/runner"], [b"/run"], keep=[]) == []


def test_arguments_are_absolute_paths_then_the_command() -> None:
    cover, keep, command = split_args(["--cover", "/run", "/tmp", "--keep", "/x", "--", "true"])
    assert (cover, keep, command) == ([b"/run", b"/tmp"], [b"/x"], ["true"])
    for bad in (["--cover", "/run"], ["--cover", "run", "--", "true"], ["--"]):
        with pytest.raises(ValueError, match=r"no command|not an absolute path"):
            split_args(bad)


@pytest.fixture
def folder() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp())
    try:
        yield made
    finally:
        for child in sorted(made.rglob("*"), reverse=True):
            child.rmdir()
        made.rmdir()


def in_own_namespace(script: str, folder: Path) -> list[str]:
    """Run ``script`` (sh) in a private mount namespace; return its output's lines."""
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@root_only
def test_detached_for_the_command_only_and_never_what_a_bind_needs(folder: Path) -> None:
    (folder / "gone").mkdir()
    (folder / "kept").mkdir()
    detach = f"{sys.executable} -I -S {DETACH}"
    script = (
        'mount -t tmpfs none "$1/gone" && mkdir "$1/gone/deeper" '
        '&& mount -t tmpfs none "$1/gone/deeper" && mount -t tmpfs none "$1/kept" '
        f'&& {detach} --cover "$1" --keep "$1/kept/home" -- /bin/cat /proc/self/mountinfo '
        "&& echo AFTER && cat /proc/self/mountinfo"
    )
    lines = in_own_namespace(script, folder)
    command, after = lines[: lines.index("AFTER")], lines[lines.index("AFTER") + 1 :]
    points = [line.split()[4] for line in command]
    assert f"{folder}/gone" not in points
    assert f"{folder}/gone/deeper" not in points
    assert f"{folder}/kept" in points  # bubblewrap binds from under it
    # The namespace that ran it (standing in for the host) still has every mount.
    assert {f"{folder}/gone", f"{folder}/gone/deeper", f"{folder}/kept"} <= {
        line.split()[4] for line in after
    }


@root_only
def test_a_bad_call_fails_as_a_sandbox_that_could_not_be_set_up() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(DETACH), "--cover", "/run"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == FAILED
    assert done.stderr.startswith("detach: ")

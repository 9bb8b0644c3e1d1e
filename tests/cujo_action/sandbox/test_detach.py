"""Before a sandbox starts, root detaches the host mounts it would only see as names.

The choice is pure (which mounts); the detaching is tried for real as root, inside a
mount namespace the test makes, so the host's own mounts never move: what the prefix
detaches is gone for the command it starts and for nobody else.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cujo_action.sandbox.detach import mount_points, prefix, to_detach, unescape

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts")

MOUNTINFO = (
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "42 27 254:0 /run/netns /run/netns rw shared:1 - ext4 /dev/vda rw\n"
    "43 42 0:4 net:[4026532] /run/netns/ns-a1b2c3 rw shared:1 - nsfs nsfs rw\n"
    "44 27 0:25 / /mnt/with\\040space ro - tmpfs tmpfs ro\n"
    "45 27 0:26 / /tmp rw - tmpfs tmpfs rw\n"
    "46 45 0:29 / /tmp/other rw - tmpfs tmpfs rw\n"
    "47 27 0:27 / /usr/lib/x rw - tmpfs tmpfs rw\n"
    "48 27 0:28 / /dev/shm rw - tmpfs tmpfs rw\n"
    "49 48 0:30 / /dev/shm rw - tmpfs tmpfs rw\n"
    "50 27 0:31 / /run/user/0 rw - tmpfs tmpfs rw\n"
)


def test_mount_points_are_read_with_their_escapes_undone() -> None:
    assert unescape("/mnt/a\\040b\\011c\\134d") == "/mnt/a b\tc\\d"
    assert unescape("/no\\escape\\99") == "/no\\escape\\99"
    assert mount_points(MOUNTINFO)[3] == "/mnt/with space"


def test_mounts_under_covered_folders_go_but_never_one_a_bind_needs() -> None:
    points = mount_points(MOUNTINFO)
    cover = ["/dev/shm", "/mnt", "/run", "/tmp"]
    # /run/netns goes with what is below it; /dev/shm is stacked twice, so named twice;
    # /usr is not covered.
    assert to_detach(points, cover, keep=[]) == [
        "/dev/shm", "/dev/shm", "/mnt/with space", "/run/netns", "/run/user/0", "/tmp",
    ]  # fmt: skip
    # /tmp holds a folder bubblewrap binds from: it stays, and what is below it is named
    # instead. /run would take /run/user/0 with it, which holds another: only its others.
    kept = ["/tmp/tmpab/home", "/run/user/0/x"]
    assert to_detach(points, [*cover, "/run/user"], keep=kept) == [
        "/dev/shm", "/dev/shm", "/mnt/with space", "/run/netns", "/tmp/other",
    ]  # fmt: skip
    # A folder whose name only starts like a covered one is not under it.
    assert to_detach(["/runner"], ["/run/"], keep=[]) == []


def test_the_prefix_is_nothing_when_nothing_is_to_go() -> None:
    assert prefix([], "unshare") == []
    assert prefix(["/run/netns"], None)[:3] == ["/bin/sh", "-c", prefix(["/x"], None)[2]]
    assert prefix(["/a", "/b c"], "/usr/bin/unshare")[:5] == [
        "/usr/bin/unshare", "--mount", "--propagation", "slave", "--",
    ]  # fmt: skip
    assert prefix(["/a", "/b c"], None)[-1] == "/a\n/b c"


@pytest.fixture
def folder() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp())
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@root_only
def test_detached_for_the_command_only(folder: Path) -> None:
    (folder / "gone").mkdir()
    (folder / "with space").mkdir()
    mounts = [folder / "gone", folder / "gone" / "deeper", folder / "with space"]
    setup = " && ".join(f"mkdir -p '{m}' && mount -t tmpfs none '{m}'" for m in mounts)
    detach = shlex.join(prefix([str(folder / "gone"), str(mounts[2])], "unshare"))
    script = (
        f"{setup} && {detach} /bin/cat /proc/self/mountinfo && echo AFTER "
        "&& cat /proc/self/mountinfo"
    )
    # The test's own namespace stands in for the host.
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    inside, after = lines[: lines.index("AFTER")], lines[lines.index("AFTER") + 1 :]
    seen = set(mount_points("\n".join(inside)))
    assert not seen & {str(m) for m in mounts}
    # The namespace that ran it still has every mount.
    assert {str(m) for m in mounts} <= set(mount_points("\n".join(after)))


@root_only
def test_a_link_named_in_place_of_a_mount_sends_the_detach_nowhere(folder: Path) -> None:
    # Were a folder on a mount's path ever writable by a pull request, a link put there
    # must not carry root's umount to a mount elsewhere: only the kernel's list is used.
    elsewhere = folder / "elsewhere"
    link = folder / "covered" / "m"
    script = (
        f"mkdir -p {elsewhere} {link.parent} && mount -t tmpfs none {elsewhere} "
        f"&& ln -s {elsewhere} {link} && "
        f"{shlex.join(prefix([str(link)], 'unshare'))} /bin/cat /proc/self/mountinfo"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert str(elsewhere) in mount_points(done.stdout)

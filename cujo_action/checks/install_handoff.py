"""Hand the install's tree to the checks that run on it, uid to uid, through a spool file.

The install's uid packs its tree (the head as installed, and its venv) with ``tar`` into
a spool in the install's root-owned corner (``PACK``); each receiving check's uid unpacks
it (``RECEIVE``, ``_receive_install``). Root only creates and opens the spool, never
through a link, and never walks either tree.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import replace
from pathlib import Path

from cujo_action.arm.context import Armed
from cujo_action.checks import _receive_install
from cujo_action.checks._receive_install import MANIFEST
from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.sandbox.jail import JailError, run_confined

HANDOFF_TIMEOUT = 600.0
# The install's tree, packed as its uid: the manifest first, then every folder and every
# file the uid owns (what it does not own in its venv is the template's: named, not sent).
PACK = (
    "cd {work} || exit 2\n"
    "me=$(id -u)\n"
    "if [ -d venv ] && [ ! -L venv ]; then\n"
    "  find venv -xdev \\( -type d -printf 'd %P\\0' \\) -o"
    " \\( -type f ! -uid \"$me\" -printf 'f %i %P\\0' \\) > {manifest}\n"
    "else\n"
    "  : > {manifest}\n"
    "fi\n"
    "{{ printf '%s\\0' {manifest}; find {repo} ./venv -xdev \\( -type d -o -uid \"$me\" \\)"
    " -print0 2>/dev/null; }} | tar -cf - --null --no-recursion --ignore-failed-read -T -\n"
    "code=$?\n"
    "rm -f {manifest}\n"
    "exit $code\n"
)
RECEIVE = Path(_receive_install.__file__).read_text()


def pack_install(armed: Armed) -> None:
    """Pack the install's tree as the install's uid into its spool; raise when it fails.

    What the install's uid does not own in its venv is the template's, shared by every
    check as links (``venvs.link_tree``): the spool names those files (the manifest
    ``_receive_install`` reads first) rather than carrying them.
    """
    # Beside the HOME, in the check's root-owned corner: no sandbox can write there.
    fd = create_spool(armed.install_spool())
    try:
        inside = armed.home_inside("install")
        packed = run_confined(
            PACK.format(
                work=shlex.quote(f"{inside}/work"),
                repo=shlex.quote(f"./{armed.job.repo}"),
                manifest=MANIFEST,
            ),
            cwd=Path(inside),
            env={"PATH": "/usr/bin:/bin", "HOME": inside, "LANG": "C.UTF-8"},
            timeout=HANDOFF_TIMEOUT,
            # No network: packing needs none.
            confinement=replace(armed.confinement("install", "install"), netns=None),
            stdout_fd=fd,
        )
    finally:
        os.close(fd)
    if packed.exit_code not in (0, 1) or packed.timed_out:
        os.unlink(armed.install_spool())  # receivers then say it is missing
        raise JailError(f"packing the install's tree failed: {packed.stderr_tail[-400:]}")


def receive_command(python: str, work: str) -> str:
    """Return the command a receiving check's uid unpacks the spool (on its stdin) with."""
    return f"{shlex.quote(python)} -I -S -c {shlex.quote(RECEIVE)} {shlex.quote(work)}"


def create_spool(path: Path) -> int:
    """Create the install's spool for writing: a new file, never through a link."""
    return open_no_follow(path, "create")


def open_spool(path: Path) -> int:
    """Open the install's spool for reading; a link or anything but a file is refused."""
    try:
        fd = open_no_follow(path, "read", nonblock=True)
    except FileNotFoundError:
        raise JailError("the install's tree was not packed") from None
    except OSError as exc:
        raise JailError(f"the install's spool cannot be opened: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JailError("the install's spool is not a regular file")
    return fd

"""Confinements for jail-level tests: what the harness would build, on this machine.

As root (CI, as on Actions) a command runs as a uid of its own, inside bubblewrap when it
works here, with the check's cgroups; elsewhere as the test's own user.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jobs import job_for

from cujo_action.arm.actionsjob import worker_source
from cujo_action.arm.context import runner_worker
from cujo_action.arm.host import worker_program
from cujo_action.find.decoys import make_decoys
from cujo_action.sandbox.cgroups import Limits, make_limits
from cujo_action.sandbox.jail import (
    INSIDE_HOME,
    NPROC_LIMIT,
    Confinement,
    View,
    bwrap_unavailable,
)
from cujo_action.sandbox.uids import UidBlock, allocate_uids


@dataclass
class Sandbox:
    """A home on the host, the confinement that shows it as INSIDE_HOME, and its limits."""

    home: Path
    confinement: Confinement
    limits: Limits
    uid: int | None

    @property
    def cwd(self) -> Path:
        """Return the home as the command sees it."""
        return Path(INSIDE_HOME) if self.confinement.view is not None else self.home


class Sandboxes:
    """Make sandboxes for a test; remove their cgroups and release the uids after."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.block: UidBlock | None = allocate_uids() if os.geteuid() == 0 else None
        self._made: list[Sandbox] = []
        self._next = 0

    def make(
        self, *, hidden: tuple[str, ...] = (), view: bool = True, worker: bool = False
    ) -> Sandbox:
        """Return a new sandbox with a fresh home and uid (``worker``: the decoy as pid 1)."""
        uid = self.block.uid(self._next) if self.block is not None else None
        self._next += 1
        home = self.root / f"home{self._next}"
        home.mkdir(mode=0o700)
        if uid is not None:
            os.chown(home, uid, uid)
        bwrap = shutil.which("bwrap")
        usable = view and bwrap is not None and bwrap_unavailable(uid, uid) is None
        program = worker_program("/usr/bin/python3", worker_source())
        pid1 = runner_worker("/usr/bin/python3", program, job_for("octo/app"), make_decoys())
        shown = (
            View(bwrap, ((str(home), INSIDE_HOME),), (), hidden, pid1 if worker else None)
            if usable and bwrap
            else None
        )
        limits = make_limits(f"cujo-test-{secrets.token_hex(4)}", NPROC_LIMIT)
        made = Sandbox(home, Confinement(None, uid, uid, shown, limits), limits, uid)
        self._made.append(made)
        return made

    def close(self) -> None:
        """Remove the cgroups and release the uid block."""
        for made in self._made:
            made.limits.remove()
        if self.block is not None:
            self.block.release()


def sandboxes_for(root: Path) -> Iterator[Sandboxes]:
    """Yield a Sandboxes (a fixture body), closing it after the test."""
    made = Sandboxes(root)
    try:
        yield made
    finally:
        made.close()

"""Stage each check's area before any pull-request code runs: its HOME, checkout and venv.

Each check gets a HOME of its own seeded with decoys and what a hosted runner's HOME
holds, a copy of the head (or of the base) laid out as a runner lays out a job, and the
run's venv template; then its HOME is handed to its uid. The areas of the checks that
run on the install's tree (``RECEIVERS``) are finished while the install runs.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path

from cujo_action.arm.actionsjob import (
    JobEvent,
    JobIdentity,
    checkout_config,
    etc_group,
    etc_passwd,
    event_file,
    file_commands,
)
from cujo_action.arm.context import CheckArea
from cujo_action.arm.decoyfiles import (
    RUNNER_DIR,
    decoy_files,
    decoy_paths,
    file_mode,
    folder_mode,
    runner_files,
)
from cujo_action.arm.venvs import links_into, place_venvs
from cujo_action.find.decoys import Decoy
from cujo_action.sandbox.boundary import (
    BoundaryError,
    copy_pristine,
    fresh_dir,
    hand_over,
    write_below,
)
from cujo_action.sandbox.cgroups import Limits
from cujo_action.schema import ALL_CHECKS, BASE_CHECK, PRIVILEGED_CHECK, CheckName, Plan

# The checks that get the run's venv template laid out as their venv: those that install
# into it, and those that receive the install's (whose venv is then made to match it:
# ``_receive_install``, so the template's files need not travel through the spool).
VENV_CHECKS: tuple[CheckName, ...] = (
    "install",
    "detonation",
    "base",
    "privileged",
    "tests",
    "probes",
    "smoke",
)
# The checks that run on the install's tree: their areas are finished while it runs.
RECEIVERS: tuple[CheckName, ...] = ("tests", "probes", "smoke")


def base_runs() -> bool:
    """Return whether the base is installed and tested beside the head (``CUJO_BASE=off``
    leaves it out, to measure what it costs; nothing is then "also at base")."""
    return os.environ.get("CUJO_BASE", "on") != "off"


def runs(plan: Plan, check: str) -> bool:
    """Return whether ``check`` runs anything in this run: the base unless left out, the
    ``privileged`` check only where a base workflow with a privileged trigger runs the
    head (``Plan.privileged``), every other check always."""
    if check == BASE_CHECK:
        return base_runs()
    if check == PRIVILEGED_CHECK:
        return plan.privileged is not None and bool(plan.privileged_dir)
    return True


def sandbox_accounts(run_dir: Path) -> tuple[Path, Path]:
    """Write the sandbox's /etc/passwd and /etc/group: a hosted runner's (``etc_passwd``)."""
    passwd, group = run_dir / "passwd", run_dir / "group"
    passwd.write_text(etc_passwd())
    group.write_text(etc_group())
    for path in (passwd, group):
        path.chmod(0o644)
    return passwd, group


def stage(
    plan: Plan,
    run_dir: Path,
    decoys: tuple[Decoy, ...],
    owners: dict[str, tuple[int | None, int | None]],
    limits: dict[str, Limits],
    job: JobIdentity,
    *,
    venv_template: str = "",
    venv_made_at: str = "",
    inside_home: str = "",
) -> tuple[dict[str, CheckArea], Callable[[], None]]:
    """Give each check that runs here (``runs``) its own HOME (decoys seeded) and copy of
    the head, before any PR code.

    Every folder is made fresh (a name already there stops the run), the copies come
    from the pristine checkout only root has written, laid out as a hosted runner lays
    out a job (``work/<repo>/<repo>``, ``work/_temp``), and each HOME is handed to its
    check's uid in one symlink-proof walk. After this, root never writes these trees.

    With ``venv_template``, each check that installs gets it as ``work/venv`` (hard links
    to its read-only files, ``venvs.place_venvs``), pointed at the path its commands see
    it at (under ``inside_home``, or the host HOME).

    Returns the areas, and what is left to stage for the checks that run on the install's
    tree (``RECEIVERS``: their HOMEs' files, venvs and hand-over), to be finished
    while the install runs (``Harness.staged``): their HOMEs sit in root's 0711 corners,
    0700 and root's until handed over, so no uid that runs meanwhile can reach them, and
    their own uids run nothing before the run waits for it.
    """
    corners = fresh_dir(run_dir / "checks", 0o711)
    areas: dict[str, CheckArea] = {}
    venvs: dict[Path, str] = {}  # where the template is copied → the path commands see
    # A receiver keeps only the template files the install's venv still shares (links):
    # where the template would be copied (no root, another file system) the copy would
    # only be deleted, and the receiver's venv comes whole through the install's spool.
    receivers_link = bool(venv_template) and links_into(venv_template, corners)
    for check in ALL_CHECKS:
        if not runs(plan, check):
            continue  # no area for a check that runs nothing here
        corner = fresh_dir(corners / check, 0o711)  # root's: the uid cannot swap its HOME
        home = fresh_dir(corner / "home", 0o700)
        if check not in RECEIVERS:
            seed_home(home, decoys, job, job.event(check))
        if check in ("install", "detonation", "base", "privileged"):
            checkout = fresh_dir(home / "work" / job.repo, 0o755) / job.repo
            ignore = ("node_modules",) if check == "detonation" else ()
            if check == "base":
                stage_commit(plan, Path(plan.base_dir), checkout, job.branch, plan.base_sha)
            elif check == "privileged":
                # As the privileged job checks the head out: by its SHA, detached.
                stage_commit(plan, Path(plan.privileged_dir), checkout, "", plan.head_sha)
            else:
                # The base worktree and the clone's reflog name the harness's own folders.
                skip = (".git/worktrees", ".git/logs")
                copy_pristine(Path(plan.head_dir), checkout, ignore=ignore, skip=skip)
            # As actions/checkout leaves it: the origin on GitHub, the token's extraheader.
            write_below(checkout, ".git/config", checkout_config(job, decoys), 0o644)
        ecosystem = plan.base_ecosystem if check == "base" else plan.ecosystem
        laid_out = check in VENV_CHECKS and (check not in RECEIVERS or receivers_link)
        if venv_template and laid_out and ecosystem != "node":
            venvs[home / "work" / "venv"] = f"{inside_home or home}/work/venv"
        uid, gid = owners[check]
        areas[check] = CheckArea(
            home=str(home), uid=uid, gid=gid, limits=limits[check],
            venv_staged=home / "work" / "venv" in venvs,
        )  # fmt: skip

    def finish(checks: Collection[str]) -> None:
        for receiver in RECEIVERS:
            if receiver in checks:
                seed_home(Path(areas[receiver].home), decoys, job, job.event(receiver))
        homes = {Path(areas[c].home) for c in checks}
        mine = {dest: inside for dest, inside in venvs.items() if dest.parents[1] in homes}
        if mine:
            place_venvs(venv_template, mine, made_at=venv_made_at or None)  # all at once
        for check in checks:
            area = areas[check]
            if area.uid is not None and area.gid is not None:
                hand_over(Path(area.home), area.uid, area.gid)

    finish([c for c in areas if c not in RECEIVERS])
    return areas, partial(finish, [c for c in areas if c in RECEIVERS])


def stage_commit(plan: Plan, worktree: Path, checkout: Path, branch: str, sha: str) -> None:
    """Copy a worktree of the clone as a checkout of its own: its files, the clone's git,
    at ``sha`` on ``branch`` (detached where ``branch`` is empty).

    The worktree's ``.git`` is a file naming the harness's clone; the copy gets the
    clone's object store and the worktree's own index instead, and ``branch`` (with its
    remote-tracking branch) at ``sha``, checked out, as the base's own push leaves it: git
    (and a version taken from git) sees an ordinary checkout. All of it is root's
    pristine checkout, copied before any pull-request code runs; the branch's refs are
    the clone's own loose files (``prepare/merge.py``), rewritten here.
    """
    head = Path(plan.head_dir)
    copy_pristine(worktree, checkout, skip=(".git",))
    copy_pristine(head / ".git", checkout / ".git", skip=("worktrees", "logs", "index"))
    index = head / ".git" / "worktrees" / worktree.name / "index"
    if index.is_file() and not index.is_symlink():
        shutil.copyfile(index, checkout / ".git" / "index", follow_symlinks=False)
    if not branch:
        write_below(checkout, ".git/HEAD", sha + "\n", 0o644)
        return
    for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
        write_below(checkout, f".git/{ref}", sha + "\n", 0o644)
    write_below(checkout, ".git/HEAD", f"ref: refs/heads/{branch}\n", 0o644)


def seed_home(
    home: Path, decoys: tuple[Decoy, ...], job: JobIdentity, event: JobEvent
) -> list[Path]:
    """Fill a fresh HOME with what a hosted runner's HOME holds for a step; return the
    paths of the files holding a decoy.

    The decoys sit where a job leaves credentials (``decoyfiles.py``): the docker login's
    config, the runner's registration beside its worker. Also ``work/_temp`` with the
    event file (of ``event``: ``JobIdentity.event``) and the step's file commands, and the
    runner's folder, whose ``bin`` the worker's tmpfs is mounted on. ``home`` is root's,
    made fresh, and no pull-request code has run in it: each file goes through
    ``write_below``, which follows no link.
    """
    steps = {
        "work/_temp/_github_workflow/event.json": event_file(job, event, time.time()),
        **file_commands(job),
        # An ordinary HOME has shell profiles; their presence is also what a write is
        # compared to.
        ".bashrc": "# ~/.bashrc\n",
        ".profile": "# ~/.profile\n",
        **runner_files(job),
    }
    planted = decoy_files(decoys, job)
    for rel, content in {**steps, **planted}.items():
        _folders_below(home, str(Path(rel).parent))
        write_below(home, rel, content, file_mode(rel))
    _folders_below(home, ".cache/tmp")  # TMPDIR where there is no bubblewrap
    _folders_below(home, f"{RUNNER_DIR}/bin")  # the worker's tmpfs is mounted here
    return decoy_paths(home, decoys, job)


def _folders_below(home: Path, rel: str) -> None:
    """Make each missing folder of ``rel`` below ``home``; refuse anything but a folder."""
    where = home
    for part in Path(rel).parts:
        if part in ("", "."):
            continue
        where = where / part
        try:
            fresh_dir(where, folder_mode(str(where.relative_to(home))))
        except BoundaryError:
            if not where.is_dir() or where.is_symlink():
                raise

"""Bundle retention: delete finished runs' bundles after ``CUJO_BUNDLE_DAYS``, and say so.

A finished run keeps its bundle (the sandbox's reports and evidence) in the relay's
``bundles/`` folder for its run page. After the days set, ``prune_bundles`` deletes
the folder and marks the run (``Store.mark_pruned``: its folder forgotten, a ``pruned``
event on its timeline), so the page says when its evidence went rather than that it
cannot be read. The verdict, findings and review stay in the record. Folders no run
points at (a bundle that could not be used) go once they are as old.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from app_relay.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pruned:
    """What one pass deleted: the bundles of runs, and folders no run pointed at."""

    runs: int = 0
    strays: int = 0


def pruned_line(days: float, at: datetime) -> str:
    """Return the timeline's words for a bundle deleted at ``at`` after ``days`` days."""
    return (
        f"the bundle (reports and evidence) was deleted on {at:%Y-%m-%d %H:%M} UTC, "
        f"{days:g} days after the run finished (CUJO_BUNDLE_DAYS)"
    )


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return path.resolve() != folder.resolve()


def prune_bundles(store: Store, folder: Path, days: float, now: datetime) -> Pruned:
    """Delete the bundles in ``folder`` of runs that finished more than ``days`` ago.

    Only folders inside ``folder`` are deleted: a run whose bundle lives elsewhere (a
    local review's, say) is left as it is.
    """
    cutoff = now - timedelta(days=days)
    runs = 0
    for run_id, where in store.bundles_past(cutoff):
        path = Path(where)
        if not _inside(path, folder):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            log.warning("run %s: its bundle %s could not be deleted", run_id, path)
            continue
        runs += store.mark_pruned(run_id, pruned_line(days, now))
    strays = 0
    if folder.is_dir():
        kept = {Path(p).resolve() for p in store.bundle_folders()}
        for entry in folder.iterdir():
            try:
                made = datetime.fromtimestamp(entry.lstat().st_mtime, now.tzinfo)
            except OSError:
                continue
            if made >= cutoff or entry.resolve() in kept:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            strays += not entry.exists()
    if runs or strays:
        log.info("pruned the bundles of %d run(s) and %d stray folder(s)", runs, strays)
    return Pruned(runs, strays)

"""The sandbox probes Cujo can see: environment-probing tools run, and decoy folders listed.

Code that hides from sandboxes looks around before it acts. Most of what it reads (the
kernel's status lines, ``uid_map``, the mounts) leaves no trace the harness can see
(``docs/limits.md``, "What a pull request can still tell"). Two kinds of looking do:

* **Running a well-known environment probe.** ``PROBE_TOOLS`` are programs that say
  what machine this is (a virtual machine, a container, which capabilities). A build or a
  test suite has no reason to run them; code that checks where it runs does. The exec
  guard holds each exec until it has named the caller (``execguard.py``), as for
  ``sudo``. ``lscpu`` and ``nproc`` are left out: builds ask them how many cores there are.
* **Listing a folder of credentials.** ``DECOY_FOLDERS`` are the folders a job's
  credentials live in (``~/.ssh``, ``~/.config/gh``, ``~/.docker``, the runner's folder); tools
  open the file they need by name, and no build lists these. Those that hold a decoy are
  watched; the decoy watcher reports a listing (``getdents``) as the event ``list``. HOME
  itself and a checkout's ``.git`` are listed by every build, and are not watched.

A ``stat`` or an ``access`` of a decoy raises no event in either kernel source, so
checking that a decoy exists is not seen; opening it without reading is (``open``).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable
from pathlib import Path

# Programs that tell what the machine is: virtualization, hardware, capabilities.
PROBE_NAMES: tuple[str, ...] = ("systemd-detect-virt", "virt-what", "dmidecode", "capsh")
# Where a distribution installs them; the watchers skip the paths that do not exist.
_TOOL_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin")
PROBE_TOOLS: tuple[Path, ...] = tuple(Path(d, name) for d in _TOOL_DIRS for name in PROBE_NAMES)
# Where the privilege tools usually live; a watcher skips those that are not installed.
PRIVILEGE_TOOLS: tuple[Path, ...] = tuple(
    Path("/usr/bin", name) for name in ("sudo", "su", "pkexec", "doas")
)
# Schedulers: what they are run for (a way to run later) is a persistence observation.
SCHEDULER_TOOLS: tuple[Path, ...] = tuple(
    Path("/usr/bin", name) for name in ("crontab", "at", "batch")
)
# Executables whose run is evidence itself: a way to root (sudo), to run later (crontab),
# or a look at what machine this is (systemd-detect-virt).
WATCHED_TOOLS: tuple[Path, ...] = (*PRIVILEGE_TOOLS, *SCHEDULER_TOOLS, *PROBE_TOOLS)

# Folders under HOME that hold credentials, which tools read by name and never list.
# The runner's own folder (arm/decoyfiles.RUNNER_DIR, pinned equal by a test) holds its
# registration files: only a thief lists it.
DECOY_FOLDERS: tuple[str, ...] = (".ssh", ".config/gh", ".docker", "runners/2.321.0")


def is_probe(tool: str) -> bool:
    """Return whether an executed file is one of the environment probes."""
    return posixpath.basename(tool) in PROBE_NAMES


def decoy_folders(home: Path, decoys: Iterable[Path]) -> list[Path]:
    """Return the credential folders of ``home`` that hold a decoy, to watch for listings.

    Called before any command of the check ran. A folder that is not a directory of its
    own (a symlink, say) is skipped: the watcher never follows a link to mark its target.
    """
    parents = {Path(d).parent for d in decoys}
    found = []
    for rel in DECOY_FOLDERS:
        folder = home / rel
        if folder not in parents:
            continue
        try:
            mode = os.lstat(folder).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            found.append(folder)
    return found

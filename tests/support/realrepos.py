"""Real projects as pull requests: two released source trees of one project, from PyPI.

A release's sdist is the project's own tree at a tagged commit (its tests, tox.ini and
build files), so two releases make a pull request whose base and head are real code.
The index is one of the registries this machine reaches; GitHub is not.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

from e2ecases import Case

# Files a build writes into an sdist that are not in the repository.
_GENERATED = ("PKG-INFO", ".egg-info/")


def sdist(project: str, version: str, into: Path) -> Path:
    """Download ``project==version``'s sdist from the index into ``into`` (once)."""
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob(f"{project}-{version}.tar.gz"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", "--dest", str(into), f"{project}=={version}"],
            check=True, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        found = sorted(into.glob(f"{project}-{version}.tar.gz"))
    if not found:
        raise FileNotFoundError(f"pip downloaded no sdist named {project}-{version}.tar.gz")
    return found[0]


def tree(archive: Path) -> dict[str, str]:
    """Return the text files of an sdist by their path in the project (generated ones left out)."""
    files: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            path = PurePosixPath(*PurePosixPath(member.name).parts[1:])
            name = str(path)
            if name in _GENERATED or any(g in name for g in _GENERATED[1:]):
                continue
            handle = tar.extractfile(member)
            if handle is None:
                continue
            try:
                files[name] = handle.read().decode("utf-8")
            except UnicodeDecodeError:
                continue  # a binary file: the tests need none of them
    return files


def release_pair(project: str, base: str, head: str, into: Path) -> Case:
    """Return a pull request from release ``base`` to release ``head`` of ``project``."""
    old = tree(sdist(project, base, into))
    new = tree(sdist(project, head, into))
    gone = sorted(set(old) - set(new))
    if gone:  # Case writes the head over the base: a removed file would linger
        raise ValueError(f"{project} {head} removes {gone}: choose releases that only change")
    return Case(old, {k: v for k, v in new.items() if old.get(k) != v})

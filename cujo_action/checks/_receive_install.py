"""Unpack the install's tree into this check's work folder, as this check's own uid.

Run confined by ``CheckRun.receive_install`` as ``python -I -S -c <this> WORK``, the
install's spool on standard input (a regular file root opened). Nothing here is root's:
the uid only rearranges its own tree.

Every venv of the run was laid out as hard links to root's read-only template
(``venvs.link_tree``), this check's too, so the install's uid packs only what it owns, and
first a manifest of its venv (``.cujo-template``, NUL-separated records): ``d REL`` for each
folder, ``f INODE REL`` for each file still shared with the template. Before unpacking,
this check's venv is made to match it: each shared file moved to where the install has
it (the same inode: the same template file), every other file removed (the install
deleted or replaced it, or the spool carries the install's own), every folder the install
has not removed. The install's venv is then this one, file for file, without carrying
the template's ~1,700 files through the spool three times.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile

MANIFEST = ".cujo-template"
_CAP = 64 << 20


def _plain(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and ".." not in parts and "" not in parts


def read_manifest(data: bytes) -> tuple[set[str], dict[int, str]]:
    """Return the install venv's folders and its shared files (inode → path)."""
    folders: set[str] = set()
    shared: dict[int, str] = {}
    for record in data.split(b"\0"):
        kind, _, rest = record.partition(b" ")
        if kind == b"d":
            folders.add(os.fsdecode(rest))
        elif kind == b"f":
            ino, _, rel = rest.partition(b" ")
            if ino.isdigit() and _plain(os.fsdecode(rel)):
                shared[int(ino)] = os.fsdecode(rel)
    return folders, shared


def align(venv: str, folders: set[str], shared: dict[int, str]) -> None:
    """Make this check's venv hold the install's shared files where it has them, and
    nothing else but folders (the spool brings the rest)."""
    me = os.getuid()
    found: dict[int, str] = {}
    for top, dirs, files in os.walk(venv):
        for name in (*files, *dirs):  # a link to a folder is listed with the folders
            path = os.path.join(top, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                continue
            if st.st_uid != me and stat.S_ISREG(st.st_mode) and st.st_ino in shared:
                found[st.st_ino] = path
            else:
                os.unlink(path)
    for ino, path in found.items():
        target = os.path.join(venv, shared[ino])
        if target != path:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(path, target)
    for top, dirs, _files in os.walk(venv, topdown=False):
        for name in dirs:
            path = os.path.join(top, name)
            if os.path.relpath(path, venv) not in folders and not os.path.islink(path):
                shutil.rmtree(path)


def main(work: str) -> int:
    spool = os.fdopen(0, "rb", closefd=False)
    with tarfile.open(fileobj=spool, mode="r|") as stream:
        first = stream.next()
        member = stream.extractfile(first) if first is not None and first.isfile() else None
        if first is None or first.name != MANIFEST or member is None or first.size > _CAP:
            print("the install's spool does not start with its manifest", file=sys.stderr)
            return 2
        folders, shared = read_manifest(member.read())
    venv = os.path.join(work, "venv")
    if os.path.isdir(venv) and not os.path.islink(venv):
        align(venv, folders, shared)
    os.lseek(0, 0, os.SEEK_SET)  # the spool is a file: GNU tar reads it from its start
    code = subprocess.run(["tar", "-xf", "-", "-C", work], stdin=0, check=False).returncode
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(work, MANIFEST))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Do the harness's root-side file work without following a path the sandbox could write.

The boundary rules (docs/design.md section 6.5), enforced here and nowhere else by hand:

* **Before** any pull-request code runs, root may create, copy and hand over trees in
  folders it created itself (``fresh_dir`` never takes ``exist_ok``: a name that is
  already there was planted, and the run stops). ``hand_over`` walks with ``os.fwalk``
  and changes owners through directory descriptors, never following a symlink; a file
  with another name (a hard link to root's read-only venv template) stays root's. A
  check's area may be finished later, while other checks run, only as long as no code
  of its own uid has run and it sits, root's and 0700, in a root-owned 0711 corner no
  other uid can enter (``arm.stage``: the checks that receive the install's tree).
* **After** pull-request code ran, root reads a sandbox-writable tree only through
  ``fingerprints`` and the readers beside it (``read_below``, ``read_file_below``, which
  names what it refused): every component opened relative to a directory descriptor with
  ``O_NOFOLLOW``, files opened ``O_NONBLOCK`` and read only when ``fstat`` says they are
  regular. Root never creates, chowns, copies or walks by name in such a tree: that work
  is done by the check's own uid, confined (``jail.run_confined``).
* A sandbox-writable folder always sits in a root-owned parent, so the sandbox can fill
  it but never swap the folder itself for a symlink.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import stat
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

_READ_CAP = 1 << 20
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# How a file is opened when its last component must never be a link: the one place
# that spells these flags (every other module asks ``open_no_follow``).
Opening = Literal["read", "create", "replace", "lock", "dir"]
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_OPENING: Final[dict[str, int]] = {
    "read": os.O_RDONLY | _NO_FOLLOW,
    # A new file: anything already at the name (a planted file or link) is refused.
    "create": os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW,
    # A file of root's own (a state file in a root-only folder), truncated.
    "replace": os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NO_FOLLOW,
    # A lock file, kept open to hold an flock on it.
    "lock": os.O_RDWR | os.O_CREAT | _NO_FOLLOW,
    "dir": _DIR_FLAGS,
}


class BoundaryError(RuntimeError):
    """A path root was about to use was not what root made (planted, or replaced)."""


def open_no_follow(
    path: str | Path,
    how: Opening,
    mode: int = 0o600,
    *,
    dir_fd: int | None = None,
    nonblock: bool = False,
) -> int:
    """Open ``path`` as ``how`` says; a link at its last component raises ``OSError``."""
    flags = _OPENING[how] | (os.O_NONBLOCK if nonblock else 0)
    return os.open(path, flags, mode, dir_fd=dir_fd)


def fresh_dir(path: Path, mode: int, owner: tuple[int, int] | None = None) -> Path:
    """Create ``path`` (it must not exist), set its mode, and hand it to ``owner``."""
    try:
        os.mkdir(path, mode)
    except FileExistsError as exc:
        raise BoundaryError(f"{path} already exists: the harness makes its folders fresh") from exc
    os.chmod(path, mode, follow_symlinks=False)
    if owner is not None:
        os.chown(path, owner[0], owner[1], follow_symlinks=False)
    return path


def copy_pristine(
    src: Path, dest: Path, *, ignore: Iterable[str] = (), skip: Iterable[str] = ()
) -> None:
    """Copy a root-held tree that no pull-request code has touched (symlinks kept as links).

    ``ignore`` names are left out wherever they are; ``skip`` paths (relative to ``src``)
    only where they are.
    """
    names = shutil.ignore_patterns(*ignore)
    skipped = {os.path.join(src, rel) for rel in skip}

    def left_out(folder: str, entries: list[str]) -> set[str]:
        here = {e for e in entries if os.path.join(folder, e) in skipped}
        return set(names(folder, entries)) | here

    shutil.copytree(src, dest, symlinks=True, ignore=left_out, dirs_exist_ok=False)


def write_below(base: Path, rel: str, text: str, mode: int) -> None:
    """Write ``text`` to ``rel`` below ``base`` (a tree root made), following no symlink.

    Every folder is opened relative to the one above it with ``O_NOFOLLOW``, and the file
    too: a link anywhere on the way (or at the file) stops with ``BoundaryError``.
    """
    try:
        top = os.open(base, _DIR_FLAGS)
    except OSError as exc:
        raise BoundaryError(f"{base} is not a folder root made: {exc.strerror}") from exc
    try:
        opened = _open_under(top, rel)
        if opened is None:
            raise BoundaryError(f"{base}/{rel}: a folder on the way is missing or a link")
        parent, leaf = opened
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(leaf, flags, mode, dir_fd=parent)
            except OSError as exc:
                raise BoundaryError(f"{base}/{rel} cannot be written: {exc.strerror}") from exc
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        finally:
            os.close(parent)
    finally:
        os.close(top)


def hand_over(path: Path, uid: int, gid: int) -> None:
    """Give a tree to ``uid`` before any code of that uid runs, following no symlink.

    A file with another name (a hard link to the venv template's, ``venvs.link_tree``)
    stays root's: giving it away would give every other name of it too, in other checks'
    HOMEs and in the template later runs use. Such a file must be read-only to all but
    root, or the run stops (a shared file somebody else could write is a channel).
    """
    top = os.open(path, _DIR_FLAGS)
    try:
        os.chown(top, uid, gid)
        for _dir, dirs, files, dfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in (*dirs, *files):
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                    if st.st_uid != 0 or st.st_mode & 0o022:
                        raise BoundaryError(
                            f"{path}: {_dir}/{name} is shared with another name and "
                            "writable by others than root: it cannot be handed over"
                        )
                    continue
                os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(top)


@contextmanager
def _holding(base: Path, rel: str) -> Iterator[tuple[int, str] | None]:
    """Hold open the folder holding ``rel`` below ``base``, with ``rel``'s last name.

    None when ``base`` or a folder on the way cannot be opened without following a link.
    """
    try:
        top = os.open(base, _DIR_FLAGS)
    except OSError:
        yield None
        return
    try:
        opened = _open_under(top, rel)
    finally:
        os.close(top)
    if opened is None:
        yield None
        return
    parent, leaf = opened
    try:
        yield parent, leaf
    finally:
        os.close(parent)


def _open_under(top: int, rel: str) -> tuple[int, str] | None:
    """Open the folder holding ``rel`` below ``top`` without following symlinks."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a plain relative path: {rel!r}")
    fd = os.dup(top)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


def _print(name: str, dfd: int) -> str | None:
    """Return one entry's fingerprint (size, mode, sha256 of its first MiB or link text)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    digest = hashlib.sha256()
    if stat.S_ISLNK(st.st_mode):
        try:
            digest.update(os.fsencode(os.readlink(name, dir_fd=dfd)))
        except OSError:
            return None
    elif stat.S_ISREG(st.st_mode):
        data = _read_regular(name, dfd, _READ_CAP)
        if data is None:
            return None  # swapped between the stat and the open
        digest.update(data)
    return f"{st.st_size}:{st.st_mode}:{digest.hexdigest()}"


def fingerprints(
    base: Path, rels: Iterable[str], limit: int = 2_000, depth: int | None = None
) -> dict[str, str]:
    """Fingerprint every entry at or below each ``rel`` of ``base``, following no symlink.

    Keys are ``rel`` paths joined with ``/``. Missing paths are simply absent; a folder
    is walked through descriptors (``os.fwalk``), its files and links fingerprinted, no
    deeper than ``depth`` folders below ``rel`` when given, at most ``limit`` of them.
    """
    return walk_prints(base, rels, limit, depth)[0]


def walk_prints(
    base: Path, rels: Iterable[str], limit: int, depth: int | None = None
) -> tuple[dict[str, str], bool]:
    """Return ``fingerprints`` and whether the walk stopped at ``limit`` with more to see."""
    prints: dict[str, str] = {}
    try:
        top = os.open(base, _DIR_FLAGS)
    except OSError:
        return prints, False
    try:
        for rel in rels:
            opened = _open_under(top, rel)
            if opened is None:
                continue
            parent, leaf = opened
            try:
                try:
                    st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    if (fp := _print(leaf, parent)) is not None:
                        if len(prints) >= limit:
                            return prints, True
                        prints[rel] = fp
                    continue
                walk = os.fwalk(leaf, dir_fd=parent, follow_symlinks=False)
                for dirpath, dirs, files, dfd in walk:
                    below = dirpath.removeprefix(leaf).strip("/")
                    if depth is not None and below and below.count("/") + 1 >= depth:
                        dirs[:] = [d for d in dirs if _is_link(d, dfd)]  # go no deeper
                    # A symlink to a folder is listed in dirs, never entered: print it.
                    for name in [*files, *(d for d in dirs if _is_link(d, dfd))]:
                        if len(prints) >= limit:
                            return prints, True
                        if (fp := _print(name, dfd)) is not None:
                            where = f"{rel}/{dirpath.removeprefix(leaf).strip('/')}".rstrip("/")
                            prints[f"{where}/{name}"] = fp
            finally:
                os.close(parent)
    finally:
        os.close(top)
    return prints, False


def matching(base: Path, rel: str, patterns: Iterable[str]) -> dict[str, str]:
    """Fingerprint the entries below ``rel`` of ``base`` that ``patterns`` name, uncapped.

    A pattern is matched folder by folder (``python*/site-packages/*.pth``: a ``*`` never
    spans a ``/``). Every folder on the way is listed in full and only the names that
    match are fingerprinted, so no number of other entries beside them can crowd them
    out. No symlink is followed: one where a folder of a pattern is (a link named
    ``python3.12``) is fingerprinted as itself, as is ``rel`` when it is not a folder.
    """
    prints: dict[str, str] = {}
    wanted = [[p for p in pattern.split("/") if p] for pattern in patterns]
    with _holding(base, rel) as opened:
        if opened is None:
            return prints
        parent, leaf = opened
        try:
            fd = os.open(leaf, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            if (fp := _print(leaf, parent)) is not None:
                prints[rel] = fp  # a link or a file where the folder belongs
            return prints
        _match_in(fd, rel.strip("/"), [w for w in wanted if w], prints)
    return prints


def _match_in(fd: int, where: str, wanted: list[list[str]], prints: dict[str, str]) -> None:
    """Fingerprint what ``wanted`` (pattern parts below this folder) names in ``fd``; close it."""
    try:
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            return
        for name in names:
            alive = [parts for parts in wanted if fnmatch.fnmatchcase(name, parts[0])]
            if not alive:
                continue
            printed = any(len(parts) == 1 for parts in alive) or _is_link(name, fd)
            if printed and (fp := _print(name, fd)) is not None:
                prints[f"{where}/{name}"] = fp
            deeper = [parts[1:] for parts in alive if len(parts) > 1]
            if not deeper:
                continue
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # not a folder (or a link, printed above): nothing below it
            _match_in(sub, f"{where}/{name}", deeper, prints)
    finally:
        os.close(fd)


def folders_holding(
    base: Path, rel: str, name: str, depth: int, budget: int
) -> tuple[list[str], int]:
    """Return the folders at most ``depth`` below ``rel`` holding an entry ``name``.

    Breadth first, each folder opened from ``base`` component by component with
    ``O_NOFOLLOW`` (no link is entered), at most ``budget`` folders listed. Returns the
    paths found and how many folders were left unlisted for the budget (0: complete).
    """
    found: list[str] = []
    try:
        top = os.open(base, _DIR_FLAGS)
    except OSError:
        return found, 0
    queue = deque([(rel.strip("/"), 0)])
    listed = 0
    try:
        while queue and listed < budget:
            where, level = queue.popleft()
            fd = _open_dir(top, where)
            if fd is None:
                continue
            listed += 1
            try:
                with os.scandir(fd) as entries:
                    folders = []
                    for entry in entries:
                        if entry.name == name:
                            found.append(where)
                        if level < depth and entry.is_dir(follow_symlinks=False):
                            folders.append(entry.name)
            except OSError:
                continue
            finally:
                os.close(fd)
            queue.extend((f"{where}/{sub}".lstrip("/"), level + 1) for sub in sorted(folders))
    finally:
        os.close(top)
    return found, len(queue)


def _open_dir(top: int, rel: str) -> int | None:
    """Open the folder ``rel`` below ``top`` without following a link, or None."""
    if not rel:
        return os.dup(top)
    opened = _open_under(top, rel)
    if opened is None:
        return None
    parent, leaf = opened
    try:
        return os.open(leaf, _DIR_FLAGS, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)


def read_below(base: Path, rel: str, cap: int) -> bytes | None:
    """Return up to ``cap`` bytes of the regular file ``rel`` below ``base``, or None.

    Every component is opened relative to its folder with ``O_NOFOLLOW``: a link on the
    way, or a file that is not regular (a fifo, a device), gives None and is never read.
    """
    with _holding(base, rel) as opened:
        if opened is None:
            return None
        parent, leaf = opened
        return _read_regular(leaf, parent, cap)


@dataclass(frozen=True)
class FileRead:
    """A file root read below a sandbox-writable folder, following no link.

    A regular file of one name: ``data`` is its first bytes (up to the cap) and ``size``
    its whole size. Anything else (a symbolic link, a fifo, a folder, a hard link, a link
    on the way): ``data`` is empty and ``not_regular`` says what stood there, never read.
    ``stamp`` tells a file left alone from one written since (device, inode, size, times).
    """

    data: bytes = b""
    size: int = 0
    stamp: tuple[int, ...] = ()
    not_regular: str = ""


def read_file_below(base: Path, rel: str, cap: int) -> FileRead | None:
    """Return the file ``rel`` below ``base`` as ``FileRead`` says, or None if absent.

    Every component is opened relative to its folder with ``O_NOFOLLOW``; the file with
    ``O_NONBLOCK`` (a fifo never blocks) and read only when ``fstat`` says it is regular
    with no other name, at most ``cap`` bytes of it.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a plain relative path: {rel!r}")
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as exc:
        raise BoundaryError(f"{base} is not a folder root made: {exc.strerror}") from exc
    try:
        for n, part in enumerate(parts[:-1]):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError:
                where = "/".join(parts[: n + 1])
                return FileRead(not_regular=f"{where} is {_what(part, fd)}, not a folder")
            os.close(fd)
            fd = nxt
        try:
            file = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError:
            return FileRead(not_regular=_what(parts[-1], fd))
        try:
            st = os.fstat(file)
            if not stat.S_ISREG(st.st_mode):
                return FileRead(not_regular=_kind(st.st_mode))
            if st.st_nlink > 1:
                return FileRead(not_regular=f"a file with {st.st_nlink - 1} other name(s)")
            chunks: list[bytes] = []
            left = cap
            while left > 0 and (chunk := os.read(file, min(left, _READ_CAP))):
                chunks.append(chunk)
                left -= len(chunk)
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            return FileRead(b"".join(chunks), st.st_size, stamp)
        finally:
            os.close(file)
    finally:
        os.close(fd)


def _what(name: str, dfd: int) -> str:
    """Return what ``name`` in ``dfd`` is, not following it (for a path root refused)."""
    try:
        return _kind(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a fifo"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
             (stat.S_ISREG, "a regular file"))  # fmt: skip
    return next((said for test, said in kinds if test(mode)), "a device")


def _read_regular(name: str, dfd: int, cap: int) -> bytes | None:
    """Return up to ``cap`` bytes of ``name`` in ``dfd`` if it is a regular file, not a link."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, cap)
    finally:
        os.close(fd)


def _is_link(name: str, dfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return False

"""Take in a sandbox bundle as untrusted input: the artifact zip, then what it holds.

The bundle comes back from the runner as the ``cujo-reports`` artifact, and anything that
held the runner's token could have uploaded it (docs/design.md section 1). ``unpack_bundle``
checks each zip entry before a byte is written: a plain relative name (no absolute path,
``..``, drive letter, backslash, control character or duplicate), a regular file (the Unix
mode in the external attributes says so; a symbolic link or any other kind is refused),
not encrypted, stored or deflated, and within the caps on the number of entries, each
file's size and the total, as declared and as actually inflated. Files are written into a
staging folder beside ``dest`` and moved there only when every entry passed, so a refused
archive leaves nothing behind.

``open_bundle`` then hands the folder to the bundle reader (``cujo_action/evidence/
reader.py``: the manifest and its hashes, the plan, the reports bound to the run, or the
run's stated failure, capped file by file and in total). Whatever the bundle holds, the
answer is a ``Bundle`` of validated models or a ``BundleError`` that says why; the caller
turns the error into an ``error`` run, never ``clean``. File I/O only; no network.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Final

from cujo_action.evidence.reader import MAX_BUNDLE_BYTES, Bundle, BundleError, MiB, read_bundle

MAX_FILES: Final = 64
# The bundle's total as the archive inflates: the reader's, as its files are read.
MAX_TOTAL: Final = MAX_BUNDLE_BYTES
MAX_FILE: Final = 8 * MiB

_CHUNK: Final = 64 * 1024
_ENCRYPTED: Final = 0x1  # general purpose flag bit 0: traditional PKWARE encryption
_STRONG_ENCRYPTION: Final = 0x40  # bit 6
_METHODS: Final = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What zipfile and zlib raise on an archive they cannot read.
_UNREADABLE = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    OverflowError,
)


def _refused(entry: str | None, reason: str) -> BundleError:
    """Return the error for an archive refused at ``entry`` (or as a whole)."""
    message = f"artifact entry {entry!r}: {reason}" if entry else f"artifact: {reason}"
    return BundleError(message, entry=entry)


def _check_name(name: str) -> str:
    """Return the entry's path (without a directory's trailing slash) or raise."""
    if not name:
        raise _refused(name, "has an empty name")
    if _CONTROL.search(name):
        raise _refused(name, "has a control character in its name")
    if "\\" in name:
        raise _refused(name, "has a backslash in its name")
    if name.startswith("/"):
        raise _refused(name, "is an absolute path")
    if _DRIVE.match(name):
        raise _refused(name, "starts with a drive letter")
    path = name[:-1] if name.endswith("/") else name
    parts = path.split("/")
    if ".." in parts:
        raise _refused(name, "climbs out of the folder with '..'")
    if any(p in ("", ".") for p in parts):
        raise _refused(name, "has an empty or '.' path segment")
    if any(len(p.encode()) > 255 for p in parts) or len(path.encode()) > 1024:
        raise _refused(name, "has a name too long to be a report")
    return path


def _check_kind(info: zipfile.ZipInfo) -> bool:
    """Return True for a directory entry, False for a regular file; refuse anything else."""
    name = info.filename
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    # Read the Unix type whatever system the archive claims to come from: a link marked
    # as made on another system is still extracted as a link by some tools.
    if stat.S_ISLNK(mode):
        raise _refused(name, "is a symbolic link")
    is_dir = name.endswith("/")
    if is_dir:
        if kind not in (0, stat.S_IFDIR):
            raise _refused(name, f"is a directory name with file type {oct(kind)}")
        if info.file_size:
            raise _refused(name, "is a directory that holds data")
        return True
    if kind == stat.S_IFDIR or info.external_attr & 0x10:  # MS-DOS directory bit
        raise _refused(name, "is a directory without a trailing '/'")
    if kind not in (0, stat.S_IFREG):  # 0: no Unix mode recorded, a plain file
        raise _refused(name, f"is not a regular file (type {oct(kind)})")
    return False


def _plan(
    zf: zipfile.ZipFile, *, max_files: int, max_total: int, max_file: int
) -> list[tuple[zipfile.ZipInfo, str, bool]]:
    """Check every entry before anything is written; return (info, path, is_dir)."""
    infos = zf.infolist()
    if len(infos) > max_files:
        raise _refused(None, f"holds {len(infos)} entries, over the cap of {max_files}")
    seen: dict[str, bool] = {}
    planned = []
    declared_total = 0
    for info in infos:
        if info.orig_filename != info.filename and "\x00" in info.orig_filename:
            raise _refused(info.filename, "has a NUL byte in its name")
        path = _check_name(info.filename)
        if path in seen:
            raise _refused(info.filename, "is a duplicate name")
        if info.flag_bits & (_ENCRYPTED | _STRONG_ENCRYPTION):
            raise _refused(info.filename, "is encrypted")
        is_dir = _check_kind(info)
        if not is_dir and info.compress_type not in _METHODS:
            raise _refused(
                info.filename, f"uses compression method {info.compress_type}, not stored/deflated"
            )
        if info.file_size > max_file:
            raise _refused(
                info.filename, f"declares {info.file_size} bytes, over the cap of {max_file}"
            )
        declared_total += info.file_size
        if declared_total > max_total:
            raise _refused(
                info.filename, f"takes the declared total over the cap of {max_total} bytes"
            )
        seen[path] = is_dir
        planned.append((info, path, is_dir))
    # A file may not also be a folder of another entry ("a" and "a/b").
    for path in seen:
        parent = PurePosixPath(path).parent
        while str(parent) != ".":
            if seen.get(str(parent)) is False:
                raise _refused(path, f"lies inside {str(parent)!r}, which is a file")
            parent = parent.parent
    return planned


def _extract(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, *, budget: int, max_file: int
) -> int:
    """Write one regular file, counting the bytes it inflates to; return how many."""
    cap = min(max_file, info.file_size, budget)
    written = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    # O_EXCL and O_NOFOLLOW: never write through anything already there.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            if written > cap:
                raise _refused(
                    info.filename,
                    f"inflates past {cap} bytes (declared {info.file_size}, "
                    f"file cap {max_file}, {budget} left of the total)",
                )
            out.write(chunk)
    if written != info.file_size:
        raise _refused(
            info.filename, f"inflates to {written} bytes, not the declared {info.file_size}"
        )
    return written


def unpack_bundle(
    zip_path: Path,
    dest: Path,
    *,
    max_files: int = MAX_FILES,
    max_total: int = MAX_TOTAL,
    max_file: int = MAX_FILE,
) -> Path:
    """Extract a ``cujo-reports`` archive into ``dest`` (absent or empty) and return it.

    Raise ``BundleError`` naming the entry and the reason on anything unsafe; then
    nothing is left in ``dest``.
    """
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise _refused(None, f"destination {dest} is not an empty folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.unpacking-", dir=dest.parent))
    try:
        try:
            with zipfile.ZipFile(zip_path) as zf:
                planned = _plan(zf, max_files=max_files, max_total=max_total, max_file=max_file)
                total = 0
                for info, path, is_dir in planned:
                    target = staging.joinpath(*path.split("/"))
                    if is_dir:
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    try:
                        total += _extract(
                            zf, info, target, budget=max_total - total, max_file=max_file
                        )
                    except BundleError:
                        raise
                    except _UNREADABLE as exc:
                        raise _refused(
                            info.filename,
                            f"cannot be inflated to its declared {info.file_size} bytes: {exc}",
                        ) from None
        except BundleError:
            raise
        except _UNREADABLE as exc:
            raise _refused(None, f"is not a readable zip archive: {exc}") from None
        except OSError as exc:
            raise _refused(None, f"cannot be written out: {exc.strerror or exc}") from None
        if dest.exists():
            dest.rmdir()  # checked empty above
        staging.replace(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def open_bundle(
    archive: Path, dest: Path, *, run_id: str, head_sha: str | None, base_sha: str | None
) -> Bundle:
    """Unpack a ``cujo-reports`` archive into ``dest`` and validate it for ``run_id``."""
    return read_bundle(
        unpack_bundle(archive, dest), run_id=run_id, head_sha=head_sha, base_sha=base_sha
    )

"""One virtual environment per run, made by root before any pull-request code runs.

``python -m venv`` spends seconds installing pip into every environment it makes; a run
made one in each check that installs. Instead ``arm`` starts one template while the proxy
starts, in a folder only root writes, and lays it out in each such check's HOME while it
stages them (``place_venvs``: hard links to the template's read-only files, so it costs
milliseconds), before the HOME is handed to the check's uid and before any pull-request
code runs: after that root never reads or writes a copy.

A harness without root makes its template the same way, for its run only (in the run's
folder, which no sandbox mounts), and each check gets a copy rather than links: its
files are the harness's own uid's, which is also the uid every check's commands run as,
so a shared file would be one check's to change under another (``_shareable``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cujo_action.sandbox.boundary import fresh_dir, open_no_follow

_TIMEOUT = 300.0
# Where root keeps the templates it made, one per interpreter, for later runs on this
# machine (a hosted runner starts empty: there every run makes its own).
CACHE_ENV = "CUJO_VENV_CACHE"
DEFAULT_CACHE = "/var/cache/cujo/venv-templates"
_MADE_AT = "made-at"  # the path the template was made at, which its scripts name


class TemplateStart:
    """``python -m venv`` started in a fresh root-owned folder; ``result`` waits for it."""

    def __init__(self, python: str, folder: Path, *, keep_as: Path | None = None) -> None:
        """Make ``folder`` (it must not exist) and start the venv in ``folder/venv``.

        With ``keep_as``, a template made whole is kept there for later runs (``kept``).
        """
        fresh_dir(folder, 0o755)
        self.folder, self.keep_as = folder, keep_as
        self.path = folder / "venv"
        self.made_at = str(self.path)
        self.stderr_path = folder / "stderr"
        with open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                # `python -m venv`, in a third of its time (fast_venv.py).
                [sys.executable, "-I", "-m", "cujo_action.arm.fast_venv", python, str(self.path)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                # No configuration of the machine's: ensurepip installs its own wheels.
                env={
                    "PATH": "/usr/local/bin:/usr/bin:/bin",
                    "LANG": "C.UTF-8",
                    "HOME": str(folder),
                    "PIP_CONFIG_FILE": os.devnull,
                },
                cwd=folder,
                umask=0o022,  # every check's uid reads it
            )

    def result(self, timeout: float = _TIMEOUT) -> str:
        """Return the template's path once made, or '' when it could not be (checks then
        make their own)."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.cancel()
            return ""
        if code != 0:
            self.discard()
            return ""
        if self.keep_as is not None:
            self._keep(self.keep_as)
        return str(self.path)

    def _keep(self, place: Path) -> None:
        """Leave the template where a later run finds it, whole or not at all."""
        (self.folder / _MADE_AT).write_text(self.made_at)
        try:
            os.rename(self.folder, place)  # atomic; a name already there stays as it is
        except OSError:
            return
        self.folder, self.path = place, place / "venv"

    def discard(self) -> None:
        """Remove a template made to be kept that was not (another run kept one first)."""
        if self.keep_as is not None and self.folder != self.keep_as:
            shutil.rmtree(self.folder, ignore_errors=True)

    def cancel(self) -> None:
        """Stop making the template (and leave nothing half made to be kept)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.discard()


class KeptTemplate:
    """A template an earlier run made and kept (``template_for``); ready at once."""

    def __init__(self, folder: Path, made_at: str) -> None:
        self.path, self.made_at = folder / "venv", made_at

    def result(self, timeout: float = _TIMEOUT) -> str:
        """Return the template's path."""
        return str(self.path)

    def discard(self) -> None:
        """Nothing to remove: it stays kept."""

    def cancel(self) -> None:
        """Nothing runs."""


def _key(python: str) -> str:
    """Name an interpreter as it is on disk now: another build is another template."""
    real = Path(python).resolve()
    st = real.stat()
    return hashlib.sha256(
        f"{real}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    ).hexdigest()[:24]


def _root_only(path: Path) -> bool:
    """Return whether ``path`` is a real folder of root's that nobody else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def _kept_in(parent: Path) -> bool:
    """Return whether nobody but root can move or replace what root keeps in ``parent``
    (a sticky folder such as /tmp lets others write, never rename root's entries)."""
    try:
        st = os.stat(parent)
    except OSError:
        return False
    return st.st_uid == 0 and (not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX))


def template_for(python: str, run_dir: Path) -> TemplateStart | KeptTemplate:
    """Return the kept template for ``python``, or start making one (kept when whole).

    A template is kept only in a folder of root's nobody else may write (every folder
    from it to ``/``), outside any run: no pull-request command ever ran as a user that
    could change it. Anything else found there is not used.
    """
    cache = Path(os.environ.get(CACHE_ENV, DEFAULT_CACHE))
    try:
        key = _key(python)
        cache.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError:
        return TemplateStart(python, run_dir / "venv-template")
    trusted = _root_only(cache) and all(_kept_in(p) for p in cache.parents)
    kept = cache / key
    if trusted and _root_only(kept) and _root_only(kept / "venv"):
        try:
            made_at = (kept / _MADE_AT).read_text()
        except OSError:
            made_at = ""
        if made_at:
            return KeptTemplate(kept, made_at)
    if not trusted:
        return TemplateStart(python, run_dir / "venv-template")
    # Made beside its final name, then renamed into place once whole.
    return TemplateStart(python, cache / f".{key}.{secrets.token_hex(6)}", keep_as=kept)


def place_venvs(template: str, copies: dict[Path, str], *, made_at: str | None = None) -> None:
    """Lay the template out at each fresh ``dest`` (in a tree root made, before any
    pull-request code ran) and point its scripts at ``inside``, the path its commands see.

    Files are hard links to the template's (``link_tree``): a venv is ~1,700 files and
    copying them cost a run more than a second; a link costs nothing, and the template's
    files are root's and read-only to everybody else, so no check can change them for
    another check or a later run (``boundary.hand_over`` leaves them root's). What names
    the venv's own path (its scripts, ``pyvenv.cfg``) is written anew in place of its
    link, never through it. Each ``dest`` is made here, fresh: a name already there (a
    link, say) stops with ``BoundaryError`` before anything is laid out.
    """
    for dest in copies:
        fresh_dir(dest, 0o755)
    # At once: each is ~200 mkdirs and ~1,500 links, mostly waiting on the file system.
    with ThreadPoolExecutor(len(copies) or 1) as pool:
        for done in [pool.submit(link_tree, Path(template), dest) for dest in copies]:
            done.result()
    named = (made_at or template).encode()
    for dest, inside in copies.items():
        # What names the venv's own path: its activate scripts, pip's launchers, the config.
        for path in [*sorted((dest / "bin").iterdir()), dest / "pyvenv.cfg"]:
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if named in data:
                _replace(path, data.replace(named, inside.encode()))


def links_into(template: str, dest: Path) -> bool:
    """Return whether ``place_venvs`` would lay ``template`` out below ``dest`` as links
    (root's template, on ``dest``'s file system) rather than as a copy of every file.

    A check that runs on the install's tree gets the install's venv through the spool
    (``_receive_install``), keeping only the template files the install still shares:
    a copy shares none, so a copy laid out for it first would only be deleted.
    """
    try:
        same_disk = os.lstat(template).st_dev == os.stat(dest).st_dev
    except OSError:
        return False
    return same_disk and _root_only(Path(template))


def _replace(path: Path, data: bytes) -> None:
    """Put a new file with ``data`` at ``path`` (its mode kept): the old name may be a
    link to the template's file, which must stay as it is."""
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    fresh = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = open_no_follow(fresh, "create", mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(fresh, mode)
    os.replace(fresh, path)


def _shareable(st: os.stat_result) -> bool:
    """Return whether a template file may be shared as a link: root's, and nobody else
    may write it (a file another user could change is copied instead)."""
    return st.st_uid == 0 and not st.st_mode & 0o022 and stat.S_ISREG(st.st_mode)


def link_tree(template: Path, dest: Path) -> None:
    """Rebuild ``template``'s tree in the empty folder ``dest``: folders made anew (modes
    kept), symlinks made anew with the same text, regular files hard-linked when root's
    and read-only to others (``_shareable``), else copied. No symlink is followed on
    either side (every step through directory descriptors). A template on another file
    system than ``dest`` is copied whole.
    """
    src_top = open_no_follow(template, "dir")
    try:
        dest_top = open_no_follow(dest, "dir")
        try:
            for rel, dirs, files, src in os.fwalk(".", dir_fd=src_top, follow_symlinks=False):
                out = open_no_follow(rel, "dir", dir_fd=dest_top)
                try:
                    for name in (*dirs, *files):  # fwalk lists links to folders as folders
                        _lay(name, src, out)
                finally:
                    os.close(out)
        finally:
            os.close(dest_top)
    finally:
        os.close(src_top)


def _lay(name: str, src: int, out: int) -> None:
    st = os.stat(name, dir_fd=src, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        os.mkdir(name, 0o700, dir_fd=out)
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=out, follow_symlinks=False)
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=out)
    elif not stat.S_ISREG(st.st_mode):
        raise OSError(f"the venv template holds {name!r}, neither file, folder nor link")
    else:
        if _shareable(st):
            try:
                os.link(name, name, src_dir_fd=src, dst_dir_fd=out, follow_symlinks=False)
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
        _copy(name, src, out, st)


def _copy(name: str, src: int, out: int, st: os.stat_result) -> None:
    """Copy ``name`` with its mode and its times: a copy dated now would make every
    byte-compiled module beside it stale (a ``.pyc`` names its source's mtime), and each
    check would compile pip and setuptools again on every start."""
    reading = open_no_follow(name, "read", dir_fd=src)
    with (
        os.fdopen(reading, "rb") as source,
        os.fdopen(open_no_follow(name, "create", dir_fd=out), "wb") as copy,
    ):
        shutil.copyfileobj(source, copy)
        copy.flush()  # every byte written before the times are set
        os.fchmod(copy.fileno(), stat.S_IMODE(st.st_mode))
        os.utime(copy.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))

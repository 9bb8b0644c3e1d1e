"""One virtual environment per run, made by root before any pull-request code runs.

``python -m venv`` spends seconds installing pip into every environment it makes; a run
made one in each check that installs. Instead ``arm`` starts one template while the proxy
starts, in a folder only root writes, and copies it into each such check's HOME while it
stages them (``place_venvs``), before the HOME is handed to the check's uid and before any
pull-request code runs: after that root never reads or writes a copy.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cujo_action.boundary import fresh_dir

_TIMEOUT = 300.0


class TemplateStart:
    """``python -m venv`` started in a fresh root-owned folder; ``result`` waits for it."""

    def __init__(self, python: str, folder: Path) -> None:
        """Make ``folder`` (it must not exist) and start the venv in ``folder/venv``."""
        fresh_dir(folder, 0o755)
        self.path = folder / "venv"
        self.stderr_path = folder.parent / "venv-template.stderr"
        with open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                [python, "-m", "venv", str(self.path)],
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
        return str(self.path) if code == 0 else ""

    def cancel(self) -> None:
        """Stop making the template."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def place_venvs(template: str, copies: dict[Path, str]) -> None:
    """Copy the template to each fresh ``dest`` (in a tree root made, before any pull-request
    code ran) and point its scripts at ``inside``, the path its commands will see it at.

    The copies run at once (``cp -a`` keeps the links as links); a failure raises OSError.
    Each ``dest`` is made here, fresh: a name already there (a link, say) stops with
    ``BoundaryError`` before anything is copied.
    """
    for dest in copies:
        fresh_dir(dest, 0o755)
    running = [
        (dest, subprocess.Popen(["cp", "-a", "--", f"{template}/.", f"{dest}/"],
                                stdin=subprocess.DEVNULL, stderr=subprocess.PIPE))
        for dest in copies
    ]  # fmt: skip
    failed = []
    for dest, proc in running:
        _, err = proc.communicate(timeout=_TIMEOUT)
        if proc.returncode != 0:
            failed.append(f"{dest}: {err.decode(errors='replace').strip()[-300:]}")
    if failed:
        raise OSError(f"copying the venv template failed: {'; '.join(failed)}")
    made_at = template.encode()
    for dest, inside in copies.items():
        # What names the venv's own path: its activate scripts, pip's launchers, the config.
        for path in [*sorted((dest / "bin").iterdir()), dest / "pyvenv.cfg"]:
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if made_at in data:
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data.replace(made_at, inside.encode()))

"""Make the run's venv template in a third of the time ``python -m venv`` takes.

``python -m venv`` spends most of its three seconds in ensurepip, which starts pip to
install pip. Here the venv is made without pip (``--without-pip``: milliseconds), then
the venv's own interpreter installs the same wheels ensurepip would have (pip, and before
Python 3.12 setuptools, from the distribution's wheel folder or ensurepip's bundle) with
pypa's ``installer`` and byte-compiles them, as pip would, on every core. The result is
the venv ``python -m venv`` makes, file for file. Anything unexpected (no wheel, two
candidates, a failed step) falls back to ``python -m venv``: slower, never different.

Run as ``python -I -m cujo_action.arm.fast_venv PYTHON DEST`` by root, in a folder only root
writes, before any pull-request code runs (``venvs.TemplateStart``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import installer

# The script the venv's interpreter runs: it imports only ``installer``, from here.
SEED = Path(__file__).with_name("_seed_wheels.py")
_TIMEOUT = 300.0


def installer_path() -> str:
    """Return the folder ``installer`` is imported from (pure Python, any 3.x reads it)."""
    return str(Path(installer.__file__).resolve().parent.parent)


def fast(python: str, dest: Path) -> None:
    """Make the venv without pip, then seed it; raise on any failure."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=_TIMEOUT)
    # By the name the venv gives its interpreter after the one it was made with, as
    # ensurepip runs: pip's launchers name it in their first line.
    named = dest / "bin" / Path(python).name
    seeding = named if named.exists() else dest / "bin" / "python"
    subprocess.run([str(seeding), "-I", str(SEED), installer_path()], check=True, timeout=_TIMEOUT)
    # As `python -m venv` would have written it.
    config = dest / "pyvenv.cfg"
    config.write_text(config.read_text().replace(" -m venv --without-pip ", " -m venv "))


def make(python: str, dest: Path) -> int:
    """Make a venv at ``dest`` with ``python``: fast, or as ``python -m venv`` does."""
    try:
        fast(python, dest)
        return 0
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"cujo: the fast venv failed ({exc}); making it with python -m venv",
              file=sys.stderr)  # fmt: skip
    shutil.rmtree(dest, ignore_errors=True)
    usual = subprocess.run([python, "-m", "venv", str(dest)], check=False, timeout=_TIMEOUT)
    return usual.returncode


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m cujo_action.arm.fast_venv PYTHON DEST", file=sys.stderr)
        return 2
    os.umask(0o022)  # every check's uid reads it
    return make(argv[0], Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

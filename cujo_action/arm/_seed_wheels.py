"""Seed the venv whose interpreter runs this with what ensurepip would install in it.

Run by ``fast_venv.fast`` as ``VENV/bin/python -I _seed_wheels.py INSTALLER_DIR``: only
``installer`` (pypa's, pure Python) is imported from the harness's install. The wheels are
the ones ``ensurepip`` uses: the distribution's wheel folder (``WHEEL_PKG_DIR``, Debian's
``/usr/share/python-wheels``) or ensurepip's own bundle, exactly one of each project;
anything else exits non-zero and ``fast_venv`` makes the venv with ``python -m venv``.
"""

from __future__ import annotations

import compileall
import sys
import sysconfig
from pathlib import Path


def wheels() -> list[Path]:
    """Return the wheels ensurepip would install for this interpreter."""
    import ensurepip  # noqa: PLC0415  (only to find its bundle)

    projects = ["pip"] if sys.version_info >= (3, 12) else ["pip", "setuptools"]
    folders = [
        sysconfig.get_config_var("WHEEL_PKG_DIR"),
        "/usr/share/python-wheels",
        str(Path(ensurepip.__file__).parent / "_bundled"),
    ]
    for folder in folders:
        if not folder or not Path(folder).is_dir():
            continue
        found = [sorted(Path(folder).glob(f"{project}-*.whl")) for project in projects]
        if all(len(one) == 1 for one in found):
            return [one[0] for one in found]
        if any(found):
            break  # the folder ensurepip would use, but not one wheel of each: not guessed
    raise SystemExit(f"no folder holds exactly one wheel of each of {projects}")


def main(installer_dir: str) -> None:
    sys.path.insert(0, installer_dir)
    from installer import install  # noqa: PLC0415
    from installer.destinations import SchemeDictionaryDestination  # noqa: PLC0415
    from installer.sources import WheelFile  # noqa: PLC0415

    paths = sysconfig.get_paths()
    destination = SchemeDictionaryDestination(
        {
            "purelib": paths["purelib"],
            "platlib": paths["platlib"],
            "headers": paths["include"],
            "scripts": paths["scripts"],
            "data": paths["data"],
        },
        interpreter=sys.executable,
        script_kind="posix",
    )
    for wheel in wheels():
        with WheelFile.open(wheel) as source:
            # As pip marks what it was asked to install.
            install(source, destination, {"INSTALLER": b"pip\n", "REQUESTED": b""})
    # Byte-compiled as pip does it, on every core.
    for lib in dict.fromkeys((paths["purelib"], paths["platlib"])):
        if not compileall.compile_dir(lib, quiet=1, workers=0):
            raise SystemExit(f"byte-compiling {lib} failed")


if __name__ == "__main__":
    main(sys.argv[1])

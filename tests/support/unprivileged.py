"""Run Cujo as an ordinary user from a root test session: an account, a harness it can run.

The test session is root (CI's). The account is ``nobody`` (uid 65534), with a HOME in a
temporary folder it owns. The harness is installed as action.yml installs it (a wheel,
from a clean copy of this checkout) into a venv made from the system's Python of the
same version (the session's own interpreter may sit in root's home, which nobody can
enter); its dependencies are the test environment's site-packages, added as a plain
path. ``why_not`` says what keeps this machine from it, for a skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from repo_paths import TOP

from cujo_action.arm.host import read_isolation
from cujo_action.arm.localisolation import local_isolation

UID = GID = 65534
PATH = "/usr/local/bin:/usr/bin:/bin"
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def system_python() -> str | None:
    """Return a system interpreter of the session's version that anybody can run."""
    for folder in ("/usr/bin", "/usr/local/bin"):
        candidate = Path(folder, VERSION)
        if candidate.exists() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def why_not() -> str | None:
    """Return why Cujo cannot be run as an ordinary user with full isolation here."""
    if os.geteuid() != 0:
        return "the test switches to an ordinary account: run it as root (as CI does)"
    if system_python() is None:
        return f"no system {VERSION} for an ordinary user to run the harness with"
    # As the ordinary user sees it: the same kernel and tools, not root.
    found = local_isolation(replace(read_isolation(), root=False))
    if found.isolation != "full":
        return f"rootless isolation unavailable: {found.why} (fix: {found.fix})"
    return None


def owned(path: Path) -> Path:
    """Make ``path`` (a new folder) and give it to the ordinary account."""
    path.mkdir(parents=True)
    os.chown(path, UID, GID)
    return path


def give(path: Path) -> None:
    """Give everything under ``path`` to the ordinary account (no symlink followed)."""
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), UID, GID)
    os.lchown(path, UID, GID)


@dataclass(frozen=True)
class Account:
    """The ordinary account's HOME and the harness it runs."""

    root: Path  # the temporary folder everything is under (removed by ``close``)
    home: Path
    python: str  # the harness venv's interpreter

    def argv(self, *args: str) -> list[str]:
        """Return the argv that runs ``args`` as the account."""
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin") or "setpriv"
        return [setpriv, f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "--", *args]

    def cujo(self, *args: str) -> list[str]:
        """Return the argv of ``cujo ARGS`` as the account."""
        return self.argv(self.python, "-m", "app_relay", *args)

    def env(self, extra: Mapping[str, str] = {}) -> dict[str, str]:
        """Return a clean environment for the account."""
        return {"PATH": PATH, "HOME": str(self.home), "LANG": "C.UTF-8", **extra}

    def run(self, argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (already prefixed) with the account's environment."""
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            list(argv), env=self.env(), capture_output=True, text=True, check=False, **kwargs
        )

    def close(self) -> None:
        """Remove everything the account had."""
        shutil.rmtree(self.root, ignore_errors=True)


def account() -> Account:
    """Install the harness for the ordinary account and give it a HOME."""
    python = system_python()
    assert python is not None, why_not()
    root = Path(tempfile.mkdtemp(prefix="cujo-rootless-"))
    root.chmod(0o755)
    source, wheels, venv = root / "source", root / "wheels", root / "venv"
    shutil.copytree(
        TOP,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", ".cujo", "*.egg-info", "*_cache", "__pycache__"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
         str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    (wheel,) = wheels.glob("cujo-*.whl")
    purelib = venv / "lib" / VERSION / "site-packages"
    # Byte-compiled here, as action.yml's pip does: the account cannot write bytecode
    # beside root's files, so each of the dozen processes a review starts would compile
    # the harness anew (a third of a second each on a 2-core runner).
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--target", str(purelib), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    (purelib / "cujo-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    shutil.rmtree(source)
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    made = Account(root, owned(root / "home"), str(venv / "bin" / "python"))
    # The account must reach the dependencies (a checkout under root's home would not do).
    probe = made.run(made.argv(made.python, "-c", "import app_relay, cujo_action, mitmproxy"))
    assert probe.returncode == 0, f"the ordinary account cannot import the harness: {probe}"
    return made

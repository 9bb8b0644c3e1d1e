"""Ask what this machine offers the sandbox: full isolation, interpreters, bubblewrap, tools.

Full isolation needs root with ``ip``, ``nft`` and ``setpriv``, or, without root,
unprivileged user namespaces and bubblewrap 0.8 (``localisolation.py`` says which); the
venvs are made from a real interpreter the sandbox user can run; the decoy runner
worker needs one that starts in bubblewrap; the harness's own install is hidden from every command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from cujo_action.arm.actionsjob import (
    IMAGE_PATH,
    RUNNER_BIN,
    TOOL_HOMES,
    WORKER_ARGS,
    JobIdentity,
    worker_source,
)
from cujo_action.arm.context import runner_worker
from cujo_action.arm.localisolation import (
    ROOT_TOOLS,
    ROOTLESS_TOOLS,
    Readings,
    local_isolation,
)
from cujo_action.find.decoys import Decoy
from cujo_action.sandbox.jail import (
    ALWAYS_HIDDEN,
    Confinement,
    JailError,
    View,
    run_confined,
    system_tool,
)

# Run by the worker's own interpreter, isolated and without site (nothing of the machine's
# packages or environment): compile the program read on stdin, write a .pyc's bytes.
_COMPILE = (
    "import importlib.util, marshal, sys; "
    "code = compile(sys.stdin.buffer.read(), sys.argv[1], 'exec'); "
    "sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))"
)


def worker_program(python: str, source: bytes) -> bytes:
    """Return the worker's ``source`` compiled by ``python``: a .pyc's bytes (empty if it
    cannot be).

    Once per run, so that no command's pid 1 compiles it again; by the interpreter that
    runs it, whose version the bytecode must match.
    """
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", _COMPILE, f"{RUNNER_BIN}/{WORKER_ARGS[0]}"],
            input=source, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return b""
    return done.stdout if done.returncode == 0 else b""


def worker_interpreter(
    bwrap: str, uid: int | None, gid: int | None, job: JobIdentity, decoys: tuple[Decoy, ...]
) -> tuple[str, bytes]:
    """Return an interpreter the runner worker starts with in bubblewrap, and the worker's
    program compiled for it (``worker_program``); ('', b'') if none."""
    source = worker_source()
    # The system's own first: an interpreter linked to a libpython beside it (some
    # toolcache builds) cannot start from the worker's path.
    candidates = dict.fromkeys(["/usr/bin/python3", base_python(for_sandbox_user=True)])
    for python in candidates:
        if not _others_can_run(Path(python)):
            continue
        program = worker_program(python, source)
        if not program:
            continue
        view = View(bwrap, (), (), (), worker=runner_worker(python, program, job, decoys))
        try:
            outcome = run_confined(
                "exit 0", cwd=Path("/"), env={"PATH": "/usr/bin:/bin"}, timeout=30,
                confinement=Confinement(None, uid, gid, view),
            )  # fmt: skip
        except (OSError, JailError):
            continue
        if outcome.exit_code == 0:
            return python, program
    return "", b""


def isolation_unavailable() -> str | None:
    """Return why full isolation cannot be had here, or None when it can."""
    found = local_isolation(read_isolation())
    return found.why if found.isolation == "partial" else None


def _sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name.replace(".", "/")).read_text()
    except OSError:
        return None


def _bwrap_version() -> str | None:
    bwrap = system_tool("bwrap")
    if not Path(bwrap).is_absolute():
        return None
    try:
        said = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return said.strip().rpartition(" ")[2]


def read_isolation() -> Readings:
    """Read what decides this machine's isolation (``localisolation.local_isolation``)."""
    tools = {*ROOT_TOOLS, *ROOTLESS_TOOLS}
    return Readings(
        root=os.geteuid() == 0,
        unprivileged_userns_clone=_sysctl("kernel.unprivileged_userns_clone"),
        max_user_namespaces=_sysctl("user.max_user_namespaces"),
        apparmor_restrict=_sysctl("kernel.apparmor_restrict_unprivileged_userns"),
        bwrap_version=_bwrap_version(),
        tools=frozenset(t for t in tools if Path(system_tool(t)).is_absolute()),
        asked_partial=os.environ.get("CUJO_ISOLATION") == "partial",
    )


def tool_homes() -> dict[str, str]:
    """Return the image's tool variables whose folder this machine has (``TOOL_HOMES``).

    The sandbox sees the host's tree read-only, so what is here is there; a hosted runner
    has them all. Root only asks whether a path of the host exists: nothing the sandbox
    can write.
    """
    return {name: value for name, value, needs in TOOL_HOMES if Path(needs).exists()}


def tool_path() -> str:
    """Return PATH after the venv: the folders of the tools Cujo needs, then the image's.

    Cujo's folders come first, so every command resolves the tools it always has; the
    rest of a hosted runner's PATH follows in the image's order (an entry this machine
    lacks finds nothing).
    """
    dirs: list[str] = []
    for tool in ("node", "npm", "git"):
        found = shutil.which(tool)
        if found and (d := str(Path(found).parent)) not in dirs:
            dirs.append(d)
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if d not in dirs:
            dirs.append(d)
    return ":".join([*dirs, *(d for d in IMAGE_PATH if d not in dirs)])


def _others_can_run(path: Path) -> bool:
    """Return whether a user with no special rights can execute ``path``."""
    real = path.resolve()
    try:
        if not real.stat().st_mode & 0o001:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in real.parents)
    except OSError:
        return False


def base_python(*, for_sandbox_user: bool) -> str:
    """Return a real interpreter (not the harness's venv) to make the run's venvs from.

    The sandbox user runs it inside bubblewrap, so it must be reachable by anybody and
    not in a hidden folder: a Python inside root's home (pyenv) is not, the system's is.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(sys.base_prefix) / "bin" / version, Path("/usr/bin/python3")]
    for candidate in candidates:
        if not candidate.exists():
            continue
        hidden = any(
            str(candidate.resolve()).startswith(h + "/") for h in (*ALWAYS_HIDDEN, sys.prefix)
        )
        if not for_sandbox_user or (_others_can_run(candidate) and not hidden):
            return str(candidate)
    return sys.executable


def hidden_harness() -> list[str]:
    """Return the host paths of the harness's own install (hidden from every command)."""
    import cujo_action  # noqa: PLC0415

    paths = [str(Path(cujo_action.__file__).resolve().parent)]
    if sys.prefix != sys.base_prefix:  # a venv of its own: all of it
        paths.append(str(Path(sys.prefix).resolve()))
    return paths

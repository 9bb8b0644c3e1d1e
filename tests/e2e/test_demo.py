"""`make demo` on a fresh machine: its set-up (examples/demo/setup.sh) and its outcome.

The set-up runs with stand-ins on PATH for ``id`` (root or not), ``apt-get`` (records
what it is asked) and the tools whose presence is being decided; the outcome is the
demo's own closing verdict, and once for real with partial isolation.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from repo_paths import TOP

SETUP = TOP / "examples" / "demo" / "setup.sh"
ALL_TOOLS = ("git", "ip", "nft", "setpriv", "bwrap")


def stand_in(folder: Path, name: str, body: str = "exit 0") -> None:
    """Write an executable shell script ``name`` into ``folder``."""
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def setup(tmp_path: Path, *, uid: int, tools: tuple[str, ...]) -> tuple[int, str, str, list[str]]:
    """Run setup.sh as ``uid`` with only ``tools`` present; return code, out, err, apt calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    stand_in(bin_dir, "id", f"echo {uid}")
    stand_in(bin_dir, "apt-get", f'echo "$*" >> {log}')
    for tool in tools:
        stand_in(bin_dir, tool)
    done = subprocess.run(
        ["/bin/sh", str(SETUP)],
        env={"PATH": str(bin_dir), "SBIN": "", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    apt = log.read_text().splitlines() if log.exists() else []
    return done.returncode, done.stdout, done.stderr, apt


def test_as_root_the_missing_isolation_tools_are_installed_after_an_update(tmp_path: Path) -> None:
    code, out, _, apt = setup(tmp_path, uid=0, tools=("git", "ip"))
    assert code == 0
    assert apt[0] == "update -qq"
    assert apt[1].split()[-3:] == ["nftables", "util-linux", "bubblewrap"]
    assert "installing nftables util-linux bubblewrap" in out


def test_as_root_with_everything_present_nothing_is_installed(tmp_path: Path) -> None:
    code, out, err, apt = setup(tmp_path, uid=0, tools=ALL_TOOLS)
    assert (code, out, err, apt) == (0, "", "", [])


def test_not_root_says_in_one_line_how_to_get_full_isolation_and_goes_on(tmp_path: Path) -> None:
    code, out, _, apt = setup(tmp_path, uid=1000, tools=("git", "ip"))
    assert code == 0
    assert apt == []
    (line,) = out.splitlines()
    assert "partial isolation" in line
    assert "sudo apt-get install nftables util-linux bubblewrap && sudo make demo" in line


def test_not_root_with_every_tool_only_root_is_missing(tmp_path: Path) -> None:
    code, out, _, _ = setup(tmp_path, uid=1000, tools=ALL_TOOLS)
    assert code == 0
    assert out.strip().endswith("for full isolation: sudo make demo")


def test_not_root_where_user_namespaces_work_says_full_isolation_without_root(
    tmp_path: Path,
) -> None:
    code, out, _, apt = setup(tmp_path, uid=1000, tools=(*ALL_TOOLS, "unshare", "nsenter"))
    assert (code, apt) == (0, [])
    (line,) = out.splitlines()
    assert line == "make demo: not root: full isolation without root (unprivileged user namespaces)"


def test_not_root_where_the_kernel_refuses_user_namespaces_says_partial(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "unshare", "echo 'unshare: Operation not permitted' >&2; exit 1")
    stand_in(bin_dir, "nsenter")
    _, out, _, _ = setup(tmp_path, uid=1000, tools=ALL_TOOLS)
    assert "partial isolation" in out


def test_not_root_without_git_the_demo_cannot_run_and_says_what_to_install(
    tmp_path: Path,
) -> None:
    code, _, err, apt = setup(tmp_path, uid=1000, tools=("ip", "nft", "setpriv", "bwrap"))
    assert code == 1
    assert apt == []
    assert "sudo apt-get install git" in err


def run_demo() -> ModuleType:
    """Import examples/demo/run_demo.py (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("run_demo", TOP / "examples/demo/run_demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result(state: str, isolation: str, unproven: list[str] | None = None) -> dict[str, object]:
    """Return the part of a `cujo review --json` object the demo reads."""
    return {"state": state, "isolation": isolation, "unproven": unproven or []}


@pytest.mark.parametrize(
    ("benign", "exfil", "ok"),
    [
        (result("clean", "full"), result("blocked", "full"), True),
        (result("unproven", "full"), result("blocked", "full"), False),
        (result("clean", "full"), result("clean", "full"), False),
        (
            result("unproven", "partial", ["isolation: not root"]),
            result("blocked", "partial"),
            True,
        ),
        (result("unproven", "partial"), result("unproven", "partial"), False),
    ],
)
def test_the_demo_passes_on_clean_and_blocked_or_on_the_honest_unproven(
    benign: dict[str, object], exfil: dict[str, object], ok: bool
) -> None:
    passed, lines = run_demo().outcome({"benign": benign, "exfil": exfil})
    assert passed is ok
    if benign["isolation"] == "partial":
        assert "sudo make demo" in lines
        assert "partial isolation" in lines


@pytest.mark.slow
def test_with_partial_isolation_the_demo_shows_unproven_and_blocked_and_exits_0(
    tmp_path: Path,
) -> None:
    # As a machine without root or the isolation tools gets it.
    done = subprocess.run(
        [sys.executable, str(TOP / "examples" / "demo" / "run_demo.py")],
        env={**os.environ, "CUJO_ISOLATION": "partial", "CUJO_DEMO_DATA": str(tmp_path)},
        cwd=TOP,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Demo: benign → unproven, exfil → blocked" in done.stdout
    assert "sudo make demo" in done.stdout

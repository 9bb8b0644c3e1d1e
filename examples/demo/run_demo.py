"""Build the demo repository in a temp dir, review two pull requests, print both verdicts.

`make demo` runs this. The repository is made from the files beside this script:
`base/` is the main branch, `benign/` and `exfil/` are laid over it as two pull requests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Demo Maintainer",
    "GIT_AUTHOR_EMAIL": "maintainer@example.test",
    "GIT_COMMITTER_NAME": "Demo Maintainer",
    "GIT_COMMITTER_EMAIL": "maintainer@example.test",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=GIT_ENV, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def build_repo(root: Path) -> Path:
    repo = root / "tinycalc"
    shutil.copytree(HERE / "base", repo)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "tinycalc: add and sub")
    for branch, message in (
        ("benign", "Add mul() with a test"),
        ("exfil", "Speed up builds"),
    ):
        git(repo, "checkout", "--quiet", "-b", branch, "main")
        shutil.copytree(HERE / branch, repo, dirs_exist_ok=True)
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", message)
    git(repo, "checkout", "--quiet", "main")
    return repo


def review(repo: Path, head: str, data: Path) -> dict:
    print(f"\n=== cujo review --base main --head {head} ===", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "app_relay", "review", "--repo", str(repo), "--base", "main",
         "--head", head, "--json", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    try:
        return json.loads(done.stdout)
    except ValueError:
        print(done.stdout)
        raise SystemExit(f"cujo review exited {done.returncode} without a JSON verdict")


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="cujo-demo-"))
    data = Path(os.environ.get("CUJO_DEMO_DATA", Path.cwd() / ".cujo" / "demo"))
    try:
        repo = build_repo(root)
        results = {head: review(repo, head, data) for head in ("benign", "exfil")}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sys.path.insert(0, str(HERE.parents[1]))
    from app_relay.cli.review import render

    print("\n" + "=" * 72)
    for head, obj in results.items():
        print(f"\nPull request `{head}`:")
        print(render(obj))
    ok, verdict = outcome(results)
    print(verdict)
    show_board(data)
    return 0 if ok else 1


def outcome(results: dict) -> tuple[bool, str]:
    """Return whether the demo showed what it should, and the closing lines saying so.

    With full isolation that is clean and blocked. Without it (not root, a tool missing,
    bubblewrap refused) a sandbox that could be dodged proves nothing clean: the benign
    pull request is unproven, which is the honest outcome and not a failure of the demo.
    """
    benign, exfil = results["benign"], results["exfil"]
    states = f"Demo: benign → {benign['state']}, exfil → {exfil['state']}"
    if benign["isolation"] == "full":
        ok = benign["state"] == "clean" and exfil["state"] == "blocked"
        return ok, states + ("" if ok else "  (expected clean and blocked)")
    ok = benign["state"] == "unproven" and exfil["state"] == "blocked"
    why = "; ".join(benign.get("unproven") or []) or "isolation is partial"
    lines = [
        states + ("" if ok else "  (expected unproven and blocked with partial isolation)"),
        f"benign is unproven, not clean, because the sandbox had partial isolation: {why}",
        "Full isolation needs root and ip, nft, setpriv and bwrap: "
        "sudo apt-get install iproute2 nftables util-linux bubblewrap && sudo make demo",
        "or, without root, unprivileged user namespaces and bubblewrap 0.8: "
        "`cujo doctor --local` says what this machine lacks and the one command that fixes it",
    ]
    return ok, "\n".join(lines)


BOARD_PORT = int(os.environ.get("CUJO_DEMO_BOARD_PORT", "8765"))


def show_board(data: Path) -> None:
    """End with the local board's address; serve it too when a person is at the terminal."""
    cujo = Path(sys.executable).with_name("cujo")
    try:
        shown = cujo.relative_to(Path.cwd())
    except ValueError:
        shown = cujo
    print(f"\nBoth runs are on the local board: {shown} board --data-dir {data} "
          f"--port {BOARD_PORT}")
    url = f"http://127.0.0.1:{BOARD_PORT}/"
    if sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("CUJO_DEMO_BOARD") != "0":
        print(f"Serving it now at {url} (Ctrl-C to stop).", flush=True)
        try:
            subprocess.run(
                [sys.executable, "-m", "app_relay", "board", "--data-dir", str(data),
                 "--port", str(BOARD_PORT)],
                stdout=subprocess.DEVNULL,
                check=False,
            )
        except KeyboardInterrupt:
            print()
        return
    print(f"The board: {url}")


if __name__ == "__main__":
    raise SystemExit(main())

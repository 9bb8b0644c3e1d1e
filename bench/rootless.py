"""Full isolation without root against root's: the same demo review, timed back to back.

The benign pull request of the demo (``CUJO_BASE=off``, as bench_review) is reviewed as
root (namespaces with veths, a uid per check, root's venv template) and as ``nobody``
(a namespace holder per phase, separate mounts, each check making its own venv), rounds
interleaved; each must end clean with ``isolation: full``. Needs root, to be both.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import unprivileged  # noqa: E402

from bench.__main__ import review  # noqa: E402


def _rootless_review(user: unprivileged.Account, repo: Path, data: Path) -> None:
    argv = user.cujo(
        "review", "--repo", str(repo), "--base", "main", "--head", "benign",
        "--json", "--data-dir", str(data),
    )  # fmt: skip
    done = subprocess.run(
        argv, env=user.env({"CUJO_BASE": "off"}), capture_output=True, text=True, check=False
    )
    try:
        result = json.loads(done.stdout)
    except ValueError:
        said = done.stderr[-2000:]
        raise SystemExit(f"bench: the rootless review printed no verdict:\n{said}") from None
    if (result["state"], result["isolation"]) != ("clean", "full"):
        raise SystemExit(
            f"bench: the rootless review was {result['state']} with {result['isolation']} "
            "isolation, expected clean and full"
        )


def bench_rootless(rounds: int) -> None:
    """Time the demo's review as root and as an ordinary user; print the ratio."""
    if why := unprivileged.why_not():
        print(f"rootless review: skipped ({why})")
        return
    user = unprivileged.account()
    try:
        repo, user_repo = run_demo_repo(user, owner="root"), run_demo_repo(user, owner="user")
        root_data = user.root / "root-data"
        user_data = unprivileged.owned(user.root / "user-data")
        as_root: list[float] = []
        rootless: list[float] = []
        for _ in range(rounds):  # interleaved, so drift hits both alike
            start = time.perf_counter()
            review(repo, "benign", root_data)
            as_root.append(time.perf_counter() - start)
            start = time.perf_counter()
            _rootless_review(user, user_repo, user_data)
            rootless.append(time.perf_counter() - start)
        base, mine = statistics.median(as_root), statistics.median(rootless)
        print(f"review of the demo project (benign PR, CUJO_BASE=off), median of {rounds}:")
        print(f"  as root (veths, a uid per check)          : {base:7.2f} s   (baseline)")
        print(
            f"  as an ordinary user (rootless, full)      : {mine:7.2f} s   "
            f"ratio {mine / base:.2f}x ({mine - base:+.2f} s)"
        )
    finally:
        user.close()


def run_demo_repo(user: unprivileged.Account, *, owner: str) -> Path:
    """Build the demo repository, owned by root or by the ordinary account (git reads
    only a repository its user owns)."""
    import run_demo  # examples/demo, on sys.path by bench/__main__

    folder = user.root / f"demo-{owner}"
    folder.mkdir(mode=0o755)
    repo = Path(run_demo.build_repo(folder))
    if owner == "user":
        unprivileged.give(folder)
    return repo

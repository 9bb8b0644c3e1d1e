"""Full isolation without root against root's: the same reviews, timed back to back.

Two pull requests, the demo's benign one and a real project's (cachetools from one
release to the next, its sdists from PyPI), each with ``CUJO_BASE=off`` as bench_review,
are reviewed as root (namespaces with veths, a uid per check, root's venv template) and
as ``nobody`` (a namespace holder per phase, separate mounts, each check making its own
venv), rounds interleaved; each must end clean with ``isolation: full``. Needs root, to
be both.
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


def _rootless_review(user: unprivileged.Account, repo: Path, data: Path, head: str) -> None:
    argv = user.cujo(
        "review", "--repo", str(repo), "--base", "main", "--head", head,
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
    """Time reviews as root and as an ordinary user, the demo and a real project; print ratios."""
    if why := unprivileged.why_not():
        print(f"rootless review: skipped ({why})")
        return
    user = unprivileged.account()
    try:
        projects = (
            ("the demo project (benign PR, CUJO_BASE=off)", "benign", run_demo_repo),
            (f"{REAL[0]} {REAL[1]} -> {REAL[2]} (sdists, CUJO_BASE=off)", "pr", real_repo),
        )
        for title, head, build in projects:
            repo, user_repo = build(user, owner="root"), build(user, owner="user")
            root_data = user.root / f"root-data-{head}"
            user_data = unprivileged.owned(user.root / f"user-data-{head}")
            as_root: list[float] = []
            rootless: list[float] = []
            for _ in range(rounds):  # interleaved, so drift hits both alike
                start = time.perf_counter()
                review(repo, head, root_data)
                as_root.append(time.perf_counter() - start)
                start = time.perf_counter()
                _rootless_review(user, user_repo, user_data, head)
                rootless.append(time.perf_counter() - start)
            base, mine = statistics.median(as_root), statistics.median(rootless)
            print(f"review of {title}, median of {rounds}:")
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


# A real project: two releases of tkem/cachetools from PyPI (tests/e2e/test_real_repos_e2e.py).
REAL = ("cachetools", "5.4.0", "5.5.0")


def real_repo(user: unprivileged.Account, *, owner: str) -> Path:
    """Build cachetools' pull request from one release to the next, owned as run_demo_repo's."""
    from gitrepo import GitRepo
    from realrepos import release_pair

    case = release_pair(*REAL, user.root / "sdists")
    folder = user.root / f"real-{owner}"
    folder.mkdir(mode=0o755)
    repo = GitRepo(folder / "repo")
    repo.write(case.base).commit("base")
    repo.branch("pr").checkout("pr")
    repo.write(case.head).commit("the pull request")
    repo.checkout("main")
    if owner == "user":
        unprivileged.give(folder)
    return folder / "repo"

"""The cost of the base run (issue 13): a whole review with the base beside the head, and without.

Both sides run the same `cujo review` of the same pull request, interleaved; the only
difference is ``CUJO_BASE=off``, which leaves the base's install and tests out. The
target is a ratio of at most 1.25: the base runs in parallel with the head's checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.armed import GIT_ENV, library_repo


def _review(repo: Path, head: str, data: Path, *, base: bool) -> tuple[float, str]:
    env = {**os.environ, "CUJO_BASE": "on" if base else "off"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "app_relay", "review", "--repo", str(repo), "--base", "main",
         "--head", head, "--json", "--data-dir", str(data)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    took = time.perf_counter() - start
    try:
        state = str(json.loads(done.stdout)["state"])
    except (ValueError, KeyError):
        raise SystemExit(f"bench: the review printed no verdict:\n{done.stderr[-2000:]}") from None
    return took, state


def _with_a_change(repo: Path) -> str:
    """Add a branch `pr` that changes one comment (the pull request reviewed)."""
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "pr"], check=True, env=env)
    readme = next(p for p in repo.iterdir() if p.name.lower().startswith("readme"))
    readme.write_text(readme.read_text() + "\n")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "pr"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True, env=env)
    return "pr"


def compare(label: str, repo: Path, head: str, rounds: int) -> None:
    """Print the review's wall time with and without the base run, best of ``rounds``."""
    data = Path(tempfile.mkdtemp(prefix="cujo-bench-base-"))
    alone = beside = float("inf")
    states = set()
    for _ in range(rounds):  # interleaved, so drift hits both alike
        took, state = _review(repo, head, data, base=False)
        alone, states = min(alone, took), states | {state}
        took, state = _review(repo, head, data, base=True)
        beside, states = min(beside, took), states | {state}
    print(f"{label}: cujo review, best of {rounds} (states: {', '.join(sorted(states))})")
    print(f"  head alone (CUJO_BASE=off)         : {alone:7.2f} s   (baseline)")
    print(f"  base beside the head               : {beside:7.2f} s   "
          f"ratio {beside / alone:.2f}x   (target <= 1.25x)")  # fmt: skip


def bench_base(rounds: int) -> None:
    import run_demo  # examples/demo, on the path bench/__main__ sets

    root = Path(tempfile.mkdtemp(prefix="cujo-bench-"))
    compare("demo project (benign PR)", run_demo.build_repo(root / "demo"), "benign", rounds)
    lib = library_repo(root / "lib")
    compare("more-itertools 10.5.0 from PyPI", lib, _with_a_change(lib), rounds)

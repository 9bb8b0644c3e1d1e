"""The cost of the post-merge context and of the workflows check on the demo (issue 33).

Two figures, each next to a baseline measured in the same run:

* **the workflows check**: a whole ``cujo review`` of the demo's benign pull request that
  also changes a workflow (a push job: the emulated checkout and a ``run:`` step, run in
  the smoke check's sandbox; zizmor at base and head) against the same pull request
  without the workflow (the baseline), interleaved, best of N; with the workflows and
  smoke checks' own spans from each review's timing record. ``CUJO_BASE=off`` on both
  sides: the base run is measured apart (``bench/base.py``).
* **the post-merge context**: what prepare does so the checks run on the merge as its
  push (``check_out_merge``: the merge of head into base on the base branch, and the push
  events of the merge and of the base) against what it did before, checking out the
  author's commit (``git checkout --detach``), in the same clone, interleaved, best of N.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.armed import GIT_ENV
from cujo_action.evidence.timing import TIMINGS_NAME
from cujo_action.prepare.git import Git, git_env
from cujo_action.prepare.merge import Asked, check_out_merge, pushed

CI_BRANCH = "benign-ci"
DOCS_WORKFLOW = """\
name: Docs
on:
  push:
    branches: [main]
permissions: {}
jobs:
  build:
    runs-on: ubuntu-latest
    timeout-minutes: 10
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          persist-credentials: false
      - name: Build the docs
        run: python -c "import tinycalc; print(tinycalc.__name__)"
"""


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, env=env,
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


def with_a_workflow(repo: Path) -> str:
    """Add the branch ``benign-ci``: the benign pull request, and a push workflow added."""
    _git(repo, "checkout", "-q", "-b", CI_BRANCH, "benign")
    flow = repo / ".github" / "workflows" / "docs.yml"
    flow.parent.mkdir(parents=True)
    flow.write_text(DOCS_WORKFLOW)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "Build the docs on push")
    _git(repo, "checkout", "-q", "main")
    return CI_BRANCH


def _review(repo: Path, head: str, data: Path) -> tuple[float, dict[str, Any]]:
    """Return a review's wall time and its timing record (its spans by name)."""
    env = {**os.environ, "CUJO_BASE": "off"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "app_relay", "review", "--repo", str(repo), "--base", "main",
         "--head", head, "--json", "--data-dir", str(data)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    took = time.perf_counter() - started
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"bench: the review printed no verdict:\n{done.stderr[-2000:]}") from None
    if result["state"] != "clean":
        raise SystemExit(f"bench: the review of {head} was {result['state']}, expected clean")
    timings = data / "runs" / result["run_id"] / TIMINGS_NAME
    record = json.loads(timings.read_text()) if timings.is_file() else {}
    spans = {str(s["name"]): float(s["seconds"]) for s in record.get("spans", [])}
    return took, spans


def _span(best: dict[str, float], name: str) -> str:
    return f"{best[name]:6.2f} s" if name in best else "   (not run)"


def bench_workflows_check(repo: Path, rounds: int) -> None:
    """Print a review with a changed workflow against one without, best of ``rounds``."""
    data = Path(tempfile.mkdtemp(prefix="cujo-bench-wf-"))
    try:
        walls: dict[str, float] = {}
        spans: dict[str, dict[str, float]] = {}
        for _ in range(rounds):  # interleaved, so drift hits both alike
            for head in ("benign", CI_BRANCH):
                took, named = _review(repo, head, data)
                if took < walls.get(head, float("inf")):
                    walls[head], spans[head] = took, named
    finally:
        shutil.rmtree(data, ignore_errors=True)
    plain, ci = walls["benign"], walls[CI_BRANCH]
    print(f"the workflows check on the demo (benign PR, CUJO_BASE=off), best of {rounds}:")
    print(f"  review, no CI file changed          : {plain:7.2f} s   (baseline)")
    print(f"  review, a push workflow added       : {ci:7.2f} s   ratio {ci / plain:.2f}x, "
          f"{ci - plain:+.2f} s")  # fmt: skip
    for name in ("check/workflows", "check/smoke"):
        print(f"    {name:<34}: {_span(spans['benign'], name)} → "
              f"{_span(spans[CI_BRANCH], name)}")  # fmt: skip


def bench_post_merge(repo: Path, rounds: int) -> None:
    """Print the post-merge checkout against checking out the head, best of ``rounds``."""
    work = Path(tempfile.mkdtemp(prefix="cujo-bench-merge-"))
    try:
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        home = work / "home"
        home.mkdir()
        base_sha, head_sha = _git(repo, "rev-parse", "main"), _git(repo, "rev-parse", "benign")
        asked = Asked(str(repo), False, repo, "main", "benign")
        detach = merge = float("inf")
        for _ in range(rounds):  # interleaved
            git = Git(git_env(home), 120, shown="demo", raw=str(repo))
            started = time.perf_counter()
            git.check("checkout", "-q", "--detach", head_sha, cwd=clone, what="checkout")
            detach = min(detach, time.perf_counter() - started)
            started = time.perf_counter()
            _, merged = check_out_merge(git, clone, asked, base_sha, head_sha)
            pushed(git, clone, merged.sha, base_sha, merged=merged.merged)
            pushed(git, clone, base_sha)
            merge = min(merge, time.perf_counter() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"the post-merge context on the demo (prepare only), best of {rounds}:")
    print(f"  check out the head (before)         : {detach * 1e3:7.1f} ms  (baseline)")
    print(f"  merge, check out, both push events  : {merge * 1e3:7.1f} ms  "
          f"ratio {merge / detach:.1f}x, {(merge - detach) * 1e3:+.1f} ms")  # fmt: skip


def bench_workflows(rounds: int) -> None:
    import run_demo  # examples/demo, on the path bench/__main__ sets

    root = Path(tempfile.mkdtemp(prefix="cujo-bench-"))
    try:
        repo = run_demo.build_repo(root / "demo")
        with_a_workflow(repo)
        bench_post_merge(repo, 10)
        bench_workflows_check(repo, rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)

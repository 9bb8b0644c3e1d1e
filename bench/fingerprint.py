"""How far the sandbox reads from a hosted runner (issue 22, item 1): the probe's differences.

One real local review (`cujo review`, the head alone) of a tiny repository whose test
command is the fingerprint probe, so it runs inside the sandbox as a pull request's test;
its line is read out of the tests report and compared with the runner profile. The figure
is a count, not a time: total differences, accepted by the profile, and unexpected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.armed import GIT_ENV
from cujo_action.arm.fingerprint import (
    PROBE_PATH,
    differences,
    load_profile,
    project_files,
    reading_from_report,
    summary,
    unexpected,
)
from cujo_action.arm.fingerprint_probe import CAP, line


def probe_repo(root: Path) -> Path:
    """Build the probe's repository: `main` with the project, `pr` changing one line."""
    repo = root / "probe-project"
    for name, text in project_files(PROBE_PATH.read_text()).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    env = {**os.environ, **GIT_ENV}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "a project whose test is the probe")
    git("checkout", "-q", "-b", "pr")
    (repo / "calc.py").write_text('"""Add numbers."""\n\n' + (repo / "calc.py").read_text())
    git("commit", "-qam", "a docstring")
    git("checkout", "-q", "main")
    return repo


def probe_review(root: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Review the probe's repository; return the verdict and the probe's reading."""
    data = root / "data"
    env = {**os.environ, "CUJO_BASE": "off"}
    done = subprocess.run(
        [sys.executable, "-m", "app_relay", "review", "--repo", str(probe_repo(root)),
         "--base", "main", "--head", "pr", "--json", "--data-dir", str(data)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    try:
        verdict = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"bench: the review printed no verdict:\n{done.stderr[-2000:]}") from None
    tests = data / "runs" / str(verdict["run_id"]) / "tests.json"
    report = json.loads(tests.read_text()) if tests.is_file() else {}
    return verdict, reading_from_report(report)


def bench_fingerprint() -> int:
    """Print each difference from the runner profile and the counts; return how many
    were not accepted."""
    root = Path(tempfile.mkdtemp(prefix="cujo-bench-fingerprint-"))
    try:
        verdict, reading = probe_review(root)
        print(f"fingerprint probe inside the sandbox (review: {verdict['state']}, "
              f"isolation {verdict.get('isolation')}):")  # fmt: skip
        if reading is None:
            raise SystemExit("bench: the probe printed no reading in the tests report")
        size = len(line(reading))
        cut = " (cut to fit: lists shortened)" if reading.get("truncated") else ""
        print(f"  the probe's line: {size} characters, cap {CAP}{cut}")
        profile = load_profile()
        found = differences(reading, profile)
        for text in summary(found, profile):
            print(f"  {text}")
        return len(unexpected(found))
    finally:
        shutil.rmtree(root, ignore_errors=True)

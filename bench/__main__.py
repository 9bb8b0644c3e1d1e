"""Benchmarks, each printed as a ratio against a baseline measured in the same run.

`make bench` runs them. These machines are noisy, so a figure only means something next
to its baseline: the two are measured back to back, interleaved, and the best of N kept.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "demo"))

import run_demo  # noqa: E402

from cujo_action.evidence.timing import TIMINGS_NAME, split  # noqa: E402
from cujo_action.find.decoys import make_decoys  # noqa: E402
from cujo_action.find.matcher import DecoyMatcher  # noqa: E402


def best_of(n: int, fn: Callable[[], object]) -> float:
    """Return the fastest of ``n`` wall-clock timings of ``fn``."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bare_install_and_test(repo: Path, head: str) -> float:
    """Do by hand what a review runs: a venv, the install, the tests, the build; return
    how long making the venv took."""
    work = Path(tempfile.mkdtemp(prefix="cujo-bench-bare-"))
    try:
        subprocess.run(
            ["git", "clone", "--quiet", "--branch", head, str(repo), str(work / "src")], check=True
        )
        py = sys.base_prefix + "/bin/python3"
        venv_started = time.perf_counter()
        subprocess.run([py, "-m", "venv", str(work / "venv")], check=True)
        venv_took = time.perf_counter() - venv_started
        vpy = str(work / "venv" / "bin" / "python")
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": str(work / "home")}
        subprocess.run(
            [vpy, "-m", "pip", "install", "--quiet", "-e", "."],
            cwd=work / "src",
            check=True,
            env=env,
        )
        subprocess.run(
            [vpy, "-m", "unittest", "discover", "-s", "tests"],
            cwd=work / "src",
            check=True,
            env=env,
            capture_output=True,
        )
        subprocess.run(
            [vpy, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work / "wheel"), "."],
            cwd=work / "src",
            check=True,
            env=env,
        )
        return venv_took
    finally:
        shutil.rmtree(work, ignore_errors=True)


def review(
    repo: Path, head: str, data: Path, python: str = sys.executable, venv_cache: Path | None = None
) -> dict[str, Any]:
    """Run `cujo review` on the demo project, the head alone; return its timing record.

    With ``venv_cache``, root keeps its venv templates there (an empty folder: the first
    run on a machine, as every run on a hosted runner is)."""
    # The base's run beside the head is measured apart (bench/base.py).
    env = {**os.environ, "CUJO_BASE": "off"}
    if venv_cache is not None:
        env["CUJO_VENV_CACHE"] = str(venv_cache)
    done = subprocess.run(
        [python, "-m", "app_relay", "review", "--repo", str(repo), "--base", "main",
         "--head", head, "--json", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )  # fmt: skip
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"bench: the review printed no verdict:\n{done.stderr[-2000:]}") from None
    if result["state"] != "clean":
        raise SystemExit(f"bench: the demo review was {result['state']}, expected clean")
    timings = data / "runs" / result["run_id"] / TIMINGS_NAME
    return dict(json.loads(timings.read_text())) if timings.is_file() else {}


def bench_review(rounds: int) -> None:
    """The fixed cost of a whole local review: its wall time beyond the bare commands, once.

    Twice: with the venv template root kept from an earlier run (a machine that reviews
    often), and on a first run (nothing kept: every run on a hosted runner)."""
    root = Path(tempfile.mkdtemp(prefix="cujo-bench-"))
    try:
        repo = run_demo.build_repo(root)
        data = root / "data"
        bares: list[float] = []
        reviews: list[float] = []
        firsts: list[float] = []
        no_venvs: list[float] = []  # the bare side less its `python -m venv`
        stages: dict[str, list[float]] = {}
        for n in range(rounds):  # interleaved, so drift hits both alike
            start = time.perf_counter()
            venv_took = bare_install_and_test(repo, "benign")
            bares.append(time.perf_counter() - start)
            no_venvs.append(bares[-1] - venv_took)
            start = time.perf_counter()
            record = review(repo, "benign", data)
            reviews.append(time.perf_counter() - start)
            start = time.perf_counter()
            review(repo, "benign", data, venv_cache=root / f"empty-cache-{n}")
            firsts.append(time.perf_counter() - start)
            spans = record.get("spans", [])
            sandbox = max((s["start"] + s["seconds"] for s in spans), default=0.0)
            stages.setdefault("outside the sandbox (cujo CLI, store, verdict)", []).append(
                reviews[-1] - sandbox
            )
            for name, took in split(record):
                stages.setdefault(name, []).append(took)
        bare = statistics.median(bares)
        review_t, first_t = statistics.median(reviews), statistics.median(firsts)
        print(f"review of the demo project (benign PR, CUJO_BASE=off), median of {rounds}:")
        print(f"  bare clone + venv + install + tests + build : {bare:7.2f} s   (baseline)")
        print(
            f"  cujo review (all checks, armed)             : {review_t:7.2f} s   "
            f"ratio {review_t / bare:.2f}x, fixed cost {review_t - bare:+.2f} s  (target <= 1 s)"
        )
        print(
            f"  the same, first run (no venv template kept) : {first_t:7.2f} s   "
            f"ratio {first_t / bare:.2f}x, fixed cost {first_t - bare:+.2f} s  (target <= 1 s)"
        )
        no_venv = statistics.median(no_venvs)
        print(
            f"  bare without making its venv               : {no_venv:7.2f} s   "
            f"review {review_t - no_venv:+.2f} s, first run {first_t - no_venv:+.2f} s beyond it"
        )
        print("  where the review's time goes (median seconds of each stage; checks overlap):")
        for name, took in stages.items():
            print(f"    {name:<48}: {statistics.median(took):6.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_matcher(rounds: int) -> None:
    """Decoy search on 1 MiB request bodies of each kind, every decoder on (issue 13)."""
    import base64
    import gzip
    import zlib

    decoys = make_decoys()
    matcher = DecoyMatcher(decoys)
    secret = json.dumps({d.name: d.value for d in decoys}).encode()

    def mib(data: bytes) -> bytes:
        return (data * (1 + (1 << 20) // max(len(data), 1)))[: 1 << 20]

    bodies = {
        "random bytes": secrets.token_bytes(1 << 20),
        "text": mib(b"lorem ipsum dolor sit amet, consectetur adipiscing elit "),
        "base64 of random": base64.b64encode(secrets.token_bytes(786_432)),
        "hex of random": secrets.token_bytes(1 << 19).hex().encode(),
        "base32 of random": base64.b32encode(secrets.token_bytes(655_360)),
        "gzip of random": gzip.compress(secrets.token_bytes(1 << 20)),
        "JSON of base64 strings": json.dumps(
            [base64.b64encode(secrets.token_bytes(700)).decode() for _ in range(1100)]
        ).encode()[: 1 << 20],
    }
    # Where a decoy hides: gzip then base64 twice, at the end of 1 MiB of base64 noise.
    planted = (
        base64.b64encode(secrets.token_bytes(700_000))
        + b"\n"
        + base64.b64encode(base64.b64encode(zlib.compress(secret)))
    )
    baseline = best_of(rounds, lambda: bodies["random bytes"].find(b"never-there-needle"))
    print(f"decoy search of a 1 MiB request body, every decoder on, best of {rounds}:")
    print(f"  one bytes.find (baseline)               : {baseline * 1e3:8.2f} ms")
    for name, body in [*bodies.items(), ("decoys zlib+base64+base64 at the end", planted)]:
        took = best_of(rounds, lambda body=body: matcher.find(body))
        found = matcher.find(body)
        assert bool(found) == (body is planted), (name, found)
        print(f"  {name:<40}: {took * 1e3:8.2f} ms   ratio {took / baseline:6.0f}x")


def bench_armed(rounds: int) -> None:
    from bench.armed import compare, library_repo

    root = Path(tempfile.mkdtemp(prefix="cujo-bench-"))
    try:
        demo = run_demo.build_repo(root / "demo")
        compare(
            "demo project (benign PR)",
            demo,
            "python -m pip install -e .",
            "python -m unittest discover -s tests",
            rounds,
        )
        lib = library_repo(root / "lib")
        compare(
            "more-itertools 10.5.0 from PyPI",
            lib,
            "python -m pip install -e .",
            "python -m unittest discover -s tests",
            rounds,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--only",
        choices=[
            "review",
            "matcher",
            "armed",
            "base",
            "webhook",
            "claim",
            "replicas",
            "diff",
            "board",
            "output",
            "bodies",
            "dns",
            "egresslog",
            "proxymemory",
            "fingerprint",
            "ratelimit",
            "merge",
            "rootless",
            "workflows",
        ],
    )
    args = parser.parse_args()
    if args.only in (None, "matcher"):
        bench_matcher(20)
    if args.only in (None, "output"):
        from bench.output import bench_output

        bench_output(args.rounds)
    if args.only in (None, "armed"):
        bench_armed(args.rounds)
    if args.only in (None, "review"):
        bench_review(args.rounds)
    if args.only in (None, "base"):
        from bench.base import bench_base

        bench_base(args.rounds)
    if args.only in (None, "webhook"):
        from bench.webhook import bench_webhook

        bench_webhook(60.0, 200)
        bench_webhook(60.0, 200, postgres=True)
    if args.only in (None, "claim"):
        from bench.relay import bench_claim_latency

        bench_claim_latency(30)
    if args.only in (None, "replicas"):
        from bench.relay import bench_replicas

        bench_replicas(40)
    if args.only in (None, "diff"):
        from bench.diffreview import bench_diff

        bench_diff(5)
    if args.only in (None, "board"):
        from bench.board import bench_board

        bench_board(20)
    if args.only in (None, "bodies"):
        from bench.bodies import bench_bodies

        bench_bodies(args.rounds + 1)
    if args.only in (None, "dns"):
        from bench.dns import bench_dns

        bench_dns(5)
    if args.only in (None, "egresslog"):
        from bench.egresslog import bench_egress_flood, bench_egresslog

        bench_egresslog(args.rounds + 1)
        bench_egress_flood(args.rounds)
    if args.only in (None, "proxymemory"):
        from bench.proxymemory import bench_proxy_memory

        bench_proxy_memory(args.rounds)
    if args.only in (None, "fingerprint"):
        from bench.fingerprint import bench_fingerprint

        bench_fingerprint()
    if args.only in (None, "rootless"):
        from bench.rootless import bench_rootless

        bench_rootless(args.rounds)
    if args.only in (None, "ratelimit"):
        from bench.ratelimit import bench_ratelimit

        bench_ratelimit()
    if args.only in (None, "merge"):
        from bench.merge import bench_merge

        bench_merge(10)
    if args.only in (None, "workflows"):
        from bench.workflows import bench_workflows

        bench_workflows(args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

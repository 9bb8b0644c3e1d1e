"""Benchmark the body search (unwrap + matcher) against main's, on 1 MiB and 20 MiB bodies.

The baseline is the search as it was at ``BASELINE``: ``unwrap.py`` and ``decoys.py``, as
they stood then at the top of the package, read from git (``git show``) and loaded as
modules of their own (``bench_old_unwrap``, ``bench_old_decoys``; the old matcher's import
of the old unwrap module is pointed at its copy), so both run in this process on
the same bytes, interleaved, best of N. Bodies: random bytes, CSV text, and base64 of
that text with a decoy at its end. The figure is new/old time per body; the old search
stops at its 24 MiB budget (and says ``unsearched``) where the new one reads on, so on
20 MiB bodies the ratio includes what the old one skipped.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "7b1c952"  # the contract commit: the search as main had it before this work


def _load(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def _baseline() -> type[DecoyMatcher]:
    """Return main's DecoyMatcher class, running on main's unwrap."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{BASELINE}:{path}"], cwd=ROOT, check=True, capture_output=True,
            text=True,
        ).stdout  # fmt: skip

    _load("bench_old_unwrap", show("cujo_action/unwrap.py"))  # their paths at BASELINE
    old = show("cujo_action/decoys.py").replace(
        "from cujo_action.unwrap import", "from bench_old_unwrap import"
    )
    matcher: type[DecoyMatcher] = _load("bench_old_decoys", old).DecoyMatcher
    return matcher


def _bodies(size: int, decoy: bytes) -> dict[str, bytes]:
    rows = b"".join(b"%d,user%d,%d\n" % (i, i, i * 7) for i in range(size // 16))[:size]
    return {
        "random": os.urandom(size),
        "text": rows,
        "base64+decoy": base64.b64encode(rows[: size * 3 // 4 - 64] + b"\n" + decoy),
    }


def _best(n: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_bodies(rounds: int = 3) -> None:
    """Print, per body, the new search's time over the old one's, and what each found."""
    decoys = make_decoys()
    new = DecoyMatcher(decoys)
    old = _baseline()(decoys)
    token = next(d for d in decoys if d.name == "GITHUB_TOKEN")
    print(f"body search, best of {rounds}: new (this tree) vs old ({BASELINE})")
    for size in (1 << 20, 20 << 20):
        for name, body in _bodies(size, token.value.encode()).items():
            t_new = t_old = float("inf")
            for _ in range(rounds):  # interleaved, so drift hits both alike
                t_new = min(t_new, _best(1, lambda b=body: new.find(b, judge_opacity=True)))
                t_old = min(t_old, _best(1, lambda b=body: old.find(b)))
            found_new = [n for n, _ in new.find(body)]
            found_old = [n for n, _ in old.find(body)]
            print(
                f"  {size >> 20:3d} MiB {name:13s} new {t_new:7.3f}s  old {t_old:7.3f}s  "
                f"ratio {t_new / t_old:5.2f}x  found new {found_new or '-'} "
                f"old {found_old or '-'}{'  old unsearched' if old.exhausted else ''}"
            )


if __name__ == "__main__":
    bench_bodies()

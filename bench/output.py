"""Benchmark the search of what a command prints (issue 20): 64 MiB of noisy output.

Each stream is written by a real child process into a pipe and drained by
``output.Capture`` as the jail drains it: with the decoy search (``OutputSearch``), and
without (the baseline, the capture as it was: tail and count only), back to back, best
of N. Reported: the wall time of each, the ratio, and the search's throughput.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.limits import OUTPUT_FLOOD
from cujo_action.sandbox.output import Capture, OutputSearch

SIZE = OUTPUT_FLOOD - (1 << 20)  # just under the flood cap: every byte is searched


def _noise(kind: str) -> bytes:
    rnd = os.urandom
    if kind == "random base64 lines":
        line = 76
        return b"".join(base64.b64encode(rnd(57)) + b"\n" for _ in range(SIZE // (line + 1)))
    if kind == "one base64 line (no separator)":
        return base64.b64encode(rnd(SIZE * 3 // 4))
    if kind == "`yes`":
        return b"y\n" * (SIZE // 2)
    words = [b"tests/test_x.py::test_", b"PASSED", b"[ 42%]", b"ok", b"0.01s", b"FAILED"]
    out = bytearray()
    n = 0
    while len(out) < SIZE:
        out += words[n % 6] + (b"\n" if n % 7 == 0 else b" ") + str(n).encode()
        n += 1
    return bytes(out[:SIZE])


def _drain(path: Path, search: OutputSearch | None) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    capture = Capture(proc.stdout, threading.Event(), search)
    capture.thread.join()
    proc.wait()
    took = time.perf_counter() - start
    assert capture.total == path.stat().st_size
    if search is not None:
        assert search.searched == capture.total
        assert not search.printed(), search.printed()
    return took


def bench_output(rounds: int) -> None:
    """Print the search's cost on 64 MiB of each kind of noise against the bare capture."""
    matcher = DecoyMatcher(make_decoys())
    print(f"output search of {SIZE >> 20} MiB printed by a command, best of {rounds}:")
    with tempfile.TemporaryDirectory(prefix="cujo-bench-output-") as tmp:
        for kind in (
            "random base64 lines", "one base64 line (no separator)", "`yes`", "test log",
        ):  # fmt: skip
            path = Path(tmp) / "out"
            path.write_bytes(_noise(kind))
            bare = searched = float("inf")
            for _ in range(rounds):
                bare = min(bare, _drain(path, None))
                lock = threading.Lock()
                searched = min(searched, _drain(path, OutputSearch(matcher, "stdout", lock)))
            rate = SIZE / searched / 1e6
            print(
                f"  {kind:<32}: bare {bare:6.2f} s, searched {searched:6.2f} s, "
                f"ratio {searched / bare:5.0f}x, {rate:5.1f} MB/s"
            )


if __name__ == "__main__":
    bench_output(int(sys.argv[1]) if len(sys.argv) > 1 else 1)

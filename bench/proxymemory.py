"""The proxy's peak memory after a 200 MiB POST, against its peak after a 1 MiB one.

A request body streams to a spool file of the proxy's own as it arrives (``proxy/spool.py``):
whatever a client sends, the proxy holds its own start (mitmproxy) and one search window
with its decodings. Each side is a fresh proxy process, sent one POST to a sunk host over
a raw socket, its peak resident memory (``VmHWM``) read once the request is logged; the
sides interleaved, N times, the highest peak of each kept. The 200 MiB body is past
``limits.BODY_SIZE``: it is refused (413) and logged ``unsearched``, its first 64 MiB
searched (a decoy is at its start). The suite checks the streaming itself, on 2 MiB
(tests/cujo_action/net/proxy/test_proxy.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from cujo_action.find.decoys import make_decoys
from cujo_action.limits import BODY_SIZE, MiB
from cujo_action.net.egress import parse_egress_log
from cujo_action.net.helperconfig import DecoySpec
from cujo_action.net.proxy.config import ProxyConfig
from cujo_action.net.proxy.process import start_proxy

LABEL = "tests/test"
SINK = "collector.exfil.test"
SIZES = (1 * MiB, 200 * MiB)
# The bound the suite held the 200 MiB POST to before its twin: mitmproxy's own start
# (about 100 MiB) plus one search window and its decodings (proxy.spool.WINDOW).
PEAK_BOUND = 400 * MiB


def _peak_rss(pid: int) -> int:
    """Return a process's peak resident memory (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    (line,) = [ln for ln in status.splitlines() if ln.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


def _post(port: int, path: str, size: int, decoy: bytes) -> bytes:
    """Send one POST of ``size`` bytes, a decoy at its start; return the answer's first line."""
    block = os.urandom(MiB)
    head = (
        f"POST http://{SINK}{path} HTTP/1.1\r\nHost: {SINK}\r\nContent-Length: {size}\r\n"
        "Connection: close\r\n\r\n"
    )

    def body() -> Iterator[bytes]:
        for i in range(size // len(block)):
            yield decoy + block[len(decoy) :] if i == 0 else block

    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head.encode())
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for chunk in body():
                sock.sendall(chunk)  # past the limit the proxy answers and stops reading
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := sock.recv(65536):
                answer += chunk
    return answer.split(b"\r\n", 1)[0]


def _one(root: Path, size: int) -> tuple[int, dict[str, object], bytes]:
    """Return a fresh proxy's peak RSS after one POST of ``size``, its record, its answer."""
    decoys = make_decoys()
    aws = next(d for d in decoys if d.name == "AWS_SECRET_ACCESS_KEY").value.encode()
    work = Path(tempfile.mkdtemp(dir=root))
    config = ProxyConfig(
        labels=[LABEL],
        confdir=work / "confdir",
        decoys=[DecoySpec(name=d.name, value=d.value) for d in decoys],
        log_path=work / "egress.jsonl",
        ready_path=work / "ready.json",
    )
    handle = start_proxy(config)
    try:
        answer = _post(handle.ports[LABEL], "/bench", size, aws)
        deadline = time.monotonic() + 60
        while not (records := parse_egress_log(config.log_path.read_bytes()).records):
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: the proxy logged no request:\n{answer!r}")
            time.sleep(0.05)
        return _peak_rss(handle.process.pid), records[-1], answer
    finally:
        handle.stop()


def bench_proxy_memory(rounds: int) -> None:
    """Print the proxy's peak RSS after each POST, the highest of ``rounds``, and the ratio."""
    root = Path(tempfile.mkdtemp(prefix="cujo-bench-proxy-"))
    try:
        peaks = dict.fromkeys(SIZES, 0)
        answers: dict[int, bytes] = {}
        for _ in range(rounds):  # interleaved, so drift hits both alike
            for size in SIZES:
                peak, record, answers[size] = _one(root, size)
                peaks[size] = max(peaks[size], peak)
                assert record["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"], record
                assert bool(record.get("unsearched")) == (size > BODY_SIZE), record
        small, big = SIZES
        print(f"proxy peak resident memory after one POST to a sunk host, highest of {rounds}:")
        print(f"  {small // MiB:4d} MiB POST (baseline): {peaks[small] / MiB:6.0f} MiB   "
              f"({answers[small].decode()})")  # fmt: skip
        print(
            f"  {big // MiB:4d} MiB POST           : {peaks[big] / MiB:6.0f} MiB   "
            f"({answers[big].decode()})   ratio {peaks[big] / peaks[small]:.2f}x, "
            f"{(peaks[big] - peaks[small]) / MiB:+.0f} MiB  (target < {PEAK_BOUND // MiB} MiB)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

"""The resolver's cost per query with names followed across queries (issue 20, item 6).

10,000 queries through ``Resolver.handle``, against the handling before ``dnsflow``
(each name parsed, scanned alone, logged and answered: ``dns_record`` and
``NameScanner.scan``), both measured here, interleaved, best of N. Two workloads: a test
suite's look-ups (a few dozen ordinary names, over and over) and a tunnel sending a
decoy-free hex stream eight characters and a counter per query.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cujo_action.find.decoys import make_decoys
from cujo_action.net.dns.record import dns_record
from cujo_action.net.dns.resolver import Resolver, ResolverConfig
from cujo_action.net.dns.wire import (
    RCODE_FORMERR,
    DnsFormatError,
    Query,
    answer_for,
    build_response,
    error_response,
    parse_query,
)
from cujo_action.net.helperconfig import DecoySpec

LABEL = "tests/test"
QUERIES = 10_000


def _message(name: str, ident: int) -> bytes:
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident & 0xFFFF, 0x0100, 1, 0, 0, 0) + qname + b"\0\1\0\1"


def _before(resolver: Resolver) -> Callable[[bytes], bytes | None]:
    """Return the handling as it was: the name scanned alone, no streams."""

    def handle(data: bytes) -> bytes | None:
        try:
            query: Query | None = parse_query(data)
        except DnsFormatError:
            query = None
        record = dns_record(
            ts=time.time(),
            label=LABEL,
            query=query,
            size=len(data),
            allow_hosts=resolver.config.allow_hosts,
            scanner=resolver.scanner,
            raw=data,
        )
        os.write(resolver._log_fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        if query is None:
            return error_response(data, RCODE_FORMERR)
        answer, rcode = answer_for(query, resolver.config.sink)
        return build_response(query, answer, rcode)

    return handle


def _workloads() -> dict[str, list[bytes]]:
    rnd = random.Random(20)
    names = ["api.github.com", "s3.amazonaws.com", "pypi.org", "files.pythonhosted.org"]
    names += [f"host-{i}.example.test" for i in range(30)]
    names += [f"d{secrets.token_hex(4)}.cloudfront.net" for _ in range(4)]
    suite = [rnd.choice(names) for _ in range(QUERIES)]
    stream = secrets.token_hex(QUERIES * 4)
    tunnel = [f"{stream[i * 8 : i * 8 + 8]}.{i}.t.exfil.test" for i in range(QUERIES)]
    return {
        "a suite's look-ups (38 names)": [_message(n, i) for i, n in enumerate(suite)],
        "hex tunnel, 8 chars a query": [_message(n, i) for i, n in enumerate(tunnel)],
    }


def bench_dns(rounds: int) -> None:
    """Print the time of 10,000 queries per workload, now and before, and their ratio."""
    root = Path(tempfile.mkdtemp(prefix="cujo-bench-dns-"))
    try:
        decoys = [DecoySpec(name=d.name, value=d.value) for d in make_decoys()]
        print(f"resolver: {QUERIES} queries through Resolver.handle, best of {rounds}:")
        for name, messages in _workloads().items():
            before = now = float("inf")
            for n in range(rounds):  # interleaved, so drift hits both alike
                config = ResolverConfig(
                    labels=[LABEL],
                    decoys=decoys,
                    log_path=root / f"egress-{n}.jsonl",
                    ready_path=root / "ready.json",
                )
                resolver = Resolver(config)  # fresh streams each round
                old = _before(resolver)
                start = time.perf_counter()
                for data in messages:
                    old(data)
                before = min(before, time.perf_counter() - start)
                start = time.perf_counter()
                for data in messages:
                    resolver.handle(LABEL, data)
                now = min(now, time.perf_counter() - start)
                resolver.close()
            print(f"  {name:<32} before (baseline): {before * 1e3:8.1f} ms "
                  f"({before / QUERIES * 1e6:5.1f} us/query)")  # fmt: skip
            print(f"  {name:<32} followed         : {now * 1e3:8.1f} ms "
                  f"({now / QUERIES * 1e6:5.1f} us/query)   ratio {now / before:.2f}x")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)

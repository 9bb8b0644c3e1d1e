"""The bundler reading the egress log as a stream into a digest, against the whole read (issue 20).

A 100,000-line log (a DNS flood of distinct names, and a mix of registry reads, plain
requests and a few decoy-bearing ones) made into every check's report egress two ways:
``egressdigest.read_egress`` from the file, line by line, and the code it replaced
(main before it, copied below as the baseline): ``read_bytes``, a list of every line,
``fit_egress`` per check. Wall time best of N, interleaved; peak memory traced once
each (``tracemalloc``: the Python heap both build); the ratios of the two.

Then a 200 MiB log of long lines to a different host each, a decoy last (the suite reads
the same flood at a 12th of the size, tests/cujo_action/evidence/test_egress_stream.py):
the digest against the bare line reader (``read_egress_log`` drained, nothing kept, the
floor of any reading), its peak against the log's size, and the decoy kept.
"""

from __future__ import annotations

import json
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from cujo_action.evidence.egressdigest import read_egress
from cujo_action.limits import EGRESS_DIGEST, MiB
from cujo_action.net.egress import (
    egress_from_record,
    egress_record,
    order_egress,
    parse_egress_log,
    read_egress_log,
)
from cujo_action.schema import CHECK_NAMES, MAX_EGRESS, REGISTRY_HOSTS, Egress

LINES = 100_000
FLOOD = 200 * MiB
FLOOD_PEAK = 64 * MiB  # the bound the suite held the 200 MiB log to before its twin

# --------------------------------------------------------------------------- the baseline
# bundle.py's fitting as it was before the stream (git show 2583bf5^:cujo_action/bundle.py).

_PHASES = {"install", "import", "test", "probe", "smoke"}


def _entry(check: str, n: int, group: list[dict[str, Any]]) -> Egress:
    first = group[0]
    url = str(first.get("url", ""))
    if len(group) > 1:
        url = f"{url} (+{len(group) - 1} more requests to this host)"
    total = sum(int(g.get("bytes_out", 0)) for g in group)
    record = {**first, "url": url, "bytes_out": max(int(first.get("bytes_out", 0)), total)}
    return egress_from_record(record, f"{check}:egress:{n}")


def _fold(
    lines: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]
) -> list[list[dict[str, Any]]]:
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault(key(line), []).append(line)
    return list(groups.values())


def _alike(line: dict[str, Any]) -> Hashable:
    if line.get("decoy_seen"):
        return id(line)
    fields = ("phase", "host", "method", "action", "route")
    return tuple(str(line.get(f)) for f in fields)


def _old_fit(check: str, lines: list[dict[str, Any]]) -> tuple[list[Egress], int]:
    mine = [ln for ln in lines if ln.get("check") == check and ln.get("phase") in _PHASES]
    kept: list[dict[str, Any]] = []
    forwarded: list[dict[str, Any]] = []
    for line in mine:
        if line.get("action") == "forwarded" and not line.get("decoy_seen"):
            forwarded.append(line)
        else:
            kept.append(line)
    folded = _fold(forwarded, lambda ln: (ln["phase"], str(ln.get("host")), str(ln.get("method"))))
    ordered = order_egress(kept, REGISTRY_HOSTS)
    groups = [[line] for line in ordered]
    if len(groups) + len(folded) > MAX_EGRESS:
        groups = _fold(ordered, _alike)
    entries = [*groups, *folded]
    out = [_entry(check, n, group) for n, group in enumerate(entries[:MAX_EGRESS], start=1)]
    return out, sum(len(group) for group in entries[MAX_EGRESS:])


def whole_read(log: Path) -> dict[str, tuple[list[Egress], int]]:
    """Return every check's egress as the bundler made it before: the whole log in a list."""
    lines, _ = parse_egress_log(log.read_bytes())
    return {check: _old_fit(check, lines) for check in CHECK_NAMES}


def streamed(log: Path) -> dict[str, tuple[list[Egress], int]]:
    """Return every check's egress from the log streamed into a digest."""
    with log.open("rb") as stream:
        digest = read_egress(stream, checks=CHECK_NAMES)
    out = {}
    for check in CHECK_NAMES:
        entries, dropped = digest.fit(check)
        out[check] = (entries, dropped.lines)
    return out


# --------------------------------------------------------------------------- the logs


def _dns_flood(n: int) -> dict[str, Any]:
    name = f"{n:08x}a1b2c3d4.t.tunnel.test"
    return egress_record(ts=1000 + n / 1000, label="tests/test", host=name, port=53,
                         method="DNS", url=f"dns://{name}/A", bytes_out=len(name),
                         action="sunk", route="dns")  # fmt: skip


def _mixed(n: int) -> dict[str, Any]:
    label = ("install/install", "install/import", "tests/test", "smoke/smoke")[n % 4]
    if n % 3:
        return egress_record(ts=n / 100, label=label, host="pypi.org", port=443, method="GET",
                             url=f"https://pypi.org/simple/pkg{n % 900}/", bytes_out=300,
                             action="forwarded")  # fmt: skip
    decoys = ("NPM_TOKEN",) if n % 5000 == 0 else ()
    return egress_record(ts=n / 100, label=label, host=f"h{n % 2000}.cdn.test", port=443,
                         method="POST" if decoys else "GET", url=f"https://h{n}.cdn.test/x",
                         bytes_out=900, action="sunk", decoy_seen=decoys,
                         decoy_where=["body"] if decoys else ())  # fmt: skip


def _write(path: Path, make: Callable[[int], dict[str, Any]]) -> None:
    with path.open("w") as fh:
        for n in range(LINES):
            fh.write(json.dumps(make(n), separators=(",", ":")) + "\n")


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench_egresslog(rounds: int) -> None:
    """Print the time and peak memory of both readings of each log, and their ratios."""
    print(f"bundling a {LINES:,}-line egress log into every check's egress, best of {rounds}:")
    with tempfile.TemporaryDirectory(prefix="cujo-bench-egress-") as tmp:
        for name, make in (("DNS flood, distinct names", _dns_flood), ("mixed", _mixed)):
            log = Path(tmp) / "egress.jsonl"
            _write(log, make)
            old, new = whole_read(log), streamed(log)
            same = all(
                [e.model_dump_json() for e in old[c][0]] == [e.model_dump_json() for e in new[c][0]]
                and old[c][1] == new[c][1]
                for c in CHECK_NAMES
            )
            assert same, f"{name}: the streamed digest's egress differs from the whole read's"
            t_old = t_new = float("inf")
            for _ in range(rounds):  # interleaved, so drift hits both alike
                start = time.perf_counter()
                whole_read(log)
                t_old = min(t_old, time.perf_counter() - start)
                start = time.perf_counter()
                streamed(log)
                t_new = min(t_new, time.perf_counter() - start)
            m_old, m_new = (
                _peak(lambda log=log: whole_read(log)),
                _peak(lambda log=log: streamed(log)),
            )
            size = log.stat().st_size / 2**20
            print(f"  {name} ({size:.1f} MiB):")
            print(f"    whole read (baseline): {t_old:6.2f} s, peak {m_old / 2**20:7.1f} MiB")
            print(
                f"    streamed digest      : {t_new:6.2f} s, peak {m_new / 2**20:7.1f} MiB   "
                f"time ratio {t_new / t_old:.2f}x, memory ratio {m_new / m_old:.3f}x"
            )


def _write_flood(path: Path, size: int) -> int:
    """Write ``size`` bytes of long lines to a different host each, then a decoy; return lines."""
    template = json.dumps(
        egress_record(ts=1.0, label="tests/test", host="HOST", port=443, method="GET",
                      url="https://HOST/" + "q" * 1500, bytes_out=100, action="sunk"),
        separators=(",", ":"),
    )  # fmt: skip
    head, mid, tail = template.split("HOST")
    decoy = egress_record(ts=99.0, label="tests/test", host="exfil.test", port=443,
                          method="POST", url="https://exfil.test/", bytes_out=100,
                          action="sunk", decoy_seen=("AWS_SECRET_ACCESS_KEY",))  # fmt: skip
    n = 0
    with path.open("w") as fh:
        while fh.tell() < size:
            fh.write("".join(f"{head}h{i}.flood.test{mid}h{i}.flood.test{tail}\n"
                             for i in range(n, n + 10_000)))  # fmt: skip
            n += 10_000
        fh.write(json.dumps(decoy) + "\n")
    return n + 1


def _bare(log: Path) -> None:
    with log.open("rb") as stream:
        for _ in read_egress_log(stream):
            pass


def _digest(log: Path) -> None:
    with log.open("rb") as stream:
        read_egress(stream, checks=CHECK_NAMES)


def bench_egress_flood(rounds: int) -> None:
    """Print the digest's time and peak memory on a 200 MiB flood, against the bare reader."""
    with tempfile.TemporaryDirectory(prefix="cujo-bench-egress-") as tmp:
        log = Path(tmp) / "egress.jsonl"
        total = _write_flood(log, FLOOD)
        size = log.stat().st_size
        with log.open("rb") as stream:
            digest = read_egress(stream, checks=CHECK_NAMES)
        entries, dropped = digest.fit("tests")
        assert entries[0].decoy_seen == ["AWS_SECRET_ACCESS_KEY"], entries[0]
        assert total > EGRESS_DIGEST, total
        assert dropped.uncounted_kinds > 0, dropped
        t_bare = t_digest = float("inf")
        for _ in range(rounds):  # interleaved, so drift hits both alike
            start = time.perf_counter()
            _bare(log)
            t_bare = min(t_bare, time.perf_counter() - start)
            start = time.perf_counter()
            _digest(log)
            t_digest = min(t_digest, time.perf_counter() - start)
        m_bare, m_digest = _peak(lambda: _bare(log)), _peak(lambda: _digest(log))
        print(f"streaming a {size / MiB:.0f} MiB egress log ({total:,} lines, a host each, "
              f"a decoy last) into every check's digest, best of {rounds}:")  # fmt: skip
        print(f"  bare line reader (baseline): {t_bare:6.2f} s, peak {m_bare / MiB:7.1f} MiB")
        print(
            f"  streamed digest            : {t_digest:6.2f} s, peak {m_digest / MiB:7.1f} MiB   "
            f"time ratio {t_digest / t_bare:.2f}x, peak {m_digest / size:.3f}x the log's size "
            f"(target < {FLOOD_PEAK // MiB} MiB), decoy kept"
        )

"""The egress log read as a stream: the report egress the whole log made, in bounded memory."""

from __future__ import annotations

import io
import json
import tracemalloc
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from bundlefactory import make_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cujo_action.evidence.bundle import attach_egress
from cujo_action.evidence.egressdigest import digest_records, read_egress
from cujo_action.limits import EGRESS_DIGEST, EGRESS_LOG_LINE, MiB
from cujo_action.net.egress import (
    RANK_EXPECTED,
    egress_from_record,
    egress_rank,
    egress_record,
    order_egress,
    parse_egress_log,
)
from cujo_action.schema import MAX_EGRESS, REGISTRY_HOSTS, Egress, parent_domain

# --------------------------------------------------------------------------- the reference
# What the bundle did before it streamed (main at 7b1c952..fb6f609): the whole log read
# into a list, then fitted per check. Copied, with MAX_EGRESS made a parameter.

_PHASES = {"install", "import", "test", "probe", "smoke"}


def _ref_parse(data: bytes) -> tuple[list[dict[str, Any]], int]:
    keys = set(egress_record(ts=0, label="install/install", host="", port=0, method="",
                             url="", bytes_out=0, action="sunk"))  # fmt: skip
    records, bad = [], 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(record, dict) or not record.keys() >= keys:
            bad += 1
            continue
        records.append(record)
    return records, bad


def _ref_entry(check: str, n: int, group: list[dict[str, Any]]) -> Egress:
    first = group[0]
    url = str(first.get("url", ""))
    if len(group) > 1:
        url = f"{url} (+{len(group) - 1} more requests to this host)"
    total = sum(int(g.get("bytes_out", 0)) for g in group)
    record = {**first, "url": url, "bytes_out": max(int(first.get("bytes_out", 0)), total)}
    return egress_from_record(record, f"{check}:egress:{n}")


def _ref_fold(
    lines: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]
) -> list[list[dict[str, Any]]]:
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault(key(line), []).append(line)
    return list(groups.values())


def _ref_alike(line: dict[str, Any]) -> Hashable:
    if line.get("decoy_seen"):
        return id(line)
    if line.get("dns_tunnel"):
        # Changed with the digest (not in the copy): a tunnel's queries fold per domain.
        return ("tunnel", line.get("phase"), parent_domain(str(line.get("host", ""))))
    fields = ("phase", "host", "method", "action", "route")
    return tuple(str(line.get(f)) for f in fields)


def ref_fit(
    check: str, lines: list[dict[str, Any]], egress_allow: Sequence[str], cap: int
) -> tuple[list[Egress], list[dict[str, Any]]]:
    mine = [ln for ln in lines if ln.get("check") == check and ln.get("phase") in _PHASES]
    kept: list[dict[str, Any]] = []
    forwarded: list[dict[str, Any]] = []
    expected = [*REGISTRY_HOSTS, *egress_allow]
    for line in mine:
        # A registry read a rule acts on (one that could not be searched) is no plain read.
        plain = egress_rank(line, expected) >= RANK_EXPECTED
        if line.get("action") == "forwarded" and not line.get("decoy_seen") and plain:
            forwarded.append(line)
        else:
            kept.append(line)
    folded = _ref_fold(
        forwarded, lambda ln: (ln["phase"], str(ln.get("host")), str(ln.get("method")))
    )
    ordered = order_egress(kept, [*REGISTRY_HOSTS, *egress_allow])
    groups = [[line] for line in ordered]
    if len(groups) + len(folded) > cap:
        groups = _ref_fold(ordered, _ref_alike)
    entries = [*groups, *folded]
    out = [_ref_entry(check, n, group) for n, group in enumerate(entries[:cap], start=1)]
    return out, [line for group in entries[cap:] for line in group]


# --------------------------------------------------------------------------- random logs

# Few values of each field, so lines the rules cannot tell apart are common and fold.
CHECK_PHASES = [("install", "install"), ("install", "import"), ("tests", "test"),
                ("tests", "test"), ("tests", "test"), ("smoke", "smoke"),
                ("base", "install")]  # fmt: skip
HOSTS = ["pypi.org", "a.flood.test", "a.flood.test", "b.flood.test", "c.ok.test"]


@st.composite
def log_line(draw: st.DrawFn) -> dict[str, Any]:
    check, phase = draw(st.sampled_from(CHECK_PHASES))
    decoys = draw(st.sampled_from([(), (), (), ("NPM_TOKEN",)]))
    return egress_record(
        ts=draw(st.sampled_from([1.0, 2.0, 2.5, 3.0, 10.0])),
        label=f"{check}/{phase}",
        host=draw(st.sampled_from(HOSTS)),
        port=443,
        method=draw(st.sampled_from(["GET", "GET", "POST"])),
        url=f"https://x.test/{draw(st.integers(0, 99))}",
        bytes_out=draw(st.integers(0, 5000)),
        action=draw(st.sampled_from(["forwarded", "sunk", "sunk", "registry-write"])),
        decoy_seen=decoys,
        decoy_where=["body"] if decoys else (),
        route=draw(st.sampled_from(["proxy", "proxy", "proxy", "direct"])),
        dns_name=draw(st.sampled_from(["", "", "doh.test"])),
        unsearched=draw(st.sampled_from(["", "", "", "body over 64 MiB"])),
        opaque=draw(st.booleans()),
        dns_tunnel=draw(st.sampled_from([False, False, False, True])),
    )


def serialize(items: list[dict[str, Any] | str], seps: list[str]) -> bytes:
    out = []
    for n, item in enumerate(items):
        text = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
        out.append(text + seps[n % len(seps)])
    return "".join(out).encode()


ITEM = st.one_of(log_line(), log_line(), log_line(), st.sampled_from(['{"ts": 1', "garbage", "[]"]))
# Lengths drawn uniformly: hypothesis would otherwise favour logs too short to fold.
LOGS = st.integers(0, 80).flatmap(lambda n: st.lists(ITEM, min_size=n, max_size=n))
SEPARATORS = st.lists(st.sampled_from(["\n", "\n", "\r\n", "\r", "\n\n"]), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=LOGS,
    seps=SEPARATORS,
    cap=st.sampled_from([1, 2, 3, 5, 8, MAX_EGRESS]),
    allow=st.sampled_from([(), ("c.ok.test",), ("*.flood.test",)]),
)
def test_the_streamed_digest_fits_egress_as_the_whole_log_did(
    items: list[dict[str, Any] | str], seps: list[str], cap: int, allow: tuple[str, ...]
) -> None:
    data = serialize(items, seps)
    records, bad = _ref_parse(data)

    digest = read_egress(io.BytesIO(data), allow, max_entries=cap)

    assert (digest.records, digest.bad_lines) == (len(records), bad)
    assert parse_egress_log(data) == (records, bad)
    expected = [*REGISTRY_HOSTS, *allow]
    for check in ("install", "tests", "smoke", "base", "detonation"):
        want, want_dropped = ref_fit(check, records, allow, cap)
        got, dropped = digest.fit(check)
        assert [e.model_dump_json() for e in got] == [e.model_dump_json() for e in want]
        assert dropped.lines == len(want_dropped)
        telling = sum(1 for ln in want_dropped if egress_rank(ln, expected) < RANK_EXPECTED)
        assert dropped.telling == telling
        phases = Counter(str(ln.get("phase")) for ln in want_dropped)
        assert dropped.phase == (phases.most_common(1)[0][0] if want_dropped else "")
        assert dropped.uncounted_kinds == 0


def line(host: str, *, ts: float, label: str = "tests/test", **kw: Any) -> dict[str, Any]:
    kw.setdefault("action", "sunk")
    return egress_record(ts=ts, label=label, host=host, port=443, method=kw.pop("method", "GET"),
                         url=f"https://{host}/", bytes_out=100, **kw)  # fmt: skip


def test_over_the_cap_of_kinds_the_least_telling_are_only_counted() -> None:
    # Small caps, so the digest must evict: 100 kinds of plain lines, then a bypass.
    lines = [line(f"h{i}.flood.test", ts=i) for i in range(100)]
    shell = line("shell.test", ts=1000, method="TCP", action="refused", route="direct")
    digest = digest_records([*lines, shell], max_entries=5, cap=20)

    entries, dropped = digest.fit("tests")

    assert entries[0].host == "shell.test"
    assert [e.host for e in entries[1:]] == [f"h{i}.flood.test" for i in range(4)]
    assert dropped.lines == 101 - 5  # every line is counted, folded or not
    assert dropped.uncounted_kinds > 0
    assert dropped.uncounted_decoys == 0


def test_decoy_lines_over_the_cap_keep_the_earliest_and_say_so() -> None:
    stolen = [line("exfil.test", ts=i, decoy_seen=("NPM_TOKEN",)) for i in range(50)]
    report = make_report("tests", run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    digest = digest_records(stolen, max_entries=5, cap=20)

    entries, dropped = digest.fit("tests")
    final = attach_egress(report, digest, proxy_ok=True)

    assert [e.ts for e in entries] == [0, 1, 2, 3, 4]
    assert all(e.decoy_seen for e in entries)
    assert dropped.lines == 45
    assert dropped.uncounted_decoys == dropped.uncounted_kinds > 0
    cuts = {c.limit: c for c in final.cuts}
    assert "decoy-bearing" in cuts["report-egress"].detail
    assert cuts["egress-digest"].hides_danger
    assert not final.evidence_complete


def test_a_line_over_the_line_cap_is_skipped_and_counted_and_the_rest_read() -> None:
    before = line("before.test", ts=1)
    after = line("after.test", ts=3)
    huge = json.dumps(line("huge.test", ts=2) | {"url": "x" * EGRESS_LOG_LINE})
    data = serialize([before, huge, after], ["\n"])
    report = make_report("tests", run_id="r", base_sha="b" * 40, head_sha="a" * 40)

    digest = read_egress(io.BytesIO(data))
    final = attach_egress(report, digest, proxy_ok=True)

    assert (digest.records, digest.long_lines) == (2, 1)
    assert [e.host for e in final.egress] == ["before.test", "after.test"]
    (cut,) = [c for c in final.cuts if c.limit == "egress-log-line"]
    assert cut.dropped == 1
    assert cut.hides_danger
    assert parse_egress_log(data).bad_lines == 1


# --------------------------------------------------------------------------- a flood


def write_flood(path: Path, size: int, decoy: dict[str, Any]) -> int:
    """Write ``size`` bytes of lines to a different host each, then ``decoy``; return lines."""
    # Long URLs, as a request's can be: a large log in few lines, so the test is quick.
    template = json.dumps(
        line("HOST", ts=1.0) | {"url": "https://HOST/" + "q" * 1500}, separators=(",", ":")
    )
    head, mid, tail = template.split("HOST")
    n = 0
    with path.open("w") as fh:
        while fh.tell() < size:
            fh.write("".join(f"{head}h{i}.flood.test{mid}h{i}.flood.test{tail}\n"
                             for i in range(n, n + 1000)))  # fmt: skip
            n += 1000
        fh.write(json.dumps(decoy) + "\n")
    return n + 1


# The 200 MiB log against the real cap is `python -m bench --only egresslog`; here the
# same crossing at a 64th of the cap of kinds, on a log a 12th of the size.
FLOOD_CAP = EGRESS_DIGEST // 64


def test_a_log_past_the_cap_of_kinds_is_read_in_bounded_memory_and_its_last_decoy_kept(
    tmp_path: Path,
) -> None:
    log = tmp_path / "egress.jsonl"
    decoy = line("exfil.test", ts=99.0, method="POST", decoy_seen=("AWS_SECRET_ACCESS_KEY",))
    total = write_flood(log, 16 * MiB, decoy)
    size = log.stat().st_size
    assert size > 16 * MiB
    assert total > 4 * FLOOD_CAP

    tracemalloc.start()
    try:
        with log.open("rb") as stream:
            digest = read_egress(stream, checks=["tests"], cap=FLOOD_CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    report = make_report("tests", run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    final = attach_egress(report, digest, proxy_ok=True)

    # Held whole, the log's bytes alone would be its size (its records, several times it).
    assert peak < size // 2, f"peak {peak / MiB:.1f} MiB of a {size / MiB:.1f} MiB log"
    assert final.egress[0].host == "exfil.test"
    assert final.egress[0].decoy_seen == ["AWS_SECRET_ACCESS_KEY"]
    cuts = {c.limit: c for c in final.cuts}
    assert cuts["report-egress"].dropped == total - MAX_EGRESS
    assert cuts["report-egress"].hides_danger
    assert cuts["egress-digest"].dropped > 0
    assert not final.evidence_complete


def test_a_flood_of_tunnel_queries_never_pushes_out_the_decoy_sent_after_it() -> None:
    # Seen end to end: 900 look-ups the resolver marked as a tunnel, then the decoy posted;
    # ranked alike, the tunnel's lines filled the report and the decoy's was dropped.
    def line(n: int, **extra: object) -> dict[str, object]:
        return {"ts": float(n), "label": "install/install", "check": "install",
                "phase": "install", "host": f"n{n}.noise{n % 97}.example.test", "port": 53,
                "method": "DNS", "url": "dns:x", "bytes_out": 60, "action": "sunk",
                "decoy_seen": [], "decoy_where": [], "route": "dns", **extra}  # fmt: skip

    flood = [line(n, dns_tunnel=True) for n in range(900)]
    sent = line(901, host="collector.exfil.test", method="POST", decoy_seen=["NPM_TOKEN"])
    data = "".join(json.dumps(r) + "\n" for r in [*flood, sent]).encode()
    kept = read_egress(io.BytesIO(data), ()).fit("install").entries
    assert kept[0].decoy_seen == ["NPM_TOKEN"]
    # The tunnel's queries fold into one entry for their parent domain.
    tunnels = [e for e in kept if e.dns_tunnel]
    assert len(tunnels) == 1
    assert "(+899 more" in tunnels[0].url

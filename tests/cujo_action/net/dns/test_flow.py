"""Names followed across queries: a decoy sent a few characters per query, and tunnels."""

from __future__ import annotations

import base64
import random
import secrets
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.limits import DNS_REASSEMBLY, LIMITS
from cujo_action.net.dns import flow as dnsflow
from cujo_action.net.dns.flow import (
    SCAN_OVERLAP,
    TUNNEL_NAMES,
    NameFlow,
    merge_flow,
)
from cujo_action.net.dns.resolver import Resolver, ResolverConfig
from cujo_action.net.egress import (
    RANK_RUNTIME_UNEXPECTED,
    RANK_UNREAD,
    egress_from_record,
    egress_rank,
    parse_egress_log,
)
from cujo_action.net.helperconfig import DecoySpec
from cujo_action.schema import registrable_length

DECOYS = make_decoys()
MATCHER = DecoyMatcher(DECOYS)
LABEL = "install/install"
ENCODERS = {
    "hex": lambda b: b.hex(),
    "base32": lambda b: base64.b32encode(b).decode().rstrip("=").lower(),
    "base64": lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="),
}
NOISE = ["api.github.com", "s3.amazonaws.com", "pypi.org", "files.pythonhosted.org"]


def names(data: str, size: int, seq: str | None, zone: str = "t.exfil.test") -> list[str]:
    """Return the query names that send ``data`` ``size`` characters at a time."""
    out = []
    for i in range(0, len(data), size):
        labels = [data[i : i + size]]
        if seq == "before":
            labels.insert(0, str(i // size))
        elif seq == "after":
            labels.append(f"{i // size:04d}")
        out.append(".".join([*labels, zone]))
    return out


def follow(
    flow: NameFlow, name: str, pid: int | None = 1, label: str = LABEL
) -> dnsflow.FlowResult:
    return flow.follow(label, pid, [p.encode() for p in name.split(".")])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    decoy=st.sampled_from([d for d in DECOYS if len(d.value) >= 24]),
    encoding=st.sampled_from(sorted(ENCODERS)),
    size=st.integers(1, 63),
    seq=st.sampled_from([None, "before", "after"]),
    per_query=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_a_decoy_sent_in_chunks_of_any_size_is_found_joined(
    decoy: Decoy, encoding: str, size: int, seq: str | None, per_query: bool, seed: int
) -> None:
    rnd = random.Random(seed)
    flow = NameFlow(MATCHER)
    found: list[tuple[list[str], list[str]]] = []
    for n, name in enumerate(names(ENCODERS[encoding](decoy.value.encode()), size, seq)):
        if rnd.random() < 0.3:  # other names between, from the same process and others
            follow(flow, rnd.choice(NOISE), pid=rnd.choice([1, 2]))
        # A process per query (nslookup in a shell loop): a new pid each time.
        result = follow(flow, name, pid=100 + n if per_query else 1)
        if result.seen:
            found.append((result.seen, result.where))
            break  # the first find is the one asserted on (a long decoy has thousands)
    assert found, "the decoy was never found"
    assert decoy.name in found[0][0]
    assert all(w.startswith("dns:joined+") for w in found[0][1])


# A token whose every four characters hold one that hex writes with a letter (j, K, z...):
# a chunk of eight hex digits and nothing else reads as a counter, and joins a query late
# (the session's random token had one, 2 in 300 do), which these positions do not test.
FIXED = Decoy("GITHUB_TOKEN", "ghs_jA1bKc2DzE3fLG4hmI5pNQ6roS7tOU8vZW9x", "GITHUB_TOKEN", None)
FIXED_MATCHER = DecoyMatcher((FIXED,))


def test_the_query_that_completes_the_slice_carries_the_decoy_and_the_next_not() -> None:
    flow = NameFlow(FIXED_MATCHER)
    results = [follow(flow, n) for n in names(FIXED.value.encode().hex(), 8, None)]
    first = next(i for i, r in enumerate(results) if r.seen)
    # A slice of 20 characters is 40 hex: the fifth eight-character chunk completes it.
    assert first == 4
    assert results[first].seen == ["GITHUB_TOKEN"]
    assert results[first].where == ["dns:joined+hex"]
    assert results[first + 1].seen == []  # the overlap holds the slice, found already


def test_a_chunk_of_digits_only_joins_all_the_same() -> None:
    # "1234" is 31323334 in hex: a label of digits only, read first as a counter. The
    # token is still found, joined whole, at most one query after the slice is complete.
    digits = Decoy("GITHUB_TOKEN", "ghs_jA1b1234zE3fLG4hmI5pNQ6roS7tOU8vZW9x", "GITHUB_TOKEN", None)
    flow = NameFlow(DecoyMatcher((digits,)))
    results = [follow(flow, n) for n in names(digits.value.encode().hex(), 8, None)]
    first = next(i for i, r in enumerate(results) if r.seen)
    assert first in (4, 5)
    assert results[first].seen == ["GITHUB_TOKEN"]
    assert results[first].where == ["dns:joined+hex"]


def test_random_chunks_carry_no_decoy() -> None:
    flow = NameFlow(MATCHER)
    for name in names(secrets.token_hex(400), 8, "after"):
        assert follow(flow, name).seen == []


def test_the_resolver_marks_the_query_line_that_completes_a_decoy(tmp_path: Path) -> None:
    config = ResolverConfig(
        labels=[LABEL],
        decoys=[DecoySpec(name=d.name, value=d.value) for d in DECOYS],
        log_path=tmp_path / "egress.jsonl",
        ready_path=tmp_path / "ready.json",
    )
    resolver = Resolver(config)
    value = next(d for d in DECOYS if d.name == "NPM_TOKEN").value
    try:
        for n, name in enumerate(names(value.encode().hex(), 8, "after")):
            qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
            header = struct.pack("!HHHHHH", n, 0x0100, 1, 0, 0, 0)
            assert resolver.handle(LABEL, header + qname + b"\0\1\0\1") is not None
    finally:
        resolver.close()
    records = parse_egress_log(config.log_path.read_bytes()).records
    marked = [r for r in records if r["decoy_seen"]]
    assert marked
    assert marked[0]["decoy_seen"] == ["NPM_TOKEN"]
    assert marked[0]["decoy_where"] == ["dns:joined+hex"]
    assert egress_rank(marked[0], []) == 0
    assert not records[0]["decoy_seen"]


# --------------------------------------------------------------------------- tunnels


def tunnel_marks(queries: list[str], label: str = LABEL, pid: int | None = None) -> list[int]:
    flow = NameFlow(MATCHER)
    return [i for i, name in enumerate(queries) if follow(flow, name, pid, label).tunnel]


def test_many_distinct_random_labels_under_one_domain_are_a_tunnel_from_the_threshold() -> None:
    below = [f"{secrets.token_hex(8)}.t.exfil.test" for _ in range(TUNNEL_NAMES - 2)]
    assert tunnel_marks(below) == []
    over = [f"{secrets.token_hex(8)}.{i}.t.exfil.test" for i in range(TUNNEL_NAMES * 3)]
    marks = tunnel_marks(over)
    assert marks
    assert TUNNEL_NAMES - 1 <= marks[0] <= TUNNEL_NAMES + 2  # the zone's t is learnt first
    assert marks == list(range(marks[0], len(over)))  # from the threshold on


def test_short_chunks_are_a_tunnel_by_their_bytes() -> None:
    one_char = [f"{secrets.token_hex(1)[0]}.{i}.t.exfil.test" for i in range(3000)]
    assert tunnel_marks(one_char)
    # Without a counter, a one-character label is one of 16: never many distinct names.
    assert tunnel_marks([f"{secrets.token_hex(1)[0]}.t.exfil.test" for _ in range(3000)]) == []


def test_benign_lookups_are_no_tunnel() -> None:
    rnd = random.Random(7)
    hosts = [f"host-{i}.example.test" for i in range(48)]
    cdn = [f"d{secrets.token_hex(4)}.cloudfront.net" for _ in range(8)]
    suite = [rnd.choice([*NOISE, *hosts, *cdn]) for _ in range(3000)]
    assert tunnel_marks(suite, "tests/test") == []
    # A name counting up is a counter, not data, however many.
    assert tunnel_marks([f"host-{i}.example.test" for i in range(5000)]) == []
    shuffled = [f"worker-{i}.example.test" for i in range(5000)]
    rnd.shuffle(shuffled)
    assert tunnel_marks(shuffled) == []


def test_a_tunnel_is_counted_per_label() -> None:
    flow = NameFlow(MATCHER)
    for i in range(TUNNEL_NAMES * 2 - 4):  # under the threshold in each label
        label = ("install/install", "tests/test")[i % 2]
        assert not follow(flow, f"{secrets.token_hex(8)}.t.exfil.test", None, label).tunnel


def test_dns_tunnel_is_carried_to_the_report_and_ranked_critical_early() -> None:
    record = {
        "ts": 1.0, "label": LABEL, "check": "install", "phase": "install",
        "host": "ab12cd34.t.exfil.test", "port": 53, "method": "DNS",
        "url": "dns:ab12cd34.t.exfil.test?type=A", "bytes_out": 60, "action": "sunk",
        "decoy_seen": [], "decoy_where": [], "route": "dns",
    }  # fmt: skip
    assert egress_from_record(record, "install:egress:1").dns_tunnel is False
    merge_flow(record, dnsflow.FlowResult([], [], True))
    assert egress_from_record(record, "install:egress:1").dns_tunnel is True
    # Kept ahead of plain lines in every phase (a rule acts on it in every phase).
    assert egress_rank(record, []) == RANK_UNREAD
    assert egress_rank({**record, "phase": "test"}, []) == RANK_UNREAD
    assert egress_rank({**record, "dns_tunnel": False, "phase": "test"}, []) == (
        RANK_RUNTIME_UNEXPECTED
    )


# --------------------------------------------------------------------------- bounds


def test_the_window_and_the_streams_are_bounded() -> None:
    flow = NameFlow(MATCHER, max_streams=8)
    for i in range(40):
        follow(flow, f"{secrets.token_hex(30)}.{secrets.token_hex(30)}.z{i % 20}.test", pid=i % 3)
    # Of each kind: by parent domain, by process too, and each process across parents.
    assert len(flow.streams) == 8 + 8 + 3
    # 40 queries, each new to both kinds (z0 comes back after z19 evicted it): 40 - 8 each.
    assert flow.evicted == (40 - 8) * 2
    flow = NameFlow(MATCHER)
    for _ in range(2000):
        follow(flow, f"{secrets.token_hex(30)}.t.exfil.test")
    assert all(s.size <= DNS_REASSEMBLY for s in flow.streams.values())
    assert all(len(s.joined) <= SCAN_OVERLAP for s in flow.streams.values())
    assert LIMITS["dns-streams"].value == dnsflow.DNS_STREAMS


def test_each_query_searches_its_new_bytes_and_a_bounded_overlap() -> None:
    """The search is linear in the bytes asked: no query re-reads the whole stream."""
    searched: list[int] = []

    class Counting(DecoyMatcher):
        def find(self, data: bytes, *, fold_case: bool = False) -> list[tuple[str, str]]:
            searched.append(len(data))
            return super().find(data, fold_case=fold_case)

    flow = NameFlow(Counting(DECOYS))
    queries = names(secrets.token_hex(20_000), 8, "after")
    for name in queries[:3]:  # the zone's labels are learnt: the window is read again
        follow(flow, name)
    searched.clear()
    for name in queries[3:]:
        follow(flow, name)
    # Per query: its eight characters and the overlap, with and without the counter.
    assert max(searched) <= 8 + 4 + SCAN_OVERLAP
    assert sum(searched) <= len(queries) * 2 * (8 + 4 + SCAN_OVERLAP)


def test_the_parent_domain_is_the_registrable_part() -> None:
    def parent(name: str) -> int:
        return registrable_length([p.encode() for p in name.split(".")])

    assert parent("ab.t.exfil.test") == 2
    assert parent("ab.evil.co.uk") == 3
    assert parent("ab.evil.com.au") == 3
    assert parent("ab.cloudfront.net") == 2
    assert parent("localhost") == 1


def test_a_name_asked_for_a_and_aaaa_is_one_look_up_and_asked_again_is_data() -> None:
    """getaddrinfo asks A and AAAA for each name: the data is not doubled."""
    token = next(d for d in DECOYS if d.name == "NPM_TOKEN")
    flow = NameFlow(MATCHER)
    seen = []
    for name in names(token.value.encode().hex(), 8, None):
        for qtype in (1, 28):
            seen += flow.follow(LABEL, 5, [p.encode() for p in name.split(".")], qtype).seen
    assert seen == ["NPM_TOKEN"] * len(seen)
    assert seen
    # One character a query, no counter: the same name asked again is the same data again.
    value = token.value
    flow = NameFlow(MATCHER)
    seen = []
    for char in value:
        for qtype in (1, 28):
            seen += flow.follow(LABEL, 5, [char.encode(), b"exfil", b"test"], qtype).seen
    assert "NPM_TOKEN" in seen


def test_glibc_asking_again_with_the_search_domain_is_the_same_look_up() -> None:
    """getent asks AAAA, then AAAA with resolv.conf's search domain, then A: one look-up."""
    token = next(d for d in DECOYS if d.name == "NPM_TOKEN")
    flow = NameFlow(MATCHER)
    seen = []
    for name in names(token.value.encode().hex(), 8, "after"):
        labels = [p.encode() for p in name.split(".")]
        for qtype, retry in ((28, False), (28, True), (1, False)):
            seen += flow.follow(LABEL, 5, labels, qtype, retry=retry).seen
    assert seen
    assert set(seen) == {"NPM_TOKEN"}
    # Without the retry flag the same name asked again for AAAA is new data, and the
    # doubled chunks hide the decoy: what the flag is for.
    flow = NameFlow(MATCHER)
    doubled = []
    for name in names(token.value.encode().hex(), 8, "after"):
        labels = [p.encode() for p in name.split(".")]
        for qtype in (28, 28, 1):
            doubled += flow.follow(LABEL, 5, labels, qtype).seen
    assert doubled == []


# --------------------------------------------------------------------------- forgotten streams


def _resolve_all(tmp_path: Path, queries: list[tuple[str, str]]) -> list[dict[str, object]]:
    """Ask the logging resolver each (label, name) in turn; return its log lines."""
    labels = sorted({label for label, _ in queries})
    tmp_path.mkdir(exist_ok=True)
    config = ResolverConfig(
        labels=labels,
        decoys=[DecoySpec(name=d.name, value=d.value) for d in DECOYS],
        log_path=tmp_path / "egress.jsonl",
        ready_path=tmp_path / "ready.json",
    )
    resolver = Resolver(config)
    try:
        for n, (label, name) in enumerate(queries):
            qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
            header = struct.pack("!HHHHHH", n & 0xFFFF, 0x0100, 1, 0, 0, 0)
            assert resolver.handle(label, header + qname + b"\0\1\0\1") is not None
    finally:
        resolver.close()
    return parse_egress_log(config.log_path.read_bytes()).records


def test_cycling_parent_domains_to_make_reassembly_forget_is_named_unsearched(
    tmp_path: Path,
) -> None:
    """Half a token, then more distinct parents than the streams kept, then the rest."""
    # 32 characters of the token: each half alone is shorter than a counting slice.
    token = next(d for d in DECOYS if d.name == "NPM_TOKEN").value[4:36].encode().hex()
    chunks = names(token, 8, "after")
    half = len(chunks) // 2
    joined = _resolve_all(tmp_path / "whole", [(LABEL, q) for q in chunks])
    assert any(r["decoy_seen"] for r in joined)  # followed whole, the chunks are found
    flood = [f"{secrets.token_hex(4)}.a.d{i}.test" for i in range(dnsflow.DNS_STREAMS + 8)]
    queries = [*chunks[:half], *flood, *chunks[half:]]
    records = _resolve_all(tmp_path, [(LABEL, q) for q in queries])
    rest = records[-(len(chunks) - half) :]
    assert not any(r["decoy_seen"] for r in records)  # what was forgotten is gone...
    reason = str(rest[0]["unsearched"])
    assert reason.startswith("DNS reassembly forgot this stream")  # ...and that is said
    assert f"limit of {dnsflow.DNS_STREAMS}" in reason
    assert egress_rank(rest[0], []) == RANK_UNREAD
    assert egress_from_record(rest[0], "install:egress:1").unsearched == reason
    # The flood's own one-off look-ups came back to nothing forgotten: none is marked.
    assert not any(r.get("unsearched") for r in records[: half + len(flood)])
    assert LIMITS["dns-streams"].hides_danger


def test_a_suite_with_many_hosts_and_processes_marks_nothing(tmp_path: Path) -> None:
    """Hundreds of one-off look-ups between a suite's repeated ones forget nothing it uses."""
    flow = NameFlow(MATCHER)
    for round_ in range(3):
        for host in ("files.pythonhosted.org", "registry.npmjs.org", "api.github.com"):
            assert follow(flow, host, pid=7).forgotten == 0
        # A process per look-up (curl in a loop), each its own stream under one parent.
        for i in range(dnsflow.DNS_STREAMS):
            assert (
                follow(flow, f"svc{i % 40}.db.example.test", pid=1000 + round_ * 1000 + i).forgotten
                == 0
            )
    assert flow.evicted > 0  # streams were forgotten, and nothing came back to one


def test_a_query_coming_back_to_a_forgotten_stream_says_how_many_were_forgotten() -> None:
    flow = NameFlow(MATCHER, max_streams=4)
    assert follow(flow, "aaaa.one.test", pid=None).forgotten == 0
    for i in range(6):
        follow(flow, f"bbbb.p{i}.test", pid=None, label="tests/test")
        follow(flow, f"bbbb.q{i}.test", pid=None)
    back = follow(flow, "cccc.one.test", pid=None)
    assert back.forgotten == flow.evicted_by_label[LABEL] > 0
    record: dict[str, object] = {"decoy_seen": [], "decoy_where": []}
    merge_flow(record, back)
    assert str(record["unsearched"]).startswith("DNS reassembly forgot this stream")
    # Asked again while it is followed: nothing more is said.
    assert follow(flow, "dddd.one.test", pid=None).forgotten == 0


def test_a_counter_before_one_digit_of_data_is_told_from_the_data() -> None:
    # Found by the property test above: hex one character a query, a counter label before
    # it ("7.4.t.exfil.test"); both labels are digits, and the data was taken for the
    # counter. The counter is the label that goes up by one.
    password = next(d for d in DECOYS if len(d.value) >= 24)
    flow = NameFlow(MATCHER)
    seen = [follow(flow, n).seen for n in names(password.value.encode().hex(), 1, "before")]
    assert any(password.name in s for s in seen)


# --------------------------------------------------------------------------- across parents


def across(data: str, size: int, zones: list[str]) -> list[str]:
    """Return query names sending ``data`` ``size`` characters at a time, each chunk under
    the next of ``zones`` in turn (no zone sees a whole slice)."""
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    return [f"{chunk}.{zones[n % len(zones)]}" for n, chunk in enumerate(chunks)]


ZONES = ["t.one.test", "t.two.test", "t.three.test"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    decoy=st.sampled_from([d for d in DECOYS if len(d.value) >= 24]),
    encoding=st.sampled_from(sorted(ENCODERS)),
    size=st.integers(1, 12),
    zones=st.integers(2, 5),
)
def test_pieces_under_several_parent_domains_from_one_process_are_found_joined(
    decoy: Decoy, encoding: str, size: int, zones: int
) -> None:
    places = [f"t.z{i}.test" for i in range(zones)]
    queries = across(ENCODERS[encoding](decoy.value.encode()), size, places)
    flow = NameFlow(MATCHER)
    asked = 0
    for asked, query in enumerate(queries, 1):  # noqa: B007 (asked: how many it took)
        if (found := follow(flow, query, pid=9)).seen:
            break
    assert found.seen, "the pieces were never joined"
    assert decoy.name in found.seen
    assert all(w.startswith("dns:joined+") for w in found.where)
    # The control: the same queries without the asking process (no stream across
    # parents) join nothing (each parent sees every zones-th chunk only).
    control = NameFlow(MATCHER)
    assert not [r for q in queries[:asked] if (r := follow(control, q, pid=None)).seen]


def test_zones_of_their_own_under_each_parent_are_left_out_of_the_join() -> None:
    """``<piece>.t.one.exfil.test``, ``<piece>.t.two.evil.test``…: each parent's own zone
    labels (``t.one``) are static under it, and read so once it has seen two queries."""
    token = next(d for d in DECOYS if d.name == "NPM_TOKEN").value.encode().hex()
    zones = ["t.one.exfil.test", "t.two.evil.test", "t.three.other.test"]
    queries = across(token, 8, zones)
    flow = NameFlow(MATCHER)
    assert not [r for q in queries if (r := follow(flow, q, pid=None)).seen]  # the control
    flow = NameFlow(MATCHER)
    found = [r for q in queries for qtype in (1, 28) if (r := flow.follow(
        LABEL, 8, [p.encode() for p in q.split(".")], qtype)).seen]  # fmt: skip
    assert [r.seen for r in found] == [["NPM_TOKEN"]]
    assert found[0].where == ["dns:joined+hex"]


def test_the_stream_across_parents_starts_with_what_the_first_parent_held() -> None:
    """The first chunks under one parent, the rest under another: the join spans both."""
    token = FIXED.value.encode().hex()
    queries = [f"{token[i : i + 8]}.t.one.test" for i in range(0, 24, 8)]
    queries += [f"{token[i : i + 8]}.t.two.test" for i in range(24, len(token), 8)]
    flow = NameFlow(FIXED_MATCHER)
    results = [follow(flow, q, pid=4) for q in queries]
    first = next(i for i, r in enumerate(results) if r.seen)
    assert first == 4  # 40 hex characters: the fifth chunk completes the first slice
    assert results[first].seen == ["GITHUB_TOKEN"]


def test_many_random_labels_from_one_process_across_domains_are_a_tunnel() -> None:
    spread = [f"{secrets.token_hex(8)}.t.d{i % 7}.test" for i in range(TUNNEL_NAMES * 3)]
    # Under each parent domain alone, under the threshold: only the process's stream
    # across them counts enough.
    assert tunnel_marks(spread, pid=None) == []
    marks = tunnel_marks(spread, pid=5)
    assert marks
    assert marks[0] <= TUNNEL_NAMES + 2
    assert marks == list(range(marks[0], len(spread)))


def test_one_process_asking_an_ordinary_suites_names_across_domains_is_no_tunnel() -> None:
    rnd = random.Random(11)
    hosts = [f"host-{i}.example.test" for i in range(48)]
    cdn = [f"d{secrets.token_hex(4)}.cloudfront.net" for _ in range(8)]
    services = [f"{name}.{zone}" for name in ("api", "www", "cdn", "static") for zone in
                ("a.test", "b.test", "c.example", "d.example")]  # fmt: skip
    suite = [rnd.choice([*NOISE, *hosts, *cdn, *services]) for _ in range(3000)]
    assert tunnel_marks(suite, "tests/test", pid=3) == []


def test_a_process_stream_across_parents_forgotten_and_asked_again_is_named() -> None:
    flow = NameFlow(MATCHER, max_streams=4)
    follow(flow, "aaaa.t.one.test", pid=1)
    assert follow(flow, "bbbb.t.two.test", pid=1).forgotten == 0  # its stream across starts
    for other in range(10, 16):  # other processes that cross parents too
        follow(flow, "cccc.t.one.test", pid=other)
        follow(flow, "dddd.t.two.test", pid=other)
    back = follow(flow, "eeee.t.two.test", pid=1)
    assert back.forgotten > 0
    # Processes that never cross a parent keep no stream across parents: none forgotten.
    flow = NameFlow(MATCHER, max_streams=4)
    follow(flow, "aaaa.t.one.test", pid=1)
    follow(flow, "bbbb.t.two.test", pid=1)
    for other in range(10, 200):
        assert follow(flow, f"x{other}.t.one.test", pid=other).forgotten == 0
    assert follow(flow, "eeee.t.two.test", pid=1).forgotten == 0

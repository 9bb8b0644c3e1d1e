"""Run the logging resolver: log every query name, answer every name with the sink address."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cujo_action.decoys import MIN_NEEDLE, Decoy, DecoyMatcher
from cujo_action.proxy import (
    Action,
    DecoySpec,
    decide,
    die_with_parent,
    egress_record,
    normalize_host,
    split_label,
)
from cujo_action.schema import REGISTRY_HOSTS, clip

# A sandbox's namespace (netns.py) sends every UDP and TCP packet to port 53 here, to the
# listener of its phase, so the port names the label as in the proxy. Every query becomes
# one JSON line in the egress log format, method "DNS":
#
#     {"ts": ..., "label": "install/install", "check": "install", "phase": "install",
#      "host": "6768705f....exfil.test", "port": 53, "method": "DNS",
#      "url": "dns:6768705f....exfil.test?type=A", "bytes_out": 97, "action": "sunk",
#      "decoy_seen": ["GITHUB_TOKEN"], "decoy_where": ["dns:hex"]}
#
# Every name, registry or not, gets the same A record, the sink address, and nothing is
# ever resolved upstream (so no query leaks the name out, the classic DNS exfiltration).
# The sink is routed into the host side of the veth, where all TCP goes to the
# transparent proxy: a client that ignores proxy variables resolves, connects and its
# whole HTTP(S) request is logged, and for an allowed registry the proxy forwards by name.
# NXDOMAIN would show only the name, and would tell malware it is in a sandbox.
# AAAA and other types get an empty answer (the namespace has no IPv6), so clients fall
# back to A. ``action`` says what the proxy does with that name's traffic: "forwarded"
# for allowed hosts, "sunk" otherwise; the query itself is always answered here.

SINK_ADDRESS = "198.18.0.1"  # RFC 2544 benchmarking range: never a real host
DNS_METHOD = "DNS"
DNS_PORT = 53
TTL = 1  # short, so a client asks again and every lookup is seen
MAX_TCP_MESSAGE = 65535

QTYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA"}
QTYPES.update({33: "SRV", 64: "SVCB", 65: "HTTPS", 255: "ANY"})
_TYPE_A, _TYPE_ANY, _CLASS_IN = 1, 255, 1
RCODE_OK, RCODE_FORMERR, RCODE_NOTIMP = 0, 1, 4


class DnsFormatError(ValueError):
    """A message that is not a well-formed single-question DNS query."""


# --------------------------------------------------------------------------- wire format


@dataclass(frozen=True)
class Query:
    """The parts of a DNS query the resolver acts on."""

    ident: int
    flags: int
    labels: tuple[bytes, ...]
    qtype: int
    qclass: int
    question: bytes  # the question section as sent, echoed in the answer

    @property
    def name(self) -> str:
        """Return the query name as text, without the root dot."""
        return ".".join(label.decode("ascii", "backslashreplace") for label in self.labels)

    @property
    def opcode(self) -> int:
        """Return the query's opcode (0 is a standard query)."""
        return (self.flags >> 11) & 0xF


def parse_query(data: bytes) -> Query:
    """Return the query in a DNS message, or raise DnsFormatError."""
    if len(data) < 12:
        raise DnsFormatError("shorter than a DNS header")
    ident, flags, qdcount = struct.unpack("!HHH", data[:6])
    if flags & 0x8000:
        raise DnsFormatError("a response, not a query")
    if qdcount != 1:
        raise DnsFormatError(f"{qdcount} questions")
    labels: list[bytes] = []
    pos = 12
    while True:
        if pos >= len(data):
            raise DnsFormatError("name runs past the message")
        length = data[pos]
        if length & 0xC0:
            # Queries never need compression; a pointer here is malformed or hostile.
            raise DnsFormatError("compressed or extended label in a question")
        pos += 1
        if length == 0:
            break
        labels.append(data[pos : pos + length])
        pos += length
    if pos + 4 > len(data) or sum(len(lb) + 1 for lb in labels) + 1 > 255:
        raise DnsFormatError("truncated question or name longer than 255 bytes")
    qtype, qclass = struct.unpack("!HH", data[pos : pos + 4])
    return Query(ident, flags, tuple(labels), qtype, qclass, data[12 : pos + 4])


def build_response(query: Query, answer: str | None, rcode: int = RCODE_OK) -> bytes:
    """Return the response to ``query``: one A record for ``answer``, or none."""
    # QR, the query's opcode and RD, RA; no EDNS (a server may answer without it).
    flags = 0x8000 | (query.flags & 0x7900) | 0x0080 | rcode
    answers = b""
    if answer is not None and rcode == RCODE_OK:
        # Name: a pointer to the question's name at offset 12.
        answers = struct.pack("!HHHIH", 0xC00C, _TYPE_A, _CLASS_IN, TTL, 4)
        answers += ipaddress.IPv4Address(answer).packed
    header = struct.pack("!HHHHHH", query.ident, flags, 1, 1 if answers else 0, 0, 0)
    return header + query.question + answers


def error_response(data: bytes, rcode: int) -> bytes | None:
    """Return a question-less error reply to a message whose header parses, else None."""
    if len(data) < 12 or data[2] & 0x80:
        return None
    ident, flags = struct.unpack("!HH", data[:4])
    return struct.pack("!HHHHHH", ident, 0x8000 | (flags & 0x7900) | 0x0080 | rcode, 0, 0, 0, 0)


def answer_for(query: Query, sink: str) -> tuple[str | None, int]:
    """Return (the A record to give or None, rcode) for a parsed query."""
    if query.opcode != 0:
        return None, RCODE_NOTIMP
    if query.qclass == _CLASS_IN and query.qtype in (_TYPE_A, _TYPE_ANY):
        return sink, RCODE_OK
    return None, RCODE_OK


# --------------------------------------------------------------------------- decoys in names


def _base32_needles(raw: bytes) -> list[tuple[bytes, str]]:
    """Return upper-case base32 needles (both alphabets) that find ``raw`` at any offset."""
    out: list[tuple[bytes, str]] = []
    for encode in (base64.b32encode, base64.b32hexencode):
        for offset in range(5):
            # As with base64: groups of 5 bytes that mix in unknown neighbours are dropped.
            padded = b"\0" * offset + raw
            full = len(padded) - len(padded) % 5
            encoded = encode(padded[:full])
            out.append((encoded[8:] if offset else encoded, "base32"))
    return out


class NameScanner:
    """Find decoys in query names: plain, hex, base64 or base32, split over labels or not."""

    def __init__(self, decoys: Iterable[Decoy]) -> None:
        """Build the matcher and the base32 needles once."""
        self.decoys = tuple(decoys)
        self.matcher = DecoyMatcher(self.decoys)
        self._b32: list[tuple[bytes, str]] = []
        for decoy in self.decoys:
            for needle, _ in _base32_needles(decoy.value.encode()):
                if len(needle) >= MIN_NEEDLE:
                    self._b32.append((needle, decoy.name))

    def scan(self, labels: Sequence[bytes]) -> tuple[list[str], list[str]]:
        """Return (decoy names, "dns:encoding" places) found in a query name."""
        # A value longer than a label (63 bytes) must be split over labels; resolvers
        # may also change the case of letters (0x20 randomisation).
        dotted = b".".join(labels)
        joined = b"".join(labels)
        hits: set[tuple[str, str]] = set()
        for data in (dotted, joined, joined.lower()):
            hits.update(self.matcher.find(data))
        upper = joined.upper()
        hits.update((name, "base32") for needle, name in self._b32 if needle in upper)
        order = {d.name: i for i, d in enumerate(self.decoys)}
        ranked = sorted(hits, key=lambda h: (order[h[0]], h[1]))
        seen = list(dict.fromkeys(name for name, _ in ranked))
        where = list(dict.fromkeys(f"dns:{encoding}" for _, encoding in ranked))
        return seen, where


def dns_record(
    *,
    ts: float,
    label: str,
    query: Query | None,
    size: int,
    allow_hosts: Iterable[str],
    scanner: NameScanner,
    raw: bytes = b"",
) -> dict[str, Any]:
    """Return the egress log line of one query (``query`` None: it did not parse)."""
    if query is None:
        # Still scanned: a decoy in a malformed packet is still a decoy sent out.
        seen, where = scanner.scan([raw])
        return egress_record(
            ts=ts,
            label=label,
            host="",
            port=DNS_PORT,
            method=DNS_METHOD,
            url="dns:?malformed",
            bytes_out=size,
            action="sunk",
            decoy_seen=seen,
            decoy_where=where,
            route="dns",
        )
    name = query.name
    qtype = QTYPES.get(query.qtype, f"TYPE{query.qtype}")
    action: Action = decide(name, allow_hosts) if name else "sunk"
    seen, where = scanner.scan(query.labels)
    return egress_record(
        ts=ts,
        label=label,
        host=normalize_host(name) if name else "",
        port=DNS_PORT,
        method=DNS_METHOD,
        url=clip(f"dns:{name}?type={qtype}", 2000),
        bytes_out=size,
        action=action,
        decoy_seen=seen,
        decoy_where=where,
        route="dns",
    )


# --------------------------------------------------------------------------- config and API


class ResolverConfig(BaseModel):
    """What one resolver process listens on, answers, looks for and writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_host: str = "127.0.0.1"
    labels: list[str] = Field(min_length=1)
    # Fixed ports by label (UDP and TCP alike); a label missing here gets a free one.
    ports: dict[str, int] = Field(default_factory=dict)
    sink: str = SINK_ADDRESS
    allow_hosts: list[str] = Field(default_factory=lambda: list(REGISTRY_HOSTS))
    decoys: list[DecoySpec] = Field(default_factory=list)
    log_path: Path
    ready_path: Path

    @field_validator("labels")
    @classmethod
    def _labels_are_check_phase(cls, labels: list[str]) -> list[str]:
        for label in labels:
            split_label(label)
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels repeat: {labels}")
        return labels

    @field_validator("sink")
    @classmethod
    def _sink_is_ipv4(cls, sink: str) -> str:
        ipaddress.IPv4Address(sink)
        return sink


class ResolverError(RuntimeError):
    """The resolver could not be started, with why."""


@dataclass
class ResolverHandle:
    """A running resolver process: its ports by label and how to stop it."""

    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    log_path: Path
    stderr_path: Path
    pid: int = field(init=False)

    def __post_init__(self) -> None:
        self.pid = self.process.pid

    def alive(self) -> bool:
        """Return whether the resolver process is still running."""
        return self.process.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        """Terminate the resolver, kill it if it outlives ``timeout``, return its exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def start_resolver(config: ResolverConfig, workdir: Path, timeout: float = 10) -> ResolverHandle:
    """Start the resolver process and return once it listens on every label's port."""
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config_path = workdir / "cujo-dns.json"
    # The config holds the decoy values: readable by the harness user only.
    fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(config.model_dump_json())
    stderr_path = workdir / "dns.stderr"
    Path(config.ready_path).unlink(missing_ok=True)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "cujo_action.dns", "--config", str(config_path)],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            env=env,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only a prctl before exec
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            ready = json.loads(Path(config.ready_path).read_text())
        except (OSError, ValueError):
            ready = None
        if isinstance(ready, dict) and ready.get("pid") == process.pid:
            ports = {str(k): int(v) for k, v in ready["ports"].items()}
            return ResolverHandle(process, ports, Path(config.log_path), stderr_path)
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            tail = stderr_path.read_text(errors="replace")[-4000:]
            raise ResolverError(f"resolver not ready (exit {process.returncode}):\n{tail}")
        time.sleep(0.02)


# --------------------------------------------------------------------------- the process


class Resolver:
    """Answer and log queries for every label; one write per log line."""

    def __init__(self, config: ResolverConfig) -> None:
        """Prepare the scanner and open the log."""
        self.config = config
        self.scanner = NameScanner(Decoy(d.name, d.value, None, None) for d in config.decoys)
        self._log_fd = os.open(
            config.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )

    def handle(self, label: str, data: bytes) -> bytes | None:
        """Log one query message and return the reply to send, if any."""
        try:
            query: Query | None = parse_query(data)
        except DnsFormatError:
            query = None
        record = dns_record(
            ts=time.time(),
            label=label,
            query=query,
            size=len(data),
            allow_hosts=self.config.allow_hosts,
            scanner=self.scanner,
            raw=data,
        )
        line = json.dumps(record, separators=(",", ":")) + "\n"
        os.write(self._log_fd, line.encode())
        if query is None:
            return error_response(data, RCODE_FORMERR)
        answer, rcode = answer_for(query, self.config.sink)
        return build_response(query, answer, rcode)

    def close(self) -> None:
        """Close the log."""
        os.close(self._log_fd)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, resolver: Resolver, label: str) -> None:
        self.resolver = resolver
        self.label = label
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        reply = self.resolver.handle(self.label, data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


async def _serve_tcp(
    resolver: Resolver, label: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            reply = resolver.handle(label, await reader.readexactly(length))
            if reply is None:
                break
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _bind_pair(host: str, port: int) -> tuple[socket.socket, socket.socket]:
    """Return a UDP and a TCP socket bound to the same port (picked when ``port`` is 0)."""
    for _ in range(20):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((host, port))
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((host, udp.getsockname()[1]))
        except OSError:
            udp.close()
            tcp.close()
            if port:
                raise
            continue  # the UDP port's TCP twin is taken: pick another
        return udp, tcp
    raise OSError(f"no port free for both UDP and TCP on {host}")


async def _serve(config: ResolverConfig) -> None:
    loop = asyncio.get_running_loop()
    resolver = Resolver(config)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ports: dict[str, int] = {}
    servers: list[asyncio.Server] = []
    transports: list[asyncio.BaseTransport] = []
    try:
        for label in config.labels:
            udp, tcp = _bind_pair(config.listen_host, config.ports.get(label, 0))
            ports[label] = udp.getsockname()[1]
            transport, _ = await loop.create_datagram_endpoint(
                lambda label=label: _Udp(resolver, label),  # type: ignore[misc]
                sock=udp,
            )
            transports.append(transport)

            async def client(
                r: asyncio.StreamReader, w: asyncio.StreamWriter, label: str = label
            ) -> None:
                await _serve_tcp(resolver, label, r, w)

            servers.append(await asyncio.start_server(client, sock=tcp))
        ready = Path(f"{config.ready_path}.tmp")
        ready.write_text(json.dumps({"pid": os.getpid(), "ports": ports}))
        # Renamed into place so a reader never sees half a file.
        ready.replace(config.ready_path)
        await stop.wait()
    finally:
        for server in servers:
            server.close()
        for endpoint in transports:
            endpoint.close()
        resolver.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the resolver described by ``--config`` until terminated."""
    parser = argparse.ArgumentParser(prog="python -m cujo_action.dns")
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = ResolverConfig.model_validate_json(args.config.read_text())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())

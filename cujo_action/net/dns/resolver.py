"""Run the logging resolver: log every query name, answer every name with the sink address."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import secrets
import signal
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cujo_action.find.decoys import Decoy
from cujo_action.net.dns.asker import asker as find_asker
from cujo_action.net.dns.flow import merge_flow
from cujo_action.net.dns.record import NameScanner, dns_record, without_search
from cujo_action.net.dns.wire import (
    RCODE_FORMERR,
    RCODE_NXDOMAIN,
    DnsFormatError,
    Query,
    answer_for,
    build_response,
    cached_ttl,
    error_response,
    parse_query,
)
from cujo_action.net.helperconfig import DecoySpec, checked_labels
from cujo_action.net.namebook import SINK_ADDRESS, SINK_NETWORK
from cujo_action.sandbox.helper_processes import (
    HarnessProcess,
    NotReady,
    Spawned,
    Starting,
    exit_now,
    wait_for_go,
)
from cujo_action.sandbox.resolvconf import sandbox_search, vm_zones
from cujo_action.schema import REGISTRY_HOSTS, normalize_host

# A sandbox's namespace (netns.py) sends every UDP and TCP packet to port 53 here, to the
# listener of its phase, so the port names the label as in the proxy; what the sandbox
# asks of systemd-resolved's stub address (127.0.0.53, which its resolv.conf names as on
# a runner) is sent on to the same place (ns/dnsstub.py). Every query becomes one JSON line
# in the egress log format, method "DNS":
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
# With ``names_path`` set (as arm does), each name gets an address of its own in the sink
# network instead, and the pair is written there before the answer leaves, so the proxy
# can name a raw connection (a reverse shell to attacker.example:4444) by the name its
# client looked up rather than by an address the resolver made up.
# AAAA and other types get an empty answer (the namespace has no IPv6), so clients fall
# back to A. ``action`` says what the proxy does with that name's traffic: "forwarded"
# for allowed hosts, "sunk" otherwise; the query itself is always answered here.
# Answers read as resolved's (dns/wire.py): its flags, its EDNS size, and TTLs counting
# down as a cache's. No client in the sandbox shares a cache (no resolved, no nscd), so a
# longer TTL hides no lookup: a name asked again is asked here again.
# The sandbox's resolv.conf has a ``search`` domain, as a runner's (sandbox/resolvconf.py):
# glibc appends it to a name it could not resolve as it is (an empty AAAA answer, a name
# without a dot). Such a name is logged as the host it looks up. Under a VM's zone of
# Azure's internal DNS (a runner's, and the one made up elsewhere) it is answered
# NXDOMAIN, as that zone answers a name it does not hold, and glibc asks the name as it
# is, which resolves (and reaches the proxy) as any other; under another search domain
# (a host's own) it resolves as any name does.

CONFIG_NAME = "cujo-dns.json"
STDERR_NAME = "dns.stderr"
MAX_TCP_MESSAGE = 65535


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
    # Give each name an address of its own in SINK_NETWORK and append
    # {"address": ..., "name": ...} lines here (namebook.NameBook reads them).
    names_path: Path | None = None
    # The sandbox's search domains (None: this host's, as the jail writes them).
    search: list[str] | None = None

    @field_validator("labels")
    @classmethod
    def _labels_are_check_phase(cls, labels: list[str]) -> list[str]:
        return checked_labels(labels)

    @field_validator("sink")
    @classmethod
    def _sink_is_ipv4(cls, sink: str) -> str:
        ipaddress.IPv4Address(sink)
        return sink


class ResolverError(RuntimeError):
    """The resolver could not be started, with why."""


class ResolverHandle(HarnessProcess):
    """A running resolver process: its ports by label and how to stop it."""


def spawn_resolver(workdir: Path) -> Spawned:
    """Start the resolver process before its config is known (``ResolverStart(…, warm=…)``
    sets it going); ``workdir`` is made here, and must be new."""
    workdir.mkdir(mode=0o700, parents=True)
    return Spawned("cujo_action.net.dns.resolver", workdir / CONFIG_NAME, workdir / STDERR_NAME)


class ResolverStart:
    """A resolver process launched but not yet known to listen: ``result`` waits for it.

    Launch from the thread that outlives the resolver (the run's main thread): the
    resolver gets SIGTERM when the *thread* that forked it ends (PR_SET_PDEATHSIG), so
    a resolver launched from a worker thread dies as soon as that thread is done.
    """

    def __init__(
        self,
        config: ResolverConfig,
        workdir: Path,
        timeout: float = 10,
        *,
        warm: Spawned | None = None,
    ) -> None:
        """Write the config and start the process (or set ``warm`` going, from
        ``spawn_resolver`` on the same folder); do not wait for it."""
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        config_path = workdir / CONFIG_NAME
        # The config holds the decoy values: readable by the harness user only.
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(config.model_dump_json())
        self.config = config
        self.stderr_path = workdir / STDERR_NAME
        start = warm or Spawned("cujo_action.net.dns.resolver", config_path, self.stderr_path)
        self.starting = Starting(start, Path(config.ready_path), timeout)
        self.process = self.starting.process
        self._handle: ResolverHandle | None = None

    def result(self) -> ResolverHandle:
        """Return the handle once the resolver listens on every label's port, or raise."""
        if self._handle is None:
            try:
                ready = self.starting.ready()
            except NotReady:
                self.cancel()
                tail = self.stderr_path.read_text(errors="replace")[-4000:]
                raise ResolverError(
                    f"resolver not ready (exit {self.process.returncode}):\n{tail}"
                ) from None
            ports = {str(k): int(v) for k, v in ready["ports"].items()}
            self._handle = ResolverHandle(
                self.process, ports, Path(self.config.log_path), self.stderr_path
            )
        return self._handle

    def cancel(self) -> None:
        """Stop the process whether or not it got ready."""
        self.starting.cancel()


def start_resolver(config: ResolverConfig, workdir: Path, timeout: float = 10) -> ResolverHandle:
    """Start the resolver process and return once it listens on every label's port."""
    return ResolverStart(config, workdir, timeout).result()


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
        self._names_fd = -1
        if config.names_path is not None:
            self._names_fd = os.open(
                config.names_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        self._addresses: dict[str, str] = {}
        # This run's TTL phases (dns.wire.cached_ttl): no other run's are the same.
        self._ttl_key = secrets.token_bytes(16)
        self.search = tuple(config.search) if config.search is not None else sandbox_search()
        self._vm_zones = vm_zones(self.search)

    def address_for(self, name: str) -> str:
        """Return the address ``name`` is answered with (its own, when names are kept)."""
        if self._names_fd < 0 or not name:
            return self.config.sink
        key = normalize_host(name)
        address = self._addresses.get(key)
        if address is None:
            # Past the network's end (131 070 names in one run) names share the sink.
            index = len(self._addresses) + 1
            if index >= SINK_NETWORK.num_addresses - 1:
                return self.config.sink
            address = str(SINK_NETWORK.network_address + index)
            self._addresses[key] = address
            line = json.dumps({"address": address, "name": key}, separators=(",", ":"))
            os.write(self._names_fd, (line + "\n").encode())
        return address

    def handle(
        self, label: str, data: bytes, client: tuple[str, int] | None = None, protocol: str = "udp"
    ) -> bytes | None:
        """Log one query message and return the reply to send, if any.

        ``client`` is the asker's address and port: while it waits for the answer, its
        socket names the sandbox process that asked (procinfo.py).
        """
        try:
            query: Query | None = parse_query(data)
        except DnsFormatError:
            query = None
        asker = find_asker(*client, protocol) if client is not None else None
        record = dns_record(
            ts=time.time(),
            label=label,
            query=query,
            size=len(data),
            allow_hosts=self.config.allow_hosts,
            scanner=self.scanner,
            raw=data,
            search=self.search,
        )
        if asker is not None:
            record["process"] = asker.fields()
        searched = without_search(query, self.search) if query is not None else None
        if query is not None:
            pid = asker.pid if asker is not None else None
            asked = searched or query
            found = self.scanner.follow(
                label, pid, asked.labels, query.qtype, retry=searched is not None
            )
            merge_flow(record, found)
        line = json.dumps(record, separators=(",", ":")) + "\n"
        os.write(self._log_fd, line.encode())
        if query is None:
            return error_response(data, RCODE_FORMERR)
        if query.opcode == 0 and without_search(query, self._vm_zones) is not None:
            return build_response(query, None, RCODE_NXDOMAIN)
        answer, rcode = answer_for(query, self.config.sink)
        if answer is not None:
            answer = self.address_for(query.name)
        ttl = cached_ttl(query.name, time.time(), self._ttl_key)
        return build_response(query, answer, rcode, ttl)

    def close(self) -> None:
        """Close the log."""
        os.close(self._log_fd)
        if self._names_fd >= 0:
            os.close(self._names_fd)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, resolver: Resolver, label: str) -> None:
        self.resolver = resolver
        self.label = label
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        reply = self.resolver.handle(self.label, data, (str(addr[0]), int(addr[1])), "udp")
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


async def _serve_tcp(
    resolver: Resolver, label: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    peer = writer.get_extra_info("peername")
    client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
    try:
        while True:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            reply = resolver.handle(label, await reader.readexactly(length), client, "tcp")
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
    parser = argparse.ArgumentParser(prog="python -m cujo_action.net.dns.resolver")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--wait", action="store_true", help="load, then wait for go on stdin")
    args = parser.parse_args(argv)
    if args.wait and not wait_for_go():  # loaded already: this module's imports
        return 0
    config = ResolverConfig.model_validate_json(args.config.read_text())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    exit_now(main())  # its log is closed: no teardown the run would wait for

"""Run the logging proxy: log every request, forward registry traffic, answer the rest."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cujo_action.decoys import Decoy, DecoyMatcher
from cujo_action.dnsflow import merge_flow
from cujo_action.doh import DohQuery, doh_query
from cujo_action.egress import (
    Action,
    decide,
    egress_record,
    host_allowed,
    normalize_host,
    split_label,
)
from cujo_action.harnessproc import HarnessProcess, Spawned, read_ready, wait_for_go
from cujo_action.procinfo import socket_owner
from cujo_action.schema import (
    MAX_SHORT,
    REGISTRY_HOSTS,
    clip,
)
from cujo_action.unwrap import decode_content

# The proxy is mitmproxy used as a library, in a process of its own
# (``python -m cujo_action.proxy --config CONFIG.json``). It listens on one port per
# label ("check/phase"), so the port a client connects to says which check and phase sent
# a request. TLS is intercepted with a CA made fresh in ``confdir`` for the run.
#
# * A request to a host in ``allow_hosts`` is forwarded upstream, verified against the
#   system CA bundle, except a write to a registry (below).
# * A request to a host in ``registry_hosts`` with any method but GET or HEAD (a publish,
#   an upload) is answered by the proxy itself with a ``403`` and never forwarded: the
#   sandbox reads registries, it never writes to them.
# * A request to any other host is answered by the proxy itself with an empty ``200``,
#   and that host is never resolved or contacted.
# * A tunnel that carries neither TLS nor HTTP (raw TCP through CONNECT) is logged with
#   the bytes it sent and closed, whatever its host: it is never forwarded. HTTP is what
#   starts with a request line; anything else (a shell's greeting) is closed at once.
# * A CONNECT tunnel that never produces a request (the client refused the run's CA, the
#   handshake failed, it sent nothing) is logged as one ``CONNECT`` line when it closes.
#
# Transparent mode (``transparent=True``) adds one more listener per label for clients that
# ignore proxy variables: the network namespace of a phase (netns.py) DNATs every TCP
# connection to that phase's transparent port, so the port still names the label, and
# mitmproxy reads the original destination with SO_ORIGINAL_DST. Such a connection is
# treated like a tunnel to that address: an HTTP(S) request in it is logged under the
# name its client asked for (SNI, else Host header, else the address) and decided on that
# name; anything else is logged as ``method: "TCP"`` and refused. An allowed name is
# forwarded to that name, never to the original address (which the logging resolver
# made up); a request whose Host differs from its SNI is never forwarded.
#
# Every request becomes one JSON line in ``log_path``, written with a single ``write`` as
# soon as the request is complete, so killing the proxy loses no line already logged::
#
#     {"ts": 1700000000.1, "label": "install/install", "check": "install",
#      "phase": "install", "host": "collector.exfil.test", "port": 443, "method": "POST",
#      "url": "https://collector.exfil.test/c?k=...", "bytes_out": 412, "action": "sunk",
#      "decoy_seen": ["GITHUB_TOKEN"], "decoy_where": ["url:plain", "body:base64"]}
#
# ``action``: "forwarded" (sent upstream), "sunk" (answered by the proxy), "refused"
# (closed unanswered: tunnels without a request, raw TCP, requests cut short),
# "registry-write" (a write to a registry, answered by the proxy with a 403).
# ``decoy_where`` parts: url, header, body (also with its Content-Encoding undone), sni,
# tcp (the bytes a tunnel carried when it produced no request); each with the encodings
# undone to find the decoy (``unwrap.py``: "body:gzip+base64"), or "unsearched" when the
# part's search ran out of budget. A CONNECT whose own request carries a
# decoy (say in Proxy-Authorization) is logged at once, as "sunk".
#
# Importing this module does not import mitmproxy; only the proxy process pays for that.

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
CA_CERT_NAME = "mitmproxy-ca-cert.pem"
CONFIG_NAME = "cujo-proxy.json"
STDERR_NAME = "proxy.stderr"
TUNNEL_METHOD = "CONNECT"
# The method of a transparent connection that carried no HTTP request.
RAW_METHOD = "TCP"
# Bytes of a tunnel's payload kept for scanning when it carries no HTTP request.
PEEK_CAP = 1 << 20
_LISTEN_RETRIES = 3

# What a write to a registry is answered with, in place of the registry.
REGISTRY_WRITE_STATUS = 403
REGISTRY_WRITE_BODY = b"Cujo's sandbox does not publish: registries are read-only here.\n"

logger = logging.getLogger("cujo.proxy")


# --------------------------------------------------------------------------- config


class DecoySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=MAX_SHORT)
    value: str = Field(min_length=1)


class ProxyConfig(BaseModel):
    """What one proxy process listens on, forwards, looks for and writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_host: str = "127.0.0.1"
    labels: list[str] = Field(min_length=1)
    # Fixed ports by label; a label missing here gets a free port picked at start.
    ports: dict[str, int] = Field(default_factory=dict)
    confdir: Path
    allow_hosts: list[str] = Field(default_factory=lambda: list(REGISTRY_HOSTS))
    # Hosts only read through the proxy (GET and HEAD); any other method is answered here.
    registry_hosts: list[str] = Field(default_factory=lambda: list(REGISTRY_HOSTS))
    upstream_ca: Path = SYSTEM_CA
    decoys: list[DecoySpec] = Field(default_factory=list)
    log_path: Path
    ready_path: Path
    # Also listen transparently, one port per label (fixed here, or picked at start).
    transparent: bool = False
    transparent_ports: dict[str, int] = Field(default_factory=dict)
    # Where the logging resolver writes which name it gave each address out for: a
    # transparent connection to such an address is logged under that name.
    names_path: Path | None = None

    @field_validator("labels")
    @classmethod
    def _labels_are_check_phase(cls, labels: list[str]) -> list[str]:
        for label in labels:
            split_label(label)
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels repeat: {labels}")
        return labels

    @field_validator("ports", "transparent_ports")
    @classmethod
    def _ports_in_range(cls, ports: dict[str, int]) -> dict[str, int]:
        for label, port in ports.items():
            if not 0 < port < 65536:
                raise ValueError(f"port {port} for {label} is not in 1..65535")
        return ports


# --------------------------------------------------------------------------- decisions


def host_header_name(host_header: str) -> str:
    """Return the host name of a Host header value, without its port."""
    value = host_header.strip()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    name, sep, port = value.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else value


def transparent_name(sni: str | None, host_header: str | None, address: str) -> tuple[str, bool]:
    """Return (the name a transparent request is logged and decided under, fronted?)."""
    # "fronted": SNI and Host name different hosts. Forwarding to either would let the
    # other ride along (domain fronting), so such a request is answered here.
    host = host_header_name(host_header) if host_header else ""
    if sni:
        return sni, bool(host) and normalize_host(host) != normalize_host(sni)
    return host or address, False


# A request line: a method token, a target, the version (RFC 9112 section 3), or as much
# of one as has arrived.
_METHOD = rb"[A-Z][A-Z0-9_.!#$%&'*+^`|~-]*"
_REQUEST_LINE = re.compile(_METHOD + rb" \S+ HTTP/\d(?:\.\d)?\r?")
_REQUEST_LINE_START = re.compile(
    _METHOD + rb"(?: \S*(?: (?P<version>[HTP]{0,4}(?:/[\d.]{0,3})?))?)?"
)
_MAX_REQUEST_LINE = 16 * 1024


def request_line_verdict(data: bytes) -> bool | None:
    """Return whether ``data`` starts with an HTTP request line (None: too early to say)."""
    line, newline, _ = data.partition(b"\n")
    if newline:
        return _REQUEST_LINE.fullmatch(line) is not None
    if not line:
        return None
    if len(line) > _MAX_REQUEST_LINE:
        return False
    start = _REQUEST_LINE_START.fullmatch(line.removesuffix(b"\r"))
    if start is None or not b"HTTP/".startswith((start["version"] or b"")[:5]):
        return False
    return None


def request_size(
    method: str,
    target: str,
    http_version: str,
    headers: Iterable[tuple[bytes, bytes]],
    body_len: int,
) -> int:
    """Return the bytes of a request as HTTP/1.1 would carry it: line, headers and body."""
    line = len(method) + 1 + len(target.encode()) + 1 + len(http_version) + 2
    return line + sum(len(k) + 2 + len(v) + 2 for k, v in headers) + 2 + body_len


def header_block(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Return headers as the ``name: value`` lines they travel as."""
    return b"\r\n".join(k + b": " + v for k, v in headers)


# In ``decoy_where``, a part whose search ran out of budget (``unwrap.BUDGET``) before
# every layer was looked at: what is deeper in it was not seen.
UNSEARCHED = "unsearched"


def scan(matcher: DecoyMatcher, parts: Iterable[tuple[str, bytes]]) -> tuple[list[str], list[str]]:
    """Return (decoy names, "part:encoding" places) found in the named parts of a request."""
    seen: list[str] = []
    where: list[str] = []
    for part, data in parts:
        if not data:
            continue
        for name, encoding in matcher.find(data):
            if name not in seen:
                seen.append(name)
            place = f"{part}:{encoding}"
            if place not in where:
                where.append(place)
        if matcher.exhausted and f"{part}:{UNSEARCHED}" not in where:
            where.append(f"{part}:{UNSEARCHED}")
    return seen, where


# --------------------------------------------------------------------------- API


class ProxyError(RuntimeError):
    """The proxy could not be started, with why (and the tail of its stderr)."""


# The logging resolver (dns.py) answers names with addresses of this network (RFC 2544
# benchmarking: never a real host), one per name when it keeps a names file.
SINK_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")


class NameBook:
    """The address → name pairs the logging resolver appends to its names file."""

    def __init__(self, path: Path) -> None:
        """Read nothing yet; ``name_of`` reads what was appended when it must."""
        self.path = Path(path)
        self.names: dict[str, str] = {}
        self._offset = 0

    def refresh(self) -> None:
        """Read the whole lines appended since the last call."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written waits for next time
        self._offset += end
        for line in data[:end].splitlines():
            try:
                pair = json.loads(line)
                self.names[str(pair["address"])] = str(pair["name"])
            except (ValueError, KeyError, TypeError):
                continue

    def name_of(self, address: str) -> str | None:
        """Return the name the resolver gave ``address`` out for, if it did."""
        if address not in self.names:
            try:
                made_up = ipaddress.ip_address(address) in SINK_NETWORK
            except ValueError:
                return None
            if not made_up:
                return None
            # The resolver writes the pair before it answers: it is there by now.
            self.refresh()
        return self.names.get(address)


def write_ca_bundle(ca_cert: Path, dest: Path, system: Path = SYSTEM_CA) -> Path:
    """Write the bundle sandbox clients trust, the system CAs plus the run's CA, to ``dest``."""
    bundle = Path(system).read_bytes().rstrip(b"\n") + b"\n" + Path(ca_cert).read_bytes()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(bundle)
    # Sandbox clients run as another user and must read it.
    dest.chmod(0o644)
    return dest


@dataclass(kw_only=True)
class ProxyHandle(HarnessProcess):
    """The running proxy: its ports and transparent listeners by label, and its CA."""

    ca_cert: Path
    # Transparent listeners by label; empty unless the config asked for them.
    transparent_ports: dict[str, int] = field(default_factory=dict)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return clip(path.read_text(errors="replace"), limit, keep="tail")
    except OSError:
        return ""


def spawn_proxy(confdir: Path) -> Spawned:
    """Start the proxy process before its config is known: it imports mitmproxy (most of
    its start) while the run prepares; ``start_proxy(config, warm=…)`` sets it going.
    ``confdir`` is made here, and must be new."""
    confdir.mkdir(mode=0o700, parents=True)
    return Spawned("cujo_action.proxy", confdir / CONFIG_NAME, confdir / STDERR_NAME)


def start_proxy(
    config: ProxyConfig, timeout: float = 20, *, warm: Spawned | None = None
) -> ProxyHandle:
    """Start the proxy process (or set ``warm`` going, from ``spawn_proxy`` on the same
    confdir) and return once it listens on every label's port."""
    confdir = Path(config.confdir)
    left = [p.name for p in confdir.iterdir()] if confdir.exists() else []
    if [name for name in left if warm is None or name != STDERR_NAME]:
        # A CA left in confdir would be reused: each run must mint its own.
        if warm is not None:
            warm.cancel()
        raise ProxyError(f"confdir {confdir} is not empty; give each run a fresh one")
    confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config_path = confdir / CONFIG_NAME
    # The config holds the decoy values: readable by the harness user only.
    fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(config.model_dump_json())
    fixed = set(config.labels) <= config.ports.keys() and (
        not config.transparent or set(config.labels) <= config.transparent_ports.keys()
    )
    attempts = 1 if fixed else _LISTEN_RETRIES
    for attempt in range(attempts):
        Path(config.ready_path).unlink(missing_ok=True)
        start = warm if warm is not None and attempt == 0 else None
        start = start or Spawned("cujo_action.proxy", config_path, confdir / STDERR_NAME)
        handle, failure = _launch(config, start.go(), timeout)
        if handle is not None:
            return handle
        # A port picked free can be taken before mitmproxy binds it: pick again.
        if "failed to listen" not in failure or attempt == attempts - 1:
            raise ProxyError(failure)
    raise AssertionError("unreachable")


def _launch(
    config: ProxyConfig, process: subprocess.Popen[bytes], timeout: float
) -> tuple[ProxyHandle | None, str]:
    stderr_path = Path(config.confdir) / STDERR_NAME
    deadline = time.monotonic() + timeout
    while True:
        ready = read_ready(Path(config.ready_path), process.pid)
        if ready is not None:
            ports = {str(k): int(v) for k, v in ready["ports"].items()}
            transparent = {str(k): int(v) for k, v in ready.get("transparent_ports", {}).items()}
            handle = ProxyHandle(
                process=process,
                ports=ports,
                log_path=Path(config.log_path),
                stderr_path=stderr_path,
                ca_cert=Path(ready["ca_cert"]),
                transparent_ports=transparent,
            )
            return handle, ""
        code = process.poll()
        if code is not None:
            return None, f"proxy exited with {code} before it was ready:\n{_tail(stderr_path)}"
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            return None, f"proxy not ready within {timeout}s:\n{_tail(stderr_path)}"
        time.sleep(0.02)


# --------------------------------------------------------------------------- the proxy process
# Everything below runs in the proxy process. mitmproxy is imported inside functions so
# that importing this module (as arm.py does) stays cheap; its objects are typed loosely.


@dataclass
class _Tunnel:
    """What is known about one CONNECT tunnel or transparent connection until it closes."""

    label: str
    host: str
    port: int
    connect_bytes: int
    connect_parts: list[tuple[str, bytes]]
    sni: str | None = None
    peeks: dict[int, bytes] = field(default_factory=dict)
    logged: bool = False
    refused: bool = False
    # A transparent connection: host and port are its original destination, and name
    # the host the resolver gave that address out for (None: the client had an address).
    transparent: bool = False
    name: str | None = None
    # The client's address and port as the proxy sees them, and, once looked up (while
    # the client is alive: at its TLS hello, or when a raw channel is refused), its process.
    peer: tuple[str, int] | None = None
    process: dict[str, Any] | None = None


class EgressAddon:
    """Log every request and tunnel; answer non-allowed hosts; refuse non-HTTP tunnels."""

    def __init__(
        self,
        config: ProxyConfig,
        ports: dict[str, int],
        transparent_ports: dict[str, int] | None = None,
    ) -> None:
        """Prepare the matcher, the label of each port, and the log file."""
        self.config = config
        self.ports = ports
        self.transparent_ports = dict(transparent_ports or {})
        self.labels_by_port = {port: label for label, port in ports.items()}
        self.labels_by_port.update({p: label for label, p in self.transparent_ports.items()})
        self.allow_hosts = list(config.allow_hosts)
        self.registry_hosts = list(config.registry_hosts)
        self.matcher = DecoyMatcher(Decoy(d.name, d.value, None, None) for d in config.decoys)
        # The resolver's own scanner, for names asked over DNS-over-HTTPS (imported here:
        # the resolver's module imports this one).
        from cujo_action.dns import NameScanner  # noqa: PLC0415

        self.names = NameScanner(self.matcher.decoys)
        # Who holds each plain client connection (by its id), looked up while it waits.
        self._processes: dict[str, dict[str, Any] | None] = {}
        self.tunnels: dict[str, _Tunnel] = {}
        self._names = NameBook(config.names_path) if config.names_path is not None else None
        # One write() per line on an O_APPEND descriptor: a killed proxy leaves whole
        # lines behind, at worst a cut last one.
        self._log_fd = os.open(
            config.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )

    # ---- helpers

    def _name_of(self, address: str) -> str | None:
        """Return the name the resolver answered with ``address``, if it did."""
        return self._names.name_of(address) if self._names is not None else None

    def _label(self, client: Any) -> str:
        port = client.proxy_mode.custom_listen_port
        if port is None and client.sockname:
            port = client.sockname[1]
        label = self.labels_by_port.get(port)
        if label is None:
            # Every mode is started with an explicit port, so this is a bug; still log
            # the request rather than drop it.
            logger.warning("no label for port %s", port)
            return self.config.labels[0]
        return label

    def _write(self, record: dict[str, Any]) -> None:
        if self._log_fd < 0:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        os.write(self._log_fd, line.encode())

    def _write_followed(self, doh: DohQuery | None, record: dict[str, Any]) -> None:
        """Write a request's line, a DoH lookup followed across requests first (dnsflow.py)."""
        if doh is not None and doh.labels:
            pid = record.get("process", {}).get("pid")
            merge_flow(record, self.names.follow(record["label"], pid, doh.labels), "doh:")
        self._write(record)

    def _log_tunnel(self, tunnel: _Tunnel, action: Action) -> None:
        parts = [*tunnel.connect_parts]
        if tunnel.sni:
            parts.append(("sni", tunnel.sni.encode()))
        peeked = b"".join(tunnel.peeks.values())
        parts.append(("tcp", peeked))
        seen, where = scan(self.matcher, parts)
        # A transparent connection's host is an address; the SNI, if any, is the name,
        # else the name the client looked up to get that address.
        if tunnel.transparent:
            host = tunnel.sni or tunnel.name or tunnel.host
        else:
            host = tunnel.host or tunnel.sni or ""
        self._write(
            egress_record(
                ts=time.time(),
                label=tunnel.label,
                host=host or "",
                port=tunnel.port,
                method=RAW_METHOD if tunnel.transparent else TUNNEL_METHOD,
                url=f"{tunnel.name or tunnel.host}:{tunnel.port}",
                bytes_out=tunnel.connect_bytes + len(peeked),
                action=action,
                decoy_seen=seen,
                decoy_where=where,
                route="direct" if tunnel.transparent else "proxy",
                process=tunnel.process,
            )
        )
        tunnel.logged = True

    def _log_flow(self, flow: Any, action: Action) -> None:
        req = flow.request
        tunnel = self.tunnels.get(flow.client_conn.id)
        raw = req.raw_content or b""
        parts = [("url", req.url.encode()), ("header", header_block(req.headers.fields))]
        # The body as its Content-Encoding says to read it: undone here, capped (mitmproxy
        # would inflate without a cap); as sent when that fails (the search then unwraps
        # whatever compression it recognises).
        coding = req.headers.get("content-encoding")
        decoded = decode_content(raw, coding) if coding else None
        parts.append(("body", raw if decoded is None else decoded))
        seen, where = scan(self.matcher, parts)
        # A DNS-over-HTTPS lookup is named as one, and its name searched as the resolver
        # searches names (labels joined, case folded where the encoding allows).
        doh = doh_query(
            req.host,
            req.path.partition("?")[0],
            dict(req.query.items()),
            {k.lower(): v for k, v in req.headers.items()},
            raw if decoded is None else decoded,
        )
        if doh is not None and doh.labels:
            names, places = self.names.scan(doh.labels)
            seen += [n for n in names if n not in seen]
            where += [p.replace("dns:", "doh:", 1) for p in places if p not in where]
        # Inside a tunnel the request line carried the path; a plain proxied request
        # carried the absolute URL.
        target = req.path if tunnel is not None or req.is_http2 else req.url
        self._write_followed(
            doh,
            egress_record(
                ts=time.time(),
                label=self._label(flow.client_conn),
                host=req.host,
                port=req.port,
                method=req.method,
                url=req.url,
                bytes_out=request_size(
                    req.method, target, req.http_version, req.headers.fields, len(raw)
                ),
                action=action,
                decoy_seen=seen,
                decoy_where=where,
                route="direct" if tunnel is not None and tunnel.transparent else "proxy",
                dns_name=doh.name if doh is not None else "",
                process=tunnel.process
                if tunnel is not None
                else self._process(_peer(flow.client_conn)),
            ),
        )
        flow.metadata["cujo_logged"] = True
        if tunnel is not None:
            tunnel.logged = True

    # ---- mitmproxy hooks

    def running(self) -> None:
        """Write the ready file once every label's port listens."""
        from mitmproxy import ctx  # noqa: PLC0415

        master: Any = ctx.master
        listening = {
            inst.mode.custom_listen_port
            for inst in master.addons.get("proxyserver").servers
            if inst.is_running
        }
        wanted = [*self.ports.items(), *self.transparent_ports.items()]
        missing = [label for label, port in wanted if port not in listening]
        if missing:
            logger.error("not listening for %s", missing)
            return
        ready = {
            "pid": os.getpid(),
            "ports": self.ports,
            "transparent_ports": self.transparent_ports,
            "ca_cert": str(Path(self.config.confdir) / CA_CERT_NAME),
        }
        tmp = Path(f"{self.config.ready_path}.tmp")
        tmp.write_text(json.dumps(ready))
        # Renamed into place so a reader never sees half a file.
        tmp.replace(self.config.ready_path)

    def done(self) -> None:
        """Log the tunnels still open and close the log."""
        for tunnel in self.tunnels.values():
            if not tunnel.logged:
                self._log_tunnel(tunnel, "refused")
        self.tunnels.clear()
        os.close(self._log_fd)
        self._log_fd = -1

    def client_connected(self, client: Any) -> None:
        """Track a transparent connection like a tunnel to its original destination."""
        from mitmproxy.proxy.mode_specs import TransparentMode  # noqa: PLC0415

        if not isinstance(client.proxy_mode, TransparentMode) or not client.sockname:
            return
        # mitmproxy put the SO_ORIGINAL_DST address in sockname before this hook.
        host, port = client.sockname[0], client.sockname[1]
        self.tunnels[client.id] = _Tunnel(
            label=self._label(client),
            host=host,
            port=port,
            connect_bytes=0,
            connect_parts=[],
            transparent=True,
            name=self._name_of(host),
            peer=_peer(client),
        )
        self._who(self.tunnels[client.id])

    def http_connect(self, flow: Any) -> None:
        """Remember a CONNECT; log it now only if the CONNECT itself carries a decoy."""
        req = flow.request
        tunnel = _Tunnel(
            label=self._label(flow.client_conn),
            host=req.host,
            port=req.port,
            connect_bytes=request_size(
                req.method, f"{req.host}:{req.port}", req.http_version, req.headers.fields, 0
            ),
            connect_parts=[
                ("url", f"{req.host}:{req.port}".encode()),
                ("header", header_block(req.headers.fields)),
            ],
            peer=_peer(flow.client_conn),
        )
        self.tunnels[flow.client_conn.id] = tunnel
        self._who(tunnel)  # the client waits for the proxy's answer: it is alive
        if scan(self.matcher, tunnel.connect_parts)[0]:
            # A CONNECT is answered here and never sent upstream, whatever its host.
            self._log_tunnel(tunnel, "sunk")

    def _refuse_host(self, host: str) -> bool:
        return not host_allowed(host, self.allow_hosts)

    def tls_clienthello(self, data: Any) -> None:
        """Remember the SNI a tunnel's client asked for, and which process asks."""
        tunnel = self.tunnels.get(data.context.client.id)
        if tunnel is not None and data.client_hello.sni:
            tunnel.sni = data.client_hello.sni
        if tunnel is not None:
            # Now, while it waits for the handshake: a client that refuses the run's CA
            # closes its socket, and then no process holds it.
            self._who(tunnel)

    def _who(self, tunnel: _Tunnel) -> None:
        """Name the sandbox process holding a tunnel, once."""
        if tunnel.process is None and tunnel.peer is not None:
            tunnel.process = self._process(tunnel.peer)

    def _process(self, peer: tuple[str, int] | None, conn: str = "") -> dict[str, Any] | None:
        """Return the sandbox process holding the client socket ``peer``.

        ``conn`` (a client connection's id) keeps the answer for that connection's later
        requests: a port is reused by other processes once its connection is closed.
        """
        if peer is None:
            return None
        if conn and conn in self._processes:
            return self._processes[conn]
        found = socket_owner(*peer)
        fields = found.fields() if found is not None else None
        if conn:
            if len(self._processes) > _PROCESS_CACHE:
                self._processes.clear()
            self._processes[conn] = fields
        return fields

    def next_layer(self, nextlayer: Any) -> None:
        """Keep a tunnel's first bytes; replace any layer but TLS or HTTP with a refusal."""
        # Runs after mitmproxy's own NextLayer addon, so nextlayer.layer holds its pick.
        from mitmproxy.proxy.layers import (  # noqa: PLC0415
            ClientTLSLayer,
            HttpLayer,
            ServerTLSLayer,
            TCPLayer,
        )

        tunnel = self.tunnels.get(nextlayer.context.client.id)
        if tunnel is None:
            return
        data = nextlayer.data_client()
        room = PEEK_CAP - sum(len(p) for k, p in tunnel.peeks.items() if k != id(nextlayer))
        tunnel.peeks[id(nextlayer)] = data[: max(room, 0)]
        layer = nextlayer.layer
        if layer is None or isinstance(layer, ServerTLSLayer | ClientTLSLayer):
            return
        if isinstance(layer, HttpLayer):
            # mitmproxy takes whatever is not TLS for HTTP and would wait for headers that
            # never come (a reverse shell's greeting), holding the connection open: only
            # what starts like a request line stays HTTP.
            verdict = request_line_verdict(data)
            if verdict is None:
                nextlayer.layer = None  # not enough bytes yet: ask again on the next ones
            if verdict is not False:
                return
        # Raw TCP, DNS or anything else through the tunnel: log what it sent, then let
        # an ignoring TCP layer try to connect, which server_connect refuses, closing it.
        tunnel.refused = True
        self._who(tunnel)
        self._log_tunnel(tunnel, "refused")
        nextlayer.layer = TCPLayer(nextlayer.context, ignore=True)

    def request(self, flow: Any) -> None:
        """Log a complete request; answer it here unless its host is allowed (a registry: read)."""
        tunnel = self.tunnels.get(flow.client_conn.id)
        fronted = False
        if tunnel is not None and tunnel.transparent:
            name, fronted = transparent_name(
                tunnel.sni, flow.request.host_header, tunnel.name or tunnel.host
            )
            # Logged, decided and (if allowed) forwarded by name, never to the made-up
            # address the client connected to.
            flow.request.data.host = name
        action: Action = (
            "sunk"
            if fronted
            else decide(
                flow.request.host,
                self.allow_hosts,
                method=flow.request.method,
                registry_hosts=self.registry_hosts,
            )
        )
        if action != "forwarded":
            from mitmproxy import http  # noqa: PLC0415

            # A response set here is what the client gets: nothing goes upstream.
            status, body = (
                (REGISTRY_WRITE_STATUS, REGISTRY_WRITE_BODY)
                if action == "registry-write"
                else (200, b"")
            )
            flow.response = http.Response.make(status, body, {"content-type": "text/plain"})
        self._log_flow(flow, action)

    def error(self, flow: Any) -> None:
        """Log a request that failed before it was complete (client gone mid-body)."""
        if flow.request is not None and not flow.metadata.get("cujo_logged"):
            self._log_flow(flow, "refused")

    def server_connect(self, data: Any) -> None:
        """Refuse every upstream connection but HTTP(S) to an allowed host."""
        # The last guard: whatever path led here, a host not allowed is never contacted
        # (nor resolved), and a refused tunnel never reaches even an allowed one.
        host = data.server.address[0] if data.server.address else ""
        tunnel = self.tunnels.get(data.client.id)
        if self._refuse_host(host) or (tunnel is not None and tunnel.refused):
            data.server.error = "cujo: upstream connection refused"

    def client_disconnected(self, client: Any) -> None:
        """Log a tunnel that closes without having carried a request."""
        self._processes.pop(client.id, None)
        tunnel = self.tunnels.pop(client.id, None)
        if tunnel is not None and not tunnel.logged:
            self._log_tunnel(tunnel, "refused")


_PROCESS_CACHE = 4096


def _peer(client: Any) -> tuple[str, int] | None:
    """Return a client connection's address and port (IPv4), if mitmproxy knows it."""
    peer = getattr(client, "peername", None)
    if isinstance(peer, tuple) and len(peer) >= 2 and isinstance(peer[1], int):
        return str(peer[0]).removeprefix("::ffff:"), peer[1]
    return None


def _free_ports(host: str, count: int) -> list[int]:
    """Return ``count`` distinct ports free on ``host`` right now."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


async def _serve(config: ProxyConfig) -> None:
    from mitmproxy import addons, options  # noqa: PLC0415
    from mitmproxy.addons.errorcheck import ErrorCheck  # noqa: PLC0415
    from mitmproxy.master import Master  # noqa: PLC0415

    # mitmproxy rejects two modes on one address, so port 0 works for one label only:
    # pick the ports here and tell mitmproxy each one.
    unset = [label for label in config.labels if label not in config.ports]
    t_unset = [label for label in config.labels if label not in config.transparent_ports]
    if not config.transparent:
        t_unset = []
    free = _free_ports(config.listen_host, len(unset) + len(t_unset))
    picked = dict(zip(unset, free[: len(unset)], strict=True))
    t_picked = dict(zip(t_unset, free[len(unset) :], strict=True))
    ports = {label: config.ports.get(label) or picked[label] for label in config.labels}
    transparent_ports = (
        {label: config.transparent_ports.get(label) or t_picked[label] for label in config.labels}
        if config.transparent
        else {}
    )
    host = f"[{config.listen_host}]" if ":" in config.listen_host else config.listen_host

    master: Any = Master(options.Options())
    defaults: Any = addons.default_addons
    # Our addon goes last: its next_layer hook must see mitmproxy's choice.
    master.addons.add(
        *defaults(),
        ErrorCheck(repeat_errors_on_stderr=True),
        EgressAddon(config, ports, transparent_ports),
    )
    master.options.update(
        mode=[
            *(f"regular@{host}:{ports[label]}" for label in config.labels),
            *(f"transparent@{host}:{port}" for port in transparent_ports.values()),
        ],
        confdir=str(config.confdir),
        connection_strategy="lazy",
        upstream_cert=False,
        ssl_verify_upstream_trusted_ca=str(config.upstream_ca),
        onboarding=False,
        http3=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, master.shutdown)
    try:
        await master.run()
    finally:
        # asyncio.run cancels the connections still open; their tracebacks say nothing.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy described by ``--config`` until terminated."""
    parser = argparse.ArgumentParser(prog="python -m cujo_action.proxy")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--wait", action="store_true", help="load, then wait for go on stdin")
    args = parser.parse_args(argv)
    if args.wait:
        # Most of the proxy's start: done while the run prepares (spawn_proxy).
        from mitmproxy import addons, options  # noqa: F401, PLC0415
        from mitmproxy.addons.errorcheck import ErrorCheck  # noqa: F401, PLC0415
        from mitmproxy.master import Master  # noqa: F401, PLC0415

        if not wait_for_go():
            return 0
    config = ProxyConfig.model_validate_json(args.config.read_text())
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cujo_action.arm.decoys import DecoyMatcher
from cujo_action.net.egress import split_label
from cujo_action.sandbox.helper_processes import HarnessProcess, Spawned, read_ready, wait_for_go
from cujo_action.schema import (
    MAX_SHORT,
    REGISTRY_HOSTS,
    clip,
    normalize_host,
)

# The proxy is mitmproxy used as a library, in a process of its own
# (``python -m cujo_action.net.proxy --config CONFIG.json``). It listens on one port per
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
# undone to find the decoy (``unwrap.py``: "body:gzip+base64"). ``unsearched`` (only when
# set) says why part of a request was not searched: its body over the proxy's limit
# (``limits.BODY_SIZE``: the rest not stored, a sunk request answered 413), or a decoding
# cap (``unwrap.py``: depth, budget, a stream inflating past its cap). ``opaque: true``: a
# POST, PUT or PATCH body that reads as nothing once decoded (``opacity.py``). A CONNECT
# whose own request carries a decoy (say in Proxy-Authorization) is logged at once, as "sunk".
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


class Scanned(NamedTuple):
    """What the search of a request's parts found, and what it could not do."""

    seen: list[str]  # decoy names
    where: list[str]  # "part:encoding" places
    unsearched: str  # "part: why" for the first part a cap kept from being searched
    opaque: bool  # a part judged for opacity read as nothing (``opacity.py``)


def scan(
    matcher: DecoyMatcher,
    parts: Iterable[tuple[str, bytes]],
    *,
    judge: Collection[str] = (),
) -> Scanned:
    """Search the named parts of a request; ``judge``: the parts judged for opacity."""
    seen: list[str] = []
    where: list[str] = []
    unsearched = ""
    opaque = False
    for part, data in parts:
        if not data:
            continue
        for name, encoding in matcher.find(data, judge_opacity=part in judge):
            if name not in seen:
                seen.append(name)
            place = f"{part}:{encoding}"
            if place not in where:
                where.append(place)
        if matcher.unsearched and not unsearched:
            unsearched = f"{part}: {matcher.unsearched}"
        opaque = opaque or (part in judge and matcher.opaque)
    return Scanned(seen, where, unsearched, opaque)


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
    return Spawned("cujo_action.net.proxy", confdir / CONFIG_NAME, confdir / STDERR_NAME)


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
        start = start or Spawned("cujo_action.net.proxy", config_path, confdir / STDERR_NAME)
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

    from cujo_action.net.proxyaddon import EgressAddon  # noqa: PLC0415

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
        # No body_size_limit: request bodies stream to disk (proxyaddon.requestheaders),
        # capped there; responses come only from allowed hosts (a large package).
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
    parser = argparse.ArgumentParser(prog="python -m cujo_action.net.proxy")
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

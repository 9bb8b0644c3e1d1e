"""The proxy process's mitmproxy addon: log every request, answer or refuse, search bodies.

Runs only inside the proxy process (``python -m cujo_action.proxy``); ``proxy.py`` holds
the configuration, the decisions and the API that starts it. mitmproxy is imported inside
functions and its objects are typed loosely.

Nothing here may block the event loop, which serves every sandbox connection: a body's
search (up to ``limits.BODY_SIZE`` and all its decodings) runs on one worker thread, one
body at a time so the proxy's memory stays bounded, and the /proc reads that name a
socket's process run on threads of their own. A request body over ``BODY_SIZE`` is
refused by mitmproxy before it is held (``limit_request_bodies``): it is logged with
``unsearched`` naming the limit, the client gets a 413 and the proxy serves on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cujo_action.decoys import Decoy, DecoyMatcher
from cujo_action.dnsflow import merge_flow
from cujo_action.doh import doh_query
from cujo_action.egress import Action, decide, egress_record, host_allowed
from cujo_action.limits import BODY_SIZE, MiB
from cujo_action.procinfo import socket_owner
from cujo_action.proxy import (
    CA_CERT_NAME,
    PEEK_CAP,
    RAW_METHOD,
    REGISTRY_WRITE_BODY,
    REGISTRY_WRITE_STATUS,
    TUNNEL_METHOD,
    NameBook,
    ProxyConfig,
    header_block,
    request_line_verdict,
    request_size,
    scan,
    transparent_name,
)
from cujo_action.unwrap import decode_content

logger = logging.getLogger("cujo.proxy")

# Methods whose body is judged for opacity (egress.opaque): what sends data somewhere.
SENDS = frozenset({"POST", "PUT", "PATCH"})
# What mitmproxy says when it refuses a body over body_size_limit (its flow error).
_OVER_LIMIT = "body_size_limit"
OVER_LIMIT_REASON = f"body over the proxy's limit of {BODY_SIZE // MiB} MiB"


def limit_request_bodies() -> None:
    """Make mitmproxy's ``body_size_limit`` refuse request bodies only.

    Requests past the limit are refused before they are held (a multi-gigabyte POST
    cannot exhaust the proxy); responses, which come only from the allowed registries,
    stay as they were (a large package is still downloaded).
    """
    from mitmproxy.proxy.layers.http import HttpStream  # noqa: PLC0415

    original: Callable[..., Any] = HttpStream.check_body_size
    if getattr(original, "cujo_requests_only", False):
        return

    def check_body_size(self: Any, request: bool) -> Any:
        if request:
            return (yield from original(self, request))
        return False

    check_body_size.cujo_requests_only = True  # type: ignore[attr-defined]
    HttpStream.check_body_size = check_body_size  # type: ignore[method-assign]


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
        # One search at a time, off the event loop: the matcher keeps its last search's
        # state, and one body's decodings at a time bound the proxy's memory.
        self._searcher = ThreadPoolExecutor(1, thread_name_prefix="cujo-search")

    async def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a search on the search thread, leaving the event loop to other clients."""
        return await asyncio.get_running_loop().run_in_executor(self._searcher, fn, *args)

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

    async def _log_tunnel(self, tunnel: _Tunnel, action: Action) -> None:
        tunnel.logged = True  # now, so no other hook logs it while it is searched
        self._write(await self._off_loop(self._tunnel_record, tunnel, action))

    def _tunnel_record(self, tunnel: _Tunnel, action: Action) -> dict[str, Any]:
        parts = [*tunnel.connect_parts]
        if tunnel.sni:
            parts.append(("sni", tunnel.sni.encode()))
        peeked = b"".join(tunnel.peeks.values())
        parts.append(("tcp", peeked))
        found = scan(self.matcher, parts)
        # A transparent connection's host is an address; the SNI, if any, is the name,
        # else the name the client looked up to get that address.
        if tunnel.transparent:
            host = tunnel.sni or tunnel.name or tunnel.host
        else:
            host = tunnel.host or tunnel.sni or ""
        tunnel.logged = True
        return egress_record(
            ts=time.time(),
            label=tunnel.label,
            host=host or "",
            port=tunnel.port,
            method=RAW_METHOD if tunnel.transparent else TUNNEL_METHOD,
            url=f"{tunnel.name or tunnel.host}:{tunnel.port}",
            bytes_out=tunnel.connect_bytes + len(peeked),
            action=action,
            decoy_seen=found.seen,
            decoy_where=found.where,
            route="direct" if tunnel.transparent else "proxy",
            process=tunnel.process,
            unsearched=found.unsearched,
        )

    async def _log_flow(self, flow: Any, action: Action, unsearched: str = "") -> None:
        """Log one request: its process looked up and its parts searched off the loop."""
        flow.metadata["cujo_logged"] = True  # now, so the error hook does not log it again
        tunnel = self.tunnels.get(flow.client_conn.id)
        if tunnel is not None:
            tunnel.logged = True
            process = tunnel.process
        else:
            process = await self._process(_peer(flow.client_conn))
        self._write(await self._off_loop(self._flow_record, flow, action, unsearched, process))

    def _flow_record(
        self, flow: Any, action: Action, unsearched: str, process: dict[str, Any] | None
    ) -> dict[str, Any]:
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
        found = scan(self.matcher, parts, judge=("body",) if req.method in SENDS else ())
        seen, where = found.seen, found.where
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
        # A body refused over the limit was never held: its size is what it announced.
        size = len(raw) or _announced(req.headers.get("content-length"))
        record = egress_record(
            ts=time.time(),
            label=self._label(flow.client_conn),
            host=req.host,
            port=req.port,
            method=req.method,
            url=req.url,
            bytes_out=request_size(req.method, target, req.http_version, req.headers.fields, size),
            action=action,
            decoy_seen=seen,
            decoy_where=where,
            route="direct" if tunnel is not None and tunnel.transparent else "proxy",
            dns_name=doh.name if doh is not None else "",
            process=process,
            unsearched=unsearched or found.unsearched,
            opaque=found.opaque,
        )
        if doh is not None and doh.labels:
            # A lookup followed across requests, as the resolver follows queries (dnsflow).
            pid = process.get("pid") if process else None
            merge_flow(record, self.names.follow(record["label"], pid, doh.labels), "doh:")
        return record

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
        # The searches under way finish first: the matcher serves one at a time.
        self._searcher.shutdown(wait=True)
        for tunnel in self.tunnels.values():
            if not tunnel.logged:
                self._write(self._tunnel_record(tunnel, "refused"))
        self.tunnels.clear()
        os.close(self._log_fd)
        self._log_fd = -1

    async def client_connected(self, client: Any) -> None:
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
        await self._who(self.tunnels[client.id])

    async def http_connect(self, flow: Any) -> None:
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
        await self._who(tunnel)  # the client waits for the proxy's answer: it is alive
        if (await self._off_loop(scan, self.matcher, tunnel.connect_parts)).seen:
            # A CONNECT is answered here and never sent upstream, whatever its host.
            await self._log_tunnel(tunnel, "sunk")

    def _refuse_host(self, host: str) -> bool:
        return not host_allowed(host, self.allow_hosts)

    async def tls_clienthello(self, data: Any) -> None:
        """Remember the SNI a tunnel's client asked for, and which process asks."""
        tunnel = self.tunnels.get(data.context.client.id)
        if tunnel is not None and data.client_hello.sni:
            tunnel.sni = data.client_hello.sni
        if tunnel is not None:
            # Now, while it waits for the handshake: a client that refuses the run's CA
            # closes its socket, and then no process holds it.
            await self._who(tunnel)

    async def _who(self, tunnel: _Tunnel) -> None:
        """Name the sandbox process holding a tunnel, once."""
        if tunnel.process is None and tunnel.peer is not None:
            tunnel.process = await self._process(tunnel.peer)

    async def _process(self, peer: tuple[str, int] | None, conn: str = "") -> dict[str, Any] | None:
        """Return the sandbox process holding the client socket ``peer``.

        ``conn`` (a client connection's id) keeps the answer for that connection's later
        requests: a port is reused by other processes once its connection is closed. The
        lookup reads /proc on a thread of its own: it never holds up other connections.
        """
        if peer is None:
            return None
        if conn and conn in self._processes:
            return self._processes[conn]
        found = await asyncio.to_thread(socket_owner, *peer)
        fields = found.fields() if found is not None else None
        if conn:
            if len(self._processes) > _PROCESS_CACHE:
                self._processes.clear()
            self._processes[conn] = fields
        return fields

    async def next_layer(self, nextlayer: Any) -> None:
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
        await self._who(tunnel)
        await self._log_tunnel(tunnel, "refused")
        nextlayer.layer = TCPLayer(nextlayer.context, ignore=True)

    async def request(self, flow: Any) -> None:
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
        await self._log_flow(flow, action)

    async def error(self, flow: Any) -> None:
        """Log a request that failed before it was complete (client gone mid-body, or a
        body over the limit, refused by mitmproxy with a 413 before it was held)."""
        if flow.request is not None and not flow.metadata.get("cujo_logged"):
            message = flow.error.msg if flow.error is not None else ""
            over = _OVER_LIMIT in message and flow.response is None
            await self._log_flow(flow, "refused", OVER_LIMIT_REASON if over else "")

    def server_connect(self, data: Any) -> None:
        """Refuse every upstream connection but HTTP(S) to an allowed host."""
        # The last guard: whatever path led here, a host not allowed is never contacted
        # (nor resolved), and a refused tunnel never reaches even an allowed one.
        host = data.server.address[0] if data.server.address else ""
        tunnel = self.tunnels.get(data.client.id)
        if self._refuse_host(host) or (tunnel is not None and tunnel.refused):
            data.server.error = "cujo: upstream connection refused"

    async def client_disconnected(self, client: Any) -> None:
        """Log a tunnel that closes without having carried a request."""
        self._processes.pop(client.id, None)
        tunnel = self.tunnels.pop(client.id, None)
        if tunnel is not None and not tunnel.logged:
            await self._log_tunnel(tunnel, "refused")


_PROCESS_CACHE = 4096


def _announced(length: str | None) -> int:
    """Return a Content-Length header's value, 0 when absent or not a number."""
    return int(length) if length is not None and length.isdigit() else 0


def _peer(client: Any) -> tuple[str, int] | None:
    """Return a client connection's address and port (IPv4), if mitmproxy knows it."""
    peer = getattr(client, "peername", None)
    if isinstance(peer, tuple) and len(peer) >= 2 and isinstance(peer[1], int):
        return str(peer[0]).removeprefix("::ffff:"), peer[1]
    return None

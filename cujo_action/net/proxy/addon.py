"""The proxy process's mitmproxy addon: log every request, answer or refuse, search bodies.

Runs only inside the proxy process (``python -m cujo_action.net.proxy.process``):
``config.py`` holds its configuration, ``request.py`` its decisions, ``process.py`` the API
that starts it. mitmproxy is imported inside functions and its objects are typed loosely.

Nothing here may block the event loop, which serves every sandbox connection: a body's
search (up to ``limits.BODY_SIZE`` and all its decodings) runs on one worker thread, one
body at a time so the proxy's memory stays bounded, and the /proc reads that name a
socket's process run on threads of their own.

No request body is held in memory: from ``requestheaders`` on, mitmproxy streams it
(``flow.request.stream``) to a spool file of the proxy's own (``proxy/spool.py``), searched
in windows once complete. A forwarded request's chunks go on to its allowed host as they
come; a sunk one's go nowhere, its request being sent to the proxy's own answering server
(``proxy/sink.py``) with an empty body. Past ``BODY_SIZE`` nothing more is stored: the
request is logged with ``unsearched`` naming the limit, a sunk one is answered 413, and
the proxy serves on.

A sunk request is answered as its host would answer it (``lookalike/pick.py``: GitHub's API
for api.github.com, a plain web server elsewhere), from its method, target, a few headers
and the first ``limits.ANSWER_PEEK`` bytes of its body, kept in memory as it streams. The
answer changes nothing of what is logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cujo_action.find.decoys import Decoy
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.limits import ANSWER_PEEK
from cujo_action.net.dns.record import NameScanner
from cujo_action.net.egress import Action, decide, host_allowed
from cujo_action.net.lookalike.pick import Lookalike
from cujo_action.net.lookalike.web import READ_HEADERS, Answer, Asked, bodiless
from cujo_action.net.namebook import NameBook
from cujo_action.net.proxy.config import CA_CERT_NAME, ProxyConfig
from cujo_action.net.proxy.record import Tunnel, flow_record, tunnel_record
from cujo_action.net.proxy.request import (
    PEEK_CAP,
    REGISTRY_WRITE_BODY,
    REGISTRY_WRITE_STATUS,
    header_block,
    request_line_verdict,
    request_size,
    scan,
    transparent_name,
)
from cujo_action.net.proxy.sink import Sink, well_formed
from cujo_action.net.proxy.spool import OVER_LIMIT_REASON, Spool, spool_dir
from cujo_action.watch.procinfo import socket_owner

logger = logging.getLogger("cujo.proxy")

# Encodings of a decoy are at most this many times its length (``\u00XX`` JSON escapes):
# windows of a large body overlap by that much of the longest decoy.
_ENCODED_GROWTH = 8


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
        # The resolver's own scanner, for names asked over DNS-over-HTTPS.
        self.names = NameScanner(self.matcher.decoys)
        # Who holds each plain client connection (by its id), looked up while it waits.
        self._processes: dict[str, dict[str, Any] | None] = {}
        self.tunnels: dict[str, Tunnel] = {}
        self._names = NameBook(config.names_path) if config.names_path is not None else None
        # One write() per line on an O_APPEND descriptor: a killed proxy leaves whole
        # lines behind, at worst a cut last one.
        self._log_fd = os.open(
            config.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        # One search at a time, off the event loop: the matcher keeps its last search's
        # state, and one body's decodings at a time bound the proxy's memory.
        self._searcher = ThreadPoolExecutor(1, thread_name_prefix="cujo-search")
        # Request bodies stream to files here (root-only, in the proxy's confdir); sunk
        # requests are sent to the sink, which answers them once logged.
        self.spool_dir = spool_dir(config.confdir)
        self.sink = Sink()
        # What sunk requests are answered with; the decoys are the tokens GitHub knows.
        self.lookalike = Lookalike(config.github, (d.value for d in config.decoys))
        longest = max((len(d.value) for d in config.decoys), default=64)
        self.overlap = _ENCODED_GROWTH * longest + 64
        self._tasks: set[asyncio.Task[None]] = set()
        # Log lines promised and not yet written (a search under way when the run stops
        # the proxy), and requests whose body was still arriving: ``done`` writes them.
        self._promised: set[_Promise] = set()
        self._arriving: dict[str, Any] = {}

    async def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a search on the search thread, leaving the event loop to other clients."""
        return await asyncio.get_running_loop().run_in_executor(self._searcher, fn, *args)

    async def _write_searched(self, promise: _Promise, fn: Callable[..., Any], *args: Any) -> None:
        """Search off the loop and write the line; a stop that cancels this wait leaves
        the promise to ``done``, which writes the line all the same."""
        self._promised.add(promise)
        promise.future = self._searcher.submit(fn, *args)
        try:
            record = await asyncio.wrap_future(promise.future)
        except asyncio.CancelledError:
            raise  # the proxy is stopping: ``done`` keeps the promise
        except BaseException:
            self._promised.discard(promise)
            promise.settle()
            raise
        if promise in self._promised:  # else ``done`` wrote it already
            self._promised.discard(promise)
            self._write(record)
        promise.settle()

    # ---- helpers

    def _name_of(self, address: str) -> str | None:
        """Return the name the resolver answered with ``address``, if it did."""
        return self._names.name_of(address) if self._names is not None else None

    def label(self, client: Any) -> str:
        """Return the label (check/phase) of the port a client connected to."""
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

    async def _log_tunnel(self, tunnel: Tunnel, action: Action) -> None:
        tunnel.logged = True  # now, so no other hook logs it while it is searched
        promise = _Promise(lambda: tunnel_record(self.matcher, tunnel, action))
        await self._write_searched(promise, tunnel_record, self.matcher, tunnel, action)

    async def _log_flow(
        self, flow: Any, action: Action, unsearched: str = "", spool: Spool | None = None
    ) -> None:
        """Log one request: its process looked up and its parts searched off the loop."""
        flow.metadata["cujo_logged"] = True  # now, so the error hook does not log it again
        self._arriving.pop(flow.id, None)
        tunnel = self.tunnels.get(flow.client_conn.id)
        found: dict[str, Any] = {}  # the process, once looked up
        promise = _Promise(
            lambda: flow_record(self, flow, action, unsearched, found.get("p"), spool),
            spool,
        )
        self._promised.add(promise)  # from here on a stop cannot lose the line
        if tunnel is not None:
            tunnel.logged = True
            found["p"] = tunnel.process
        else:
            found["p"] = await self._process(_peer(flow.client_conn))
        self._promised.discard(promise)
        await self._write_searched(
            promise, flow_record, self, flow, action, unsearched, found["p"], spool
        )

    # ---- mitmproxy hooks

    async def running(self) -> None:
        """Start the sink; write the ready file once every label's port listens."""
        from mitmproxy import ctx  # noqa: PLC0415

        if not self.sink.port:
            await self.sink.start()

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
        """Write every line still owed, log the tunnels still open, close the log.

        Stopping cancels the hooks that wait for a search; the searches themselves finish
        (the matcher serves one at a time) and their lines are written here, as are the
        requests whose body was still arriving (searched as far as it came). Nothing
        the proxy was handed is left out of the log because the run ended.
        """
        self._searcher.shutdown(wait=True)
        for promise in list(self._promised):
            self._write(promise.result())
            promise.settle()
        self._promised.clear()
        for flow in list(self._arriving.values()):
            spool: Spool | None = flow.metadata.pop("cujo_spool", None)
            if flow.metadata.get("cujo_logged"):
                continue
            flow.metadata["cujo_logged"] = True
            tunnel = self.tunnels.get(flow.client_conn.id)
            if tunnel is not None:
                tunnel.logged = True
            if spool is not None:
                spool.close()
            process = tunnel.process if tunnel is not None else None
            self._write(flow_record(self, flow, "refused", "", process, spool))
            if spool is not None:
                spool.remove()
        self._arriving.clear()
        for tunnel in self.tunnels.values():
            if not tunnel.logged:
                self._write(tunnel_record(self.matcher, tunnel, "refused"))
        self.tunnels.clear()
        self.sink.close()
        os.close(self._log_fd)
        self._log_fd = -1

    async def client_connected(self, client: Any) -> None:
        """Track a transparent connection like a tunnel to its original destination."""
        from mitmproxy.proxy.mode_specs import TransparentMode  # noqa: PLC0415

        if not isinstance(client.proxy_mode, TransparentMode) or not client.sockname:
            return
        # mitmproxy put the SO_ORIGINAL_DST address in sockname before this hook.
        host, port = client.sockname[0], client.sockname[1]
        self.tunnels[client.id] = Tunnel(
            label=self.label(client),
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
        if self.config.relayed and self._relayed(flow.client_conn):
            # The rootless forwarder's CONNECT names the original destination: from here
            # on, a transparent connection (its client is the relay, no sandbox process).
            self.tunnels[flow.client_conn.id] = Tunnel(
                label=self.label(flow.client_conn),
                host=req.host,
                port=req.port,
                connect_bytes=0,
                connect_parts=[],
                transparent=True,
                name=self._name_of(req.host),
            )
            return
        tunnel = Tunnel(
            label=self.label(flow.client_conn),
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

    def _relayed(self, client: Any) -> bool:
        """Return whether ``client`` came through a relayed transparent listener."""
        port = client.proxy_mode.custom_listen_port
        return port is not None and port in self.transparent_ports.values()

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

    async def _who(self, tunnel: Tunnel) -> None:
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

    def _decide(self, flow: Any) -> Action:
        """Return what becomes of a request (a transparent one is named first)."""
        tunnel = self.tunnels.get(flow.client_conn.id)
        fronted = False
        if tunnel is not None and tunnel.transparent:
            name, fronted = transparent_name(
                tunnel.sni, flow.request.host_header, tunnel.name or tunnel.host
            )
            # Logged, decided and (if allowed) forwarded by name, never to the made-up
            # address the client connected to.
            flow.request.data.host = name
        if fronted:
            return "sunk"
        return decide(
            flow.request.host,
            self.allow_hosts,
            method=flow.request.method,
            registry_hosts=self.registry_hosts,
        )

    def requestheaders(self, flow: Any) -> None:
        """Decide a request; stream a body that may follow to a spool of the proxy's own."""
        if flow.request.method == "CONNECT":
            return
        action = self._decide(flow)
        flow.metadata["cujo_action"] = action
        if not _may_have_body(flow.request):
            return
        spool = Spool(self.spool_dir)
        flow.metadata["cujo_spool"] = spool
        self._arriving[flow.id] = flow  # until it is logged: a stop mid-body logs it too
        forward = action == "forwarded"
        # The head of a sunk body, which its answer reads (a new repository's name).
        peek = bytearray()
        flow.metadata["cujo_peek"] = peek

        def stream(chunk: bytes) -> list[bytes]:
            # Called with each chunk as it arrives, then with b"" at the body's end.
            spool.streamed = True
            over = spool.over
            spool.feed(chunk)
            if not forward and len(peek) < ANSWER_PEEK:
                peek.extend(chunk[: ANSWER_PEEK - len(peek)])
            if not forward and spool.over and not over:
                # Past the limit: logged and answered 413 now; the rest is read and
                # dropped. An empty chunk ends the sink's (chunked) body: it answers.
                task = asyncio.get_running_loop().create_task(self._over_limit(flow, spool))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return [b""]
            # A forwarded request's chunks go on to its (allowed) host as they come; a
            # sunk one's nowhere: the sink gets an empty body. Never an empty chunk: sent
            # chunked, that would end the body.
            return [chunk] if forward and chunk else []

        if not forward:
            # mitmproxy streams only to a server it connected to: a sunk request is sent,
            # rewritten, to the proxy's own sink, and logged as the client sent it.
            flow.metadata["cujo_original"] = flow.request.copy()
            token = self.sink.expect()
            flow.metadata["cujo_sink"] = token
            req = flow.request
            req.scheme = "http"
            req.host, req.port = self.sink.address
            req.path = f"/{token}"
            # Chunked, so the empty body's end tells the sink when to answer.
            req.headers.pop("content-length", None)
            req.headers["transfer-encoding"] = "chunked"
        flow.request.stream = stream

    async def _over_limit(self, flow: Any, spool: Spool) -> None:
        """Log a sunk request whose body passed the limit, then have the sink answer 413."""
        flow.metadata.pop("cujo_spool", None)
        spool.close()
        await self._log_flow(flow, "refused", OVER_LIMIT_REASON, spool)
        self.sink.answer(flow.metadata["cujo_sink"], *_plain(413, b""))

    async def request(self, flow: Any) -> None:
        """Log a complete request; answer it here unless its host is allowed (a registry: read)."""
        if flow.metadata.get("cujo_logged"):
            return  # logged and answered when its body passed the limit
        action: Action = flow.metadata.get("cujo_action") or self._decide(flow)
        spool: Spool | None = flow.metadata.pop("cujo_spool", None)
        token: str | None = flow.metadata.get("cujo_sink")
        if spool is not None and not spool.streamed:
            # The request ended with its headers (an HTTP/2 GET): nothing was streamed,
            # so it is answered here, as it came.
            spool.remove()
            spool = None
            if token is not None:
                self.sink.forget(token)
                flow.request = flow.metadata.pop("cujo_original")
                del flow.metadata["cujo_sink"]
                token = None
        if spool is not None:
            spool.close()
        unsearched = OVER_LIMIT_REASON if spool is not None and spool.over else ""
        if unsearched and action != "forwarded":
            action = "refused"  # answered 413, as a body past the limit always was
        answer = (
            Answer(*_plain(REGISTRY_WRITE_STATUS, REGISTRY_WRITE_BODY))
            if action == "registry-write"
            else Answer(*_plain(413, b""))
            if action == "refused"
            else self.lookalike.answer(_asked(flow, spool), time.time())
            if action == "sunk"
            else None
        )
        if token is not None and answer is not None:
            # The sink answers once mitmproxy sends it the body's end, after this hook.
            self.sink.answer(token, answer.status, answer.headers, answer.body)
            flow.request.trailers = None
        elif answer is not None:
            # A response set here is what the client gets: nothing goes upstream.
            flow.response = _response(flow.request.method, answer)
        await self._log_flow(flow, action, unsearched, spool)

    async def error(self, flow: Any) -> None:
        """Log a request that failed before it was complete (the client gone mid-body)."""
        self._arriving.pop(flow.id, None)
        spool: Spool | None = flow.metadata.pop("cujo_spool", None)
        token = flow.metadata.get("cujo_sink")
        if token is not None:
            self.sink.forget(token)
        if flow.request is not None and not flow.metadata.get("cujo_logged"):
            if spool is not None:
                spool.close()
            await self._log_flow(flow, "refused", "", spool)
        elif spool is not None:
            spool.remove()

    def server_connect(self, data: Any) -> None:
        """Refuse every upstream connection but HTTP(S) to an allowed host."""
        # The last guard: whatever path led here, a host not allowed is never contacted
        # (nor resolved), and a refused tunnel never reaches even an allowed one.
        host = data.server.address[0] if data.server.address else ""
        tunnel = self.tunnels.get(data.client.id)
        if tunnel is not None and tunnel.refused:
            data.server.error = "cujo: upstream connection refused"
        elif self.sink.port and tuple(data.server.address or ()) == self.sink.address:
            return  # the proxy's own sink, where sunk requests are sent (requestheaders)
        elif self._refuse_host(host):
            data.server.error = "cujo: upstream connection refused"

    async def client_disconnected(self, client: Any) -> None:
        """Log a tunnel that closes without having carried a request."""
        self._processes.pop(client.id, None)
        tunnel = self.tunnels.pop(client.id, None)
        if tunnel is not None and not tunnel.logged:
            await self._log_tunnel(tunnel, "refused")


_PROCESS_CACHE = 4096


def _plain(status: int, body: bytes) -> tuple[int, tuple[tuple[str, str], ...], bytes]:
    """Return a text/plain answer (a registry write's, a body past the limit's)."""
    return status, (("content-type", "text/plain"),), body


def _asked(flow: Any, spool: Spool | None) -> Asked:
    """Return a sunk request as its answer reads it: as the client sent it."""
    request = flow.metadata.get("cujo_original") or flow.request
    peek = bytes(flow.metadata.get("cujo_peek") or b"")
    headers = {name: request.headers[name] for name in READ_HEADERS if name in request.headers}
    return Asked(
        method=request.method,
        host=request.host,
        target=request.path,
        headers=headers,
        body=peek,
        body_cut=spool is not None and spool.received > len(peek),
    )


def _response(method: str, answer: Answer) -> Any:
    """Return a mitmproxy response carrying ``answer`` (no body for HEAD, 204 or 304)."""
    from mitmproxy import http  # noqa: PLC0415

    response = http.Response.make(answer.status, answer.body, list(_encoded(answer.headers)))
    if bodiless(method, answer.status):
        if answer.status in (204, 304):
            response.headers.pop("content-length", None)
        # The length a GET would have carried stays in content-length; no body is sent.
        response.raw_content = b""
    return response


def _encoded(headers: tuple[tuple[str, str], ...]) -> Iterator[tuple[bytes, bytes]]:
    """Yield an answer's well-formed headers as mitmproxy takes them."""
    for name, value in headers:
        if well_formed(name, value):
            yield name.encode(), value.encode("latin-1", "replace")


def _may_have_body(request: Any) -> bool:
    """Return whether a body may follow a request's headers."""
    if request.is_http2 or request.is_http3:
        return True  # said by the stream's end, after this: a bodiless one is undone
    from mitmproxy.net.http.http1 import expected_http_body_size  # noqa: PLC0415

    try:
        return expected_http_body_size(request) != 0
    except ValueError:
        return False  # mitmproxy refuses such a request itself


def _peer(client: Any) -> tuple[str, int] | None:
    """Return a client connection's address and port (IPv4), if mitmproxy knows it."""
    peer = getattr(client, "peername", None)
    if isinstance(peer, tuple) and len(peer) >= 2 and isinstance(peer[1], int):
        return str(peer[0]).removeprefix("::ffff:"), peer[1]
    return None


class _Promise:
    """A log line owed: the search under way that makes it (``future``), else ``make``,
    which makes it here and now; the request's spool, removed once the line is written."""

    def __init__(self, make: Callable[[], dict[str, Any]], spool: Spool | None = None) -> None:
        self.make = make
        self.spool = spool
        self.future: Future[dict[str, Any]] | None = None

    def result(self) -> dict[str, Any]:
        """Return the line: the search's, or made now when it never ran or failed."""
        future = self.future
        if (
            future is not None
            and future.done()
            and not future.cancelled()
            and future.exception() is None
        ):
            return future.result()
        return self.make()

    def settle(self) -> None:
        """Remove the request's spool: its line is written (or will never be)."""
        if self.spool is not None:
            self.spool.remove()
            self.spool = None

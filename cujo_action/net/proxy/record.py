"""The proxy's log lines: what a request or a tunnel carried, searched for decoys.

Built on the proxy addon's search thread (``proxy/addon.py``), one at a time.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import unquote_to_bytes

from cujo_action.find.inflate import decode_content
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.net.dns.doh import doh_query
from cujo_action.net.dns.flow import merge_flow
from cujo_action.net.dns.record import NameScanner
from cujo_action.net.egress import Action, egress_record
from cujo_action.net.proxy.request import (
    header_parts,
    request_size,
    scan,
)
from cujo_action.net.proxy.spool import Spool, search_spool
from cujo_action.schema import RAW_METHOD, TLS_METHOD, TUNNEL_METHOD

# Methods whose body is judged for opacity (egress.opaque): what sends data somewhere.
SENDS = frozenset({"POST", "PUT", "PATCH"})


@dataclass
class Tunnel:
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


def began_tls(sni: str | None, first: bytes) -> bool:
    """Return whether a connection began with a TLS handshake: an SNI was read, or its
    first bytes are a TLS handshake record (content type 22, version 3.x)."""
    return sni is not None or first[:2] == b"\x16\x03"


def tunnel_record(matcher: DecoyMatcher, tunnel: Tunnel, action: Action) -> dict[str, Any]:
    """Return the log line of a tunnel: its CONNECT, SNI and first bytes searched."""
    parts = [*tunnel.connect_parts]
    if tunnel.sni:
        parts.append(("sni", tunnel.sni.encode()))
    peeked = b"".join(tunnel.peeks.values())
    parts.append(("tcp", peeked))
    found = scan(matcher, parts)
    # A transparent connection's host is an address; the SNI, if any, is the name,
    # else the name the client looked up to get that address.
    if tunnel.transparent:
        host = tunnel.sni or tunnel.name or tunnel.host
        method = TLS_METHOD if began_tls(tunnel.sni, peeked) else RAW_METHOD
    else:
        host = tunnel.host or tunnel.sni or ""
        method = TUNNEL_METHOD
    tunnel.logged = True
    return egress_record(
        ts=time.time(),
        label=tunnel.label,
        host=host or "",
        port=tunnel.port,
        method=method,
        url=f"{tunnel.name or tunnel.host}:{tunnel.port}",
        bytes_out=tunnel.connect_bytes + len(peeked),
        action=action,
        decoy_seen=found.seen,
        decoy_where=found.where,
        route="direct" if tunnel.transparent else "proxy",
        process=tunnel.process,
        unsearched=found.unsearched,
    )


class Recorder(Protocol):
    """What a request's log line is built from: the proxy addon (``proxy.addon.EgressAddon``)."""

    matcher: DecoyMatcher
    names: NameScanner
    overlap: int
    tunnels: dict[str, Tunnel]

    def label(self, client: Any) -> str:
        """Return the label (check/phase) of the port a client connected to."""
        ...


def flow_record(
    addon: Recorder,
    flow: Any,
    action: Action,
    unsearched: str,
    process: dict[str, Any] | None,
    spool: Spool | None = None,
) -> dict[str, Any]:
    """Return the log line of a request: its URL, headers and body searched."""
    # A sunk request was rewritten to reach the sink: logged as the client sent it.
    req = flow.metadata.get("cujo_original") or flow.request
    tunnel = addon.tunnels.get(flow.client_conn.id)
    raw = req.raw_content or b""
    parts = [("url", req.url.encode()), *header_parts(req.headers.fields)]
    judge = ("body",) if req.method in SENDS else ()
    coding = req.headers.get("content-encoding")
    if spool is None:
        # The body as its Content-Encoding says to read it: undone here, capped
        # (mitmproxy would inflate without a cap); as sent when that fails (the search
        # then unwraps whatever compression it recognises).
        decoded = decode_content(raw, coding) if coding else None
        body: bytes | None = raw if decoded is None else decoded
        parts.append(("body", body or b""))
        found = scan(addon.matcher, parts, judge=judge)
        seen, where = found.seen, found.where
        body_unsearched, opaque = found.unsearched, found.opaque
        size = len(raw)
    else:
        found = scan(addon.matcher, parts)

        def whole(data: bytes) -> tuple[list[str], list[str], str, bool]:
            got = scan(addon.matcher, [("body", data)], judge=judge)
            return got.seen, got.where, got.unsearched, got.opaque

        searched = search_spool(
            addon.matcher, spool, coding, judge=bool(judge), overlap=addon.overlap,
            scan_whole=whole,
        )  # fmt: skip
        seen = found.seen + [n for n in searched.seen if n not in found.seen]
        where = found.where + [w for w in searched.where if w not in found.where]
        body_unsearched = found.unsearched or searched.unsearched
        opaque = searched.opaque
        body = searched.whole
        size = spool.received
    # A DNS-over-HTTPS lookup is named as one, and its name searched as the resolver
    # searches names (labels joined, case folded where the encoding allows).
    doh = doh_query(
        req.host,
        req.path.partition("?")[0],
        dict(req.query.items()),
        {k.lower(): v for k, v in req.headers.items()},
        body or b"",
    )
    if doh is not None and doh.labels:
        names, places = addon.names.scan(doh.labels)
        seen += [n for n in names if n not in seen]
        where += [p.replace("dns:", "doh:", 1) for p in places if p not in where]
    # Inside a tunnel the request line carried the path; a plain proxied request
    # carried the absolute URL.
    target = req.path if tunnel is not None or req.is_http2 else req.url
    record = egress_record(
        ts=time.time(),
        label=addon.label(flow.client_conn),
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
        unsearched=unsearched or body_unsearched,
        opaque=opaque,
        addressed=(tunnel.name or "") if tunnel is not None and tunnel.transparent else "",
    )
    pid = process.get("pid") if process else None
    if doh is not None and doh.labels:
        # A lookup followed across requests, as the resolver follows queries (dnsflow).
        merge_flow(record, addon.names.follow(record["label"], pid, doh.labels), "doh:")
    if pieces := target_pieces(req.path):
        # The request's path and query followed across the requests to its host (and a
        # process's across hosts), as the resolver follows names: a decoy cut finer than
        # a slice, a piece a request (a package name, a query string), is found joined
        # (``url:joined+…``). No tunnel count: a registry's file paths look random.
        labels = [*pieces, *req.host.lower().encode().split(b".")]
        found_url = addon.names.follow(f"{record['label']} url", pid, labels)
        merge_flow(record, replace(found_url, tunnel=False), "url:")
    return record


_TARGET_SPLIT = re.compile(rb"[/?&=;#]")


def target_pieces(path: str) -> list[bytes]:
    """Return a request target's pieces, in order: its path segments and its query's
    names and values, each percent-decoded."""
    raw = path.encode("utf-8", "surrogateescape")
    return [unquote_to_bytes(piece) for piece in _TARGET_SPLIT.split(raw) if piece]

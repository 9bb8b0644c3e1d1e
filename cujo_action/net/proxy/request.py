"""Read a request as the proxy decides and logs it: its name, its size, its parts searched."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import NamedTuple

from cujo_action.find.matcher import DecoyMatcher
from cujo_action.schema import normalize_host

# Bytes of a tunnel's payload kept for scanning when it carries no HTTP request.
PEEK_CAP = 1 << 20

# What a write to a registry is answered with, in place of the registry.
REGISTRY_WRITE_STATUS = 403
REGISTRY_WRITE_BODY = b"Cujo's sandbox does not publish: registries are read-only here.\n"


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


def header_parts(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, bytes]]:
    """Return a request's headers as the parts searched: ``authorization``, the header
    that hands a credential to the server (a token, or basic auth's ``user:password``),
    then ``header``, every other one. A rule tells a secret's use from its theft by it."""
    fields = list(headers)
    auth = [(k, v) for k, v in fields if k.lower() == b"authorization"]
    rest = [(k, v) for k, v in fields if k.lower() != b"authorization"]
    return [("authorization", header_block(auth)), ("header", header_block(rest))]


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

"""Tell a DNS-over-HTTPS request from any other, and read the name it asks for.

DoH (RFC 8484) carries a DNS query in HTTPS: the wire message base64url-encoded in
``?dns=`` (GET) or as the body (POST, ``application/dns-message``); the JSON flavour
(Google's ``/resolve``, Cloudflare's ``application/dns-json``) names it in ``?name=``.
Through the proxy such a request is logged like any other; this names it as DoH, with
the name it asked for, so a lookup that went around the logging resolver is still seen
as one (its labels searched for decoys as the resolver searches them). Pure.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

from cujo_action.net.dns.wire import DnsFormatError, parse_query
from cujo_action.schema import normalize_host

# Public resolvers that answer DoH (their documented endpoints), by host name or address.
WELL_KNOWN = frozenset(
    {
        "dns.google", "dns.google.com", "8.8.8.8", "8.8.4.4",
        "cloudflare-dns.com", "mozilla.cloudflare-dns.com", "one.one.one.one",
        "security.cloudflare-dns.com", "family.cloudflare-dns.com", "1.1.1.1", "1.0.0.1",
        "dns.quad9.net", "dns9.quad9.net", "dns10.quad9.net", "dns11.quad9.net", "9.9.9.9",
        "149.112.112.112", "doh.opendns.com", "dns.nextdns.io", "doh.cleanbrowsing.org",
        "dns.adguard-dns.com", "dns.adguard.com", "unfiltered.adguard-dns.com", "doh.dns.sb",
        "dns.alidns.com", "doh.pub", "dns.twnic.tw", "doh.mullvad.net", "dns.mullvad.net",
        "doh.libredns.gr", "dns.controld.com", "freedns.controld.com",
    }
)  # fmt: skip
DNS_MESSAGE = "application/dns-message"
DNS_JSON = "application/dns-json"
UNREADABLE = "(a question that does not parse)"


@dataclass(frozen=True)
class DohQuery:
    """A DoH request: the name it asked for, and its labels as sent."""

    name: str
    labels: tuple[bytes, ...]


def doh_query(
    host: str,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    body: bytes,
) -> DohQuery | None:
    """Return what a request asks as DNS-over-HTTPS, or None when it is no DoH request."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    accept = headers.get("accept", "").lower()
    known = normalize_host(host) in WELL_KNOWN
    wire = None
    if "dns" in query:
        encoded = query["dns"]
        try:
            wire = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            wire = b""
    elif content_type == DNS_MESSAGE:
        wire = body
    if wire is not None:
        try:
            parsed = parse_query(wire)
        except DnsFormatError:
            return DohQuery(UNREADABLE, ())
        return DohQuery(parsed.name, parsed.labels)
    json_style = DNS_JSON in (content_type, accept) or path.rstrip("/").endswith(
        ("/resolve", "/dns-query")
    )
    if "name" in query and (known or json_style):
        name = query["name"].rstrip(".")
        return DohQuery(name, tuple(label.encode() for label in name.split(".") if label))
    if known and path.rstrip("/").endswith(("/dns-query", "/resolve")):
        return DohQuery(UNREADABLE, ())
    return None

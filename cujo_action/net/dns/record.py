"""Log one DNS query: its name searched for decoys, as one line of the egress log."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from cujo_action.find.decoys import Decoy
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.net.dns.flow import FlowResult, NameFlow
from cujo_action.net.dns.wire import Query, qtype_text
from cujo_action.net.egress import Action, decide, egress_record
from cujo_action.schema import clip, normalize_host

DNS_METHOD = "DNS"
DNS_PORT = 53


class NameScanner:
    """Find decoys in query names: plain, hex, base64 or base32, split over labels or not.

    A label holds 63 bytes and a name 255, so a decoy often leaves in pieces (30 bytes of
    a 40-byte secret hex-encoded in one query, the rest in the next): the matcher counts
    a long enough slice (``matcher.SLICE``), and names are searched with their labels
    joined, their case folded where the encoding allows (0x20 randomisation,
    lower-casing resolvers).
    """

    def __init__(self, decoys: Iterable[Decoy]) -> None:
        """Build the matcher once, and the streams names are followed in (``follow``)."""
        self.decoys = tuple(decoys)
        self.matcher = DecoyMatcher(self.decoys)
        self.flow = NameFlow(self.matcher)

    def follow(
        self,
        label: str,
        pid: int | None,
        labels: Sequence[bytes],
        qtype: int = 1,
        retry: bool = False,
    ) -> FlowResult:
        """Return what one query completes in its streams (dns/flow.py): decoys sent a few
        characters per query, a tunnel (``retry``: asked again with the search domain)."""
        return self.flow.follow(label, pid, labels, qtype, retry)

    def scan(self, labels: Sequence[bytes]) -> tuple[list[str], list[str]]:
        """Return (decoy names, "dns:encoding" places) found in a query name."""
        # Joined, and joined without the zone's labels (exfil.test): the zone would run on
        # from the data's last label and change the encoding's case or alphabet.
        hits: list[tuple[str, str]] = []
        for keep in sorted({len(labels), max(len(labels) - 1, 1), max(len(labels) - 2, 1)}):
            hits += self.matcher.find(b"".join(labels[:keep]), fold_case=True)
        order = {d.name: i for i, d in enumerate(self.decoys)}
        hits.sort(key=lambda hit: order.get(hit[0], len(order)))
        seen = list(dict.fromkeys(name for name, _ in hits))
        where = list(dict.fromkeys(f"dns:{encoding}" for _, encoding in hits))
        return seen, where


def without_search(query: Query, search: Sequence[str]) -> Query | None:
    """Return ``query`` as asked before a search domain was appended, or None if none was.

    glibc appends resolv.conf's ``search`` domain to a name it could not resolve as it is
    (an empty AAAA answer, a name without a dot): ``pypi.org.<search domain>`` is still a
    look-up of ``pypi.org``.
    """
    lowered = tuple(label.lower() for label in query.labels)
    for domain in search:
        tail = tuple(part.encode().lower() for part in domain.strip(".").split(".") if part)
        if tail and len(lowered) > len(tail) and lowered[-len(tail) :] == tail:
            return dataclasses.replace(query, labels=query.labels[: -len(tail)])
    return None


def dns_record(
    *,
    ts: float,
    label: str,
    query: Query | None,
    size: int,
    allow_hosts: Iterable[str],
    scanner: NameScanner,
    raw: bytes = b"",
    search: Sequence[str] = (),
) -> dict[str, Any]:
    """Return the egress log line of one query (``query`` None: it did not parse).

    A name under a ``search`` domain is logged as the host it looks up (the name without
    the domain: ``without_search``); its URL keeps the whole name asked.
    """
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
    asked = without_search(query, search) or query
    name = asked.name
    qtype = qtype_text(query.qtype)
    action: Action = decide(name, allow_hosts) if name else "sunk"
    seen, where = scanner.scan(asked.labels)
    return egress_record(
        ts=ts,
        label=label,
        host=normalize_host(name) if name else "",
        port=DNS_PORT,
        method=DNS_METHOD,
        url=clip(f"dns:{query.name}?type={qtype}", 2000),
        bytes_out=size,
        action=action,
        decoy_seen=seen,
        decoy_where=where,
        route="dns",
    )

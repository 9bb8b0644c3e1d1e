"""Read and write DNS messages: parse a query, build its answer or an error reply."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset

# Parsed and built by dnspython (https://www.dnspython.org/): only what the resolver
# decides is written here. The logging resolver (dns/resolver.py) answers with these, and a
# DNS-over-HTTPS request (doh.py) is read with ``parse_query``.
#
# An answer reads as systemd-resolved's stub gives it on a runner (its
# src/resolve/resolved-dns-stub.c): RA set, RD and CD echoed, AA and AD clear (nothing
# is authoritative or DNSSEC-validated; ``options trust-ad`` only lets a client ask for
# AD), an OPT record only when the query had one, advertising resolved's 65494 bytes,
# and TTLs that count down as a cache's do (``cached_ttl``).

TTL = 1  # when no cache is imitated
# resolved's ADVERTISE_DATAGRAM_SIZE_MAX: the loopback MTU less Ethernet, IP and UDP.
STUB_PAYLOAD = 65536 - 14 - 20 - 8
# TTLs an upstream commonly gives an A record; each name gets one (``cached_ttl``).
_TTLS = (60, 300, 600, 3600)

_TYPE_A, _TYPE_ANY, _CLASS_IN = 1, 255, 1
RCODE_OK, RCODE_FORMERR, RCODE_NXDOMAIN, RCODE_NOTIMP = 0, 1, 3, 4
MAX_NAME = 255


class DnsFormatError(ValueError):
    """A message that is not a well-formed single-question DNS query."""


@dataclass(frozen=True)
class Query:
    """The parts of a DNS query the resolver acts on, and the message they came from."""

    message: dns.message.Message
    labels: tuple[bytes, ...]  # as sent, case kept (a decoy may be cased)
    qtype: int
    qclass: int
    # The query's EDNS version (-1: no OPT record) and its DNSSEC OK bit.
    edns: int = -1
    dnssec_ok: bool = False

    @property
    def ident(self) -> int:
        """Return the query's id."""
        return int(self.message.id)

    @property
    def name(self) -> str:
        """Return the query name as text, without the root dot."""
        return ".".join(label.decode("ascii", "backslashreplace") for label in self.labels)

    @property
    def opcode(self) -> int:
        """Return the query's opcode (0 is a standard query)."""
        return int(self.message.opcode())

    @property
    def question(self) -> bytes:
        """Return the question section as it goes on the wire (echoed in the answer)."""
        wire = dns.name.Name([*self.labels, b""]).to_wire() or b""
        return wire + struct.pack("!HH", self.qtype, self.qclass)


def parse_query(data: bytes) -> Query:
    """Return the query in a DNS message, or raise DnsFormatError."""
    if len(data) < 12:
        raise DnsFormatError("shorter than a DNS header")
    try:
        message = dns.message.from_wire(data, question_only=True, ignore_trailing=False)
    except (dns.exception.DNSException, ValueError, IndexError) as exc:
        raise DnsFormatError(f"{type(exc).__name__}: {exc}") from None
    if message.flags & dns.flags.QR:
        raise DnsFormatError("a response, not a query")
    if len(message.question) != 1:
        raise DnsFormatError(f"{len(message.question)} questions")
    rrset = message.question[0]
    labels = tuple(label for label in rrset.name.labels if label)
    if sum(len(label) + 1 for label in labels) + 1 > MAX_NAME:
        raise DnsFormatError("name longer than 255 bytes")
    edns, dnssec_ok = _edns(data)
    return Query(message, labels, int(rrset.rdtype), int(rrset.rdclass), edns, dnssec_ok)


def _edns(data: bytes) -> tuple[int, bool]:
    """Return the EDNS version and DO bit of a query (-1, False without a readable OPT)."""
    try:
        full = dns.message.from_wire(data, ignore_trailing=True)
    except (dns.exception.DNSException, ValueError, IndexError):
        return -1, False
    return int(full.edns), bool(full.ednsflags & dns.flags.DO)


def cached_ttl(name: str, now: float, key: bytes = b"") -> int:
    """Return the TTL a cache would give ``name`` at ``now``: counting down, then anew.

    Each name gets one of the common TTLs and a phase of its own (from ``key``, so a run's
    are not another's): asked twice, its TTL has gone down by the time between, as an
    answer from resolved's cache has.
    """
    digest = hashlib.blake2b(name.lower().encode(), key=key[:64], digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    base = _TTLS[value % len(_TTLS)]
    return base - (int(now) + (value >> 8)) % base


def build_response(
    query: Query, answer: str | None, rcode: int = RCODE_OK, ttl: int = TTL
) -> bytes:
    """Return the response to ``query``: one A record for ``answer``, or none."""
    response = dns.message.make_response(query.message, recursion_available=True)
    # make_response keeps RD; resolved echoes CD too, and sets neither AA nor AD.
    response.flags |= query.message.flags & dns.flags.CD
    response.set_rcode(dns.rcode.Rcode(rcode))
    if query.edns >= 0:
        # DO only where resolved would: it validates nothing, so only when CD asks it.
        dnssec_ok = query.dnssec_ok and bool(query.message.flags & dns.flags.CD)
        response.use_edns(0, dns.flags.DO if dnssec_ok else 0, STUB_PAYLOAD)
    if answer is not None and rcode == RCODE_OK:
        rrset = dns.rrset.from_text(query.message.question[0].name, ttl, "IN", "A", answer)
        response.answer.append(rrset)
    return response.to_wire()


def error_response(data: bytes, rcode: int) -> bytes | None:
    """Return a question-less error reply to a message whose header parses, else None."""
    if len(data) < 12 or data[2] & 0x80:
        return None
    ident, flags = struct.unpack("!HH", data[:4])
    reply = dns.message.Message(id=ident)
    reply.flags = dns.flags.QR | dns.flags.RA | (flags & (dns.flags.RD | 0x7800))
    reply.set_rcode(dns.rcode.Rcode(rcode))
    return reply.to_wire()


def answer_for(query: Query, sink: str) -> tuple[str | None, int]:
    """Return (the A record to give or None, rcode) for a parsed query."""
    if query.opcode != 0:
        return None, RCODE_NOTIMP
    if query.qclass == _CLASS_IN and query.qtype in (_TYPE_A, _TYPE_ANY):
        return sink, RCODE_OK
    return None, RCODE_OK


def qtype_text(qtype: int) -> str:
    """Return a query type as DNS names it (A, AAAA, TXT, TYPE65534…)."""
    return dns.rdatatype.to_text(dns.rdatatype.RdataType.make(qtype))

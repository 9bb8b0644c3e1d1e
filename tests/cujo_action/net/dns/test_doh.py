"""DNS-over-HTTPS is told from other requests, and the name it asks for read (RFC 8484)."""

from __future__ import annotations

import base64

import dns.message

from cujo_action.find.decoys import make_decoys
from cujo_action.net.dns.doh import UNREADABLE, doh_query
from cujo_action.net.dns.flow import merge_flow
from cujo_action.net.dns.record import NameScanner


def wire(name: str) -> bytes:
    """A query as DoH clients send it, made by dnspython (the oracle)."""
    message = dns.message.make_query(name, "A")
    message.id = 0  # RFC 8484 asks for id 0, for caching
    return message.to_wire()


def test_a_get_with_the_wire_query_in_dns_is_read() -> None:
    encoded = base64.urlsafe_b64encode(wire("abcd.exfil.test")).decode().rstrip("=")
    found = doh_query("dns.google", "/dns-query", {"dns": encoded}, {}, b"")
    assert found is not None
    assert (found.name, found.labels) == ("abcd.exfil.test", (b"abcd", b"exfil", b"test"))


def test_a_post_of_a_dns_message_is_read_whatever_the_host() -> None:
    headers = {"content-type": "application/dns-message"}
    found = doh_query("doh.corp.test", "/q", {}, headers, wire("a.b.test"))
    assert found is not None
    assert found.name == "a.b.test"


def test_the_json_flavour_of_public_resolvers_is_read() -> None:
    found = doh_query("dns.google", "/resolve", {"name": "x.test.", "type": "A"}, {}, b"")
    assert found is not None
    assert found.name == "x.test"
    accept = {"accept": "application/dns-json"}
    other = doh_query("cloudflare-dns.com", "/dns-query", {"name": "y.test"}, accept, b"")
    assert other is not None
    assert other.name == "y.test"


def test_an_unreadable_question_to_a_resolver_is_still_doh() -> None:
    found = doh_query("1.1.1.1", "/dns-query", {"dns": "!!!"}, {}, b"")
    assert found is not None
    assert (found.name, found.labels) == (UNREADABLE, ())
    assert doh_query("dns.quad9.net", "/dns-query", {}, {}, b"") is not None


def test_ordinary_requests_are_no_doh() -> None:
    assert doh_query("pypi.org", "/simple/six/", {}, {}, b"") is None
    assert doh_query("api.example.test", "/search", {"name": "bob"}, {}, b"") is None
    assert doh_query("dns.google", "/", {}, {"accept": "text/html"}, b"") is None


def test_a_decoy_sent_a_few_characters_per_doh_request_is_found_joined() -> None:
    """The proxy follows DoH names across requests as the resolver follows queries."""
    decoys = make_decoys()
    scanner = NameScanner(decoys)
    data = next(d for d in decoys if d.name == "GITHUB_TOKEN").value.encode().hex()
    places: list[str] = []
    for i in range(0, len(data), 8):
        encoded = base64.urlsafe_b64encode(wire(f"{data[i : i + 8]}.{i}.t.exfil.test"))
        found = doh_query("dns.google", "/dns-query", {"dns": encoded.decode()}, {}, b"")
        assert found is not None
        assert scanner.scan(found.labels) == ([], [])  # no request holds a slice alone
        record: dict[str, object] = {"decoy_seen": [], "decoy_where": []}
        merge_flow(record, scanner.follow("tests/test", 42, found.labels), "doh:")
        places += record["decoy_where"]  # type: ignore[arg-type]
    assert "doh:joined+hex" in places

"""A caught connection that carried no request is logged as TLS when it began a TLS
handshake (a client that refused the run's CA), as TCP when it was a raw channel."""

from __future__ import annotations

from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.net.proxy.record import Tunnel, began_tls, tunnel_record

MATCHER = DecoyMatcher(make_decoys())
# The first bytes of a TLS 1.2/1.3 ClientHello record, and of a reverse shell's greeting.
HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
SHELL = b"shell from runner\n"


def caught(*, sni: str | None, first: bytes, transparent: bool = True) -> Tunnel:
    return Tunnel(
        label="tests/test",
        host="198.18.0.7",
        port=443,
        connect_bytes=0,
        connect_parts=[],
        sni=sni,
        peeks={1: first},
        transparent=transparent,
        name="collector.exfil.test",
    )


def test_a_caught_tls_hello_is_tls_named_by_its_sni() -> None:
    record = tunnel_record(MATCHER, caught(sni="collector.exfil.test", first=HELLO), "refused")
    assert (record["method"], record["route"], record["host"]) == (
        "TLS",
        "direct",
        "collector.exfil.test",
    )


def test_a_tls_hello_without_a_name_is_still_tls() -> None:
    assert began_tls(None, HELLO)
    record = tunnel_record(MATCHER, caught(sni=None, first=HELLO), "refused")
    assert record["method"] == "TLS"


def test_anything_else_caught_is_a_raw_channel() -> None:
    assert not began_tls(None, SHELL)
    assert not began_tls(None, b"")
    record = tunnel_record(MATCHER, caught(sni=None, first=SHELL), "refused")
    assert (record["method"], record["route"], record["host"]) == (
        "TCP",
        "direct",
        "collector.exfil.test",
    )


def test_a_connect_tunnel_stays_connect() -> None:
    tunnel = caught(sni="collector.exfil.test", first=HELLO, transparent=False)
    record = tunnel_record(MATCHER, tunnel, "refused")
    assert (record["method"], record["route"]) == ("CONNECT", "proxy")

"""The namespace's nftables guard sends TCP and DNS to the harness and counts every drop."""

from __future__ import annotations

from cujo_action.net.ns.layout import Layout
from cujo_action.net.ns.nftguard import Drops, Redirect, Refused, parse_drops, ruleset


def test_ruleset_redirects_tcp_and_dns_and_counts_every_other_drop() -> None:
    text = ruleset(
        Layout("a1b2c3", 0), Redirect(transparent_port=7001, dns_port=7053, proxy_port=7000)
    )
    assert "table inet cujo_a1b2c3 {" in text
    assert 'iifname "cujoa1b2c3h" meta l4proto tcp counter dnat ip to 127.0.0.1:7001' in text
    assert 'iifname "cujoa1b2c3h" udp dport 53 counter dnat ip to 127.0.0.1:7053' in text
    assert 'iifname "cujoa1b2c3h" tcp dport 53 counter dnat ip to 127.0.0.1:7053' in text
    assert "ip daddr 10.200.0.1 tcp dport 7000 counter dnat ip to 127.0.0.1:7000" in text
    assert "tcp dport { 7000, 7001, 7053 } accept" in text
    assert 'counter drop comment "refused"' in text
    # The regular proxy rule must come before the catch-all transparent rule.
    assert text.index("tcp dport 7000") < text.index("meta l4proto tcp counter dnat")
    bare = ruleset(Layout("a1b2c3", 0), Redirect(transparent_port=7001))
    assert "dport 53" not in bare
    assert "tcp dport { 7001 } accept" in bare


def test_parse_drops_reads_set_elements_and_rule_counters() -> None:
    listing = {
        "nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "inet", "name": "cujo_a1b2c3"}},
            {
                "set": {
                    "name": "refused4",
                    "elem": [
                        {
                            "elem": {
                                "val": {"concat": ["10.200.0.1", "udp", 9999]},
                                "counter": {"packets": 1, "bytes": 29},
                            }
                        },
                        {
                            "elem": {
                                "val": {"concat": ["203.0.113.7", "udp", 1234]},
                                "counter": {"packets": 3, "bytes": 87},
                            }
                        },
                    ],
                }
            },
            {
                "set": {
                    "name": "refused4_other",
                    "elem": [
                        {
                            "elem": {
                                "val": {"concat": ["10.200.0.1", "icmp"]},
                                "counter": {"packets": 2, "bytes": 168},
                            }
                        }
                    ],
                }
            },
            {
                "rule": {
                    "comment": "refused",
                    "expr": [{"counter": {"packets": 6, "bytes": 284}}, {"drop": None}],
                }
            },
            {
                "rule": {
                    "comment": "ipv6",
                    "expr": [{"counter": {"packets": 1, "bytes": 70}}, {"drop": None}],
                }
            },
            {"rule": {"comment": "transparent", "expr": [{"counter": {"packets": 9, "bytes": 1}}]}},
        ]
    }
    drops = parse_drops(listing)
    assert drops == Drops(
        refused=[
            Refused("203.0.113.7", "udp", 1234, 3, 87),
            Refused("10.200.0.1", "icmp", None, 2, 168),
            Refused("10.200.0.1", "udp", 9999, 1, 29),
        ],
        packets=7,
        ipv6_packets=1,
    )
    assert str(drops.refused[0]) == "refused: 3 packets to 203.0.113.7:1234/udp"
    assert str(drops.refused[1]) == "refused: 2 packets to 10.200.0.1/icmp"
    assert parse_drops({}) == Drops()

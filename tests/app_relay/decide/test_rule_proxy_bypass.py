"""proxy-bypass: a raw channel (neither HTTP nor TLS) to an unexpected host, or a packet the
jail refused, is critical; HTTP and TLS the namespace caught are ordinary egress."""

from __future__ import annotations

from cujo_action.schema import REFUSED_PACKETS


def test_fires_on_a_raw_connection_to_an_unexpected_host(make, run_rule):
    raw = make.egress("tests", "203.0.113.9", method="TCP", action="refused", route="direct")

    [finding] = run_rule("proxy-bypass", [make.report("tests", egress=[raw])])

    assert finding.severity == "critical"
    assert finding.evidence == [raw.id]
    assert finding.title.startswith("1 raw connection to 203.0.113.9 (neither HTTP nor TLS")


def test_fires_on_refused_packets(make, run_rule):
    udp = make.observation("install", REFUSED_PACKETS, "refused: 3 packets to 10.9.9.9:53/udp")

    [finding] = run_rule("proxy-bypass", [make.report("install", observations=[udp])])

    assert finding.evidence == [udp.id]
    assert "10.9.9.9:53/udp" in finding.title


def test_near_miss_proxied_requests_and_direct_registry_traffic(make, run_rule):
    proxied = make.egress("tests", "collector.exfil.test")  # runtime-egress's business
    registry = make.egress("install", "pypi.org", action="forwarded", route="direct")
    dns = make.egress("install", "pypi.org", method="DNS", route="dns")

    reports = [
        make.report("tests", egress=[proxied]),
        make.report("install", egress=[registry, dns]),
    ]
    assert run_rule("proxy-bypass", reports) == []


def test_caught_http_and_tls_are_not_a_bypass_without_proxy_variables(make, run_rule):
    # Under full isolation no proxy is set: every client is caught by the namespace.
    # What it caught as HTTP or TLS is ordinary egress (runtime-egress, install-egress).
    post = make.egress("tests", "collector.exfil.test", method="POST", route="direct")
    pinned = make.egress("tests", "collector.exfil.test", method="TLS", action="refused",
                         route="direct")  # fmt: skip
    early = make.egress("install", "evil.test", method="GET", route="direct")
    reports = [
        make.report("tests", egress=[post, pinned]),
        make.report("install", egress=[early]),
    ]
    assert run_rule("proxy-bypass", reports) == []
    assert [f.rule for f in run_rule("install-egress", reports)] == ["install-egress"]

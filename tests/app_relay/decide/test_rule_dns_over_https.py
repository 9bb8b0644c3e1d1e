"""dns-over-https: a lookup over HTTPS during install or import went around the resolver."""

from __future__ import annotations


def test_fires_on_doh_during_install_and_import_and_names_what_was_asked(make, run_rule):
    install = make.egress("install", "dns.google", method="GET", dns_name="x1.exfil.test")
    again = make.egress("install", "dns.google", method="POST", dns_name="x2.exfil.test")
    imported = make.egress("detonation", "cloudflare-dns.com", dns_name="beacon.test")
    reports = [
        make.report("install", egress=[install, again]),
        make.report("detonation", egress=[imported]),
    ]

    findings = run_rule("dns-over-https", reports)

    assert [f.evidence for f in findings] == [[install.id, again.id], [imported.id]]
    assert all(f.severity == "critical" for f in findings)
    assert findings[0].title == (
        "install: DNS-over-HTTPS to dns.google (around the logging resolver) asked for "
        "x1.exfil.test, x2.exfil.test"
    )
    assert findings[1].check == "detonation"


def test_near_misses_an_ordinary_request_and_doh_in_the_tests(make, run_rule):
    ordinary = make.egress("install", "dns.google", method="GET")
    tests = make.egress("tests", "dns.google", dns_name="example.test")
    reports = [make.report("install", egress=[ordinary]), make.report("tests", egress=[tests])]

    assert run_rule("dns-over-https", reports) == []

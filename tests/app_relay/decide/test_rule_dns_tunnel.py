"""dns-tunnel: many distinct high-entropy labels under one parent domain (the resolver
marks the queries): critical during install and import, a warning later."""

from __future__ import annotations


def test_install_is_critical_and_groups_by_parent_domain(make, run_rule):
    a = make.egress("install", "a1b2c3d4.t.exfil.test", method="DNS", route="dns", dns_tunnel=True)
    b = make.egress("install", "e5f6a7b8.t.exfil.test", method="DNS", route="dns", dns_tunnel=True)
    reports = [make.report("install", egress=[a, b])]

    (finding,) = run_rule("dns-tunnel", reports)

    assert finding.severity == "critical"
    assert finding.evidence == [a.id, b.id]
    assert "exfil.test" in finding.title


def test_tests_phase_is_a_warning(make, run_rule):
    q = make.egress("tests", "zz9x.cdn.example", method="DNS", route="dns", dns_tunnel=True)

    (finding,) = run_rule("dns-tunnel", [make.report("tests", egress=[q])])

    assert finding.severity == "warn"


def test_unmarked_queries_do_not_fire(make, run_rule):
    q = make.egress("install", "pypi.org", method="DNS", route="dns")
    assert run_rule("dns-tunnel", [make.report("install", egress=[q])]) == []

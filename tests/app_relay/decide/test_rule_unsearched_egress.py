"""unsearched-egress: a request to an unexpected host that could not be searched for
decoys (over the proxy's body limit, encodings nested past the limit): critical."""

from __future__ import annotations

from app_relay.decide.hits import RuleContext
from cujo_action.schema import Policy


def test_fires_for_an_unexpected_host_and_names_why(make, run_rule):
    big = make.egress("tests", "collector.exfil.test", method="POST",
                      unsearched="body over the proxy's limit of 64 MiB")  # fmt: skip
    reports = [make.report("tests", egress=[big])]

    (finding,) = run_rule("unsearched-egress", reports)

    assert finding.severity == "critical"  # at test time too
    assert finding.evidence == [big.id]
    assert "collector.exfil.test" in finding.title
    assert "body over the proxy's limit of 64 MiB" in finding.title


def test_a_request_to_a_registry_that_could_not_be_searched_fires(make, run_rule):
    # Seven base64 layers in a query string to PyPI: forwarded on GitHub, so a channel.
    nested = make.egress("tests", "pypi.org", unsearched="nested past 6")
    reports = [make.report("tests", egress=[nested])]

    (finding,) = run_rule("unsearched-egress", reports)

    assert finding.severity == "critical"
    assert finding.evidence == [nested.id]
    assert "pypi.org" in finding.title


def test_egress_allow_hosts_registry_lookups_and_searched_bodies_do_not_fire(make, run_rule):
    lookup = make.egress("install", "files.pythonhosted.org", route="dns", method="DNS",
                         unsearched="DNS reassembly forgot this stream")  # fmt: skip
    allowed = make.egress("tests", "uploads.corp.test", method="PUT", unsearched="too big")
    searched = make.egress("tests", "collector.exfil.test", method="POST")
    reports = [make.report("install", egress=[lookup]),
               make.report("tests", egress=[allowed, searched])]  # fmt: skip
    ctx = RuleContext(policy=Policy(egress_allow=["uploads.corp.test"]))

    assert run_rule("unsearched-egress", reports, ctx) == []

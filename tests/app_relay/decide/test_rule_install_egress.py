"""install-egress: the install reaching a host that is no registry and not allowed."""

from __future__ import annotations

import pytest

from app_relay.decide.hits import RuleContext
from cujo_action.schema import REGISTRY_HOSTS, Policy


def test_fires_on_an_unknown_host_even_when_the_report_says_forwarded(make, run_rule):
    call = make.egress("install", "payload.evil.example", method="POST", action="forwarded")
    again = make.egress("install", "payload.evil.example", method="GET", action="refused")

    [finding] = run_rule("install-egress", [make.report("install", egress=[call, again])])

    assert finding.severity == "critical"
    assert finding.check == "install"
    assert finding.evidence == [call.id, again.id]
    assert "payload.evil.example" in finding.title
    assert "2 requests" in finding.title


def test_fires_for_the_install_phase_inside_detonation(make, run_rule):
    call = make.egress("detonation", "evil.example", phase="install")

    [finding] = run_rule("install-egress", [make.report("detonation", egress=[call])])

    assert finding.check == "detonation"
    assert finding.evidence == [call.id]


@pytest.mark.parametrize("host", [*REGISTRY_HOSTS, "PyPI.org.", "files.pythonhosted.org"])
def test_near_miss_registries_are_expected(make, run_rule, host):
    call = make.egress("install", host, action="forwarded")

    assert run_rule("install-egress", [make.report("install", egress=[call])]) == []


@pytest.mark.parametrize(
    ("allow", "host", "fires"),
    [
        ("mirror.corp.example", "mirror.corp.example", False),
        ("mirror.corp.example", "other.corp.example", True),
        ("*.corp.example", "a.b.corp.example", False),
        ("*.corp.example", "corp.example", True),
        ("*.corp.example", ".corp.example", True),
        ("*.corp.example", "evilcorp.example", True),
        ("pypi.*", "pypi.attacker.net", True),
        ("*", "anything.example", True),
    ],
)
def test_egress_allow_exact_names_and_leading_globs_only(make, run_rule, allow, host, fires):
    ctx = RuleContext(policy=Policy(egress_allow=[allow]))
    call = make.egress("install", host)

    found = run_rule("install-egress", [make.report("install", egress=[call])], ctx)

    assert bool(found) is fires


def test_near_miss_the_same_host_outside_the_install_phase(make, run_rule):
    call = make.egress("tests", "evil.example")

    assert run_rule("install-egress", [make.report("tests", egress=[call])]) == []


def test_fires_on_a_request_with_no_host_at_all(make, run_rule):
    call = make.egress("install", "")

    [finding] = run_rule("install-egress", [make.report("install", egress=[call])])

    assert "(no host)" in finding.title

"""import-egress: importing the code phones a host that is no registry and not allowed."""

from __future__ import annotations

from app_relay.decide.hits import RuleContext
from cujo_action.schema import Policy


def test_fires_when_an_import_reaches_an_unknown_host(make, run_rule):
    call = make.egress("detonation", "beacon.evil.example", phase="import", method="POST")

    [finding] = run_rule("import-egress", [make.report("detonation", egress=[call])])

    assert finding.severity == "critical"
    assert finding.check == "detonation"
    assert finding.evidence == [call.id]
    assert "beacon.evil.example" in finding.title
    assert finding.title.startswith("import:")


def test_near_miss_a_registry_or_an_allowed_host_during_import(make, run_rule):
    ctx = RuleContext(policy=Policy(egress_allow=["*.corp.example"]))
    calls = [
        make.egress("detonation", "pypi.org", phase="import"),
        make.egress("detonation", "api.corp.example", phase="import"),
    ]

    assert run_rule("import-egress", [make.report("detonation", egress=calls)], ctx) == []


def test_near_miss_the_same_host_during_install_is_another_rule(make, run_rule):
    call = make.egress("detonation", "beacon.evil.example", phase="install")

    assert run_rule("import-egress", [make.report("detonation", egress=[call])]) == []

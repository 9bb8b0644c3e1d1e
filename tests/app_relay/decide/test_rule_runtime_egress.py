"""runtime-egress: tests, probes or smoke reaching an unexpected host is a warning."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("check", "phase"), [("tests", "test"), ("probes", "probe"), ("smoke", "smoke")]
)
def test_fires_as_a_warning_in_each_runtime_phase(make, run_rule, check, phase):
    call = make.egress(check, "api.example.net", phase=phase)

    [finding] = run_rule("runtime-egress", [make.report(check, egress=[call])])

    assert finding.severity == "warn"
    assert finding.check == check
    assert finding.evidence == [call.id]
    assert "api.example.net" in finding.title


def test_near_miss_registries_at_runtime_and_unknown_hosts_at_install(make, run_rule):
    reports = [
        make.report("tests", egress=[make.egress("tests", "registry.npmjs.org")]),
        make.report("install", egress=[make.egress("install", "api.example.net")]),
    ]

    assert run_rule("runtime-egress", reports) == []

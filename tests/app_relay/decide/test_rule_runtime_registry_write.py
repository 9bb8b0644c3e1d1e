"""runtime-registry-write: tests, probes or smoke writing to a registry is a warning."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("check", "phase"), [("tests", "test"), ("probes", "probe"), ("smoke", "smoke")]
)
def test_fires_as_a_warning_in_each_runtime_phase(make, run_rule, check, phase):
    put = make.egress(
        check, "registry.npmjs.org", phase=phase, method="PUT", action="registry-write"
    )

    [finding] = run_rule("runtime-registry-write", [make.report(check, egress=[put])])

    assert finding.severity == "warn"
    assert finding.check == check
    assert finding.evidence == [put.id]
    assert "registry.npmjs.org" in finding.title


def test_near_miss_reads_at_runtime_and_writes_at_install(make, run_rule):
    reports = [
        make.report("tests", egress=[make.egress("tests", "pypi.org", action="forwarded")]),
        make.report(
            "install",
            egress=[make.egress("install", "pypi.org", method="POST", action="registry-write")],
        ),
    ]

    assert run_rule("runtime-registry-write", reports) == []

"""registry-write: the install or an import writing to a package registry is critical."""

from __future__ import annotations

import pytest

from app_relay.decide.hits import RuleContext
from cujo_action.schema import Policy


@pytest.mark.parametrize(
    ("check", "phase"),
    [("install", "install"), ("detonation", "install"), ("detonation", "import")],
)
def test_fires_on_a_write_the_proxy_refused(make, run_rule, check, phase):
    put = make.egress(
        check, "registry.npmjs.org", phase=phase, method="PUT", action="registry-write"
    )

    [finding] = run_rule("registry-write", [make.report(check, egress=[put])])

    assert finding.severity == "critical"
    assert finding.check == check
    assert finding.evidence == [put.id]
    assert finding.title.startswith(f"{phase}: 1 request (PUT)")
    assert "registry.npmjs.org" in finding.title


def test_fires_on_a_write_to_a_registry_whatever_the_proxy_says(make, run_rule):
    # A proxy that forwarded a write (an older one) still leaves the method and host.
    post = make.egress("install", "PyPI.org.", method="POST", action="forwarded")
    delete = make.egress("install", "pypi.org", method="DELETE", action="forwarded")

    [finding] = run_rule("registry-write", [make.report("install", egress=[post, delete])])

    assert finding.evidence == [post.id, delete.id]
    assert "2 requests (POST, DELETE)" in finding.title


def test_near_miss_reads_tunnels_and_lookups_of_a_registry(make, run_rule):
    calls = [
        make.egress("install", "registry.npmjs.org", method="GET", action="forwarded"),
        make.egress("install", "registry.npmjs.org", method="HEAD", action="forwarded"),
        make.egress("install", "registry.npmjs.org", method="CONNECT", action="refused"),
        make.egress("install", "pypi.org", method="TCP", action="refused", route="direct"),
        make.egress("install", "pypi.org", method="DNS", action="forwarded", route="dns"),
    ]

    assert run_rule("registry-write", [make.report("install", egress=calls)]) == []


def test_near_miss_a_write_to_an_egress_allow_host_is_no_registry_write(make, run_rule):
    ctx = RuleContext(policy=Policy(egress_allow=["uploads.corp.example"]))
    put = make.egress("install", "uploads.corp.example", method="PUT", action="forwarded")

    assert run_rule("registry-write", [make.report("install", egress=[put])], ctx) == []


def test_near_miss_a_write_at_runtime_is_the_warning_rule(make, run_rule):
    put = make.egress("tests", "registry.npmjs.org", method="PUT", action="registry-write")

    assert run_rule("registry-write", [make.report("tests", egress=[put])]) == []

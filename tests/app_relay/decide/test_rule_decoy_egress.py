"""decoy-egress: a request that carried a decoy secret is critical, wherever it went."""

from __future__ import annotations

from app_relay.decide.hits import RuleContext
from cujo_action.schema import Policy


def test_fires_on_a_decoy_in_a_request_and_names_host_phase_decoys_and_encoding(make, run_rule):
    first = make.egress(
        "detonation",
        "collect.evil.example",
        decoys=["AWS_SECRET_ACCESS_KEY"],
        where=["body:base64"],
    )
    second = make.egress(
        "detonation", "collect.evil.example", decoys=["GITHUB_TOKEN"], where=["url:plain"]
    )
    reports = [make.report("detonation", egress=[first, second])]

    [finding] = run_rule("decoy-egress", reports)

    assert finding.severity == "critical"
    assert finding.check == "detonation"
    assert finding.evidence == [first.id, second.id]
    for word in ("collect.evil.example", "import", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"):
        assert word in finding.title
    assert "body:base64" in finding.title
    assert "url:plain" in finding.title


def test_fires_even_towards_a_registry_or_an_allowed_host_in_any_phase(make, run_rule):
    ctx = RuleContext(policy=Policy(egress_allow=["telemetry.example"]))
    to_registry = make.egress(
        "tests", "pypi.org", decoys=["PYPI_TOKEN"], where=["header:plain"], action="forwarded"
    )
    to_allowed = make.egress("smoke", "telemetry.example", decoys=["NPM_TOKEN"], where=["body:hex"])
    reports = [
        make.report("smoke", egress=[to_allowed]),
        make.report("tests", egress=[to_registry]),
    ]

    findings = run_rule("decoy-egress", reports, ctx)

    assert [f.evidence for f in findings] == [[to_registry.id], [to_allowed.id]]
    assert all(f.severity == "critical" for f in findings)


def test_near_miss_a_request_to_an_unknown_host_without_a_decoy(make, run_rule):
    quiet = make.egress("install", "cdn.evil.example")

    assert run_rule("decoy-egress", [make.report("install", egress=[quiet])]) == []


def test_says_so_when_the_proxy_did_not_record_where_the_decoy_was(make, run_rule):
    leak = make.egress("install", "evil.example", decoys=["AWS_ACCESS_KEY_ID"])

    [finding] = run_rule("decoy-egress", [make.report("install", egress=[leak])])

    assert "where not recorded" in finding.title

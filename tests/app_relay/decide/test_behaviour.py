"""One finding per behaviour: hits that share a cause are merged, on real and made reports."""

from __future__ import annotations

from bundlefactory import demo_exfil_reports as demo_reports

from app_relay.decide.behaviour import one_per_behaviour
from app_relay.decide.hits import RuleContext
from app_relay.decide.judge import decide
from app_relay.decide.rules import apply_rules
from cujo_action.schema import CHECK_NAMES, HARNESS_TAMPER, PERSISTENCE_WRITE


def test_the_rules_alone_report_the_demo_as_five_criticals_and_a_warning():
    # The count, taken before merging: the oracle this change is measured by.
    found = apply_rules(demo_reports(), RuleContext())

    assert [f.severity for f in found] == ["critical"] * 5 + ["warn"]


def test_the_demo_exfiltration_is_one_critical_finding():
    reports = demo_reports()

    verdict = decide(reports, expected=CHECK_NAMES, ctx=RuleContext())

    assert verdict.state == "blocked"
    [finding] = verdict.findings
    assert finding.id == "F1"
    assert finding.severity == "critical"
    assert finding.rule == "decoy-egress"
    assert finding.rules == ["decoy-egress", "install-egress", "runtime-egress"]
    # Every occurrence: three posts in each of install, detonation and smoke.
    assert finding.evidence == [
        f"{check}:egress:{n}" for check in ("install", "detonation", "smoke") for n in (1, 2, 3)
    ]
    assert finding.title == (
        "install, detonation, smoke: 9 requests to collector.exfil.test carried decoy "
        "AWS_SECRET_ACCESS_KEY (body:base64)"
    )
    assert verdict.summary.startswith("Blocked by 1 critical finding, first F1")


def test_the_same_write_seen_by_two_rules_is_one_finding(make, ctx):
    profile = "/home/runner/.bashrc"
    wrote = make.observation("install", PERSISTENCE_WRITE, "appended a line", path=profile)
    tamper = make.observation("smoke", HARNESS_TAMPER, "rewrote it", path="/home/runner/./.bashrc")
    reports = [
        make.report("install", observations=[wrote]),
        make.report("smoke", observations=[tamper]),
    ]

    [finding] = one_per_behaviour(apply_rules(reports, ctx), reports)

    assert finding.rules == ["persistence-write", "harness-tamper"]
    assert finding.evidence == [wrote.id, tamper.id]
    assert finding.title.startswith("persistence write: /home/runner/.bashrc — appended a line")
    assert finding.title.endswith("(2 occurrences in install, smoke)")


def test_the_strongest_rule_sets_the_severity_whatever_came_first(make, ctx):
    # A test reached the host (a warning) before the install sent it a decoy (critical).
    call = make.egress("tests", "evil.example")
    leak = make.egress("install", "EVIL.example.", decoys=["NPM_TOKEN"], where=["header:plain"])
    reports = [make.report("tests", egress=[call]), make.report("install", egress=[leak])]

    [finding] = one_per_behaviour(apply_rules(reports, ctx), reports)

    assert finding.severity == "critical"
    assert finding.rules == ["decoy-egress", "install-egress", "runtime-egress"]
    assert finding.evidence == [leak.id, call.id]
    assert finding.title == (
        "install, tests: 2 requests to evil.example; 1 of them carried decoy NPM_TOKEN "
        "(header:plain)"
    )


def test_different_causes_stay_apart_and_are_numbered_most_severe_first(make, ctx):
    one = make.egress("install", "a.example")
    two = make.egress("install", "b.example")
    read = make.decoy("tests", "/home/runner/.pypirc")
    reports = [make.report("install", egress=[one, two]), make.report("tests", decoy_events=[read])]

    found = one_per_behaviour(apply_rules(reports, ctx), reports)

    assert [(f.id, f.rule, f.rules) for f in found] == [
        ("F1", "install-egress", ["install-egress"]),
        ("F2", "install-egress", ["install-egress"]),
        ("F3", "decoy-read", ["decoy-read"]),
    ]
    assert found == apply_rules(reports, ctx)  # nothing merged: the findings are unchanged


def test_evidence_the_reports_do_not_hold_merges_nothing(make, ctx):
    one = make.egress("install", "a.example")
    reports = [make.report("install", egress=[one])]
    [finding] = apply_rules(reports, ctx)
    stray = finding.model_copy(update={"id": "F2", "evidence": ["install:egress:99"]})

    found = one_per_behaviour([finding, stray], reports)

    assert [f.evidence for f in found] == [[one.id], ["install:egress:99"]]


def test_a_steps_use_of_its_secret_leads_its_hosts_finding_and_keeps_naming_the_step(make, ctx):
    # runtime-egress sees the same host (its look-up and the request); the finding is the
    # step's use, a warning whose title names it, never "carried decoy".
    step = ".github/workflows/docs.yml · job build · step 5: Announce"
    command = make.command(
        f"# {step}\nbash -e x.sh", phase="smoke", workflow_step=step, started_ts=1.0,
        sandbox_pid=40,
    )  # fmt: skip
    lookup = make.egress("smoke", "api.github.com", method="DNS", route="dns")
    use = make.egress(
        "smoke", "api.github.com", method="POST", decoys=["GITHUB_TOKEN"],
        where=["authorization:plain"], ts=2.0, pid=41, parents=["40 /usr/bin/bash"],
    )  # fmt: skip
    reports = [make.report("smoke", egress=[lookup, use], commands=[command])]

    [finding] = one_per_behaviour(apply_rules(reports, ctx), reports)

    assert (finding.rule, finding.severity) == ("workflow-secret-use", "warn")
    assert finding.rules == ["workflow-secret-use", "runtime-egress"]
    assert finding.title.startswith(f"{step}: hands GITHUB_TOKEN to api.github.com")
    assert "carried decoy" not in finding.title

"""Base vs head: what the base already does is noted, never blocks; what head adds does."""

from __future__ import annotations

from app_relay.decide.hits import RuleContext
from app_relay.decide.judge import decide
from cujo_action.schema import CHECK_NAMES, FAILING_TEST, SHELL_PROFILE_WRITE, TESTS_FAILED


def test_a_download_the_base_install_makes_too_is_a_note(make, run_rule):
    # The project's own install fetches a data file: at base and at head alike.
    head = make.egress("install", "data.example.test", phase="install")
    base = make.egress("base", "data.example.test", phase="install")
    reports = [make.report("install", egress=[head]), make.report("base", egress=[base])]

    (finding,) = run_rule("install-egress", reports)

    assert finding.severity == "info"
    assert finding.title.startswith("also at base: install: 1 request (GET) to data.example.test")
    assert finding.evidence == [head.id, base.id]  # both runs cited
    verdict = decide(reports, expected=["install"], ctx=RuleContext())
    assert verdict.state == "clean"


def test_what_head_adds_beside_the_base_still_blocks(make, run_rule):
    same = make.egress("install", "data.example.test", phase="install")
    new = make.egress("install", "collector.evil.test", phase="install")
    base = make.egress("base", "data.example.test", phase="install")
    reports = [make.report("install", egress=[same, new]), make.report("base", egress=[base])]

    findings = run_rule("install-egress", reports)

    assert [(f.severity, f.evidence[0]) for f in findings] == [
        ("critical", new.id),
        ("info", same.id),
    ]
    assert decide(reports, expected=["install"], ctx=RuleContext()).state == "blocked"


def test_hiding_a_secret_in_the_bases_noise_blocks(make, run_rule):
    # The same host the base downloads from, but the request carries a decoy: a new kind.
    theft = make.egress(
        "install", "data.example.test", phase="install", decoys=["AWS_SECRET_ACCESS_KEY"],
        where=["body:plain"], method="POST",
    )  # fmt: skip
    base = make.egress("base", "data.example.test", phase="install")
    reports = [make.report("install", egress=[theft]), make.report("base", egress=[base])]

    verdict = decide(reports, expected=["install"], ctx=RuleContext())

    assert verdict.state == "blocked"
    assert verdict.findings[0].rule == "decoy-egress"
    assert verdict.findings[0].severity == "critical"


def test_a_different_phase_is_a_different_behaviour(make, run_rule):
    # The base's tests call a service; the head's install now does.
    head = make.egress("install", "api.example.test", phase="install")
    base = make.egress("base", "api.example.test", phase="test")
    reports = [make.report("install", egress=[head]), make.report("base", egress=[base])]

    (finding,) = run_rule("install-egress", reports)

    assert finding.severity == "critical"


def test_a_suite_failing_at_base_too_is_not_a_finding_on_the_change(make, run_rule):
    head = make.observation("tests", TESTS_FAILED, "`pytest` exited 1: 2 failed")
    base = make.observation("base", TESTS_FAILED, "`pytest` exited 1 at base: 2 failed")
    reports = [
        make.report("tests", status="failed", observations=[head]),
        make.report("base", status="failed", observations=[base]),
    ]

    (finding,) = run_rule("tests-fail", reports)

    assert finding.severity == "info"
    assert finding.title.startswith("the suite fails at base too: the test suite failed")
    verdict = decide(reports, expected=["tests"], ctx=RuleContext())
    assert verdict.state == "clean"  # and the base's failure is no gap in the evidence
    assert verdict.unproven == []


def _failing(make, check, names):
    where = " at base" if check == "base" else ""
    suite = make.observation(check, TESTS_FAILED, f"`pytest` exited 1{where}: many failed")
    named = [make.observation(check, FAILING_TEST, f"fails: {n}", path=n) for n in names]
    return make.report(check, status="failed", observations=[suite, *named])


def test_the_suites_failures_are_compared_test_by_test(make, run_rule):
    old = [f"tests/test_env.py::test_colour_{n}" for n in range(40)]
    # The head breaks one test among forty old failures: that one is named, and counts.
    reports = [_failing(make, "tests", [*old, "tests/test_core.py::test_new"]),
               _failing(make, "base", old)]  # fmt: skip
    (finding,) = run_rule("tests-fail", reports)
    assert finding.severity == "warn"
    assert finding.title.startswith(
        "the suite fails at base too, but these fail only at head: tests/test_core.py::test_new;"
    )
    # The same old failures at both ends (the base failing more is no news either).
    reports = [_failing(make, "tests", old[:39]), _failing(make, "base", old)]
    (finding,) = run_rule("tests-fail", reports)
    assert finding.severity == "info"
    assert finding.title.startswith("the suite fails at base too: the test suite failed")
    # Past what was named, the unnamed count is compared too: more unnamed at head is news.
    more = "(12 more failing tests, not named)"
    reports = [_failing(make, "tests", [*old, more]),
               _failing(make, "base", [*old, "(3 more failing tests, not named)"])]  # fmt: skip
    (finding,) = run_rule("tests-fail", reports)
    assert finding.severity == "warn"
    assert more in finding.title


def test_persistence_the_base_writes_too_is_a_note(make, run_rule):
    head = make.observation("install", SHELL_PROFILE_WRITE, "x", path="~/.bashrc")
    base = make.observation("base", SHELL_PROFILE_WRITE, "x", path="~/.bashrc")
    reports = [
        make.report("install", observations=[head]),
        make.report("base", observations=[base]),
    ]

    (finding,) = run_rule("shell-profile-write", reports)

    assert finding.severity == "info"


def test_a_listing_is_compared_as_a_listing_not_as_a_write(make, run_rule):
    head = make.decoy("install", "~/.ssh", "list", pid=4)
    listed = make.decoy("base", "~/.ssh", "list", phase="install", pid=5)
    wrote = make.decoy("base", "~/.ssh", "write", phase="install", pid=5)

    also = [make.report("install", decoy_events=[head]), make.report("base", decoy_events=[listed])]
    other = [make.report("install", decoy_events=[head]), make.report("base", decoy_events=[wrote])]

    assert [f.severity for f in run_rule("decoy-probe", also)] == ["info"]
    assert [f.severity for f in run_rule("decoy-probe", other)] == ["warn"]


def test_the_base_alone_makes_no_finding(make, run_rule):
    base = make.report(
        "base",
        status="failed",
        egress=[make.egress("base", "collector.evil.test", phase="install", decoys=["NPM_TOKEN"])],
    )
    heads = [make.report(check) for check in CHECK_NAMES]

    verdict = decide([*heads, base], expected=CHECK_NAMES, ctx=RuleContext())

    assert verdict.findings == []
    assert verdict.state == "clean"

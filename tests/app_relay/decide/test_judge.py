"""The deterministic judge, the verdict model and the rule registry it runs."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from repo_paths import TOP

from app_relay.decide import rules
from app_relay.decide.hits import Hit, RuleContext
from app_relay.decide.judge import DeterministicJudge, Judge, decide, error_verdict
from app_relay.decide.rules import RULES, apply_rules
from app_relay.verdict import MAX_EVIDENCE, MAX_TITLE, Finding, Verdict
from cujo_action.schema import CHECK_NAMES, TESTS_FAILED

ALL = list(CHECK_NAMES)


def quiet_run(make, **tweak):
    """Return one ok report per check; `tweak` replaces a check's report."""
    return [tweak.get(check) or make.report(check) for check in CHECK_NAMES]


def test_clean_when_every_check_produced_evidence_and_nothing_was_found(make, ctx):
    verdict = decide(quiet_run(make), expected=ALL, ctx=ctx)

    assert verdict.state == "clean"
    assert verdict.findings == []
    assert verdict.unproven == []
    assert verdict.judge == "deterministic"
    assert "produced evidence" in verdict.summary


def test_failing_tests_are_a_warning_not_a_gap(make, ctx):
    failed = make.observation("tests", TESTS_FAILED, "1 failed")
    reports = quiet_run(make, tests=make.report("tests", status="failed", observations=[failed]))

    verdict = decide(reports, expected=ALL, ctx=ctx)

    assert verdict.state == "clean"
    assert [f.rule for f in verdict.findings] == ["tests-fail"]
    assert "1 warning" in verdict.summary


@pytest.mark.parametrize(
    ("tweak", "line"),
    [
        ("missing", "smoke: no report came back"),
        ("skipped", "smoke: skipped (no smoke command)"),
        ("error", "smoke: no usable evidence (runner lost)"),
        ("timeout", "smoke: `npm start` timed out after 900s"),
        ("incomplete", "smoke: evidence incomplete"),
    ],
)
def test_unproven_for_each_gap_in_a_check(make, ctx, tweak, line):
    smoke = {
        "missing": None,
        "skipped": make.report("smoke", status="skipped", summary="no smoke command"),
        "error": make.report("smoke", status="error", summary="runner lost"),
        "timeout": make.report(
            "smoke",
            commands=[make.command("npm start", phase="smoke", exit_code=None, timed_out=True)],
        ),
        "incomplete": make.report("smoke", evidence_complete=False),
    }[tweak]
    reports = [make.report(c) for c in CHECK_NAMES if c != "smoke"] + ([smoke] if smoke else [])

    verdict = decide(reports, expected=ALL, ctx=ctx)

    assert verdict.state == "unproven"
    [said] = verdict.unproven
    assert said.startswith(line)
    assert "smoke" in verdict.summary


def test_unproven_when_the_plan_says_so(make, ctx):
    verdict = decide(quiet_run(make), expected=ALL, ctx=ctx, plan_unproven="no build files found")

    assert verdict.state == "unproven"
    assert verdict.unproven == ["plan: no build files found"]


def test_unproven_when_no_check_was_expected(ctx):
    verdict = decide([], expected=[], ctx=ctx)

    assert verdict.state == "unproven"


def test_only_expected_checks_must_produce_evidence(make, ctx):
    reports = [make.report("install"), make.report("smoke", status="skipped")]

    assert decide(reports, expected=["install"], ctx=ctx).state == "clean"


def test_one_line_per_check_even_with_several_gaps(make, ctx):
    tests = make.report(
        "tests",
        status="error",
        evidence_complete=False,
        commands=[make.command("pytest", exit_code=None, timed_out=True)],
    )

    verdict = decide(quiet_run(make, tests=tests), expected=ALL, ctx=ctx)

    [line] = verdict.unproven
    assert line.startswith("tests: no usable evidence")
    assert "`pytest` timed out" in line
    assert "evidence incomplete" in line


def test_partial_isolation_is_clean_unless_full_isolation_is_required(make, ctx):
    reports = quiet_run(make, install=make.report("install", isolation="partial"))

    assert decide(reports, expected=ALL, ctx=ctx).state == "clean"
    strict = decide(reports, expected=ALL, ctx=ctx, require_full_isolation=True)
    assert strict.state == "unproven"
    assert strict.unproven == ["install: ran with partial isolation"]
    judged = DeterministicJudge(require_full_isolation=True).decide(reports, expected=ALL, ctx=ctx)
    assert judged == strict


def test_blocked_on_a_critical_finding(make, ctx):
    leak = make.egress("install", "evil.example", decoys=["GITHUB_TOKEN"], where=["url:plain"])
    reports = quiet_run(make, install=make.report("install", egress=[leak]))

    verdict = decide(reports, expected=ALL, ctx=ctx)

    assert verdict.state == "blocked"
    # Two rules saw one request: one finding per behaviour, naming both.
    [finding] = verdict.findings
    assert finding.rules == ["decoy-egress", "install-egress"]
    assert verdict.summary.startswith("Blocked by 1 critical finding, first F1")
    assert "evil.example" in verdict.summary


def test_critical_beats_every_gap_and_keeps_them_on_the_record(make, ctx):
    sudo = make.observation("install", "sudo", "sudo -n true")
    reports = [
        make.report("install", status="failed", observations=[sudo], evidence_complete=False),
        make.report("tests", status="skipped", summary="install failed"),
    ]

    verdict = decide(reports, expected=ALL, ctx=ctx, plan_unproven="no lockfile")

    assert verdict.state == "blocked"
    assert [f.rule for f in verdict.findings] == ["sudo-use"]
    assert "plan: no lockfile" in verdict.unproven
    assert "detonation: no report came back" in verdict.unproven


def test_warnings_alone_never_block(make, ctx):
    call = make.egress("tests", "api.example.net")
    read = make.decoy("tests", "/home/cujo/.pypirc", "read")
    reports = quiet_run(make, tests=make.report("tests", egress=[call], decoy_events=[read]))

    verdict = decide(reports, expected=ALL, ctx=ctx)

    assert verdict.state == "clean"
    assert {f.severity for f in verdict.findings} == {"warn"}


def test_the_deterministic_judge_is_a_judge(make, ctx):
    judge: Judge = DeterministicJudge()

    assert judge.decide(quiet_run(make), expected=ALL, ctx=ctx) == decide(
        quiet_run(make), expected=ALL, ctx=ctx
    )


def test_error_verdict_is_never_clean_and_says_why():
    verdict = error_verdict("report tests fails validation at egress.0.host")

    assert verdict.state == "error"
    assert verdict.findings == []
    assert "fails validation" in verdict.summary
    assert "says nothing about the pull request" in verdict.summary
    assert error_verdict("  ").summary.startswith("Cujo could not finish this review: no reason")


# --------------------------------------------------------------------------- verdict model


def finding(**change):
    base = {"id": "F1", "rule": "sudo-use", "severity": "critical", "check": "install"}
    return Finding(**{**base, "title": "t", "evidence": ["install:obs:1"], **change})


def test_a_finding_without_evidence_cannot_be_built():
    with pytest.raises(ValidationError, match="evidence"):
        finding(evidence=[])
    with pytest.raises(ValidationError):
        finding(evidence=["not an id"])


def test_a_rule_hit_without_evidence_cannot_be_built():
    with pytest.raises(ValueError, match="must cite evidence"):
        Hit(check="install", title="nothing to show", evidence=())


def test_a_long_title_is_clipped_not_rejected():
    # Clipped to MAX_TITLE bytes of JSON, the cut mark ("…" is three bytes) included.
    title = finding(title="x" * 5_000).title
    assert title.startswith("x" * 180)
    assert len(title.encode()) == MAX_TITLE


@pytest.mark.parametrize("state", ["clean", "unproven", "error"])
def test_a_critical_finding_cannot_sit_in_a_verdict_that_does_not_block(state):
    with pytest.raises(ValidationError, match="critical"):
        Verdict(state=state, summary="s", findings=[finding()], unproven=["x: y"], judge="model")


def test_verdict_states_must_match_what_they_claim():
    with pytest.raises(ValidationError, match="blocked"):
        Verdict(state="blocked", summary="s", findings=[], judge="model")
    with pytest.raises(ValidationError, match="unproven"):
        Verdict(state="unproven", summary="s", unproven=[], judge="model")
    with pytest.raises(ValidationError, match="clean"):
        Verdict(state="clean", summary="s", unproven=["tests: skipped"], judge="model")
    with pytest.raises(ValidationError, match="summary"):
        Verdict(state="error", summary="  ", judge="deterministic")
    with pytest.raises(ValidationError, match="unique"):
        Verdict(state="blocked", summary="s", findings=[finding(), finding()], judge="model")


# --------------------------------------------------------------------------- registry


def test_rule_ids_are_unique_kebab_case_and_each_is_documented_and_tested():
    ids = [rule.id for rule in RULES]
    docs = (TOP / "docs" / "rules.md").read_text()

    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.id)
        assert f"\n## {rule.id}\n\n**Severity:** {rule.severity}\n" in docs
        test_file = f"test_rule_{rule.id.replace('-', '_')}.py"
        assert (TOP / "tests" / "app_relay" / "decide" / test_file).is_file()
        assert rule.description.endswith(".")
        assert "\n" not in rule.description


def test_the_rules_apply_in_the_order_docs_rules_md_lists_them():
    # The rules live by family in several modules; the order of application (which
    # numbers findings of one severity) is the registry's, and the docs state it.
    docs = (TOP / "docs" / "rules.md").read_text()
    documented = re.findall(r"^## ([a-z-]+)$", docs, re.MULTILINE)

    assert [rule.id for rule in RULES] == documented[: len(RULES)]


def test_findings_are_numbered_critical_first_whatever_the_report_order(make, ctx):
    read = make.decoy("tests", "/home/cujo/.pypirc", "read")
    call = make.egress("install", "evil.example")
    sudo = make.observation("smoke", "sudo", "sudo id")
    reports = [
        make.report("tests", decoy_events=[read]),
        make.report("smoke", observations=[sudo]),
        make.report("install", egress=[call]),
    ]

    forward = apply_rules(reports, ctx)
    backward = apply_rules(list(reversed(reports)), ctx)

    assert forward == backward
    assert [(f.id, f.rule) for f in forward] == [
        ("F1", "install-egress"),
        ("F2", "sudo-use"),
        ("F3", "decoy-read"),
    ]


def test_critical_comes_first_even_if_the_registry_lists_it_last(make, ctx, monkeypatch):
    monkeypatch.setattr(rules, "RULES", tuple(reversed(RULES)))
    call = make.egress("tests", "api.example.net")
    sudo = make.observation("smoke", "sudo", "sudo id")
    reports = [make.report("tests", egress=[call]), make.report("smoke", observations=[sudo])]

    assert [(f.id, f.rule) for f in apply_rules(reports, ctx)] == [
        ("F1", "sudo-use"),
        ("F2", "runtime-egress"),
    ]


def test_a_finding_cites_at_most_the_cap_and_its_title_keeps_the_count(make, ctx):
    calls = [make.egress("install", "evil.example") for _ in range(MAX_EVIDENCE + 5)]

    [found] = apply_rules([make.report("install", egress=calls)], ctx)

    assert found.evidence == [c.id for c in calls[:MAX_EVIDENCE]]
    assert f"{MAX_EVIDENCE + 5} requests" in found.title


def test_every_cited_id_is_one_the_reports_hold(make):
    leak = make.egress("detonation", "x.example", decoys=["NPM_TOKEN"], phase="import")
    reports = [
        make.report("detonation", egress=[leak]),
        make.report("tests", decoy_events=[make.decoy("tests", "/home/cujo/.env", "delete")]),
        make.report("smoke", observations=[make.observation("smoke", "persistence_write")]),
    ]
    held = {e.id for r in reports for e in [*r.egress, *r.decoy_events, *r.observations]}

    cited = {i for f in apply_rules(reports, RuleContext()) for i in f.evidence}

    assert cited
    assert cited <= held


def test_a_failed_install_is_a_gap_but_a_failed_suite_is_not() -> None:
    from cujo_action.schema import CHECK_NAMES, Report, utcnow

    now = utcnow()

    def rep(check: str, status: str) -> Report:
        return Report.model_validate(
            {
                "run_id": "r",
                "check": check,
                "head_sha": "b" * 40,
                "base_sha": "a" * 40,
                "status": status,
                "summary": f"{check} {status}",
                "started_at": now,
                "finished_at": now,
                "isolation": "full",
                "evidence_complete": True,
            }
        )

    ctx = RuleContext()
    failed_detonation = [rep(c, "failed" if c == "detonation" else "ok") for c in CHECK_NAMES]
    verdict = decide(failed_detonation, expected=CHECK_NAMES, ctx=ctx)
    assert verdict.state == "unproven"
    assert verdict.unproven[0].startswith("detonation: the install failed")
    failed_tests = [rep(c, "failed" if c == "tests" else "ok") for c in CHECK_NAMES]
    assert decide(failed_tests, expected=CHECK_NAMES, ctx=ctx).state == "clean"

"""tests-fail: the suite ran and failed; the tests check says so in a `tests_failed` observation."""

from __future__ import annotations

from cujo_action.schema import TESTS_FAILED


def test_fires_when_the_tests_check_failed_and_cites_its_observation(make, run_rule):
    failed = make.observation("tests", TESTS_FAILED, "3 failed, 120 passed at head")
    report = make.report("tests", status="failed", observations=[failed])

    [finding] = run_rule("tests-fail", [report])

    assert finding.severity == "warn"
    assert finding.check == "tests"
    assert finding.evidence == [failed.id]
    assert "3 failed, 120 passed" in finding.title


def test_near_miss_a_passing_suite_that_noted_old_failures(make, run_rule):
    noted = make.observation("tests", TESTS_FAILED, "2 failed at base")

    assert run_rule("tests-fail", [make.report("tests", status="ok", observations=[noted])]) == []


def test_near_miss_another_check_that_failed(make, run_rule):
    noted = make.observation("probes", TESTS_FAILED, "probe failed")

    assert (
        run_rule("tests-fail", [make.report("probes", status="failed", observations=[noted])]) == []
    )


def test_no_finding_without_an_observation_to_cite(make, run_rule):
    # A finding must cite evidence; the tests check owes the observation.
    assert run_rule("tests-fail", [make.report("tests", status="failed")]) == []

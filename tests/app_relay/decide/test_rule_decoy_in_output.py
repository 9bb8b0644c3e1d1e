"""decoy-in-output: a command printed a decoy (in any encoding) to its output: critical.

In a project's own CI the log is public; tj-actions' payload (2025) printed the runner's
secrets there, base64 twice, with no network at all."""

from __future__ import annotations

from cujo_action.schema import DECOY_IN_OUTPUT


def test_fires_on_the_observation_at_any_phase(make, run_rule):
    printed = make.observation(
        "tests", DECOY_IN_OUTPUT, "GITHUB_TOKEN (base64+base64) in the stdout of `pytest`",
        phase="test",
    )  # fmt: skip
    reports = [make.report("tests", observations=[printed])]

    (finding,) = run_rule("decoy-in-output", reports)

    assert finding.severity == "critical"
    assert finding.evidence == [printed.id]
    assert "GITHUB_TOKEN (base64+base64)" in finding.title


def test_other_observations_do_not_fire(make, run_rule):
    note = make.observation("tests", "output_flood", "wrote over 64 MiB")
    assert run_rule("decoy-in-output", [make.report("tests", observations=[note])]) == []


def test_fires_on_a_decoy_written_to_a_file_the_runner_reads_naming_it(make, run_rule):
    written = make.observation(
        "tests", DECOY_IN_OUTPUT,
        "GITHUB_TOKEN (base64+base64) in $GITHUB_STEP_SUMMARY after `python ci/test.py`",
        path="$GITHUB_STEP_SUMMARY", phase="test",
    )  # fmt: skip

    (finding,) = run_rule("decoy-in-output", [make.report("tests", observations=[written])])

    assert finding.severity == "critical"
    assert finding.evidence == [written.id]
    assert finding.title.startswith("a decoy was written to $GITHUB_STEP_SUMMARY: GITHUB_TOKEN")

"""harness-tamper: code that touches Cujo's own harness is critical."""

from __future__ import annotations

from cujo_action.schema import HARNESS_TAMPER


def test_fires_on_each_harness_tamper_observation(make, run_rule):
    killed = make.observation("tests", HARNESS_TAMPER, "sent SIGKILL to the proxy")
    edited = make.observation(
        "tests", HARNESS_TAMPER, "wrote the report", path="/cujo/out/tests.json"
    )

    findings = run_rule("harness-tamper", [make.report("tests", observations=[killed, edited])])

    assert [f.evidence for f in findings] == [[killed.id], [edited.id]]
    assert all(f.severity == "critical" for f in findings)
    assert "SIGKILL" in findings[0].title
    assert "/cujo/out/tests.json" in findings[1].title


def test_near_miss_other_observation_kinds(make, run_rule):
    note = make.observation("tests", "harness_note", "proxy restarted by the harness itself")

    assert run_rule("harness-tamper", [make.report("tests", observations=[note])]) == []

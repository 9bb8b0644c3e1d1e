"""resource-abuse: a phase that floods the process table is critical."""

from __future__ import annotations

from cujo_action.schema import PROCESS_FLOOD


def test_fires_on_a_process_flood(make, run_rule):
    bomb = make.observation("tests", PROCESS_FLOOD, "`:(){ :|:& };:` ran 1010 processes at once")

    [finding] = run_rule("resource-abuse", [make.report("tests", observations=[bomb])])

    assert finding.severity == "critical"
    assert finding.evidence == [bomb.id]


def test_near_miss_a_timeout_is_not_abuse(make, run_rule):
    slow = make.observation("tests", "timeout", "`sleep 600` ran past its 900s timeout")

    assert run_rule("resource-abuse", [make.report("tests", observations=[slow])]) == []

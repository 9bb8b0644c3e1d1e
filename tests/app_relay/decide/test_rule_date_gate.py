"""date-gate: changed code compares the clock with a fixed date: a warning, never a block.

A payload that waits for a date never fires in a review run today; the probes check names
each added line that compares the clock with a fixed date (cujo_action/checks/dategates.py).
"""

from __future__ import annotations

from cujo_action.schema import DATE_GATE


def test_fires_as_a_warning_naming_the_line(make, run_rule):
    gate = make.observation(
        "probes", DATE_GATE,
        "calc/__init__.py:12 compares the clock with a fixed date: "
        "`if time.time() > 1780000000:`",
        path="calc/__init__.py",
    )  # fmt: skip

    (finding,) = run_rule("date-gate", [make.report("probes", observations=[gate])])

    assert finding.severity == "warn"
    assert finding.evidence == [gate.id]
    assert finding.title.startswith("waits for a date? calc/__init__.py:12 compares the clock")


def test_other_observations_do_not_fire(make, run_rule):
    note = make.observation("probes", "nothing_to_probe", "no changed module")
    assert run_rule("date-gate", [make.report("probes", observations=[note])]) == []

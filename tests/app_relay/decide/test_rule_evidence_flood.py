"""evidence-flood: a flood filled a limit on evidence (limits.py marks which limits a
flood fills): critical during install and import, a warning later."""

from __future__ import annotations


def test_a_flood_during_install_is_critical_and_cites_the_cut(make, run_rule):
    cut = make.cut("install", "report-egress", dropped=2_400, kept=500, phase="install")
    reports = [make.report("install", evidence_complete=False, cuts=[cut])]

    (finding,) = run_rule("evidence-flood", reports)

    assert finding.severity == "critical"
    assert finding.evidence == [cut.id]
    assert "2400 more dropped" in finding.title


def test_detonation_without_a_phase_counts_as_import(make, run_rule):
    cut = make.cut("detonation", "decoy-readers", dropped=10)
    (finding,) = run_rule("evidence-flood", [make.report("detonation", cuts=[cut])])
    assert finding.severity == "critical"


def test_later_phases_warn_and_limits_that_are_no_flood_do_not_fire(make, run_rule):
    flood = make.cut("tests", "report-egress", dropped=3)
    tail = make.cut("tests", "report-commands", dropped=3, hides_danger=False)
    reports = [make.report("tests", cuts=[flood, tail])]

    (finding,) = run_rule("evidence-flood", reports)

    assert finding.severity == "warn"
    assert finding.evidence == [flood.id]

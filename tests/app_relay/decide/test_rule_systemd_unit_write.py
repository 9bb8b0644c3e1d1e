"""systemd-unit-write: user units start with the user's session or on a timer."""

from __future__ import annotations

from cujo_action.schema import SYSTEMD_UNIT_WRITE

WRITES = {
    "~/.config/systemd/user/updater.service": (
        None,
        "[Service]\nExecStart=/home/runner/.x\n",
    ),
    "~/.config/systemd/user/timers.target.wants/updater.timer": (None, "[Timer]\n"),
}
HARMLESS = {
    "~/.config/systemd/user.conf.bak": (None, "x"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("systemd-unit-write", SYSTEMD_UNIT_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("systemd-unit-write", HARMLESS)

"""autostart-write: desktop entries in autostart run at every graphical login."""

from __future__ import annotations

from cujo_action.schema import AUTOSTART_WRITE

WRITES = {
    "~/.config/autostart/updater.desktop": (None, "[Desktop Entry]\nExec=/tmp/x\n"),
}
HARMLESS = {
    "~/.config/autostarted": (None, "x"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("autostart-write", AUTOSTART_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("autostart-write", HARMLESS)

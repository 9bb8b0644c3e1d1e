"""decoy-read: a decoy file read, when no request carried a decoy, is a warning."""

from __future__ import annotations

import pytest

AWS = "/home/cujo/.aws/credentials"
NPMRC = "/home/cujo/.npmrc"
DOCKER = "~/.docker/config.json"
RUNNER_CREDENTIALS = "~/runners/2.321.0/.credentials"


def test_fires_once_per_file_across_events_and_checks(make, run_rule):
    opened = make.decoy("tests", AWS, "open", exe="/usr/bin/python3")
    read = make.decoy("tests", AWS, "read", exe="/usr/bin/python3")
    later = make.decoy("smoke", AWS, "read")
    reports = [
        make.report("smoke", decoy_events=[later]),
        make.report("tests", decoy_events=[opened, read]),
    ]

    [finding] = run_rule("decoy-read", reports)

    assert finding.severity == "warn"
    assert finding.check == "tests"
    assert finding.evidence == [opened.id, read.id, later.id]
    assert AWS in finding.title
    assert "python3" in finding.title
    assert "test, smoke" in finding.title


def test_near_miss_when_a_request_carried_a_decoy_decoy_egress_covers_it(make, run_rule):
    read = make.decoy("install", AWS, "read")
    leak = make.egress("tests", "evil.example", decoys=["AWS_SECRET_ACCESS_KEY"])
    reports = [make.report("install", decoy_events=[read]), make.report("tests", egress=[leak])]

    assert run_rule("decoy-read", reports) == []


@pytest.mark.parametrize("exe", [None, "/usr/bin/npm", "/usr/local/bin/node", "/usr/bin/yarn"])
@pytest.mark.parametrize("event", ["open", "read"])
def test_near_miss_npm_reading_its_own_npmrc(make, run_rule, exe, event):
    touch = make.decoy("install", NPMRC, event, exe=exe)

    assert run_rule("decoy-read", [make.report("install", decoy_events=[touch])]) == []


def test_fires_when_a_named_process_outside_npm_reads_npmrc(make, run_rule):
    touch = make.decoy("install", NPMRC, "read", exe="/usr/bin/python3")

    [finding] = run_rule("decoy-read", [make.report("install", decoy_events=[touch])])

    assert finding.evidence == [touch.id]


def test_near_miss_a_process_that_opened_and_read_nothing_is_decoy_probe(make, run_rule):
    opened = make.decoy("tests", AWS, "open", pid=42, exe="/usr/bin/python3")
    listed = make.decoy("tests", "/home/cujo/.aws", "list", pid=42)

    assert run_rule("decoy-read", [make.report("tests", decoy_events=[opened, listed])]) == []


def test_a_reader_still_fires_beside_a_process_that_only_opened(make, run_rule):
    probe = make.decoy("tests", AWS, "open", pid=42, exe="/usr/bin/python3")
    opened = make.decoy("tests", AWS, "open", pid=43, exe="/usr/bin/cat")
    read = make.decoy("tests", AWS, "read", pid=43, exe="/usr/bin/cat")

    reports = [make.report("tests", decoy_events=[probe, opened, read])]
    [finding] = run_rule("decoy-read", reports)

    assert finding.evidence == [opened.id, read.id]
    assert "by cat during test" in finding.title


def test_near_miss_writes_are_decoy_tamper_not_decoy_read(make, run_rule):
    write = make.decoy("tests", AWS, "write")

    assert run_rule("decoy-read", [make.report("tests", decoy_events=[write])]) == []


@pytest.mark.parametrize("exe", ["/usr/bin/docker", "/usr/libexec/docker/cli-plugins/docker-buildx",
                                 "/usr/bin/podman"])  # fmt: skip
def test_near_miss_docker_reading_its_own_config(make, run_rule, exe):
    touch = make.decoy("tests", DOCKER, "read", exe=exe)

    assert run_rule("decoy-read", [make.report("tests", decoy_events=[touch])]) == []


@pytest.mark.parametrize("exe", ["/usr/bin/python3", None])
def test_fires_when_another_or_an_unnamed_process_reads_the_docker_login(make, run_rule, exe):
    touch = make.decoy("tests", DOCKER, "read", exe=exe)

    [finding] = run_rule("decoy-read", [make.report("tests", decoy_events=[touch])])

    assert finding.evidence == [touch.id]
    assert DOCKER in finding.title


@pytest.mark.parametrize("exe", ["/usr/bin/docker", "/usr/bin/npm", None])
def test_fires_on_the_runners_credentials_whoever_reads_them(make, run_rule, exe):
    # Only the runner's listener reads its registration; no tool's exception covers it.
    touch = make.decoy("probes", RUNNER_CREDENTIALS, "read", exe=exe)

    [finding] = run_rule("decoy-read", [make.report("probes", decoy_events=[touch])])

    assert RUNNER_CREDENTIALS in finding.title

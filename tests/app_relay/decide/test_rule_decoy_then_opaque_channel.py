"""decoy-then-opaque-channel: a process read a decoy, then opened a channel the proxy
could not see into (TLS refusing the run's CA, raw TCP): critical at any phase."""

from __future__ import annotations

PY = "/usr/bin/python3.12"


def test_fires_when_the_reader_opens_the_channel_and_cites_both(make, run_rule):
    read = make.decoy("tests", "~/.aws/credentials", pid=4100, exe=PY, ts=100.0,
                      parents=["4000 /usr/bin/bash"])  # fmt: skip
    pinned = make.egress(
        "tests", "collector.exfil.test", method="CONNECT", action="refused", port=443,
        pid=4100, exe=PY, cmdline="python steal.py", parents=["4000 /usr/bin/bash"], ts=101.0,
    )  # fmt: skip
    reports = [make.report("tests", decoy_events=[read], egress=[pinned])]

    (finding,) = run_rule("decoy-then-opaque-channel", reports)

    assert finding.severity == "critical"  # in the test phase too
    assert finding.evidence == [read.id, pinned.id]
    assert finding.title == (
        "test: python3.12 (pid 4100: `python steal.py`) read decoy ~/.aws/credentials, then "
        "opened a channel to collector.exfil.test:443 the proxy could not see into "
        "(TLS refusing the run's CA)"
    )


def test_a_child_reading_for_its_parent_counts(make, run_rule):
    # subprocess.run(["cat", key]) in the process that then opens a raw socket.
    read = make.decoy("install", "~/.ssh/id_ed25519", pid=51, exe="/usr/bin/cat", ts=1.0,
                      parents=["50 /usr/bin/python3", "40 /usr/bin/bash"])  # fmt: skip
    raw = make.egress("install", "203.0.113.9", method="TCP", action="refused", port=4444,
                      route="direct", pid=50, exe="/usr/bin/python3", ts=2.0)  # fmt: skip
    reports = [make.report("install", decoy_events=[read], egress=[raw])]

    (finding,) = run_rule("decoy-then-opaque-channel", reports)

    assert "(raw TCP)" in finding.title


def test_a_caught_tls_connection_refusing_the_ca_is_a_channel_too(make, run_rule):
    # No proxy variable: the client went straight out, the namespace caught it, and it
    # refused the run's CA (a pinned client), so nothing it said could be read.
    read = make.decoy("tests", "~/.aws/credentials", pid=90, exe=PY, ts=1.0)
    pinned = make.egress("tests", "collector.exfil.test", method="TLS", action="refused",
                         route="direct", pid=90, exe=PY, ts=2.0)  # fmt: skip
    reports = [make.report("tests", decoy_events=[read], egress=[pinned])]

    (finding,) = run_rule("decoy-then-opaque-channel", reports)

    assert finding.evidence == [read.id, pinned.id]
    assert finding.title.endswith("(TLS refusing the run's CA)")


def test_near_misses_other_processes_order_requests_and_unknown_holders(make, run_rule):
    read = make.decoy("tests", "~/.aws/credentials", pid=10, exe=PY, ts=5.0)
    other = make.egress("tests", "x.test", method="CONNECT", action="refused", pid=11, ts=6.0)
    before = make.egress("tests", "y.test", method="CONNECT", action="refused", pid=10, ts=4.0)
    seen = make.egress("tests", "z.test", method="POST", action="sunk", pid=10, ts=6.0)
    unknown = make.egress("tests", "w.test", method="CONNECT", action="refused", ts=6.0)
    reports = [make.report("tests", decoy_events=[read], egress=[other, before, seen, unknown])]

    assert run_rule("decoy-then-opaque-channel", reports) == []


def test_a_decoy_read_then_an_opaque_post_by_the_same_process_is_critical(make, run_rule):
    # The credentials file read, its content XORed and posted: nothing to match, but the
    # sender read the decoy first.
    read = make.decoy("tests", "~/.aws/credentials", pid=70, exe=PY, ts=1.0)
    post = make.egress("tests", "collector.exfil.test", method="POST", opaque=True,
                       bytes_out=64, pid=70, exe=PY, ts=2.0)  # fmt: skip
    reports = [make.report("tests", decoy_events=[read], egress=[post])]

    (finding,) = run_rule("decoy-then-opaque-channel", reports)

    assert finding.severity == "critical"
    assert finding.evidence == [read.id, post.id]
    assert "decode to nothing readable" in finding.title


def test_a_reader_kept_only_among_the_readers_still_counts(make, run_rule):
    # Twenty processes read the file first; the sender's event was past the events' cap,
    # but every reader's pid is kept.
    cut = make.cut("tests", "report-decoy-events", dropped=1, hides_danger=False)
    reader = make.reader(90, "~/.aws/credentials", ts=1.0, parents=[80])
    channel = make.egress("tests", "collector.exfil.test", method="CONNECT",
                          action="refused", pid=90, ts=2.0)  # fmt: skip
    reports = [make.report("tests", egress=[channel], cuts=[cut], decoy_readers=[reader])]

    (finding,) = run_rule("decoy-then-opaque-channel", reports)

    assert finding.evidence == [cut.id, channel.id]


def test_a_reader_of_the_docker_login_among_the_readers_still_counts(make, run_rule):
    # The docker CLI's own reads of its config are excused only when the kernel names
    # it: a crowd of readers cannot push the thief into the unnamed readers and hide it.
    cut = make.cut("tests", "report-decoy-events", dropped=1, hides_danger=False)
    reader = make.reader(90, "~/.docker/config.json", ts=1.0, parents=[80])
    channel = make.egress("tests", "collector.exfil.test", method="CONNECT",
                          action="refused", pid=90, ts=2.0)  # fmt: skip
    reports = [make.report("tests", egress=[channel], cuts=[cut], decoy_readers=[reader])]

    (finding,) = run_rule("decoy-then-opaque-channel", reports)

    assert finding.evidence == [cut.id, channel.id]
    assert "~/.docker/config.json" in finding.title


def test_near_miss_the_docker_cli_reading_its_config_before_a_pinned_pull(make, run_rule):
    read = make.decoy("tests", "~/.docker/config.json", pid=60, exe="/usr/bin/docker", ts=1.0)
    pull = make.egress("tests", "registry.example.test", method="CONNECT", action="refused",
                       port=443, pid=60, exe="/usr/bin/docker", ts=2.0)  # fmt: skip
    reports = [make.report("tests", decoy_events=[read], egress=[pull])]

    assert run_rule("decoy-then-opaque-channel", reports) == []

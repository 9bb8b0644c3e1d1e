"""opaque-egress: a POST or PUT to a host that is not a registry sent a body that decodes
to nothing readable: a warning with its evidence (critical only when its sender read a
decoy first: decoy-then-opaque-channel)."""

from __future__ import annotations


def test_an_opaque_post_is_a_warning_naming_host_and_bytes(make, run_rule):
    post = make.egress("tests", "collector.exfil.test", method="POST", opaque=True,
                       bytes_out=48, pid=7, ts=2.0)  # fmt: skip
    reports = [make.report("tests", egress=[post])]

    (finding,) = run_rule("opaque-egress", reports)

    assert finding.severity == "warn"
    assert finding.evidence == [post.id]
    assert "collector.exfil.test" in finding.title
    assert "48 bytes" in finding.title


def test_reads_registries_and_readable_bodies_do_not_fire(make, run_rule):
    get = make.egress("tests", "collector.exfil.test", method="GET", opaque=True)
    registry = make.egress("tests", "pypi.org", method="POST", opaque=True)
    readable = make.egress("tests", "collector.exfil.test", method="POST")
    reports = [make.report("tests", egress=[get, registry, readable])]

    assert run_rule("opaque-egress", reports) == []

"""decoy-tamper: a decoy file written or deleted is a warning."""

from __future__ import annotations

KEY = "/home/cujo/.ssh/id_ed25519"


def test_fires_once_per_file_on_writes_and_deletes(make, run_rule):
    write = make.decoy("smoke", KEY, "write")
    delete = make.decoy("smoke", KEY, "delete")
    npmrc = make.decoy("install", "/home/cujo/.npmrc", "write", exe="/usr/bin/npm")
    reports = [
        make.report("smoke", decoy_events=[write, delete]),
        make.report("install", decoy_events=[npmrc]),
    ]

    findings = run_rule("decoy-tamper", reports)

    assert [f.evidence for f in findings] == [[npmrc.id], [write.id, delete.id]]
    assert all(f.severity == "warn" for f in findings)
    assert KEY in findings[1].title
    assert "written and deleted" in findings[1].title


def test_near_miss_opens_and_reads(make, run_rule):
    events = [make.decoy("smoke", KEY, "open"), make.decoy("smoke", KEY, "read")]

    assert run_rule("decoy-tamper", [make.report("smoke", decoy_events=events)]) == []

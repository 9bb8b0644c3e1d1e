"""persistence-write: writes that survive the run (profiles, keys, cron, hooks)."""

from __future__ import annotations

from cujo_action.schema import PERSISTENCE_WRITE


def test_fires_on_each_persistence_write_and_names_the_path(make, run_rule):
    profile = make.observation(
        "install", PERSISTENCE_WRITE, "appended a curl | sh line", path="/home/cujo/.bashrc"
    )
    keys = make.observation("tests", PERSISTENCE_WRITE, path="/home/cujo/.ssh/authorized_keys")
    reports = [
        make.report("tests", observations=[keys]),
        make.report("install", observations=[profile]),
    ]

    findings = run_rule("persistence-write", reports)

    assert [f.evidence for f in findings] == [[profile.id], [keys.id]]
    assert all(f.severity == "critical" for f in findings)
    assert "/home/cujo/.bashrc" in findings[0].title
    assert "curl | sh" in findings[0].title
    assert findings[1].check == "tests"


def test_near_miss_other_observation_kinds(make, run_rule):
    other = make.observation("install", "file_write", path="/home/cujo/.bashrc")

    assert run_rule("persistence-write", [make.report("install", observations=[other])]) == []

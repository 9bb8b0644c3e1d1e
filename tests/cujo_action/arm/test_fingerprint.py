"""The fingerprint probe and its comparison with the runner profile (issue 22, item 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from cujo_action.arm.fingerprint import (
    PROBE_PATH,
    Difference,
    differences,
    load_profile,
    reading_from_output,
    reading_from_report,
    stale,
    summary,
    unexpected,
)
from cujo_action.arm.fingerprint_probe import CAP, MARKER, line, shape
from cujo_action.limits import OUTPUT_TAIL

PROFILE: dict[str, Any] = {
    "fields": {
        "pid1": {"equals": "systemd"},
        "processes": {"at_least": 100},
        "tls.issuer": {"one_of": ["Sectigo Limited", "DigiCert Inc"]},
        "folders.present": {"includes": ["/snap", "/opt/hostedtoolcache"]},
        "env.no_proxy": {"of": "env.names", "excludes": ["HTTPS_PROXY", "ALL_PROXY"]},
        "env.no_cujo": {"of": "env.names", "none_contains": "cujo"},
        "env.shapes": {"shapes": {"GITHUB_RUN_ID": "number", "RUNNER_TEMP": "path"}},
    },
    "accepted": [{"field": "pid1", "reason": "the decoy worker is pid 1", "fix": "item 5"}],
}

RUNNER: dict[str, Any] = {
    "pid1": "systemd",
    "processes": 212,
    "tls.issuer": "Sectigo Limited",
    "folders.present": ["/opt/hostedtoolcache", "/snap", "/usr/share/dotnet"],
    "env.names": ["CI", "HOME", "PATH"],
    "env.shapes": {"GITHUB_": {"RUN_ID": "n"}, "RUNNER_": {"TEMP": "p", "OS": "t"}},
}


def test_a_runner_reading_has_no_differences() -> None:
    assert differences(RUNNER, PROFILE) == []


def test_each_rule_kind_reports_what_it_saw() -> None:
    sandbox = {
        **RUNNER,
        "pid1": "Runner.Worker",
        "processes": 2,
        "tls.issuer": "mitmproxy",
        "folders.present": ["/snap"],
        "env.names": ["CI", "HTTPS_PROXY", "CUJO_RUN"],
        "env.shapes": {"GITHUB_": {"RUN_ID": "t"}, "RUNNER_": {"TEMP": "p"}},
    }
    found = {d.field: d for d in differences(sandbox, PROFILE)}
    assert found["pid1"] == Difference(
        "pid1", '"systemd"', "Runner.Worker", "the decoy worker is pid 1"
    )
    assert found["processes"].seen == 2
    assert found["processes"].expected == ">= 100"
    assert found["tls.issuer"].seen == "mitmproxy"
    assert found["folders.present"].seen == {"missing": ["/opt/hostedtoolcache"]}
    assert found["env.no_proxy"].seen == ["HTTPS_PROXY"]
    assert found["env.no_cujo"].seen == ["CUJO_RUN"]
    assert found["env.shapes"].seen == {"GITHUB_RUN_ID": "text"}
    assert [d.field for d in unexpected(list(found.values()))] == [
        f for f in PROFILE["fields"] if f != "pid1"
    ]


def test_a_field_not_read_is_a_difference() -> None:
    reading = {k: v for k, v in RUNNER.items() if k != "tls.issuer"}
    (only,) = differences(reading, PROFILE)
    assert (only.field, only.seen, only.accepted) == ("tls.issuer", None, None)


def test_a_wrong_type_never_passes() -> None:
    reading = {**RUNNER, "processes": True, "folders.present": "/snap /opt/hostedtoolcache"}
    assert {d.field for d in differences(reading, PROFILE)} == {"processes", "folders.present"}


def test_the_summary_counts_and_names_accepted_entries_no_longer_seen() -> None:
    found = differences({**RUNNER, "processes": 3}, PROFILE)
    assert stale(found, PROFILE) == ["pid1"]
    lines = summary(found, PROFILE)
    assert lines[-2] == "differences from the runner profile: 1 total, 0 accepted, 1 unexpected"
    assert lines[-1].endswith(": pid1")
    assert "NOT ACCEPTED" in lines[0]


def test_the_kept_profile_is_whole_and_accepts_only_its_own_fields() -> None:
    profile = load_profile()
    assert profile["date"]
    assert any("actions/runner-images" in s for s in profile["source"])
    accepted = [a["field"] for a in profile["accepted"]]
    assert len(accepted) == len(set(accepted))
    assert set(accepted) <= set(profile["fields"])
    assert all(a["reason"] and a["fix"] for a in profile["accepted"])
    # Every rule is of a kind the comparison knows (an empty reading trips each).
    assert len(differences({}, profile)) == len(profile["fields"])


def test_the_reading_is_found_in_a_report_among_other_output() -> None:
    report = {
        "commands": [
            {"stdout_tail": "collected 3 items\n" + MARKER + '{"pid1": "systemd"}\nok\n'},
            {"stdout_tail": "nothing here\n" + MARKER + "{not json\n"},
        ]
    }
    assert reading_from_report(report) == {"pid1": "systemd"}
    assert reading_from_output("no marker at all") is None
    assert reading_from_report({}) is None


def test_shapes_never_carry_the_value() -> None:
    shapes = [shape(v) for v in ("", "42", "true", "https://x.test/", "/a/b", "/a:/b", "ghp_x")]
    assert shapes == ["e", "n", "b", "u", "p", "l", "t"]


def test_an_overlong_reading_is_cut_to_the_cap_and_says_so() -> None:
    assert CAP <= OUTPUT_TAIL - 1000  # the report keeps the whole line, with room to spare
    names = {f"NAME_{i:04}": "t" for i in range(600)}
    text = line({"probe": 1, "env.names": list(names), "env.shapes": {"GITHUB_": names}})
    assert len(text) <= CAP
    cut = json.loads(text.removeprefix(MARKER))
    assert cut["truncated"] is True
    assert cut["env.names"][0] == "NAME_0000"
    assert cut["env.shapes"]["GITHUB_"]
    assert line({"probe": 1}) == MARKER + '{"probe":1}'


def test_the_probe_prints_one_line_under_the_cap_and_no_values(tmp_path: Any) -> None:
    secret = "ghp_" + "Zq9" * 12
    env = {
        **os.environ,
        "PROBE_PLANTED_TOKEN": secret,
        "GITHUB_TOKEN": secret,
        "RUNNER_TEMP": str(tmp_path),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, str(PROBE_PATH)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(MARKER)
    assert len(lines[0]) <= CAP
    assert secret not in done.stdout
    assert "Zq9Zq9" not in done.stdout
    assert str(tmp_path) not in done.stdout
    reading = reading_from_output(done.stdout)
    assert reading is not None
    assert reading["network"] is False
    assert not any(key.startswith(("dns.", "tls.", "zen.")) for key in reading)
    assert "PROBE_PLANTED_TOKEN" in reading["env.names"]
    assert reading["env.shapes"]["GITHUB_"]["TOKEN"] == "t"
    assert reading["env.shapes"]["RUNNER_"]["TEMP"] == "p"
    assert not any(key.startswith("error.") for key in reading), reading


@pytest.mark.parametrize("field", ["status.no_new_privs", "uid_map", "pid1", "passwd.lines"])
def test_the_probe_reads_the_kernel_and_the_image(field: str) -> None:
    done = subprocess.run(
        [sys.executable, str(PROBE_PATH)], capture_output=True, text=True, timeout=60, check=True
    )
    reading = reading_from_output(done.stdout)
    assert reading is not None
    assert reading[field] not in ("", None)

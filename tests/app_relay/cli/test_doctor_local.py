"""`cujo doctor --local`: the sandbox's answer about this machine, said with its fix."""

from __future__ import annotations

import json
import subprocess
import sys

from app_relay.cli.doctor_local import local_lines


def test_full_isolation_without_root_is_ok() -> None:
    code, lines = local_lines({"isolation": "full", "how": "rootless", "why": "", "fix": ""})
    assert code == 0
    assert lines == [
        "ok    isolation: full, without root (unprivileged user namespaces): "
        "a review here can be clean"
    ]


def test_partial_isolation_fails_with_why_and_the_one_fix() -> None:
    code, lines = local_lines(
        {
            "isolation": "partial",
            "how": "proxy variables only",
            "why": "AppArmor restricts unprivileged user namespaces",
            "fix": "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        }
    )
    assert code == 1
    assert lines[0].startswith("FAIL  isolation: partial: AppArmor restricts")
    assert "unproven at best" in lines[0]
    assert lines[1] == "      fix: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"


def test_an_answer_that_is_neither_is_never_taken_for_full() -> None:
    code, lines = local_lines({"isolation": "maybe"})
    assert code == 3
    assert lines[0].startswith("FAIL  isolation unknown")


def test_the_command_asks_this_machine_and_agrees_with_the_sandbox() -> None:
    asked = subprocess.run(
        [sys.executable, "-m", "cujo_action", "isolation"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    found = json.loads(asked.stdout)
    said = subprocess.run(
        [sys.executable, "-m", "app_relay", "doctor", "--local"],
        capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert said.returncode == local_lines(found)[0]
    assert said.stdout.splitlines() == local_lines(found)[1]
    partial = subprocess.run(
        [sys.executable, "-m", "app_relay", "doctor", "--local"],
        capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "CUJO_ISOLATION": "partial"},
    )  # fmt: skip
    assert partial.returncode == 1
    assert "fix: unset CUJO_ISOLATION" in partial.stdout

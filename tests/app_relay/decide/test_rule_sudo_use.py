"""sudo-use: code that tries to gain root through sudo is critical."""

from __future__ import annotations

from cujo_action.schema import SUDO


def test_fires_on_a_sudo_observation(make, run_rule):
    tried = make.observation("install", SUDO, "sudo -n sh -c 'curl …'")

    [finding] = run_rule("sudo-use", [make.report("install", observations=[tried])])

    assert finding.severity == "critical"
    assert finding.check == "install"
    assert finding.evidence == [tried.id]
    assert "sudo -n" in finding.title


def test_near_miss_other_observation_kinds(make, run_rule):
    other = make.observation("install", "sudoers_read", "read /etc/sudoers")

    assert run_rule("sudo-use", [make.report("install", observations=[other])]) == []

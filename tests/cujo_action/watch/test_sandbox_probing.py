"""The probes Cujo watches: which tools, which folders, and what their exec is called."""

from __future__ import annotations

from pathlib import Path

from cujo_action.checks.evidence_record import tool_kind
from cujo_action.schema import CRON_WRITE, SANDBOX_PROBE, SUDO
from cujo_action.watch.sandbox_probing import PROBE_TOOLS, decoy_folders, is_probe


def test_the_probe_list_is_short_and_leaves_out_what_builds_run() -> None:
    names = {tool.name for tool in PROBE_TOOLS}
    assert names == {"systemd-detect-virt", "virt-what", "dmidecode", "capsh"}
    assert not names & {"lscpu", "nproc", "uname", "hostname", "id"}


def test_an_exec_is_named_by_the_tool_it_ran() -> None:
    assert tool_kind("/usr/bin/systemd-detect-virt") == SANDBOX_PROBE
    assert tool_kind("/usr/sbin/capsh") == SANDBOX_PROBE
    assert tool_kind("/usr/bin/sudo") == SUDO
    assert tool_kind("/usr/bin/pkexec") == SUDO
    assert tool_kind("/usr/bin/crontab") == CRON_WRITE
    assert not is_probe("/usr/bin/lscpu")


def test_only_credential_folders_holding_a_decoy_are_watched(tmp_path: Path) -> None:
    home = tmp_path / "home"
    decoys = [home / ".docker/config.json", home / ".ssh/id_ed25519", home / ".npmrc",
              home / "runners/2.321.0/.credentials",
              home / "work/app/app/.git/config"]  # fmt: skip
    for decoy in decoys:
        decoy.parent.mkdir(parents=True, exist_ok=True)
        decoy.write_text("secret\n")
    (home / ".config/gh").mkdir(parents=True)  # no decoy in it

    # HOME itself and a checkout's .git are listed by every build: never watched.
    expected = [home / ".ssh", home / ".docker", home / "runners/2.321.0"]
    assert decoy_folders(home, decoys) == expected


def test_a_credential_folder_that_is_a_symlink_is_skipped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    elsewhere = tmp_path / "host"
    elsewhere.mkdir()
    home.mkdir()
    (home / ".ssh").symlink_to(elsewhere)
    decoy = home / ".ssh/id_ed25519"
    decoy.write_text("secret\n")

    assert decoy_folders(home, [decoy]) == []


def test_the_runners_folder_watched_for_listings_is_where_its_registration_is() -> None:
    from cujo_action.arm.decoyfiles import RUNNER_DIR
    from cujo_action.watch.sandbox_probing import DECOY_FOLDERS

    assert RUNNER_DIR in DECOY_FOLDERS

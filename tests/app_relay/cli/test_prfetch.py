"""Fetching a pull request: the token reaches git and GitHub's hosts alone, never the sandbox."""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import time
from pathlib import Path

import pytest
from cujorun import CUJO, Pending
from githttps import PrivateGitServer
from gitrepo import GitRepo

from app_relay.cli import local
from app_relay.cli.prfetch import (
    FetchedPull,
    auth_config,
    fetch_pull,
    github_origins,
    sandbox_env,
    text_of,
    token_of,
)
from app_relay.cli.pullname import PullError, PullTarget, parse_target
from app_relay.runs.localrun import LocalRunner

# --------------------------------------------------------------------------- the token


def test_the_token_goes_to_git_as_a_header_scoped_to_the_origin() -> None:
    env = auth_config("https://git.test:8443/octo/w.git", "ghp_abc")
    assert env["GIT_CONFIG_KEY_0"] == "http.https://git.test:8443/.extraHeader"
    basic = base64.b64encode(b"x-access-token:ghp_abc").decode()
    assert env["GIT_CONFIG_VALUE_0"] == f"Authorization: Basic {basic}"
    assert env["GIT_CONFIG_VALUE_1"] == "false"  # http.followRedirects
    # Never over plain http, never to a file:// remote, never beside a URL's own credentials.
    assert auth_config("http://git.test/octo/w.git", "ghp_abc") == {}
    assert auth_config("file:///tmp/octo/w.git", "ghp_abc") == {}
    assert auth_config("https://me:pw@git.test/octo/w.git", "ghp_abc") == {}
    with pytest.raises(PullError):
        auth_config("https://git.test/octo/w.git", "ghp_abc\nX-Evil: 1")


def test_the_sandbox_environment_holds_no_token_and_no_model_key() -> None:
    env = {
        "PATH": "/usr/bin",
        "GH_TOKEN": "t1",
        "GITHUB_TOKEN": "t2",
        "ANTHROPIC_API_KEY": "k",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": "Authorization: Basic x",
        "CUJO_ISOLATION": "partial",
    }
    assert sandbox_env(env) == {"PATH": "/usr/bin", "CUJO_ISOLATION": "partial"}


# --------------------------------------------------------------------------- fetching


def private_remote(root: Path) -> tuple[Path, str]:
    """Build octo/calc.git under ``root`` with main and refs/pull/7/head; return (root, head)."""
    work = GitRepo(root / "work")
    work.write({"a.txt": "a\n"}).commit("base")
    work.branch("pr").checkout("pr")
    head = work.write({"b.txt": "b\n"}).commit("the pull request")
    work.checkout("main")
    bare = root / "web" / "octo" / "calc.git"
    bare.parent.mkdir(parents=True)
    work.git("clone", "--quiet", "--bare", str(work.path), str(bare))
    work.git("push", "--quiet", str(bare), "pr:refs/pull/7/head")
    return root / "web", head


def test_the_token_reaches_git_by_its_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    web, head = private_remote(tmp_path)
    token = "ghp_" + "7" * 36
    # A git that logs each command line before it runs: the token must be in none.
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_log = tmp_path / "argv.log"
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$@" >> {argv_log}\nexec {real} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with PrivateGitServer(web, token, tmp_path) as host:
        monkeypatch.setenv("GIT_SSL_CAINFO", str(host.cert))
        target = parse_target(f"{host.url}/octo/calc/pull/7", {})
        env = {**os.environ, "GH_TOKEN": token, "CUJO_GITHUB_WEB_URL": host.url}
        pull = fetch_pull(target, base=None, env=env, say=lambda line: None)
        seen = list(host.host.seen)
    try:
        assert (pull.head_sha, pull.base_ref, pull.base_from) == (head, "main", "default branch")
        assert seen
        assert all(s.authorized for s in seen)
        logged = argv_log.read_text()
        assert "ls-remote" in logged
        assert "fetch" in logged
        assert token not in logged
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        assert basic not in logged
        # The throwaway clone keeps no credential: its config and refs say nothing of it.
        for path in pull.clone.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path
                assert basic.encode() not in path.read_bytes(), path
        assert "extraheader" not in (pull.clone / "config").read_text().lower()
        assert pull.clone.name.startswith("cujo-pull-")
    finally:
        pull.remove()
    assert not pull.clone.exists()


def test_the_sandbox_is_started_without_the_tokens_or_the_model_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "sandbox.env"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nenv > {seen}\n")
    python.chmod(0o755)
    monkeypatch.setattr(local, "LocalRunner", lambda: LocalRunner(python=str(python)))
    for name in ("GH_TOKEN", "GITHUB_TOKEN", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, f"secret-{name}")
    repo = GitRepo(tmp_path / "repo")
    repo.write({"a.txt": "a\n"}).commit("base")
    args = argparse.Namespace(
        repo=str(repo.path), base="main", head="main", data_dir=tmp_path / "data", verbose=False
    )
    started = local.start_review(args)
    assert started.run.wait() == 0
    started.close_detail()
    env = seen.read_text()
    assert "PATH=" in env
    assert "secret-" not in env
    assert started.detail is not None
    assert started.detail.name == f"{started.run_id}.log"


@pytest.mark.parametrize(
    ("owner_name", "base_ref", "told"),
    [
        (("octo", "widgets"), "release/2.x", "--upstream octo/widgets --base-branch release/2.x"),
        # A base given as a commit names no branch; a remote's path may name no repository.
        (None, "a" * 40, ""),
    ],
)
def test_the_sandbox_is_told_where_the_pull_request_merges(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    owner_name: tuple[str, str] | None,
    base_ref: str,
    told: str,
) -> None:
    seen = tmp_path / "sandbox.argv"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" > {seen}\n')
    python.chmod(0o755)
    monkeypatch.setattr(local, "LocalRunner", lambda: LocalRunner(python=str(python)))
    repo = GitRepo(tmp_path / "cujo-pull-x")
    sha = repo.write({"a.txt": "a\n"}).commit("base")
    target = PullTarget(url="https://github.com/octo/widgets", number=7, repo="octo/widgets",
                        host="github.com", owner_name=owner_name)  # fmt: skip
    pull = FetchedPull(target, repo.path, base_ref, sha, sha, "github")
    args = argparse.Namespace(repo=str(repo.path), base=sha, head=sha, pull_request=pull,
                              data_dir=tmp_path / "data", verbose=False)  # fmt: skip
    started = local.start_review(args)
    assert started.run.wait() == 0
    started.close_detail()
    argv = seen.read_text()
    assert argv.strip().endswith(f"--out {started.out} {told}".strip())


def test_gh_token_goes_to_no_host_but_github_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    web, _ = private_remote(tmp_path)
    token = "ghp_" + "5" * 36
    with PrivateGitServer(web, token, tmp_path) as host:
        monkeypatch.setenv("GIT_SSL_CAINFO", str(host.cert))
        target = parse_target(f"{host.url}/octo/calc/pull/7", {})
        env = {**os.environ, "GH_TOKEN": token, "PATH": "/usr/bin:/bin"}
        env.pop("CUJO_GITHUB_WEB_URL", None)
        with pytest.raises(PullError) as refused:
            fetch_pull(target, base=None, env=env, say=lambda line: None)
        seen = list(host.host.seen)
    assert seen
    assert all(s.authorization is None for s in seen)
    assert f"set CUJO_GITHUB_WEB_URL={host.url}" in str(refused.value)
    assert token not in str(refused.value)


def test_gh_keeps_the_token_for_other_hosts(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    (bin_dir / "gh").write_text(f'#!/bin/sh\necho "$@" > {asked}\necho gho_fromgh\n')
    (bin_dir / "gh").chmod(0o755)
    env = {"PATH": str(bin_dir), "GH_TOKEN": "ghp_env"}
    assert token_of(env, "ghe.corp.test", from_env=True) == "ghp_env"
    assert not asked.exists()  # GH_TOKEN first: gh is not asked
    assert token_of(env, "ghe.corp.test", from_env=False) == "gho_fromgh"
    assert asked.read_text().split() == ["auth", "token", "--hostname", "ghe.corp.test"]
    assert token_of({"PATH": str(tmp_path)}, "github.com", from_env=True) is None  # no gh
    assert github_origins({"CUJO_GITHUB_WEB_URL": "https://x@GHE.test:8443/"}) == {
        "github.com",
        "ghe.test:8443",
    }


def test_ctrl_c_while_fetching_removes_the_throwaway_clone(tmp_path: Path) -> None:
    web, _ = private_remote(tmp_path)
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A git whose fetch never ends, as a slow remote's: Ctrl-C is what ends it.
    (bin_dir / "git").write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = fetch ] && exec tail -f /dev/null; done\n'
        f'exec {real} "$@"\n'
    )
    (bin_dir / "git").chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CUJO_")},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TMPDIR": str(tmp),
        "CUJO_GITHUB_WEB_URL": web.as_uri(),
    }
    out = tmp_path / "out"
    out.mkdir()
    pending = Pending(
        [str(CUJO), "review", "octo/calc#7", "--data-dir", str(tmp_path / "d")],
        env,
        out,
        tmp_path / "d",
    )
    deadline = time.monotonic() + 60
    while not list(tmp.glob("cujo-pull-*")):
        assert time.monotonic() < deadline, "the fetch should have begun"
        time.sleep(0.05)
    pending.interrupt()
    review = pending.wait()
    assert review.code == 3, review
    assert "interrupted while fetching; nothing was reviewed" in review.stderr
    assert list(tmp.glob("cujo-pull-*")) == []


def test_the_pull_requests_text_is_taken_from_githubs_answer() -> None:
    answer = {"title": "T", "body": None, "head": {"ref": "$(id)", "sha": "a" * 40}}
    assert text_of(answer) == {"title": "T", "body": "", "head_ref": "$(id)"}
    # What the answer does not say stays unknown, never made up.
    assert text_of({"head": "x"}) == {"title": None, "body": None, "head_ref": None}

"""`cujo review OWNER/REPO#N`: naming a pull request, the token's reach, the short report."""

from __future__ import annotations

import argparse
import base64
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cujorun import CUJO, Pending
from githttps import PrivateGitServer
from gitrepo import GitRepo

from app_relay.cli import local
from app_relay.cli import main as cli
from app_relay.cli.prfetch import (
    PullError,
    api_base,
    auth_config,
    fetch_pull,
    github_origins,
    parse_target,
    remote_target,
    sandbox_env,
    target_of_clone,
    token_of,
)
from app_relay.cli.progress import MAX_LINES, WIDTH, Progress, brief, worth_showing
from app_relay.cli.review import summary_object
from app_relay.decide.verdict import ModelUse, Verdict
from app_relay.runs.localrun import LocalRunner

# --------------------------------------------------------------------------- naming


def test_owner_repo_number_maps_to_github() -> None:
    target = parse_target("octo-org/widgets.js#7", {})
    assert target.url == "https://github.com/octo-org/widgets.js.git"
    assert (target.number, target.repo, target.host) == (7, "octo-org/widgets.js", "github.com")
    assert target.shown_url == "https://github.com/octo-org/widgets.js/pull/7"


def test_owner_repo_number_follows_the_web_url_setting() -> None:
    ghe = parse_target("octo/widgets#12", {"CUJO_GITHUB_WEB_URL": "https://ghe.corp.test/"})
    assert ghe.url == "https://ghe.corp.test/octo/widgets.git"
    assert ghe.shown_url == "https://ghe.corp.test/octo/widgets/pull/12"
    local = parse_target("octo/widgets#3", {"CUJO_GITHUB_WEB_URL": "file:///tmp/x"})
    assert local.url == "file:///tmp/x/octo/widgets.git"
    assert (local.host, local.owner_name) == ("", ("octo", "widgets"))


@pytest.mark.parametrize(
    ("url", "clone", "number"),
    [
        ("https://github.com/octo/widgets/pull/7", "https://github.com/octo/widgets.git", 7),
        ("https://github.com/octo/widgets/pull/7/files", "https://github.com/octo/widgets.git", 7),
        ("https://ghe.corp.test/octo/w/pull/31/", "https://ghe.corp.test/octo/w.git", 31),
        ("http://127.0.0.1:8080/a/b/pull/2", "http://127.0.0.1:8080/a/b.git", 2),
    ],
)
def test_a_pull_request_url_keeps_its_host(url: str, clone: str, number: int) -> None:
    target = parse_target(url, {"CUJO_GITHUB_WEB_URL": "https://elsewhere.test"})
    assert (target.url, target.number) == (clone, number)


@pytest.mark.parametrize(
    "text",
    [
        "octo#7",
        "octo/widgets",
        "octo/widgets#0",
        "octo/widgets#x",
        "octo/widgets#-1",
        "-octo/widgets#1",
        "octo/../x#1",
        "octo/widgets/extra#1",
        "https://github.com/octo/widgets/issues/7",
        "https://github.com/octo/widgets/pull/",
        "https://github.com/octo/widgets/pull/7?x=1",
        "https://github.com/octo/pull/7",
        "ftp://github.com/octo/widgets/pull/7",
        "file:///tmp/octo/widgets/pull/7",
    ],
)
def test_bad_forms_are_refused_as_usage(text: str) -> None:
    with pytest.raises(PullError) as refused:
        parse_target(text, {})
    assert refused.value.code == 2
    assert "OWNER/REPO" in str(refused.value) or "pull request URL" in str(refused.value)


def test_a_url_s_credentials_are_never_shown() -> None:
    with pytest.raises(PullError) as refused:
        parse_target("https://me:hunter2@github.com/octo/widgets/issues/1", {})
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    ("remote", "host", "repo"),
    [
        ("git@github.com:octo/widgets.git", "github.com", "octo/widgets"),
        ("ssh://git@ghe.corp.test/octo/widgets.git", "ghe.corp.test", "octo/widgets"),
        ("https://github.com/octo/widgets", "github.com", "octo/widgets"),
    ],
)
def test_an_origin_remote_names_its_host_and_repository(remote: str, host: str, repo: str) -> None:
    target = remote_target(remote, 5)
    assert (target.url, target.host, target.repo, target.number) == (remote, host, repo, 5)


def test_a_clone_of_a_path_fetches_from_that_path(tmp_path: Path) -> None:
    target = remote_target(str(tmp_path / "octo" / "widgets.git"), 5)
    assert target.url == (tmp_path / "octo" / "widgets.git").as_uri()
    assert target.owner_name == ("octo", "widgets")


def test_pr_outside_a_clone_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(PullError) as refused:
        target_of_clone(str(tmp_path), 7)
    assert refused.value.code == 2
    assert "is not a git clone" in str(refused.value)
    repo = GitRepo(tmp_path / "noorigin")
    with pytest.raises(PullError) as refused:
        target_of_clone(str(repo.path), 7)
    assert "has no `origin` remote" in str(refused.value)


def test_github_is_asked_only_where_there_is_one() -> None:
    assert api_base(parse_target("o/r#1", {}), {}) == "https://api.github.com"
    fake = {"CUJO_GITHUB_API_URL": "http://127.0.0.1:9/api/"}
    assert api_base(parse_target("o/r#1", fake), fake) == "http://127.0.0.1:9/api"
    # A bare repository or any other host: nothing is asked (no request leaves for a guess).
    assert api_base(parse_target("o/r#1", {"CUJO_GITHUB_WEB_URL": "file:///x"}), {}) is None
    assert api_base(parse_target("https://ghe.test/o/r/pull/1", {}), {}) is None
    with pytest.raises(PullError):
        api_base(parse_target("o/r#1", {}), {"CUJO_GITHUB_API_URL": "file:///etc"})


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


# --------------------------------------------------------------------------- the command line


def usage(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(["review", *argv])
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_the_forms_that_name_nothing_or_too_much_are_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "(missing --repo, --base, --head)" in usage(capsys)
    assert "drop --pr, --repo and --head" in usage(capsys, "o/r#7", "--head", "x")
    assert "drop --pr, --repo and --head" in usage(capsys, "o/r#7", "--pr", "7")
    assert "drop --head" in usage(capsys, "--pr", "7", "--head", "x")


def test_a_bad_pull_request_name_exits_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["review", "octo/widgets#x", "--data-dir", str(tmp_path / "data")])
    assert code == 2
    assert "names no pull request" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # no record, no run


def test_the_console_script_refuses_pr_outside_a_clone(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(CUJO), "review", "--pr", "7", "--data-dir", str(tmp_path / "d")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    assert "is not a git clone" in done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- what is shown


def test_each_stage_starts_and_ends_on_a_line_of_its_own() -> None:
    times = iter([10.0, 11.0, 14.5, 20.0])
    out = io.StringIO()
    progress = Progress(out, clock=lambda: next(times))
    progress.step("install: in_progress")
    progress.step("tests: in_progress")
    progress.step("install: completed (success)")
    progress.step("tests: completed (failure)")
    progress.step("smoke: completed (skipped)")
    assert out.getvalue().splitlines() == [
        "cujo: install ...",
        "cujo: tests ...",
        "cujo: install done (4.5s)",
        "cujo: tests failed (9.0s)",
        "cujo: smoke skipped",
    ]


def test_a_stage_that_began_before_its_mark_arrived_counts_from_then() -> None:
    times = iter([5.0, 5.0])
    out = io.StringIO()
    progress = Progress(out, clock=lambda: next(times), began={"prepare": 2.0})
    progress.step("prepare: in_progress")
    progress.step("prepare: completed (success)")
    assert out.getvalue().splitlines() == ["cujo: prepare ...", "cujo: prepare done (3.0s)"]


def many_findings_object(n: int) -> dict[str, Any]:
    verdict = Verdict(
        state="blocked",
        summary="Blocked by a critical finding. " * 30,
        findings=[
            {
                "id": f"F{i}",
                "rule": "decoy-egress",
                "severity": "critical",
                "check": "install",
                "title": f"finding {i} " + "x" * 150,
                "evidence": [f"install:egress:{i}"],
            }
            for i in range(1, n + 1)
        ],
        unproven=[f"tests: line {i}" for i in range(5)],
        judge="deterministic",
    )
    obj = summary_object(
        run_id="local-1",
        bundle=None,
        verdict=verdict,
        record="sqlite:////data/cujo.db run local-1 (bundle in /data/runs/local-1)",
        base_sha="a" * 40,
        head_sha="b" * 40,
        pull_request={"repo": "octo/widgets", "number": 7, "url": "https://g.test/o/w/pull/7"},
    )
    obj["isolation"] = "full"
    return obj


def test_the_short_report_fits_a_terminal_and_counts_what_it_leaves_out() -> None:
    shown = brief(many_findings_object(20), detail="/data/runs/local-1.log")
    lines = shown.splitlines()
    assert len(lines) <= MAX_LINES
    assert all(len(line) <= WIDTH for line in lines), [len(x) for x in lines]
    assert lines[0].startswith("Cujo verdict: BLOCKED  (run local-1, judge deterministic)")
    assert "pull request octo/widgets#7" in shown
    assert f"head {'b' * 12}" in shown
    assert "isolation full" in shown
    assert "+15 more findings" in shown
    assert "+3 more unproven" in shown
    assert (
        "\n  record: sqlite:////data/cujo.db run local-1\n  bundle: /data/runs/local-1\n" in shown
    )
    assert "detail: /data/runs/local-1.log" in shown


def test_json_names_the_pull_request_and_the_judge_and_why_it_fell_back() -> None:
    obj = many_findings_object(1)
    assert obj["pull_request"] == {
        "repo": "octo/widgets",
        "number": 7,
        "url": obj["pull_request"]["url"],
    }
    assert obj["judge"] == "deterministic"
    assert "judge_fallback" not in obj
    fell_back = Verdict(
        state="clean",
        summary="s",
        findings=[],
        unproven=[],
        judge="deterministic-fallback",
        model_use=ModelUse(model="m", outcome="overloaded", detail="the API was overloaded"),
    )
    again = summary_object(run_id="r", bundle=None, verdict=fell_back, record="x")
    assert (again["judge"], again["judge_fallback"]) == ("deterministic", "the API was overloaded")
    assert "pull_request" not in again


def test_cli_loads_without_the_heavy_libraries_still() -> None:
    probe = (
        "import sys, app_relay.cli.main, app_relay.cli.prfetch\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'pydantic', 'anthropic', 'fastapi', 'uvicorn')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


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


def test_a_quiet_review_still_shows_isolation_the_plan_and_why_it_stopped() -> None:
    shown = [
        "cujo: isolation PARTIAL: bubblewrap is missing\n",
        "cujo: isolation full: bubblewrap, uids 1-6 (one per check), 8 network namespaces\n",
        "cujo: plan (python): install `pip install .`, test `-`, smoke `-`\n",
        "cujo: cannot prepare: /x is not a git repository.\n",
        "Traceback (most recent call last):\n",
    ]
    detail = [
        "cujo: tests: test: $ python -m unittest\n",
        "cujo: detonation: install: exit 0 after 4.9s\n",
        "cujo: timings: warm-up 0.01s\n",
    ]
    assert all(worth_showing(line) for line in shown)
    assert not any(worth_showing(line) for line in detail)


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

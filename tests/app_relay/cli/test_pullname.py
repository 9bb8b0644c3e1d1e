"""`cujo review OWNER/REPO#N`, a pull request URL, --pr N: naming one, and the command line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cujorun import CUJO
from gitrepo import GitRepo

from app_relay.cli import main as cli
from app_relay.cli.prfetch import api_base, target_of_clone
from app_relay.cli.pullname import PullError, parse_target, remote_target

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

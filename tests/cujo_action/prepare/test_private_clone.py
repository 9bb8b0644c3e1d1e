"""prepare on a private repository: the job's token for the clone, refs/pull/N/head, a moved head.

The repository is served by ``githttps.PrivateGitServer``: git's smart HTTP behind HTTPS
on loopback, answering 401 to any request without the token, as GitHub answers for a
private repository. The pull request's head is reachable only as ``refs/pull/7/head``,
as a fork's head is in the base repository.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from githttps import PrivateGitServer
from gitrepo import GitRepo

from cujo_action.prepare.git import PrepareError
from cujo_action.prepare.plan import prepare
from cujo_action.schema import Plan

TOKEN = "ghs_" + secrets.token_hex(18)
# Each refusal's words name its case: the token is random, and never in a test's name.
REFUSALS = (
    "only over https",
    "credentials of its own",
    "control characters",
    "empty",
    "40-hex SHA",
    "above 0",
    "local path",
)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, GitRepo, Path]]:
    """Serve octo/app with main and refs/pull/7/head; return (url, source repo, bare)."""
    source = GitRepo(tmp_path / "source")
    source.write({"README.md": "app\n", "calc.py": "X = 1\n"}).commit("base")
    source.branch("pr").checkout("pr")
    source.write({"calc.py": "X = 2\n"}).commit("the pull request")
    source.checkout("main")
    bare = tmp_path / "host" / "octo" / "app"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(source.path), str(bare)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["git", "-C", str(bare), "update-ref", "refs/pull/7/head", source.sha("pr")], check=True
    )
    # A fork's branch is not in the base repository: only refs/pull/7/head reaches it.
    subprocess.run(["git", "-C", str(bare), "branch", "-D", "pr"], check=True, capture_output=True)
    certs = tmp_path / "certs"
    certs.mkdir()
    with PrivateGitServer(tmp_path / "host", TOKEN, certs) as server:
        monkeypatch.setenv("GIT_SSL_CAINFO", str(server.cert))
        yield f"{server.url}/octo/app", source, bare
        seen = server.host.seen
    assert seen, "the git host was never asked"


def prepare_pull(
    served: tuple[str, GitRepo, Path],
    work: Path,
    *,
    number: int | None = 7,
    token: str | None = TOKEN,
    head: str | None = None,
) -> Plan:
    """Prepare the served pull request (main → pr) as the action asks the harness to."""
    url, source, _ = served
    return prepare(
        url,
        source.sha("main"),
        head or source.sha("pr"),
        "run-1",
        work,
        pull_request=number,
        token=token,
    )


def test_the_token_clones_a_private_repository_and_fetches_the_pull_request_head(
    served: tuple[str, GitRepo, Path], tmp_path: Path
) -> None:
    url, source, _ = served
    work = tmp_path / "work"
    plan = prepare_pull(served, work)
    assert (plan.base_sha, plan.head_sha) == (source.sha("main"), source.sha("pr"))
    assert (Path(plan.head_dir) / "calc.py").read_text() == "X = 2\n"
    assert (Path(plan.base_dir) / "calc.py").read_text() == "X = 1\n"
    # Nowhere on disk: not in the clone's config, its refs and logs, nor the plan.
    for path in work.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert plan.repo == url


def test_the_token_goes_to_the_git_host_only_as_the_checkout_sends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = GitRepo(tmp_path / "source")
    source.write({"a.txt": "a\n"}).commit("base")
    bare = tmp_path / "host" / "octo" / "app"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(source.path), str(bare)],
        check=True,
        capture_output=True,
    )
    certs = tmp_path / "certs"
    certs.mkdir()
    with PrivateGitServer(tmp_path / "host", TOKEN, certs) as server:
        monkeypatch.setenv("GIT_SSL_CAINFO", str(server.cert))
        prepare(f"{server.url}/octo/app", "main", "main", "r", tmp_path / "w", token=TOKEN)
        seen = list(server.host.seen)
    assert seen
    assert all(s.authorized for s in seen), [(s.method, s.path) for s in seen]


def test_without_the_token_a_private_repository_cannot_be_cloned(
    served: tuple[str, GitRepo, Path], tmp_path: Path
) -> None:
    with pytest.raises(PrepareError, match=r"Could not clone https://127\.0\.0\.1:\d+/octo/app"):
        prepare_pull(served, tmp_path / "w", token=None)


def test_a_wrong_token_is_refused_and_never_shown(
    served: tuple[str, GitRepo, Path], tmp_path: Path
) -> None:
    wrong = "ghs_" + secrets.token_hex(18)
    with pytest.raises(PrepareError) as caught:
        prepare_pull(served, tmp_path / "w", token=wrong)
    assert wrong not in str(caught.value)


def test_a_head_that_moved_since_the_dispatch_is_an_error_that_says_so(
    served: tuple[str, GitRepo, Path], tmp_path: Path
) -> None:
    _, source, bare = served
    dispatched = source.sha("pr")
    # A force push: the pull request's head is now another commit, off main.
    source.git("branch", "--force", "pr", "main")
    source.checkout("pr")
    source.write({"calc.py": "X = 3\n"}).commit("rewritten")
    source.checkout("main")
    subprocess.run(
        ["git", "-C", str(bare), "fetch", "--quiet", str(source.path), "+pr:refs/pull/7/head"],
        check=True,
        capture_output=True,
    )
    moved = source.sha("pr")
    assert moved != dispatched
    with pytest.raises(PrepareError) as caught:
        prepare_pull(served, tmp_path / "w", head=dispatched)
    message = str(caught.value)
    assert "head moved" in message
    assert moved in message
    assert dispatched in message
    assert "force push" in message


def test_a_pull_request_that_does_not_exist_is_an_error_naming_its_ref(
    served: tuple[str, GitRepo, Path], tmp_path: Path
) -> None:
    with pytest.raises(PrepareError, match=r"Could not fetch refs/pull/8/head"):
        prepare_pull(served, tmp_path / "w", number=8)


@pytest.mark.parametrize(
    ("repo", "token", "pull_request", "head", "why"),
    [
        ("http://127.0.0.1:9/octo/app", TOKEN, None, "main", "only over https"),
        ("https://x:y@127.0.0.1:9/octo/app", TOKEN, None, "main", "credentials of its own"),
        ("https://127.0.0.1:9/octo/app", "ghs_a\r\nX-Evil: 1", None, "main", "control characters"),
        ("https://127.0.0.1:9/octo/app", "", None, "main", "empty"),
        ("https://127.0.0.1:9/octo/app", TOKEN, 7, "main", "40-hex SHA"),
        ("https://127.0.0.1:9/octo/app", TOKEN, 0, "a" * 40, "above 0"),
        ("/some/local/path", TOKEN, None, "main", "local path"),
    ],
    ids=REFUSALS,
)
def test_a_token_or_pull_request_that_cannot_be_used_safely_is_refused_before_any_git(
    repo: str, token: str, pull_request: int | None, head: str, why: str, tmp_path: Path
) -> None:
    with pytest.raises(PrepareError, match=why):
        prepare(repo, "main", head, "r", tmp_path / "w", pull_request=pull_request, token=token)
    assert not (tmp_path / "w" / "head").exists()


def test_the_entry_point_refuses_an_empty_token_on_stdin(tmp_path: Path) -> None:
    args = f"--repo https://127.0.0.1:9/octo/app --base {'a' * 40} --head {'b' * 40} --run-id r"
    args += f" --token-stdin --pull-request 7 --out {tmp_path / 'out'}"
    done = subprocess.run(
        [sys.executable, "-m", "cujo_action", "run", *args.split()],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "standard input held no token" in done.stderr
    assert not (tmp_path / "out").exists()

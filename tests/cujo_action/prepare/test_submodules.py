"""Submodules come from where the base says, at the commit the checkout records, over
http(s) only: real git, real repositories served over git's plain HTTP on loopback."""

from __future__ import annotations

import functools
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gitrepo import GitRepo

from cujo_action.prepare import submodules
from cujo_action.prepare.plan import prepare

SETUP = {"setup.py": "from setuptools import setup\nsetup()\n"}


class Served:
    """Bare repositories under ``root``, served read-only over HTTP on loopback; every
    path asked for is kept in ``asked``."""

    def __init__(self, root: Path) -> None:
        self.root, self.asked = root, list[str]()
        root.mkdir(parents=True, exist_ok=True)
        seen = self.asked

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        handler = functools.partial(Handler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def publish(self, repo: GitRepo, name: str) -> str:
        """Serve ``repo`` as ``name`` (a bare copy, as a plain-HTTP git server keeps one)."""
        bare = self.root / name
        subprocess.run(["rm", "-rf", str(bare)], check=True)
        subprocess.run(["git", "clone", "--quiet", "--bare", str(repo.path), str(bare)], check=True)
        subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
        return f"{self.url}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(tmp_path / "served")
    yield server
    server.close()


def _gitmodules(path: str, url: str) -> str:
    return f'[submodule "{path}"]\n\tpath = {path}\n\turl = {url}\n'


def _commit(
    repo: GitRepo, message: str, files: dict[str, str], links: dict[str, str] | None = None
) -> None:
    """Commit ``files`` and the gitlinks ``links`` (path → commit), as `git submodule add`
    records them: the commit lives in another repository."""
    repo.write(files)
    if files:
        repo.git("add", "--", *files)
    for path, sha in (links or {}).items():
        repo.git("update-index", "--add", "--cacheinfo", f"160000,{sha},{path}")
    repo.git("commit", "--quiet", "--allow-empty", "-m", message)


def _data(tmp_path: Path, name: str, versions: list[str]) -> tuple[GitRepo, list[str]]:
    """Return a repository of test data, one commit a version of ``cases.txt``."""
    repo = GitRepo(tmp_path / name)
    shas = [repo.write({"cases.txt": text}).commit(text) for text in versions]
    return repo, shas


def _project(tmp_path: Path, gitmodules: str, base_sha: str) -> GitRepo:
    repo = GitRepo(tmp_path / "octo" / "toml")
    _commit(repo, "base", {**SETUP, ".gitmodules": gitmodules}, {"tests/toml-test": base_sha})
    repo.branch("pr").checkout("pr")
    return repo


def test_each_checkout_gets_the_submodule_at_the_commit_it_records(
    tmp_path: Path, served: Served
) -> None:
    data, (old, new) = _data(tmp_path, "toml-test", ["old cases\n", "new cases\n"])
    url = served.publish(data, "toml-test.git")
    repo = _project(tmp_path, _gitmodules("tests/toml-test", url), old)
    _commit(repo, "pr: newer cases", {}, {"tests/toml-test": new})  # the pull request moves it on

    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")

    head = Path(plan.head_dir) / "tests" / "toml-test" / "cases.txt"
    base = Path(plan.base_dir) / "tests" / "toml-test" / "cases.txt"
    assert head.read_text() == "new cases\n"
    assert base.read_text() == "old cases\n"
    fetched = [n for n in plan.notes if "fetched as the base's .gitmodules" in n]
    assert len(fetched) == 2, plan.notes
    assert f"tests/toml-test ({url}) at {new[:12]}" in fetched[0]
    assert not any("left out" in n for n in plan.notes), plan.notes


def test_a_pull_request_that_points_the_submodule_elsewhere_fetches_nothing_from_there(
    tmp_path: Path, served: Served
) -> None:
    data, (old,) = _data(tmp_path, "toml-test", ["cases\n"])
    url = served.publish(data, "toml-test.git")
    repo = _project(tmp_path, _gitmodules("tests/toml-test", url), old)
    # The head names a host of its own and a commit only that host has.
    theirs = Served(tmp_path / "theirs")
    try:
        evil, (payload,) = _data(tmp_path, "evil", ["payload\n"])
        evil_url = theirs.publish(evil, "evil.git")
        text = _gitmodules("tests/toml-test", evil_url)
        _commit(repo, "pr: better data", {".gitmodules": text}, {"tests/toml-test": payload})

        plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    finally:
        theirs.close()

    assert theirs.asked == []  # not one request reached the head's host
    assert any("names other URLs for tests/toml-test: not followed" in n for n in plan.notes)
    [left] = [n for n in plan.notes if n.startswith("Git submodules at head left out")]
    assert "tests/toml-test:" in left, left
    assert not (Path(plan.head_dir) / "tests" / "toml-test" / "cases.txt").exists()
    # The base, whose own commit is at its own URL, has its submodule.
    assert (Path(plan.base_dir) / "tests" / "toml-test" / "cases.txt").read_text() == "cases\n"


@pytest.mark.parametrize(
    "url",
    [
        "file://{served}/toml-test.git",  # the runner's own files
        "{served}/toml-test.git",  # a bare path is a local clone
        "ext::sh -c touch% {canary}",  # a command
        "http://user:secret@127.0.0.1:9/toml-test.git",  # credentials in the URL
        "../toml-test.git",  # relative to a local repository's folder
    ],
)
def test_a_submodule_url_that_is_not_plain_http_is_not_fetched(
    tmp_path: Path, served: Served, url: str
) -> None:
    data, (old,) = _data(tmp_path, "toml-test", ["cases\n"])
    served.publish(data, "toml-test.git")
    canary = tmp_path / "canary"
    given = url.format(served=served.root, canary=canary)
    repo = _project(tmp_path, _gitmodules("tests/toml-test", given), old)
    _commit(repo, "pr", {"a.py": ""})

    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")

    assert not (Path(plan.head_dir) / "tests" / "toml-test" / "cases.txt").exists()
    assert not canary.exists()
    left = [n for n in plan.notes if "left out" in n]
    assert len(left) == 2, plan.notes
    assert all("is not an http(s) URL" in n for n in left), left
    assert "secret" not in " ".join(plan.notes)  # a URL's credentials are never shown


def test_a_server_that_is_down_leaves_the_submodule_out_saying_why(tmp_path: Path) -> None:
    repo = _project(tmp_path, _gitmodules("tests/toml-test", "http://127.0.0.1:9/t.git"), "ab" * 20)
    _commit(repo, "pr", {"a.py": ""})
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    [left, _] = [n for n in plan.notes if "left out" in n]
    assert "tests/toml-test: " in left, left
    assert "127.0.0.1" in left, left  # git's own reason: nothing listens there


def test_past_the_cap_the_rest_are_named_as_left_out(
    tmp_path: Path, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submodules, "MAX_FETCHED", 1)
    data, (old,) = _data(tmp_path, "toml-test", ["cases\n"])
    url = served.publish(data, "toml-test.git")
    text = _gitmodules("a/one", url) + _gitmodules("b/two", url)
    repo = _project(tmp_path, text, old)
    _commit(repo, "pr", {}, {"a/one": old, "b/two": old})
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    assert (Path(plan.head_dir) / "a" / "one" / "cases.txt").exists()
    assert not (Path(plan.head_dir) / "b" / "two" / "cases.txt").exists()
    assert any("b/two: past the first 1 submodules fetched" in n for n in plan.notes)


def test_a_submodule_the_base_does_not_declare_is_left_out(tmp_path: Path) -> None:
    repo = _project(tmp_path, "", "ab" * 20)
    _commit(repo, "pr", {"a.py": ""})
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    left = [n for n in plan.notes if "left out" in n]
    assert len(left) == 2, plan.notes
    assert all("tests/toml-test: not in the base's .gitmodules" in n for n in left)
    assert not (Path(plan.head_dir) / "tests" / "toml-test" / ".git").exists()


def test_a_project_without_submodules_says_nothing_of_them(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "octo" / "plain")
    repo.write(SETUP).commit("base")
    repo.branch("pr").checkout("pr")
    repo.write({"a.py": ""}).commit("pr")
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    assert not any("submodule" in n for n in plan.notes), plan.notes


@pytest.mark.parametrize(
    ("url", "superproject", "resolved"),
    [
        ("https://github.com/toml-lang/toml-test", "", "https://github.com/toml-lang/toml-test"),
        (
            "../toml-test.git",
            "https://github.com/py/tomlkit",
            "https://github.com/py/toml-test.git",
        ),
        ("./sub", "https://github.com/py/tomlkit", "https://github.com/py/tomlkit/sub"),
        ("../../../x.git", "https://github.com/py/tomlkit", None),  # past the host
        ("../toml-test.git", "/home/me/tomlkit", None),
        ("git@github.com:toml-lang/toml-test.git", "", None),
        ("ssh://github.com/x.git", "", None),
        ("https://token@github.com/x.git", "", None),
    ],
)
def test_urls_resolve_as_git_resolves_them_and_only_to_http(
    url: str, superproject: str, resolved: str | None
) -> None:
    assert submodules.resolve(url, superproject) == resolved

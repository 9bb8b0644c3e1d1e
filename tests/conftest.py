"""Fixtures for the end-to-end tests: real git repositories and the real `cujo` command."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from cujorun import CUJO, Cujo
from gitrepo import GitRepo

# The fake GitHub (a real HTTP server on loopback) for the relay's tests.
pytest_plugins = ["fakegithub.plugin"]

Files = Mapping[str, str | None]


@pytest.fixture(scope="session")
def cujo(tmp_path_factory: pytest.TempPathFactory) -> Cujo:
    """The `cujo` command, recording every review of the session in one local record."""
    assert CUJO.exists(), f"{CUJO} is missing: install the project with `make`"
    return Cujo(tmp_path_factory.mktemp("cujo-data"), tmp_path_factory.mktemp)


@pytest.fixture(scope="session")
def pr_repo(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., GitRepo]:
    """Build a repository whose `main` holds ``base`` and whose branch ``pr`` adds ``head``."""

    def build(name: str, base: Files, head: Files, *, branch: str = "pr") -> GitRepo:
        repo = GitRepo(tmp_path_factory.mktemp(name) / "repo")
        repo.write(base).commit("base")
        repo.branch(branch).checkout(branch)
        repo.write(head).commit("the pull request")
        repo.checkout("main")
        return repo

    return build

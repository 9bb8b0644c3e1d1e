"""`make release VERSION=X.Y.Z` (tools/release.py) on a real repository made here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo
from repo_paths import TOP

SCRIPT = TOP / "tools" / "release.py"
ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Release Manager",
    "GIT_AUTHOR_EMAIL": "release@example.test",
    "GIT_COMMITTER_NAME": "Release Manager",
    "GIT_COMMITTER_EMAIL": "release@example.test",
}


@pytest.fixture
def cujo(tmp_path: Path) -> GitRepo:
    """A Cujo repository with the files a release touches, as they are in this tree."""
    repo = GitRepo(tmp_path / "cujo")
    for name in ("pyproject.toml", "examples/workflow.yml", "docs/install.md"):
        (repo.path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TOP / name, repo.path / name)
    repo.commit("Cujo")
    return repo


def release(repo: GitRepo, version: str) -> subprocess.CompletedProcess[str]:
    """Run the release script in ``repo``."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), version, "--repo", str(repo.path)],
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
    )


def commit_of(repo: GitRepo, tag: str) -> str:
    """Return the commit a tag names."""
    return repo.git("rev-parse", f"{tag}^{{commit}}")


def test_a_release_tags_moves_the_major_tag_and_prints_the_pinned_line(cujo: GitRepo) -> None:
    done = release(cujo, "0.1.0")
    assert done.returncode == 0, done.stderr
    tagged = commit_of(cujo, "v0.1.0")
    assert commit_of(cujo, "v0") == tagged
    line = f"uses: cujo-dev/cujo/.github/workflows/sandbox.yml@{tagged} # v0.1.0"
    assert line in done.stdout
    assert "git push origin HEAD v0.1.0 && git push --force origin v0" in done.stdout
    # The guide and the example now name that commit, in a commit after the tag.
    example = (cujo.path / "examples" / "workflow.yml").read_text()
    assert f"sandbox.yml@{tagged} # v0.1.0" in example
    assert f"sandbox.yml@{tagged} # v0.1.0" in (cujo.path / "docs" / "install.md").read_text()
    assert cujo.git("rev-parse", "HEAD~1") == tagged
    assert cujo.git("status", "--porcelain") == ""


def test_the_next_release_sets_the_version_and_moves_the_major_tag(cujo: GitRepo) -> None:
    assert release(cujo, "0.1.0").returncode == 0
    first = commit_of(cujo, "v0.1.0")
    done = release(cujo, "0.2.0")
    assert done.returncode == 0, done.stderr
    second = commit_of(cujo, "v0.2.0")
    assert second != first
    assert commit_of(cujo, "v0") == second
    assert commit_of(cujo, "v0.1.0") == first
    assert 'version = "0.2.0"' in cujo.git("show", f"{second}:pyproject.toml")
    example = (cujo.path / "examples" / "workflow.yml").read_text()
    assert f"@{second} # v0.2.0" in example
    assert first not in example


@pytest.mark.parametrize("version", ["1.0", "v1.0.0", "1.0.0-rc1", "01.0.0", ""])
def test_a_version_that_is_not_x_y_z_is_refused(cujo: GitRepo, version: str) -> None:
    done = release(cujo, version)
    assert done.returncode == 1
    assert "VERSION must be X.Y.Z" in done.stderr
    assert cujo.git("tag", "--list") == ""


def test_a_tree_with_changes_is_refused(cujo: GitRepo) -> None:
    (cujo.path / "README.md").write_text("not committed\n")
    done = release(cujo, "0.1.0")
    assert done.returncode == 1
    assert "work tree has changes" in done.stderr
    assert cujo.git("tag", "--list") == ""


def test_a_version_already_tagged_is_refused(cujo: GitRepo) -> None:
    assert release(cujo, "0.1.0").returncode == 0
    done = release(cujo, "0.1.0")
    assert done.returncode == 1
    assert "already tagged" in done.stderr

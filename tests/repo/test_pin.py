"""The commit the install guide pins holds the harness this tree tests (tools/pin.py).

A pin left behind installs another harness than the one the suite checks: these tests
fail until ``make pin`` (or ``make release``) points the guide at a commit that holds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo
from repo_paths import TOP

PIN = TOP / "tools" / "pin.py"
RELEASE = TOP / "tools" / "release.py"
ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Release Manager",
    "GIT_AUTHOR_EMAIL": "release@example.test",
    "GIT_COMMITTER_NAME": "Release Manager",
    "GIT_COMMITTER_EMAIL": "release@example.test",
}
USES = "cujo-dev/cujo/.github/workflows/sandbox.yml"


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run one of the tools with ``args``."""
    return subprocess.run(
        [sys.executable, str(script), *args], env=ENV, capture_output=True, text=True
    )


def test_the_guide_and_the_example_pin_a_commit_holding_this_trees_harness() -> None:
    if not (TOP / ".git").exists():
        pytest.skip("not a git checkout: the pin is checked in a clone")
    done = run(PIN, "check", "--repo", str(TOP))
    assert done.returncode == 0, f"{done.stderr}\n(`make pin` points the guide at HEAD)"


@pytest.fixture
def cujo(tmp_path: Path) -> GitRepo:
    """A small Cujo repository pinned at its own first commit."""
    repo = GitRepo(tmp_path / "cujo")
    files = {
        "pyproject.toml": '[project]\nname = "cujo"\nversion = "0.1.0"\n',
        "action.yml": "name: cujo\n",
        ".github/workflows/sandbox.yml": "name: sandbox\n",
        "cujo_action/run.py": "print('harness')\n",
        "tools/sandbox/install.sh": "true\n",
        "requirements/harness.txt": "",
        "requirements/harness-build.txt": "",
        "app_relay/serve.py": "print('relay')\n",
        "examples/workflow.yml": f"    uses: {USES}@{'0' * 40} # main, no release\n",
        "docs/install.md": f"```yaml\n    uses: {USES}@{'0' * 40} # main, no release\n```\n",
    }
    for name, text in files.items():
        (repo.path / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.path / name).write_text(text)
    repo.commit("Cujo")
    assert run(PIN, "head", "--repo", str(repo.path)).returncode == 0
    return repo


def test_a_pin_at_a_commit_whose_harness_is_unchanged_holds(cujo: GitRepo) -> None:
    first = cujo.git("rev-parse", "HEAD~1")
    assert f"@{first} # main, no release" in (cujo.path / "examples/workflow.yml").read_text()
    # A change outside the harness (the relay's own code) leaves the pin right.
    (cujo.path / "app_relay/serve.py").write_text("print('relay 2')\n")
    cujo.commit("Relay")
    assert run(PIN, "check", "--repo", str(cujo.path)).returncode == 0


@pytest.mark.parametrize(
    "path",
    [
        "action.yml",
        ".github/workflows/sandbox.yml",
        "cujo_action/run.py",
        "tools/sandbox/install.sh",
        "requirements/harness.txt",
    ],
)
def test_a_harness_changed_after_the_pinned_commit_fails(cujo: GitRepo, path: str) -> None:
    (cujo.path / path).write_text("changed\n")
    done = run(PIN, "check", "--repo", str(cujo.path))
    assert done.returncode == 1
    assert "runs another harness" in done.stderr
    assert path in done.stderr
    assert "make pin" in done.stderr
    # Committed, then pinned again: right.
    cujo.commit("Harness")
    assert run(PIN, "head", "--repo", str(cujo.path)).returncode == 0
    assert run(PIN, "check", "--repo", str(cujo.path)).returncode == 0


def test_a_label_naming_no_tag_fails(cujo: GitRepo) -> None:
    example = cujo.path / "examples/workflow.yml"
    guide = cujo.path / "docs/install.md"
    for path in (example, guide):
        path.write_text(path.read_text().replace("# main, no release", "# v0.1.0"))
    done = run(PIN, "check", "--repo", str(cujo.path))
    assert done.returncode == 1
    assert "no tag v0.1.0 exists" in done.stderr


def test_pins_that_differ_or_name_no_commit_fail(cujo: GitRepo) -> None:
    example = cujo.path / "examples/workflow.yml"
    example.write_text(f"    uses: {USES}@{'1' * 40} # main, no release\n")
    done = run(PIN, "check", "--repo", str(cujo.path))
    assert done.returncode == 1
    assert "the pins differ" in done.stderr
    assert "not in this repository" in done.stderr


def test_make_release_on_a_clone_of_this_repository_leaves_a_pin_that_holds(
    tmp_path: Path,
) -> None:
    if not (TOP / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(TOP), str(clone)], env=ENV, check=True)
    subprocess.run(["git", "-C", str(clone), "tag", "-d", *tags(clone)], env=ENV, check=False)
    done = run(RELEASE, "9.8.7", "--repo", str(clone))
    assert done.returncode == 0, done.stderr
    tagged = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "v9.8.7^{commit}"],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name in ("examples/workflow.yml", "docs/install.md"):
        assert f"{USES}@{tagged} # v9.8.7" in (clone / name).read_text()
    checked = run(PIN, "check", "--repo", str(clone))
    assert checked.returncode == 0, checked.stderr


def tags(repo: Path) -> list[str]:
    """Return the tags of ``repo`` (a clone of a released tree may have some)."""
    done = subprocess.run(
        ["git", "-C", str(repo), "tag", "--list"], env=ENV, capture_output=True, text=True
    )
    return done.stdout.split()

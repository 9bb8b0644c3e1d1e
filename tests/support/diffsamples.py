"""Build diffs for the diff review's tests: what `git diff` prints, and a mixed sample."""

from __future__ import annotations

from gitrepo import GitRepo

BASE = "b" * 40
HEAD = "a" * 40
SETUP = 'from setuptools import setup\n\nsetup(name="tiny", version="0.1")\n'


def git_diff(tmp_path, base: dict[str, str | None], head: dict[str, str | None]) -> str:
    """Return what `git diff` prints between two commits (the format GitHub serves)."""
    repo = GitRepo(tmp_path / "repo")
    repo.write(base).commit("base")
    repo.write(head)
    repo.git("add", "-A")
    repo.commit("head")
    return repo.git("diff", "--no-color", "-M", "HEAD~1", "HEAD") + "\n"


def numbered(n: int, word: str = "line") -> str:
    return "".join(f"{word} {i}\n" for i in range(n))


def mixed_diff(tmp_path) -> str:
    return git_diff(
        tmp_path,
        {"app.py": numbered(400), "notes.md": numbered(50), "legacy.py": numbered(40)},
        {
            "app.py": numbered(400, "changed"),  # one large code hunk
            "notes.md": numbered(50) + "more\n",
            "legacy.py": numbered(10),  # deletion-only
            "setup.py": SETUP,
            ".github/workflows/ci.yml": "on: push\njobs: {}\n",
            "scripts/build.sh": "#!/bin/sh\nmake\n",
            "poetry.lock": numbered(300, "lock"),
            "vendor/lib.js": numbered(300, "vendored"),
            "dist/bundle.min.js": "x" * 5000 + "\n",
        },
    )

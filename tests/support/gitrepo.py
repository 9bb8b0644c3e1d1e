"""Build real git repositories in temporary directories for tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

# A fixed identity and clock, and no user, system or hook configuration, so every
# machine builds the same commits and nothing outside the test changes what git does.
_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}
_EPOCH = 1_700_000_000


class GitRepo:
    """A git repository on disk, driven through the git command line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._commits = 0
        path.mkdir(parents=True, exist_ok=True)
        if not (path / ".git").exists():
            self.git("init", "--quiet", "--initial-branch=main")

    def git(self, *args: str) -> str:
        """Run git in the repository and return its stdout, stripped; raise on failure."""
        clock = f"{_EPOCH + self._commits * 60} +0000"
        env = {
            **_ENV,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.path),
            "GIT_AUTHOR_DATE": clock,
            "GIT_COMMITTER_DATE": clock,
        }
        done = subprocess.run(
            ["git", "-c", f"core.hooksPath={os.devnull}", "-c", "commit.gpgsign=false", *args],
            cwd=self.path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def write(self, files: Mapping[str, str | None]) -> GitRepo:
        """Write files (path → text) into the working tree; None deletes the file."""
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        return self

    def commit(self, message: str) -> str:
        """Stage everything and commit it; return the new commit's SHA."""
        self._commits += 1
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.sha()

    def branch(self, name: str, start: str = "HEAD") -> GitRepo:
        """Create branch ``name`` at ``start`` without switching to it."""
        self.git("branch", name, start)
        return self

    def checkout(self, name: str) -> GitRepo:
        """Switch the working tree to branch or commit ``name``."""
        self.git("checkout", "--quiet", name)
        return self

    def sha(self, ref: str = "HEAD") -> str:
        """Return the commit SHA ``ref`` points at."""
        return self.git("rev-parse", "--verify", f"{ref}^{{commit}}")

"""Start a local review: the record's folder, the commits a local repository names, the sandbox.

Light on purpose (the local runner and the standard library only): ``cujo review``
starts the sandbox from here before it loads what records and decides.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from app_relay.cli.prfetch import FetchedPull, sandbox_env
from app_relay.cli.progress import worth_showing
from app_relay.runs.localrun import LocalRun, LocalRunner


def data_dir(explicit: Path | None) -> Path:
    """Return where the local record and bundles live."""
    if explicit:
        return explicit
    if env := os.environ.get("CUJO_HOME"):
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "cujo"


def database_url(folder: Path) -> str:
    """Return the record's database URL (``CUJO_DATABASE_URL`` wins)."""
    return os.environ.get("CUJO_DATABASE_URL") or f"sqlite:///{folder / 'cujo.db'}"


UNKNOWN_SHA = "0" * 40


def resolve(repo: str, ref: str) -> str:
    """Return the commit ``ref`` names in a local repository, or zeros when it cannot tell.

    The record wants the commits from the start; when they cannot be read here, the
    sandbox's own prepare step says why, and the run ends ``error`` with that reason.
    """
    if "://" in repo or ref.startswith("-"):
        return UNKNOWN_SHA
    sha = (git_text(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") or "").strip()
    return sha if len(sha) == 40 else UNKNOWN_SHA


def git_text(repo: str, *args: str) -> str | None:
    """Return what git prints in a local repository, or None when it fails."""
    try:
        done = subprocess.run(
            ["git", "-C", repo, *args],
            capture_output=True,
            timeout=60,
            check=False,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_CONFIG_NOSYSTEM": "1",
                # As prepare does: a folder inside another repository is not that repository.
                "GIT_CEILING_DIRECTORIES": str(Path(repo).parent),
            },
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", errors="replace")


@dataclass
class LocalReview:
    """A local sandbox review as started: what it reviews, where it writes, its process."""

    run_id: str
    repo: str
    base_sha: str
    head_sha: str
    folder: Path  # the record's folder
    out: Path  # the run's bundle
    run: LocalRun
    # The tamper record the sandbox prints as it goes, as the job's log holds it on Actions.
    printed: list[str] = field(default_factory=list)
    pull: FetchedPull | None = None  # the pull request fetched for it, if one was
    detail: Path | None = None  # where the sandbox's detail went (None: on stderr, -v)
    detail_file: IO[str] | None = None
    started_at: float = field(default_factory=time.monotonic)  # when the sandbox started

    @property
    def pr_number(self) -> int | None:
        """Return the pull request's number, when the review is of one."""
        return self.pull.target.number if self.pull else None

    def close_detail(self) -> None:
        """Close the detail log (the sandbox has ended)."""
        if self.detail_file is not None:
            self.detail_file.close()


def _quiet_detail(log: IO[str]) -> Callable[[str], None]:
    """Return where a quiet review's sandbox lines go: all to ``log``, what matters on."""

    def detail(line: str) -> None:
        log.write(line)
        if worth_showing(line):
            sys.stderr.write(line)
            sys.stderr.flush()

    return detail


def start_review(args: argparse.Namespace) -> LocalReview:
    """Start the sandbox on head against base, as resolved here; return at once.

    The sandbox reviews the commits resolved here, and its bundle must be bound to them:
    a branch that moves during the review cannot swap what the verdict is about. A ref
    that did not resolve goes as given, so the sandbox's prepare names it in the error.
    Raises OSError when the record's folder cannot be made.
    """
    folder = data_dir(args.data_dir)
    run_id = f"local-{secrets.token_hex(6)}"
    repo = str(Path(args.repo).resolve()) if "://" not in args.repo else args.repo
    base_sha, head_sha = resolve(repo, args.base), resolve(repo, args.head)
    out = folder / "runs" / run_id
    printed: list[str] = []
    pull: FetchedPull | None = getattr(args, "pull_request", None)
    if pull is not None:
        # The record names the pull request, not the throwaway clone it was fetched into.
        repo_shown = pull.target.repo
        what = f"{repo_shown}#{pull.target.number} (head {head_sha[:12]})"
    else:
        repo_shown, what = repo, f"{repo}: {args.base} → {args.head}"
    print(f"cujo: reviewing {what} (run {run_id})", file=sys.stderr, flush=True)
    detail, detail_file = None, None
    if not getattr(args, "verbose", True):
        # Quiet: the sandbox's own lines go to a file beside the bundle (-v shows them).
        (folder / "runs").mkdir(parents=True, exist_ok=True)
        detail = folder / "runs" / f"{run_id}.log"
        detail_file = detail.open("x", buffering=1, encoding="utf-8", errors="replace")
    run = LocalRunner().start(
        repo=repo,
        base=base_sha if base_sha != UNKNOWN_SHA else args.base,
        head=head_sha if head_sha != UNKNOWN_SHA else args.head,
        run_id=run_id,
        out=out,
        record=printed,
        # The person's tokens and the model key stay out of the sandbox's environment.
        env=sandbox_env(os.environ),
        detail=_quiet_detail(detail_file) if detail_file is not None else None,
        # The job reads as a push to the pull request's repository and base branch, which
        # the throwaway clone it was fetched into does not name.
        **(pull.merge_target() if pull is not None else {}),
    )
    return LocalReview(
        run_id, repo_shown, base_sha, head_sha, folder, out, run, printed, pull, detail,
        detail_file,
    )  # fmt: skip

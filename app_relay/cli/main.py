"""The ``cujo`` command: ``cujo review`` runs a pull request locally, end to end.

This module is light on purpose: for ``cujo review`` it starts the sandbox first
(``start_review``), and only then loads what records and decides (``subcommands``), which
then loads while the sandbox prepares and arms.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app_relay.cli.register import add_register_parser, relay_register
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
    print(f"cujo: reviewing {repo}: {args.base} → {args.head} (run {run_id})", file=sys.stderr)
    run = LocalRunner().start(
        repo=repo,
        base=base_sha if base_sha != UNKNOWN_SHA else args.base,
        head=head_sha if head_sha != UNKNOWN_SHA else args.head,
        run_id=run_id,
        out=out,
        record=printed,
    )
    return LocalReview(run_id, repo, base_sha, head_sha, folder, out, run, printed)


def main(argv: list[str] | None = None) -> int:
    """Run the ``cujo`` command."""
    parser = argparse.ArgumentParser(
        prog="cujo", description="Review pull requests by running them."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rev = sub.add_parser("review", help="review a local branch in the sandbox")
    rev.add_argument("--repo", required=True, help="path (or clone URL) of the repository")
    rev.add_argument("--base", required=True, help="base ref or SHA")
    rev.add_argument("--head", required=True, help="head ref or SHA")
    rev.add_argument("--mode", choices=["sandbox", "diff"], default="sandbox")
    rev.add_argument("--json", action="store_true", help="print one JSON object")
    rev.add_argument(
        "--data-dir", type=Path, help="record and bundles (default ~/.local/share/cujo)"
    )
    relay = sub.add_parser("relay", help="the GitHub App")
    relay_sub = relay.add_subparsers(dest="relay_command", required=True)
    serve = relay_sub.add_parser("serve", help="receive webhooks and review pull requests")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (0: any)")
    serve.add_argument(
        "--workers", type=int, default=4, help="deliveries worked at once, per worker process"
    )
    serve.add_argument(
        "--worker-processes",
        type=int,
        default=1,
        help="processes working deliveries beside the webhook's (0: threads of its own)",
    )
    work = relay_sub.add_parser(
        "work", help="work recorded deliveries (started by `serve`; several may share a record)"
    )
    work.add_argument("--workers", type=int, default=4, help="deliveries worked at once")
    mig = relay_sub.add_parser(
        "migrate", help="bring the record (CUJO_DATABASE_URL) to the newest revision and exit"
    )
    mig.add_argument(
        "--new-intake",
        action="store_true",
        help="start an empty intake queue beside a SQLite record whose queue file is gone",
    )
    add_register_parser(relay_sub)
    brd = sub.add_parser("board", help="watch the local record's runs in a browser")
    brd.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any)")
    brd.add_argument("--data-dir", type=Path, help="the record (default ~/.local/share/cujo)")
    doc = sub.add_parser("doctor", help="check that Cujo can guard a repository on GitHub")
    doc.add_argument("--repo", required=True, help="OWNER/NAME on GitHub")
    doc.add_argument("--branch", help="the branch whose merges Cujo guards (default: default)")
    args = parser.parse_args(argv)
    if args.command == "review":
        # The sandbox first: the record, the verdict and their libraries load while it
        # prepares and arms.
        try:
            started = start_review(args) if args.mode == "sandbox" else None
        except OSError as exc:  # no folder for the record: no run
            why = f"{exc.strerror} ({exc.filename})" if exc.strerror else str(exc)
            print(
                f"cujo review: cannot open the record in {data_dir(args.data_dir)}: {why}; "
                "give a writable --data-dir (or CUJO_HOME)",
                file=sys.stderr,
            )
            return 3
        try:
            from app_relay.cli import review as subcommands  # noqa: PLC0415
        except BaseException:
            if started is not None:
                started.run.stop()
            raise
        return subcommands.review(args, started)
    if args.command == "relay" and args.relay_command == "register":
        return relay_register(args, lambda: data_dir(None))
    if args.command in ("doctor", "board"):
        from app_relay.cli import review as subcommands  # noqa: PLC0415

        return subcommands.doctor(args) if args.command == "doctor" else subcommands.board(args)
    if args.command == "relay":
        from app_relay.cli import serve as relay_process  # noqa: PLC0415  (loads the web stack)

        if args.relay_command == "migrate":
            return relay_process.migrate(args)
        if args.relay_command == "serve":
            return relay_process.serve(args)
        return relay_process.work(args)
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":
    sys.exit(main())

"""The ``cujo`` command: parse its command line and hand it to the subcommand's module.

This module is light on purpose: for ``cujo review`` it starts the sandbox first
(``local.start_review``), and only then loads the subcommand's module (the record, the
verdict and their libraries), which then loads while the sandbox prepares and arms. So
each subcommand's module is imported where it is chosen, not at the top: ``cujo`` must
start without SQLAlchemy, pydantic or the GitHub client loaded (a test holds it to that).
Nothing imports this module but ``python -m app_relay``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from app_relay.cli.local import data_dir, start_review
from app_relay.cli.prfetch import fetch_pull, target_of_clone
from app_relay.cli.pullname import PullError, parse_target
from app_relay.cli.register import add_register_parser, relay_register


def main(argv: list[str] | None = None) -> int:
    """Run the ``cujo`` command."""
    parser = argparse.ArgumentParser(
        prog="cujo", description="Review pull requests by running them."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rev = sub.add_parser(
        "review",
        help="review a pull request (OWNER/REPO#N, its URL, --pr N) or a local branch",
        description="Review a pull request by running it in the sandbox: OWNER/REPO#N, a pull "
        "request URL, --pr N inside a clone, or --repo PATH --base REF --head REF.",
    )
    rev.add_argument(
        "pull", nargs="?", metavar="PULL", help="OWNER/REPO#N or https://HOST/OWNER/REPO/pull/N"
    )
    rev.add_argument("--pr", type=int, metavar="N", help="pull request N of the clone's origin")
    rev.add_argument("--repo", help="path (or clone URL) of the repository; with --pr, the clone")
    rev.add_argument("--base", help="base ref or SHA (a pull request's own base when GitHub says)")
    rev.add_argument("--head", help="head ref or SHA")
    rev.add_argument("--mode", choices=["sandbox", "diff"], default="sandbox")
    rev.add_argument("--json", action="store_true", help="print one JSON object")
    rev.add_argument(
        "-v", "--verbose", action="store_true", help="show the sandbox's detail as it runs"
    )
    rev.add_argument(
        "--open", action="store_true", help="open the run page on the local board, live"
    )
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
    doc.add_argument("--repo", help="OWNER/NAME on GitHub")
    doc.add_argument(
        "--local", action="store_true", help="say which isolation a review gets on this machine"
    )
    doc.add_argument("--branch", help="the branch whose merges Cujo guards (default: default)")
    args = parser.parse_args(argv)
    if args.command == "review":
        if wrong := review_form(args):
            rev.error(wrong)
        return _review(args)
    if args.command == "relay" and args.relay_command == "register":
        return relay_register(args, lambda: data_dir(None))
    if args.command == "doctor" and args.local:
        from app_relay.cli.doctor_local import doctor_local  # noqa: PLC0415

        return doctor_local()
    if args.command == "doctor" and not args.repo:
        parser.error("doctor needs --repo OWNER/NAME (or --local)")
    if args.command == "doctor":
        from app_relay.cli import doctor  # noqa: PLC0415  (loads the GitHub client)

        return doctor.doctor(args)
    if args.command == "board":
        from app_relay.cli import local_board  # noqa: PLC0415  (loads the record and the web)

        return local_board.board(args)
    if args.command == "relay":
        from app_relay.cli import serve as relay_process  # noqa: PLC0415  (loads the web stack)

        if args.relay_command == "migrate":
            return relay_process.migrate(args)
        if args.relay_command == "serve":
            return relay_process.serve(args)
        return relay_process.work(args)
    return 2  # pragma: no cover - argparse rejects unknown commands first


def review_form(args: argparse.Namespace) -> str | None:
    """Return why ``cujo review``'s arguments name nothing to review, or None when they do."""
    if args.pull is not None:
        if args.pr is not None or args.head is not None or args.repo is not None:
            return f"{args.pull} names the pull request: drop --pr, --repo and --head"
        return None
    if args.pr is not None:
        if args.head is not None:
            return "--pr N reviews the pull request's head: drop --head"
        return None
    missing = [f"--{name}" for name in ("repo", "base", "head") if getattr(args, name) is None]
    if missing:
        return (
            "give a pull request (OWNER/REPO#N, its URL, or --pr N inside a clone), or a "
            f"local branch with --repo, --base and --head (missing {', '.join(missing)})"
        )
    return None


def _say(line: str) -> None:
    print(f"cujo: {line}", file=sys.stderr, flush=True)


def _quiet(line: str) -> None:
    """Say nothing (a quiet review's detail)."""


def _review(args: argparse.Namespace) -> int:
    """Fetch the pull request named (if one is), start the sandbox, then load and review."""
    pull = None
    if args.pull is not None or args.pr is not None:
        began = time.monotonic()
        try:
            target = (
                parse_target(args.pull, os.environ)
                if args.pull is not None
                else target_of_clone(args.repo or ".", args.pr)
            )
            _say(f"fetch: {target.repo}#{target.number} ...")
            pull = fetch_pull(
                target, base=args.base, env=os.environ, say=_say if args.verbose else _quiet
            )
        except PullError as exc:
            print(f"cujo review: {exc}", file=sys.stderr)
            return exc.code
        except KeyboardInterrupt:  # fetch_pull removed what it had fetched
            print("cujo: interrupted while fetching; nothing was reviewed", file=sys.stderr)
            return 3
        _say(
            f"fetch: done ({time.monotonic() - began:.1f}s): head {pull.head_sha[:12]}, "
            f"base {pull.base_ref} {pull.base_sha[:12]} (from {pull.base_from})"
        )
        for note in pull.notes:
            _say(f"note: {note}")
        args.repo, args.base, args.head = str(pull.clone), pull.base_sha, pull.head_sha
    args.pull_request = pull
    try:
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
            from app_relay.cli import review  # noqa: PLC0415  (loads while the sandbox starts)
        except BaseException:
            if started is not None:
                started.run.stop()
            raise
        return review.review(args, started)
    finally:
        if pull is not None:
            pull.remove()  # the throwaway clone: also on Ctrl-C and on any error


if __name__ == "__main__":
    sys.exit(main())

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
import sys
from pathlib import Path

from app_relay.cli.local import data_dir, start_review
from app_relay.cli.register import add_register_parser, relay_register


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
    doc.add_argument("--repo", help="OWNER/NAME on GitHub")
    doc.add_argument(
        "--local", action="store_true", help="say which isolation a review gets on this machine"
    )
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
            from app_relay.cli import review  # noqa: PLC0415  (loads while the sandbox starts)
        except BaseException:
            if started is not None:
                started.run.stop()
            raise
        return review.review(args, started)
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


if __name__ == "__main__":
    sys.exit(main())

"""The sandbox entry: ``python -m cujo_action run …`` (what action.yml and LocalRunner run).

``isolation`` prints which isolation a review gets here (``cujo doctor --local`` reads it).
``check-id`` is the shell scripts' check of a run's inputs (tools/sandbox/start.sh): the
patterns of ``schema`` (``SHA``, ``RUN_ID``, ``PULL_NUMBER``, ``REPO_NAME``), so a value
the shell lets through is one every reader accepts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from cujo_action.evidence.stages import Follower, detach
from cujo_action.run import run_sandbox
from cujo_action.schema import BRANCH, PULL_NUMBER, REPO_NAME, RUN_ID, SHA, STAGES

# GitHub's tokens are tens of characters; anything near this is not one.
_TOKEN_MAX = 4096


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the sandbox; exit 0 with reports, 3 on failure."""
    parser = argparse.ArgumentParser(prog="python -m cujo_action")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="review head against base and write reports to --out")
    run.add_argument("--repo", required=True, help="a local path or a clone URL")
    run.add_argument("--base", required=True, help="base commit (SHA or ref)")
    run.add_argument("--head", required=True, help="head commit (SHA or ref)")
    run.add_argument("--run-id", required=True)
    run.add_argument("--out", required=True, type=Path, help="folder for the reports bundle")
    run.add_argument("--workdir", type=Path, help="where to check out and run (default: temp)")
    run.add_argument("--keep", action="store_true", help="keep the temp work folder")
    run.add_argument(
        "--pull-request",
        type=int,
        help="fetch head as refs/pull/N/head and require it to still be --head (a SHA)",
    )
    run.add_argument(
        "--upstream",
        default="",
        metavar="OWNER/NAME",
        help="the repository the pull request merges into, as GitHub names it (default: "
        "the clone URL's, or the local repository's origin)",
    )
    run.add_argument(
        "--base-branch",
        default="",
        metavar="BRANCH",
        help="the branch the pull request merges into (default: the branch at --base)",
    )
    run.add_argument(
        "--token-stdin",
        action="store_true",
        help="read a token for cloning over https from standard input (never from argv or env)",
    )
    run.add_argument(
        "--detach",
        type=Path,
        metavar="STATE",
        help="run in the background, printing to STATE/log (a new folder); `follow` reads it",
    )
    follow = sub.add_parser("follow", help="print a detached run's log until a stage is over")
    follow.add_argument("--state", required=True, type=Path, help="the run's --detach folder")
    follow.add_argument(
        "--until",
        required=True,
        choices=[*STAGES, "end"],
        help="the stage whose end to wait for, or `end` for the run's end",
    )
    check = sub.add_parser(
        "check-id",
        help="check a run's inputs: exit 2 with a workflow ::error:: (never the value) if one "
        "is not a commit SHA, a pull request number, a run id or a repository name",
    )
    check.add_argument("--sha", action="append", default=[], help="a 40-hex commit SHA")
    check.add_argument("--pull-request", action="append", default=[], help="its number")
    check.add_argument("--run-id", action="append", default=[], help="1-64 of A-Za-z0-9._-")
    check.add_argument("--repo", action="append", default=[], help="owner/name")
    sub.add_parser(
        "isolation",
        help="print, as JSON, which isolation a review gets on this machine, why, and the fix",
    )
    args = parser.parse_args(argv)
    if args.command == "isolation":
        return _isolation()
    if args.command == "follow":
        return _follow(args.state, args.until)
    if args.command == "check-id":
        return check_ids(args.sha, args.pull_request, args.run_id, args.repo)
    if not RUN_ID.fullmatch(args.run_id):
        parser.error("--run-id must be 1-64 letters, digits, '.', '_' or '-'")
    if args.pull_request is not None and args.pull_request < 1:
        parser.error("--pull-request must be a number above 0")
    if args.upstream and not REPO_NAME.fullmatch(args.upstream):
        parser.error("--upstream must be owner/name as GitHub spells a repository")
    if args.base_branch and not BRANCH.fullmatch(args.base_branch):
        parser.error("--base-branch must be a branch name (letters, digits, . _ / + -)")
    token = None
    if args.token_stdin:
        # Held in this root process for the clone alone: pull-request commands are
        # other users in other namespaces, started with an environment of their own.
        token = sys.stdin.read(_TOKEN_MAX).strip()
        if not token:
            parser.error("--token-stdin: standard input held no token")

    def review() -> int:
        return run_sandbox(
            args.repo,
            args.base,
            args.head,
            args.run_id,
            args.out,
            workdir=args.workdir,
            keep=args.keep,
            pull_request=args.pull_request,
            token=token,
            upstream=args.upstream,
            base_branch=args.base_branch,
        )

    if args.detach is None:
        return review()
    try:
        return detach(args.detach, review)
    except OSError as exc:
        parser.error(f"--detach {args.detach}: {exc.strerror} (it must be a new folder)")


def _isolation() -> int:
    """Print this machine's isolation (``localisolation.py``) as one JSON object."""
    from cujo_action.arm.host import read_isolation  # noqa: PLC0415
    from cujo_action.arm.localisolation import local_isolation  # noqa: PLC0415

    found = local_isolation(read_isolation())
    print(json.dumps(dataclasses.asdict(found)))
    return 0


# What the shell says of a refused value (never the value: it could hold a workflow command).
SHA_REFUSED = "::error::base-sha and head-sha must be 40-hex commit SHAs"
PULL_NUMBER_REFUSED = "::error::pull-request must be a pull request number"
RUN_ID_REFUSED = "::error::run-id must be 1-64 of A-Z a-z 0-9 . _ -"
REPO_NAME_REFUSED = "::error::the repository must be owner/name as GitHub spells it"


def check_ids(
    shas: list[str], pull_requests: list[str], run_ids: list[str], repos: list[str]
) -> int:
    """Print the first refusal in the shell's order (SHAs, pull request, run id, repository)
    to standard output, as the workflow reads it, and return 2; return 0 if all pass."""
    for values, pattern, refused in (
        (shas, SHA, SHA_REFUSED),
        (pull_requests, PULL_NUMBER, PULL_NUMBER_REFUSED),
        (run_ids, RUN_ID, RUN_ID_REFUSED),
        (repos, REPO_NAME, REPO_NAME_REFUSED),
    ):
        if not all(pattern.fullmatch(value) for value in values):
            print(refused, flush=True)
            return 2
    return 0


def _follow(state: Path, until: str) -> int:
    """Print the run's log until ``until`` is over; exit 0, or the run's code at its end."""
    try:
        code = Follower(state).until(None if until == "end" else until)
    except OSError as exc:
        print(f"cujo: cannot follow the run in {state}: {exc.strerror}", file=sys.stderr)
        return 3
    if until == "end":
        return code if code is not None else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sandbox entry: ``python -m cujo_action run …`` (what action.yml and LocalRunner run)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from cujo_action.run import run_sandbox


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
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", args.run_id):
        parser.error("--run-id must be 1-64 letters, digits, '.', '_' or '-'")
    return run_sandbox(
        args.repo, args.base, args.head, args.run_id, args.out, workdir=args.workdir, keep=args.keep
    )


if __name__ == "__main__":
    sys.exit(main())

"""The commit the install guide pins: ``make pin-check`` and ``make pin``.

``examples/workflow.yml`` and ``docs/install.md`` call Cujo's reusable workflow at one
commit (``…/sandbox.yml@<sha> # <label>``). That commit must hold the same harness as the
tree here (the reusable workflow, the action, the harness's code, scripts and locks), or
the guide installs something other than what this tree tests. A commit cannot name
itself, so the pin is an earlier commit whose harness is unchanged since.

* ``check``: exit 1, naming the paths, when the pin is not that; the label must be a tag
  on the pinned commit (``# vX.Y.Z``) or say there is no release (``# main, no release``).
* ``head``: point both files at ``HEAD`` (committed first) as ``# main, no release`` and
  commit that; ``make release`` pins a tag instead.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# `OWNER/REPO/.github/workflows/sandbox.yml@SHA # LABEL` in the guide and the example.
USES = re.compile(
    r"(?P<target>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/\.github/workflows/sandbox\.yml)"
    r"@(?P<ref>[0-9A-Za-z._/-]+) # (?P<label>v[0-9A-Za-z.+-]+|main, no release)"
)
PINNED_FILES = ("examples/workflow.yml", "docs/install.md")
# What the pinned commit runs on the runner: it must be the same as here.
HARNESS = (
    ".github/workflows/sandbox.yml",
    "action.yml",
    "cujo_action",
    "tools/sandbox",
    "requirements/harness.txt",
    "requirements/harness-build.txt",
)
UNRELEASED = "main, no release"
SHA = re.compile(r"^[0-9a-f]{40}$")


class PinError(Exception):
    """The pin is wrong or cannot be checked; the message says how to fix it."""


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git in ``repo``; raise PinError when ``check`` and it fails."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise PinError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done


def pins(repo: Path) -> list[tuple[str, str, str]]:
    """Return every (file, sha, label) pin in the guide and the example."""
    found: list[tuple[str, str, str]] = []
    for name in PINNED_FILES:
        for match in USES.finditer((repo / name).read_text()):
            found.append((name, match["ref"], match["label"]))
    return found


def problems(repo: Path) -> list[str]:
    """Return what is wrong with the pin, each with its fix; empty when it is right."""
    found = pins(repo)
    named = {name for name, _, _ in found}
    wrong = [
        f"{name}: no `…/sandbox.yml@<sha> # <label>` line: restore it from examples/workflow.yml"
        for name in PINNED_FILES
        if name not in named
    ]
    if not found:
        return wrong
    if len({(sha, label) for _, sha, label in found}) != 1:
        wrong.append(f"the pins differ: {sorted({(n, s, lab) for n, s, lab in found})}")
    _, sha, label = found[0]
    fix = "run `make pin` (or `make release VERSION=X.Y.Z`)"
    if not SHA.fullmatch(sha):
        return [*wrong, f"the pin `{sha}` is not a full commit SHA: {fix}"]
    if git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode != 0:
        return [*wrong, f"the pinned commit {sha} is not in this repository: {fix}"]
    if label != UNRELEASED:
        tagged = git(repo, "rev-parse", "--verify", "--quiet", f"{label}^{{commit}}", check=False)
        if tagged.returncode != 0:
            wrong.append(f"the pin is labelled {label} but no tag {label} exists: {fix}")
        elif tagged.stdout.strip() != sha:
            wrong.append(f"the pin is labelled {label} but {label} is another commit: {fix}")
    # Tracked files of the harness, the pinned commit against the work tree.
    changed = git(repo, "diff", "--name-only", sha, "--", *HARNESS).stdout.split()
    if changed:
        shown = ", ".join(changed[:8]) + (" …" if len(changed) > 8 else "")
        wrong.append(f"the pinned commit {sha[:12]} runs another harness ({shown}): {fix}")
    return wrong


def pin_head(repo: Path) -> str:
    """Point the guide and the example at ``HEAD`` as unreleased and commit; return the sha."""
    if git(repo, "status", "--porcelain").stdout.strip():
        raise PinError("the work tree has changes: commit them first (the pin names a commit)")
    sha = git(repo, "rev-parse", "HEAD^{commit}").stdout.strip()
    changed: list[str] = []
    for name in PINNED_FILES:
        path = repo / name
        text = path.read_text()
        pinned = USES.sub(lambda m: f"{m['target']}@{sha} # {UNRELEASED}", text)
        if pinned != text:
            path.write_text(pinned)
            changed.append(name)
    if changed:
        message = f"Pin the install guide at {sha[:12]} (no release yet)"
        git(repo, "commit", "--quiet", "-m", message, "--", *changed)
    return sha


def main(argv: list[str] | None = None) -> int:
    """Check or move the pin from the command line."""
    parser = argparse.ArgumentParser(prog="tools/pin.py", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("check", "head"))
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the Cujo repository")
    args = parser.parse_args(argv)
    try:
        if args.action == "head":
            print(f"pinned {pin_head(args.repo)} ({UNRELEASED})")
            return 0
        wrong = problems(args.repo)
    except PinError as exc:
        print(f"pin: {exc}", file=sys.stderr)
        return 1
    for line in wrong:
        print(f"pin: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

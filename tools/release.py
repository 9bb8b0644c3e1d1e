"""Tag a release: ``make release VERSION=X.Y.Z``.

Cujo's reusable workflow runs the action from its own commit (``job.workflow_sha``), so
no file names its own commit and a release is only tags:

1. the version in pyproject.toml is set to X.Y.Z (one commit, when it differs);
2. ``vX.Y.Z`` is tagged there and ``vX`` is moved to it;
3. the install guide's and the example workflow's ``uses:`` line is pointed at that
   commit as ``@<sha> # vX.Y.Z`` (one commit after the tag: a commit cannot hold its own
   SHA), which is the line Dependabot's ``github-actions`` ecosystem updates;
4. the line and the push commands are printed. Nothing is pushed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
# The project's own version line in pyproject.toml's [project] table.
PROJECT_VERSION = re.compile(r'(?m)^version = "[^"\n]*"$')
# `uses: OWNER/REPO/.github/workflows/sandbox.yml@REF # vX.Y.Z` in the guide and example
# (or `# main, no release`, as tools/pin.py writes it before the first release).
USES = re.compile(
    r"(?P<target>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/\.github/workflows/sandbox\.yml)"
    r"@[0-9A-Za-z._/-]+ # (?:v[0-9A-Za-z.+-]+|main, no release)"
)
PINNED_FILES = ("examples/workflow.yml", "docs/install.md")


class ReleaseError(Exception):
    """The release cannot be made as asked; the message says why."""


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its output; raise ReleaseError when it fails."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def set_version(text: str, version: str) -> str:
    """Return pyproject.toml's text with the project's version set to ``version``."""
    if len(PROJECT_VERSION.findall(text)) != 1:
        raise ReleaseError('pyproject.toml must hold exactly one line `version = "…"`')
    return PROJECT_VERSION.sub(f'version = "{version}"', text)


def pin(text: str, sha: str, version: str) -> tuple[str, int]:
    """Return ``text`` with each sandbox.yml ``uses:`` pinned to ``sha # vX.Y.Z``, and how many."""
    return USES.subn(lambda m: f"{m['target']}@{sha} # v{version}", text)


def release(repo: Path, version: str) -> str:
    """Make the release in ``repo``; return the ``uses:`` line for the install guide."""
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"VERSION must be X.Y.Z (digits), got {version!r}")
    if git(repo, "status", "--porcelain"):
        raise ReleaseError("the work tree has changes: commit or drop them first")
    tag, major = f"v{version}", f"v{version.partition('.')[0]}"
    if git(repo, "tag", "--list", tag):
        raise ReleaseError(f"{tag} is already tagged")
    pyproject = repo / "pyproject.toml"
    text = pyproject.read_text()
    if (bumped := set_version(text, version)) != text:
        pyproject.write_text(bumped)
        git(repo, "commit", "--quiet", "-m", f"Release {tag}", "--", "pyproject.toml")
    sha = git(repo, "rev-parse", "HEAD^{commit}")
    git(repo, "tag", "--annotate", "-m", f"Cujo {tag}", tag, sha)
    git(repo, "tag", "--force", "--annotate", "-m", f"Cujo {major} (now {tag})", major, sha)
    target = ""
    changed: list[str] = []
    for name in PINNED_FILES:
        path = repo / name
        if not path.exists():
            continue
        pinned, count = pin(path.read_text(), sha, version)
        if count and pinned != path.read_text():
            path.write_text(pinned)
            changed.append(name)
        target = target or next((m["target"] for m in USES.finditer(pinned)), "")
    if not target:
        raise ReleaseError(f"no `uses: …/sandbox.yml@… # v…` line in {', '.join(PINNED_FILES)}")
    if changed:
        git(repo, "commit", "--quiet", "-m", f"Point the install guide at {tag}", "--", *changed)
    return f"uses: {target}@{sha} # {tag}"


def main(argv: list[str] | None = None) -> int:
    """Run the release from the command line."""
    parser = argparse.ArgumentParser(prog="make release", description=__doc__.splitlines()[0])
    parser.add_argument("version", help="X.Y.Z")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the Cujo repository")
    args = parser.parse_args(argv)
    try:
        line = release(args.repo, args.version)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    major = f"v{args.version.partition('.')[0]}"
    print(f"Tagged v{args.version} and moved {major}. The install line:\n\n    {line}\n")
    print(f"Push them: git push origin HEAD v{args.version} && git push --force origin {major}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

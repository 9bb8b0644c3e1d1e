"""Name the repository a pull request merges into, and its branches, as GitHub names them.

The job the checks run in reads as a push to the upstream (``GITHUB_REPOSITORY``, the
event file, the checkout's origin): on a runner, the repository of the clone URL (the
relay's, on GitHub); in a local review, the pull request's ``OWNER/REPO`` when it was
named (``--upstream``), else the source's own ``origin`` on a forge, else a plausible
owner/name made from the project (the base commit's author, the repository's folder),
never the folders above it: those are this machine's.

The base branch is the one given (``--base-branch``), else the branch ``--base`` names,
else a branch at the base commit (the default branch first), else the default branch.
The default branch is the remote's ``HEAD`` when the clone is of a forge; a local
repository's ``HEAD`` is only what was last checked out, so there the base branch is it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from cujo_action.prepare.git import Git, PrepareError
from cujo_action.schema import BRANCH, REPO_NAME

FALLBACK_OWNER = "octo-org"
FALLBACK_NAME = "project"
FALLBACK_BRANCH = "main"

_OWNER_BAD = re.compile(r"[^A-Za-z0-9-]+")
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:(.*)$")
# A GitHub account's private address: ``ID+login@`` (or ``login@``, before 2017).
_NOREPLY = re.compile(r"^(?:[0-9]+\+)?([A-Za-z0-9-]{1,39})@users\.noreply\.github\.com$")


def owner_of(text: str) -> str:
    """Return ``text`` as a GitHub account name allows ("" when nothing is left)."""
    return _OWNER_BAD.sub("-", text).strip("-")[:39].strip("-")


def name_of(text: str) -> str:
    """Return ``text`` as a GitHub repository name allows ("" when nothing is left)."""
    cleaned = _NAME_BAD.sub("-", text).strip("-")[:100]
    return "" if cleaned in (".", "..") else cleaned


def repository_of(url: str) -> tuple[str, str] | None:
    """Return (owner, name) of a clone URL on a forge; None for a path or a ``file://`` URL
    (whose folders are this machine's)."""
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme == "file" or not parts.hostname:
            return None
        path = parts.path
    elif found := _SCP.match(url):
        path = found.group(1)
    else:
        return None
    segments = [p for p in path.split("/") if p]
    if len(segments) < 2:
        return None
    owner, name = owner_of(segments[-2]), name_of(segments[-1].removesuffix(".git"))
    return (owner, name) if owner and name else None


def upstream_name(
    git: Git, repo: str, source: Path | None, clone: Path, base_sha: str, given: str = ""
) -> str:
    """Return the upstream's ``owner/name`` (the module's docstring says which).

    ``repo`` is the repository as given (a clone URL or a path), ``source`` the local
    repository it names (None for a URL), ``clone`` prepare's clone of it.
    """
    if given:
        if not REPO_NAME.fullmatch(given):
            raise PrepareError(f"{given!r} is not owner/name as GitHub spells a repository.")
        return given
    found = repository_of(repo)
    if found is None and source is not None:
        ceiling = {"GIT_CEILING_DIRECTORIES": str(source.parent)}
        origin = git.run("remote", "get-url", "origin", cwd=source, env=ceiling)
        if origin.code == 0:
            found = repository_of(origin.out.decode("utf-8", "replace").strip())
    if found is not None:
        return "/".join(found)
    # Nothing names it on a forge: its author, and the folder it is kept in (the clone
    # of a repository is named after it), and nothing above that folder.
    folder = source.name if source is not None else urlsplit(repo).path.rstrip("/")
    name = name_of(Path(folder).name.removesuffix(".git")) or FALLBACK_NAME
    email = git.run("show", "-s", "--format=%ae", base_sha, cwd=clone)
    address = email.out.decode("utf-8", "replace").strip() if email.code == 0 else ""
    noreply = _NOREPLY.match(address)
    owner = owner_of(noreply.group(1) if noreply else address.partition("@")[0])
    return f"{owner or FALLBACK_OWNER}/{name}"


def remote_branches(git: Git, clone: Path) -> dict[str, str]:
    """Return the clone's branches of its origin: name → commit."""
    listed = ("--format=%(objectname) %(refname:lstrip=3)", "refs/remotes/origin/")
    out = git.run("for-each-ref", *listed, cwd=clone).out
    found = {}
    for line in out.decode("utf-8", "replace").splitlines():
        sha, _, name = line.partition(" ")
        if name and name != "HEAD":
            found[name] = sha
    return found


def branches(
    git: Git, clone: Path, base: str, base_sha: str, *, given: str = "", forge: bool = False
) -> tuple[str, str]:
    """Return (the base branch, the default branch), as the module's docstring says.

    ``base`` is the base as given (a branch, tag or SHA), ``forge`` whether the clone is
    of a forge (its ``HEAD`` then names the default branch).
    """
    if given and not BRANCH.fullmatch(given):
        raise PrepareError(f"{given!r} is not a branch name the sandbox can use.")
    known = remote_branches(git, clone)
    head = git.run("symbolic-ref", "--quiet", "refs/remotes/origin/HEAD", cwd=clone)
    default = head.out.decode().strip().removeprefix("refs/remotes/origin/") if forge else ""
    branch = given
    if not branch:
        named = base.removeprefix("refs/heads/").removeprefix("origin/")
        branch = named if named in known else ""
    if not branch:
        at_base = sorted(name for name, sha in known.items() if sha == base_sha)
        first = [b for b in (default, "main", "master") if b and b in at_base]
        branch = (first or at_base or [""])[0]
    branch = branch if BRANCH.fullmatch(branch) else ""
    default = default if BRANCH.fullmatch(default) else ""
    branch = branch or default or FALLBACK_BRANCH
    return branch, default or branch


def head_branch(git: Git, clone: Path, head: str, head_sha: str, base_branch: str) -> str:
    """Return the pull request's branch as its merge names it ("" when none is known)."""
    known = remote_branches(git, clone)
    named = head.removeprefix("refs/heads/").removeprefix("origin/")
    if named in known and named != base_branch:
        return named if BRANCH.fullmatch(named) else ""
    at_head = sorted(n for n, sha in known.items() if sha == head_sha and n != base_branch)
    return next((n for n in at_head if BRANCH.fullmatch(n)), "")

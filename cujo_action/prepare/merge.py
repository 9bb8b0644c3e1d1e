"""Check out what runs after the merge: head merged into base, on the base branch.

GitHub tests a pull request on ``refs/pull/N/merge``, head merged into base without
fast-forward; merging the pull request pushes a merge of the same tree and parents to the
base branch, and there the workflows that hold the repository's secrets run on it. So the
checks of the head run on that merge (``merge_head``: the tree ``git merge`` makes, the
parents base and head, GitHub as committer and the owner as the one who merged, the
message GitHub's merge button writes), checked out on the base branch as
``actions/checkout`` leaves a push (``check_out_branch``), and their job reads as the
push of it (``pushed``, which ``arm`` turns into the event). Where head conflicts with
base GitHub makes no merge: the checks run on head, and the plan says so.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cujo_action.prepare.git import Git
from cujo_action.prepare.upstream import branches, head_branch, upstream_name
from cujo_action.schema import (
    MAX_SHORT,
    MAX_TEXT,
    PUSH_COMMITS,
    PUSH_PATHS,
    SHA,
    WEB_FLOW,
    ZERO_SHA,
    Push,
    PushedCommit,
    Upstream,
    clip,
    noreply,
)

# The files a checkout made by prepare keeps that no actions/checkout leaves: the last
# fetch names refs/pull/N/head, the last reset the head.
_LEFTOVERS = ("FETCH_HEAD", "ORIG_HEAD")
_FIELDS = 8  # of ``_FORMAT``, the message last


@dataclass(frozen=True)
class Asked:
    """What prepare was given: the repository (a clone URL, on a forge or not, or the
    local folder ``source``), the refs as named, the pull request's number, and where it
    merges when the caller knows."""

    repo: str
    forge: bool
    source: Path | None
    base: str
    head: str
    pull_request: int | None = None
    upstream: str = ""
    base_branch: str = ""


@dataclass(frozen=True)
class Merged:
    """The commit the checks of the head run on, and why it is not a merge when it is not."""

    sha: str
    merged: bool
    note: str = ""


def check_out_merge(
    git: Git, clone: Path, asked: Asked, base_sha: str, head_sha: str
) -> tuple[Upstream, Merged]:
    """Merge head into base and check it out on the base branch; return where it merges
    (the upstream, its branch) and what was checked out.

    The owner merges: the merge names them, and the job's actor is them.
    """
    named = upstream_name(git, asked.repo, asked.source, clone, base_sha, asked.upstream)
    branch, default = branches(
        git, clone, asked.base, base_sha, given=asked.base_branch, forge=asked.forge
    )
    owner, owner_id = named.partition("/")[0], 1_000_000 + secrets.randbelow(150_000_000)
    number = asked.pull_request or 1 + secrets.randbelow(3000)
    source = head_branch(git, clone, asked.head, head_sha, branch) or f"patch-{number % 40 + 1}"
    merged = merge_head(
        git,
        clone,
        base_sha,
        head_sha,
        message=merge_message(git, clone, head_sha, number, f"{owner}/{source}"),
        author=(owner, noreply(owner, owner_id)),
        when=int(time.time()),
    )
    check_out_branch(git, clone, branch, merged.sha)
    target = Upstream(repository=named, owner_id=owner_id, branch=branch, default_branch=default)
    return target, merged


def merge_message(git: Git, clone: Path, head_sha: str, number: int, source: str) -> str:
    """Return the message GitHub's merge button writes: the pull request's number, its
    branch (``owner/branch``) and its title (here the head commit's subject, which GitHub
    makes the title of a pull request of one commit)."""
    subject = git.run("show", "-s", "--format=%s", head_sha, cwd=clone)
    title = subject.out.decode("utf-8", "replace").strip() if subject.code == 0 else ""
    return f"Merge pull request #{number} from {source}\n\n{title or source}\n"


def merge_head(
    git: Git,
    clone: Path,
    base_sha: str,
    head_sha: str,
    *,
    message: str,
    author: tuple[str, str],
    when: int,
) -> Merged:
    """Merge head into base without fast-forward, as GitHub does; return the commit."""

    def on_head(why: str) -> Merged:
        return Merged(head_sha, False, clip(f"{why}, so the checks ran on head", MAX_TEXT))

    inside = git.run("merge-base", "--is-ancestor", head_sha, base_sha, cwd=clone)
    if inside.code == 0:
        return on_head("head is already in base: there is nothing to merge")
    made = git.run(
        "merge-tree", "--write-tree", "--name-only", "--no-messages", base_sha, head_sha, cwd=clone
    )
    lines = made.out.decode("utf-8", "replace").splitlines()
    if made.code == 1 and lines:
        shown = ", ".join(lines[1:4]) + (", …" if len(lines) > 4 else "")
        return on_head(
            f"head conflicts with base ({shown or 'no file named'}): GitHub cannot merge it "
            "as it is, and there is no merge to run after it"
        )
    if made.code != 0 or not lines or not SHA.fullmatch(lines[0]):
        return on_head(f"head could not be merged into base ({git.why(made)})")
    stamp = f"{when} +0000"
    env = {
        "GIT_AUTHOR_NAME": author[0],
        "GIT_AUTHOR_EMAIL": author[1],
        "GIT_AUTHOR_DATE": stamp,
        # GitHub commits what its merge button (and refs/pull/N/merge) makes.
        "GIT_COMMITTER_NAME": WEB_FLOW[0],
        "GIT_COMMITTER_EMAIL": WEB_FLOW[1],
        "GIT_COMMITTER_DATE": stamp,
    }
    parents = ("-p", base_sha, "-p", head_sha)
    done = git.run("commit-tree", lines[0], *parents, "-m", message, cwd=clone, env=env)
    sha = done.out.decode().strip()
    if done.code != 0 or not SHA.fullmatch(sha):
        return on_head(f"the merge of head into base could not be written ({git.why(done)})")
    return Merged(sha, True)


def check_out_branch(git: Git, clone: Path, branch: str, sha: str) -> None:
    """Check ``sha`` out on ``branch``, as actions/checkout leaves a push to it.

    The branch and its remote-tracking branch name the commit; no other local branch is
    left, nor the refs and files prepare's own fetches left (``refs/cujo/…``,
    ``FETCH_HEAD``): a job's checkout has none of them.
    """
    at = f"check out {sha} on {branch}"
    git.check("checkout", "--quiet", "--force", "-B", branch, sha, cwd=clone, what=at)
    moved = f"move origin/{branch} to {sha}"
    git.check("update-ref", f"refs/remotes/origin/{branch}", sha, cwd=clone, what=moved)
    refs = git.run("for-each-ref", "--format=%(refname)", "refs/heads/", "refs/cujo/", cwd=clone)
    for ref in refs.out.decode("utf-8", "replace").splitlines():
        if ref != f"refs/heads/{branch}":
            git.run("update-ref", "-d", ref, cwd=clone)
    for name in _LEFTOVERS:
        with contextlib.suppress(FileNotFoundError):
            (clone / ".git" / name).unlink()


# A commit's fields, NUL-separated (no field, not even a message, can hold a NUL).
_FORMAT = "%H%x00%T%x00%an%x00%ae%x00%cn%x00%ce%x00%aI%x00%B"


def pushed(git: Git, clone: Path, after: str, before: str = "", *, merged: bool = False) -> Push:
    """Return the push of ``after`` to a branch that was at ``before``.

    Without ``before``, the push of ``after`` alone onto its first parent (the base, as
    its own last push). The commits listed are the newest ``PUSH_COMMITS`` of it.
    """
    if before:
        newest = ("--reverse", f"--max-count={PUSH_COMMITS}")
        listed = git.run("rev-list", *newest, after, f"^{before}", cwd=clone)
        shas = listed.out.decode().split() if listed.code == 0 else [after]
    else:
        parents = git.run("rev-list", "--parents", "--max-count=1", after, cwd=clone)
        line = parents.out.decode().split()
        before = line[1] if parents.code == 0 and len(line) > 1 else ZERO_SHA
        shas = [after]
    return Push(before=before, after=after, merged=merged, commits=_commits(git, clone, shas))


def _commits(git: Git, clone: Path, shas: list[str]) -> list[PushedCommit]:
    shas = [s for s in shas if SHA.fullmatch(s)]
    if not shas:
        return []
    shown = git.run("log", "--no-walk=unsorted", "-z", f"--format={_FORMAT}", *shas, cwd=clone)
    fields = shown.out.decode("utf-8", "replace").split("\0") if shown.code == 0 else []
    files = _files(git, clone, shas)
    found = []
    for at in range(0, len(fields) - _FIELDS + 1, _FIELDS):
        sha, tree, an, ae, cn, ce, when, message = fields[at : at + _FIELDS]
        if not SHA.fullmatch(sha) or not SHA.fullmatch(tree):
            continue
        changed = files.get(sha, {})
        found.append(
            PushedCommit(
                id=sha,
                tree_id=tree,
                message=clip(message.rstrip("\n"), MAX_TEXT),
                timestamp=_github_time(when),
                author_name=clip(an, MAX_SHORT),
                author_email=clip(ae, MAX_SHORT),
                committer_name=clip(cn, MAX_SHORT),
                committer_email=clip(ce, MAX_SHORT),
                added=changed.get("A", [])[:PUSH_PATHS],
                removed=changed.get("D", [])[:PUSH_PATHS],
                modified=changed.get("M", [])[:PUSH_PATHS],
            )
        )
    return found


def _github_time(when: str) -> str:
    """Return git's strict ISO time as GitHub writes it: UTC as Z, any other offset kept."""
    utc = when.endswith("+00:00")
    return clip(when.removesuffix("+00:00") + "Z" if utc else when, MAX_SHORT)


def _files(git: Git, clone: Path, shas: list[str]) -> dict[str, dict[str, list[str]]]:
    """Return each commit's added (A), removed (D) and modified (M) paths, against its
    first parent (a merge's changes are what it brings to the branch)."""
    listing = ("-r", "-z", "--no-renames", "--name-status", "--diff-merges=first-parent")
    asked = "".join(f"{s}\n" for s in shas).encode()
    out = git.run(
        "diff-tree", "--stdin", "--always", "--root", *listing, cwd=clone, stdin=asked
    ).out
    tokens = out.decode("utf-8", "replace").split("\0")
    found: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    at = 0
    while at < len(tokens):
        token = tokens[at]
        if len(token) == 1 and current is not None and at + 1 < len(tokens):
            kind = {"A": "A", "D": "D"}.get(token, "M")  # a type change is a modification
            current.setdefault(kind, []).append(clip(tokens[at + 1], MAX_TEXT))
            at += 2
            continue
        if SHA.fullmatch(token.strip()):
            current = found.setdefault(token.strip(), {})
        at += 1
    return found

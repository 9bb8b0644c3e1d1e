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
from dataclasses import dataclass
from pathlib import Path

from cujo_action.prepare.git import Git
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
    clip,
)

# The files a checkout made by prepare keeps that no actions/checkout leaves: the last
# fetch names refs/pull/N/head, the last reset the head.
_LEFTOVERS = ("FETCH_HEAD", "ORIG_HEAD")
_FIELDS = 8  # of ``_FORMAT``, the message last


@dataclass(frozen=True)
class Merged:
    """The commit the checks of the head run on, and why it is not a merge when it is not."""

    sha: str
    merged: bool
    note: str = ""


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
    inside = git.run("merge-base", "--is-ancestor", head_sha, base_sha, cwd=clone)
    if inside.code == 0:
        return Merged(head_sha, False, "head is already in base: there is nothing to merge, "
                      "so the checks ran on head")  # fmt: skip
    made = git.run(
        "merge-tree", "--write-tree", "--name-only", "--no-messages", base_sha, head_sha,
        cwd=clone,
    )  # fmt: skip
    lines = made.out.decode("utf-8", "replace").splitlines()
    if made.code == 1 and lines:
        shown = ", ".join(lines[1:4]) + (", …" if len(lines) > 4 else "")
        return Merged(head_sha, False, clip(
            f"head conflicts with base ({shown or 'no file named'}): GitHub cannot merge it "
            "as it is, so the checks ran on head, not on the merge that would run after it",
            MAX_TEXT,
        ))  # fmt: skip
    if made.code != 0 or not lines or not SHA.fullmatch(lines[0]):
        return Merged(head_sha, False, clip(
            f"head could not be merged into base ({git.why(made)}), so the checks ran on "
            "head, not on the merge that would run after it",
            MAX_TEXT,
        ))  # fmt: skip
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
    done = git.run(
        "commit-tree", lines[0], "-p", base_sha, "-p", head_sha, "-m", message,
        cwd=clone, env=env,
    )  # fmt: skip
    sha = done.out.decode().strip()
    if done.code != 0 or not SHA.fullmatch(sha):
        return Merged(head_sha, False, clip(
            f"the merge of head into base could not be written ({git.why(done)}), so the "
            "checks ran on head", MAX_TEXT,
        ))  # fmt: skip
    return Merged(sha, True)


def check_out_branch(git: Git, clone: Path, branch: str, sha: str) -> None:
    """Check ``sha`` out on ``branch``, as actions/checkout leaves a push to it.

    The branch and its remote-tracking branch name the commit; no other local branch is
    left, nor the refs and files prepare's own fetches left (``refs/cujo/…``,
    ``FETCH_HEAD``): a job's checkout has none of them.
    """
    git.check(
        "checkout", "--quiet", "--force", "-B", branch, sha, cwd=clone,
        what=f"check out {sha} on {branch}",
    )  # fmt: skip
    git.check(
        "update-ref", f"refs/remotes/origin/{branch}", sha, cwd=clone,
        what=f"move origin/{branch} to {sha}",
    )  # fmt: skip
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
        listed = git.run(
            "rev-list", "--reverse", f"--max-count={PUSH_COMMITS}", after, f"^{before}",
            cwd=clone,
        )  # fmt: skip
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
                # GitHub writes UTC as Z, any other offset as it is.
                timestamp=clip(when.removesuffix("+00:00") + ("Z" * when.endswith("+00:00")),
                               MAX_SHORT),
                author_name=clip(an, MAX_SHORT),
                author_email=clip(ae, MAX_SHORT),
                committer_name=clip(cn, MAX_SHORT),
                committer_email=clip(ce, MAX_SHORT),
                added=changed.get("A", [])[:PUSH_PATHS],
                removed=changed.get("D", [])[:PUSH_PATHS],
                modified=changed.get("M", [])[:PUSH_PATHS],
            )
        )  # fmt: skip
    return found


def _files(git: Git, clone: Path, shas: list[str]) -> dict[str, dict[str, list[str]]]:
    """Return each commit's added (A), removed (D) and modified (M) paths, against its
    first parent (a merge's changes are what it brings to the branch)."""
    out = git.run(
        "diff-tree", "--stdin", "--always", "--root", "-r", "-z", "--no-renames",
        "--name-status", "--diff-merges=first-parent",
        cwd=clone, stdin="".join(f"{s}\n" for s in shas).encode(),
    ).out  # fmt: skip
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

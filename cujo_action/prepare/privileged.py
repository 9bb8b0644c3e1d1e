"""Find a base workflow that already runs the head with secrets, and the pull request it gets.

A base workflow with a privileged trigger (``pull_request_target``, ``workflow_run``,
``issue_comment``) that checks out the pull request's head runs the head's code in a job
that holds the repository's secrets and a token that can write, before any merge
(``workflow/audit.untrusted_checkouts`` finds the step). Then the head is
installed and tested a second time in such a job (``checks/privileged.py``), and this
module says what that job receives (``PullTarget``): the pull request's number (the one
asked for; a plausible one for a local branch), branch (the local branch's name; a
plausible one where only a SHA was given), title and body (the head commit's subject and
body, as GitHub fills a new pull request's from its only commit) and author (the head
commit's, by the login its GitHub address names, else a login made from the name).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from pathlib import Path

import yaml

from cujo_action.prepare.git import Git, is_sha
from cujo_action.schema import MAX_SHORT, MAX_TEXT, NOREPLY_DOMAIN, PullTarget, clip
from cujo_action.workflow.audit import privileged, untrusted_checkouts
from cujo_action.workflow.parse import parse

# GitHub's private address for an account's commits: ``ID+login@…`` (older: ``login@…``).
_NOREPLY = re.compile(
    rf"^(?:(?P<id>[1-9][0-9]{{0,11}})\+)?(?P<login>[A-Za-z0-9-]{{1,39}})"
    rf"@{re.escape(NOREPLY_DOMAIN)}$"
)


def runs_head(workflows: Mapping[str, str]) -> tuple[str, str, str] | None:
    """Return the first base workflow (path, name, trigger) with a privileged trigger that
    checks out the head, in path order; None where there is none."""
    for path in sorted(workflows):
        workflow = parse(path, workflows[path])
        if workflow.kind != "workflow" or workflow.error or not untrusted_checkouts(workflow):
            continue
        return path, _name(workflows[path], path), privileged(workflow)[0]
    return None


def _name(text: str, path: str) -> str:
    """Return the workflow's ``name:`` (GITHUB_WORKFLOW), else its path, as GitHub does."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return path
    name = loaded.get("name") if isinstance(loaded, dict) else None
    return clip(name, MAX_SHORT) if isinstance(name, str) and name.strip() else path


def _login(name: str, email: str) -> tuple[str, int]:
    """Return the author's login and account id: from a GitHub address, else made up."""
    found = _NOREPLY.match(email)
    if found:
        account = int(found["id"]) if found["id"] else 1_000_000 + secrets.randbelow(9_000_000)
        return found["login"], account
    made = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:39] or "contributor"
    return made, 1_000_000 + secrets.randbelow(150_000_000)


def _counts(git: Git, clone: Path, base_sha: str, head_sha: str) -> tuple[int, int, int, int]:
    """Return the pull request's commits, added and deleted lines, and changed files."""
    listed = git.run("rev-list", "--count", head_sha, f"^{base_sha}", cwd=clone)
    commits = int(listed.out.strip() or 1) if listed.code == 0 else 1
    added = deleted = files = 0
    stat = git.run("diff", "--numstat", "-z", f"{base_sha}...{head_sha}", cwd=clone)
    for entry in stat.out.split(b"\0") if stat.code == 0 else []:
        parts = entry.split(b"\t")
        if len(parts) < 3:
            continue
        files += 1
        added += int(parts[0]) if parts[0].isdigit() else 0
        deleted += int(parts[1]) if parts[1].isdigit() else 0
    return commits, added, deleted, files


def pull_target(
    git: Git,
    clone: Path,
    base_sha: str,
    head_sha: str,
    head: str,
    pull_request: int | None,
    found: tuple[str, str, str],
) -> PullTarget:
    """Return the pull request as the base workflow ``found`` (``runs_head``) receives it."""
    path, name, trigger = found
    shown = git.run("log", "-1", "-z", "--format=%an%x00%ae%x00%s%x00%b", head_sha, cwd=clone)
    fields = shown.out.decode("utf-8", "replace").split("\0") if shown.code == 0 else []
    author, email, subject, body = [*fields, "", "", "", ""][:4]
    login, account = _login(author, email)
    number = pull_request or 1 + secrets.randbelow(400)
    commits, added, deleted, files = _counts(git, clone, base_sha, head_sha)
    branch = head if head and not is_sha(head) else f"patch-{number}"
    return PullTarget(
        number=number,
        branch=clip(branch, MAX_SHORT),
        head_sha=head_sha,
        title=clip(subject or branch, MAX_SHORT),
        body=clip(body.strip(), MAX_TEXT),
        author=login,
        author_id=account,
        workflow=clip(path, MAX_SHORT),
        workflow_name=name,
        trigger=trigger,
        commits=commits,
        additions=added,
        deletions=deleted,
        changed_files=files,
    )

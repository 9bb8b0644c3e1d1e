"""The post-merge push as a job reads it: the variables naming the event, the event file,
and the event as the worker's job message holds it.

A pull request meets the repository's secrets once it is merged, in the jobs the push of
the merge to the base branch starts. So each check's job reads as that push
(``Plan.push``; the base check's as the push of the base commit, ``Plan.base_push``, so
what is "also at base" was seen in the same context): ``GITHUB_EVENT_NAME`` is ``push``,
``GITHUB_REF`` the branch, ``GITHUB_SHA`` the commit checked out, ``GITHUB_BASE_REF`` and
``GITHUB_HEAD_REF`` empty as on a push, and the event file is GitHub's push payload, shaped
as octokit/webhooks' push examples (``tests/samples/webhooks/push.*.json``). Pure.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from cujo_action.net.lookalike.github_facts import API, REPO_LINKS, WEB, id_code
from cujo_action.schema import (
    NOREPLY_DOMAIN,
    WEB_FLOW,
    ZERO_SHA,
    Push,
    PushedCommit,
    noreply,
)


class PushJob(Protocol):
    """The job a push runs, as this module reads it (``actionsjob.JobIdentity`` is one)."""

    @property
    def owner(self) -> str: ...
    @property
    def repo(self) -> str: ...
    @property
    def repository(self) -> str: ...
    @property
    def repository_id(self) -> int: ...
    @property
    def owner_id(self) -> int: ...
    @property
    def actor(self) -> str: ...
    @property
    def branch(self) -> str: ...
    @property
    def default_branch(self) -> str: ...


EVENT_NAME = "push"
# The workflow the job belongs to, as its variables name it.
WORKFLOW_NAME = "CI"
WORKFLOW_FILE = ".github/workflows/ci.yml"
_NOREPLY = f"@{NOREPLY_DOMAIN}"


def event_env(job: PushJob, push: Push) -> dict[str, str]:
    """Return the variables of a step that name its event: the push of ``push.after``."""
    ref = f"refs/heads/{job.branch}"
    return {
        "GITHUB_EVENT_NAME": EVENT_NAME,
        # Only a pull request's run has these; a push's are empty (docs: "Variables").
        "GITHUB_BASE_REF": "",
        "GITHUB_HEAD_REF": "",
        "GITHUB_REF": ref,
        "GITHUB_REF_NAME": job.branch,
        # A repository that requires Cujo's check protects the branch it merges into.
        "GITHUB_REF_PROTECTED": "true",
        "GITHUB_REF_TYPE": "branch",
        "GITHUB_SHA": push.after,
        "GITHUB_WORKFLOW": WORKFLOW_NAME,
        "GITHUB_WORKFLOW_REF": f"{job.repository}/{WORKFLOW_FILE}@{ref}",
        "GITHUB_WORKFLOW_SHA": push.after,
    }


def push_event(job: PushJob, push: Push, now: float) -> str:
    """Return the ``push`` event file a step reads at ``GITHUB_EVENT_PATH``."""
    commits = [_commit(job, commit) for commit in push.commits]
    head = next((c for c in commits if c["id"] == push.after), None)
    event = {
        "ref": f"refs/heads/{job.branch}",
        "before": push.before,
        "after": push.after,
        "repository": repository(job, now),
        "pusher": {"name": job.actor, "email": noreply(job.actor, job.owner_id)},
        "sender": account(job.actor, job.owner_id),
        "created": push.before == ZERO_SHA,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": f"{WEB}/{job.repository}/compare/{push.before[:12]}...{push.after[:12]}",
        "commits": commits,
        "head_commit": head,
    }
    return json.dumps(event, indent=2) + "\n"


def event_context(job: PushJob, push: Push) -> list[dict[str, str]]:
    """Return the ``github`` context's event entries as the worker's job message holds them."""
    return [
        {"k": "event_name", "v": EVENT_NAME},
        {"k": "ref", "v": f"refs/heads/{job.branch}"},
        {"k": "ref_name", "v": job.branch},
        {"k": "sha", "v": push.after},
        {"k": "actor", "v": job.actor},
        {"k": "workflow_ref", "v": f"{job.repository}/{WORKFLOW_FILE}@refs/heads/{job.branch}"},
    ]


def account(login: str, account_id: int) -> dict[str, Any]:
    """Return a user as a webhook's ``sender`` or ``owner`` shows one."""
    base = f"{API}/users/{login}"
    return {
        "login": login,
        "id": account_id,
        "node_id": "U_kgDO" + id_code(account_id),
        "avatar_url": f"https://avatars.githubusercontent.com/u/{account_id}?v=4",
        "gravatar_id": "",
        "url": base,
        "html_url": f"{WEB}/{login}",
        "followers_url": f"{base}/followers",
        "following_url": f"{base}/following{{/other_user}}",
        "gists_url": f"{base}/gists{{/gist_id}}",
        "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{base}/subscriptions",
        "organizations_url": f"{base}/orgs",
        "repos_url": f"{base}/repos",
        "events_url": f"{base}/events{{/privacy}}",
        "received_events_url": f"{base}/received_events",
        "type": "User",
        "user_view_type": "public",
        "site_admin": False,
    }


def repository(job: PushJob, now: float) -> dict[str, Any]:
    """Return the repository as a push event shows it (its times as epoch seconds)."""
    full = job.repository
    base = f"{API}/repos/{full}"
    # Made a few months to a few years ago, the same for every check of the run.
    created = int(now) - 86_400 * (90 + job.repository_id % 1_400)
    owner = account(job.owner, job.owner_id)
    value: dict[str, Any] = {
        "id": job.repository_id,
        "node_id": "R_kgDO" + id_code(job.repository_id),
        "name": job.repo,
        "full_name": full,
        "private": False,
        "owner": {"name": job.owner, "email": noreply(job.owner, job.owner_id), **owner},
        "html_url": f"{WEB}/{full}",
        "description": None,
        "fork": False,
        "url": f"{WEB}/{full}",
    }
    for key, tail in REPO_LINKS:
        value[key] = base + tail
    value.update(
        {
            "created_at": created,
            "updated_at": datetime.fromtimestamp(int(now) - 3_600, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "pushed_at": int(now),
            "git_url": f"git://github.com/{full}.git",
            "ssh_url": f"git@github.com:{full}.git",
            "clone_url": f"{WEB}/{full}.git",
            "svn_url": f"{WEB}/{full}",
            "homepage": None,
            "size": 40 + job.repository_id % 4_000,
            "stargazers_count": 0,
            "watchers_count": 0,
            "language": "Python",
            "has_issues": True,
            "has_projects": True,
            "has_downloads": True,
            "has_wiki": True,
            "has_pages": False,
            "has_discussions": False,
            "forks_count": 0,
            "mirror_url": None,
            "archived": False,
            "disabled": False,
            "open_issues_count": 1,
            "license": None,
            "allow_forking": True,
            "is_template": False,
            "web_commit_signoff_required": False,
            "custom_properties": {},
            "topics": [],
            "visibility": "public",
            "forks": 0,
            "open_issues": 1,
            "watchers": 0,
            "default_branch": job.default_branch,
            "stargazers": 0,
            "master_branch": job.default_branch,
        }
    )
    return value


def _person(name: str, email: str) -> dict[str, str]:
    """Return a commit's author or committer; GitHub adds the account it knows the address of."""
    value = {"name": name, "email": email}
    if (name, email) == WEB_FLOW[:2]:
        value["username"] = WEB_FLOW[2]
    elif email.endswith(_NOREPLY):
        value["username"] = email.removesuffix(_NOREPLY).rpartition("+")[2]
    return value


def _commit(job: PushJob, commit: PushedCommit) -> dict[str, Any]:
    return {
        "id": commit.id,
        "tree_id": commit.tree_id,
        "distinct": True,
        "message": commit.message,
        "timestamp": commit.timestamp,
        "url": f"{WEB}/{job.repository}/commit/{commit.id}",
        "author": _person(commit.author_name, commit.author_email),
        "committer": _person(commit.committer_name, commit.committer_email),
        "added": list(commit.added),
        "removed": list(commit.removed),
        "modified": list(commit.modified),
    }

"""The pull request as a base workflow with a privileged trigger's job reads it.

Where a base workflow with a privileged trigger (``pull_request_target`` and its kin)
checks out the pull request's head, the head's code meets the repository's secrets and a
token that can write before any merge. The ``privileged`` check runs the head's install
and tests a second time in such a job (``Plan.privileged``), whose variables, event file
and job message say what GitHub says there: ``GITHUB_EVENT_NAME`` is
``pull_request_target``, ``GITHUB_REF`` the base branch and ``GITHUB_SHA`` the base's
commit (the job is the base's), ``GITHUB_HEAD_REF`` and ``GITHUB_BASE_REF`` the two
branches, and the event file GitHub's ``pull_request`` payload (``action: opened``),
shaped as octokit/webhooks' examples (``tests/samples/webhooks/pull_request.*.json``).
Whatever the workflow's own privileged trigger, the job reads as ``pull_request_target``
(``docs/limits.md``). Pure.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from cujo_action.arm.pushevent import PushJob, account, repository
from cujo_action.net.lookalike.github_facts import API, WEB, id_code
from cujo_action.schema import PullTarget

EVENT_NAME = "pull_request_target"


def _ref(job: PushJob) -> str:
    return f"refs/heads/{job.branch}"


def target_env(job: PushJob, target: PullTarget, base_sha: str) -> dict[str, str]:
    """Return the variables of a step that name its event: ``target`` on the base at
    ``base_sha``, in the base's workflow that runs it."""
    return {
        # Who opened the pull request started the job.
        "GITHUB_ACTOR": target.author,
        "GITHUB_ACTOR_ID": str(target.author_id),
        "GITHUB_TRIGGERING_ACTOR": target.author,
        "GITHUB_EVENT_NAME": EVENT_NAME,
        "GITHUB_BASE_REF": job.branch,
        "GITHUB_HEAD_REF": target.branch,
        "GITHUB_REF": _ref(job),
        "GITHUB_REF_NAME": job.branch,
        "GITHUB_REF_PROTECTED": "true",
        "GITHUB_REF_TYPE": "branch",
        "GITHUB_SHA": base_sha,
        "GITHUB_WORKFLOW": target.workflow_name,
        "GITHUB_WORKFLOW_REF": f"{job.repository}/{target.workflow}@{_ref(job)}",
        "GITHUB_WORKFLOW_SHA": base_sha,
    }


def target_context(job: PushJob, target: PullTarget, base_sha: str) -> list[dict[str, str]]:
    """Return the ``github`` context's event entries as the worker's job message holds them."""
    return [
        {"k": "event_name", "v": EVENT_NAME},
        {"k": "ref", "v": _ref(job)},
        {"k": "ref_name", "v": job.branch},
        {"k": "sha", "v": base_sha},
        {"k": "head_ref", "v": target.branch},
        {"k": "base_ref", "v": job.branch},
        {"k": "actor", "v": target.author},
        {"k": "workflow_ref", "v": f"{job.repository}/{target.workflow}@{_ref(job)}"},
    ]


def _time(now: float, ago: int) -> str:
    return datetime.fromtimestamp(int(now) - ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _side(owner: dict[str, Any], ref: str, sha: str, repo: dict[str, Any]) -> dict[str, Any]:
    return {"label": f"{owner['login']}:{ref}", "ref": ref, "sha": sha, "user": owner, "repo": repo}


def target_event(job: PushJob, target: PullTarget, base_sha: str, now: float) -> str:
    """Return the ``pull_request_target`` event file a step reads at ``GITHUB_EVENT_PATH``:
    the pull request from a fork of the upstream, just opened."""
    full = job.repository
    number = target.number
    pulls, issues = f"{API}/repos/{full}/pulls/{number}", f"{API}/repos/{full}/issues/{number}"
    upstream = repository(job, now)
    author = account(target.author, target.author_id)
    fork = {
        **upstream,
        "id": upstream["id"] + 1 + target.author_id % 50_000,
        "full_name": f"{target.author}/{job.repo}",
        "owner": author,
        "html_url": f"{WEB}/{target.author}/{job.repo}",
        "url": f"{API}/repos/{target.author}/{job.repo}",
        "fork": True,
    }
    created = 3_600 * (2 + number % 70)
    pull = {
        "url": pulls,
        "id": 1_000_000_000 + job.repository_id % 900_000_000 + number,
        "node_id": "PR_kwDO" + id_code(job.repository_id) + id_code(number),
        "html_url": f"{WEB}/{full}/pull/{number}",
        "diff_url": f"{WEB}/{full}/pull/{number}.diff",
        "patch_url": f"{WEB}/{full}/pull/{number}.patch",
        "issue_url": issues,
        "number": number,
        "state": "open",
        "locked": False,
        "title": target.title,
        "user": author,
        "body": target.body or None,
        "created_at": _time(now, created),
        "updated_at": _time(now, 5),
        "closed_at": None,
        "merged_at": None,
        "merge_commit_sha": None,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "labels": [],
        "milestone": None,
        "draft": False,
        "commits_url": f"{pulls}/commits",
        "review_comments_url": f"{pulls}/comments",
        "review_comment_url": f"{API}/repos/{full}/pulls/comments{{/number}}",
        "comments_url": f"{issues}/comments",
        "statuses_url": f"{API}/repos/{full}/statuses/{target.head_sha}",
        "head": _side(author, target.branch, target.head_sha, fork),
        "base": _side(upstream["owner"], job.branch, base_sha, upstream),
        "author_association": "CONTRIBUTOR",
        "auto_merge": None,
        "active_lock_reason": None,
        "merged": False,
        "mergeable": None,
        "rebaseable": None,
        "mergeable_state": "unknown",
        "merged_by": None,
        "comments": 0,
        "review_comments": 0,
        "maintainer_can_modify": True,
        "commits": target.commits,
        "additions": target.additions,
        "deletions": target.deletions,
        "changed_files": target.changed_files,
        "_links": {
            "self": {"href": pulls},
            "html": {"href": f"{WEB}/{full}/pull/{number}"},
            "issue": {"href": issues},
            "comments": {"href": f"{issues}/comments"},
            "review_comments": {"href": f"{pulls}/comments"},
            "review_comment": {"href": f"{API}/repos/{full}/pulls/comments{{/number}}"},
            "commits": {"href": f"{pulls}/commits"},
            "statuses": {"href": f"{API}/repos/{full}/statuses/{target.head_sha}"},
        },
    }
    event = {
        "action": "opened",
        "number": number,
        "pull_request": pull,
        "repository": upstream,
        "sender": author,
    }
    return json.dumps(event, indent=2) + "\n"

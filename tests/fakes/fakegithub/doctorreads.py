"""What ``cujo doctor`` reads past the guard: the App's events and a repository's Actions policy.

WRITTEN BY HAND FROM GITHUB'S DOCUMENTATION, not recorded from GitHub:

* ``GET /app`` (https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app) also
  answers the App's ``events`` and its OAuth ``client_id`` (server.py's route reads them
  from here and from oauth.py);
* ``GET /repos/{owner}/{repo}/actions/permissions``
  (https://docs.github.com/en/rest/actions/permissions#get-github-actions-permissions-for-a-repository):
  ``enabled``, and ``allowed_actions`` (``all``, ``local_only`` or ``selected``) when enabled;
* ``GET /repos/{owner}/{repo}/actions/permissions/fork-pr-contributor-approval``
  (https://docs.github.com/en/rest/actions/permissions#get-fork-pr-contributor-approval-permissions-for-a-repository):
  ``approval_policy``;
  both need the Administration (read) repository permission of an App: 403 without it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from fakegithub.server import Api, Request, refuse, route

_LOCK = threading.Lock()
# The events app-manifest.json asks for, as a freshly registered App has them.
MANIFEST_EVENTS = (
    "pull_request",
    "issue_comment",
    "check_run",
    "workflow_run",
    "workflow_job",
    "repository_ruleset",
    "branch_protection_rule",
)


@dataclass
class AppPolicies:
    """The App's subscribed events, and each repository's Actions settings."""

    events: list[str] = field(default_factory=lambda: list(MANIFEST_EVENTS))
    # owner/name → {"enabled": bool, "allowed_actions": str}; unset: enabled, all.
    actions: dict[str, dict[str, Any]] = field(default_factory=dict)
    # owner/name → approval_policy; unset: first_time_contributors (GitHub's default).
    fork_approval: dict[str, str] = field(default_factory=dict)


def app_policies(api_or_state: Any) -> AppPolicies:
    """Return a fake GitHub's App events and Actions settings (made on first use)."""
    state = getattr(api_or_state, "state", api_or_state)
    with _LOCK:
        found: AppPolicies | None = getattr(state, "app_policies", None)
        if found is None:
            found = AppPolicies()
            state.app_policies = found
        return found


def _administration(api: Api, req: Request) -> str:
    """Return the repository, when the installation may read its administration."""
    full = api.repo(req).full_name
    if api.state.installation_permissions.get("administration") not in ("read", "write"):
        raise refuse(403, "Resource not accessible by integration")
    return full


@route("GET", "/repos/{owner}/{repo}/actions/permissions")
def _actions_permissions(api: Api, req: Request) -> Any:
    full = _administration(api, req)
    found = dict(app_policies(api).actions.get(full, {"enabled": True, "allowed_actions": "all"}))
    if not found.get("enabled"):
        found.pop("allowed_actions", None)
    return found


@route("GET", "/repos/{owner}/{repo}/actions/permissions/fork-pr-contributor-approval")
def _fork_pr_approval(api: Api, req: Request) -> Any:
    full = _administration(api, req)
    return {"approval_policy": app_policies(api).fork_approval.get(full, "first_time_contributors")}

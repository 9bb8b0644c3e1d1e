"""Read what ``cujo doctor`` reports beyond the guard: the App's own settings, and a
repository's Actions policy (whether Actions run, which actions, fork pull requests).

Reads only, each fail-closed. ``read_app`` is made as the App (its JWT, through
``app_request``); ``ActionsPolicyReads`` is part of the gateway (``client.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app_relay.github.answers import GitHubAnswer, GitHubError
from app_relay.github.hook_deliveries import AppRequests
from app_relay.github.payloads import repo_path
from app_relay.github.transport import GatewayTransport

# GitHub's answers for "which actions and reusable workflows may run".
ALLOWED_ACTIONS = ("all", "local_only", "selected")
# Which outside contributors' fork pull requests wait for a maintainer's approval.
FORK_APPROVAL = (
    "first_time_contributors_new_to_github",
    "first_time_contributors",
    "all_external_contributors",
)


@dataclass(frozen=True, slots=True)
class AppSettings:
    """The App as GitHub says it is set: its events and its OAuth client's id."""

    slug: str
    events: frozenset[str]
    client_id: str | None


@dataclass(frozen=True, slots=True)
class ActionsPolicy:
    """A repository's Actions settings; None where the App may not read them."""

    enabled: bool | None
    allowed_actions: str | None
    fork_approval: str | None


def read_app(app: AppRequests) -> AppSettings:
    """Read the App's own settings (``GET /app``)."""
    # https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app
    _, data = app.app_request("GET", "/app", idempotent=True)
    a = GitHubAnswer("GET /app", data)
    listed = a.array("events")
    if not all(isinstance(e, str) and e for e in listed):
        raise GitHubError("GET /app", "field 'events' is not a list of names")
    events = frozenset(str(e) for e in listed)
    client_id = a.opt_text("client_id") if a.has("client_id") else None
    return AppSettings(slug=a.text("slug"), events=events, client_id=client_id)


class ActionsPolicyReads(GatewayTransport):
    """Read a repository's Actions settings (Administration: read; None when refused)."""

    def actions_policy(self, repo: str) -> ActionsPolicy:
        """Read whether Actions run, which actions may, and the fork approval policy."""
        # https://docs.github.com/en/rest/actions/permissions#get-github-actions-permissions-for-a-repository
        enabled: bool | None = None
        allowed: str | None = None
        base = f"{repo_path(repo)}/actions/permissions"
        a = self._readable(base)
        if a is not None:
            enabled = a.flag("enabled")
            allowed = a.opt_one_of("allowed_actions", ALLOWED_ACTIONS) if enabled else None
        # https://docs.github.com/en/rest/actions/permissions#get-fork-pr-contributor-approval-permissions-for-a-repository
        b = self._readable(f"{base}/fork-pr-contributor-approval")
        fork = b.one_of("approval_policy", FORK_APPROVAL) if b is not None else None
        return ActionsPolicy(enabled=enabled, allowed_actions=allowed, fork_approval=fork)

    def _readable(self, path: str) -> GitHubAnswer | None:
        """Read ``path``; None when GitHub refuses the App (403) or does not have it (404)."""
        try:
            return self._get(path)
        except GitHubError as exc:
            if exc.status in (403, 404):
                return None
            raise

"""Read what the merge gate needs that no other part reads: each fail-closed.

Part of the gateway (``client.py`` composes it), through the one call policy: who a
user token belongs to (``GET /user``, with that token), the pull request's merge facts
(``mergeable``, ``merged``, its node id), the check runs and commit statuses on a
commit, and the merge methods the repository allows. docs/design.md section 12.
"""

from __future__ import annotations

import math
import time
from typing import Any

from github import Auth, Github

from app_relay.github.answers import GitHubAnswer, GitHubError
from app_relay.github.merge_facts import CheckRunSeen, PullFacts, StatusSeen
from app_relay.github.payloads import path_segment, positive, repo_path
from app_relay.github.signin import UserToken
from app_relay.github.transport import GatewayTransport
from app_relay.github.vocab import CONCLUSIONS_SEEN, LOGIN, MERGE_METHODS, OBJECT_ID, STATUSES_SEEN

# https://docs.github.com/en/rest/commits/statuses#get-the-combined-status-for-a-specific-reference
STATUS_STATES = ("success", "pending", "failure", "error")


class MergeReads(GatewayTransport):
    """Read a pull request's merge facts, a commit's checks, and a person, for the gate."""

    def _user_github(self, user: UserToken, timeout_s: float) -> Github:
        """Return a PyGithub client acting as the person (no retries of its own)."""
        if user.expires_at is not None and user.expires_at <= time.time():
            raise GitHubError("user token", "the user access token expired", status=401)
        return Github(
            auth=Auth.Token(user.value),
            base_url=self._app.base_url,
            timeout=max(1, math.ceil(timeout_s)),
            retry=None,  # retries are the policy's, and the merge has none (merging.py)
            lazy=True,
            user_agent="cujo-relay",
        )

    def user_identity(self, user: UserToken) -> tuple[str, str]:
        """Return the login and GitHub ``type`` (User, Bot, ...) a user token belongs to."""
        # https://docs.github.com/en/rest/users/users#get-the-authenticated-user
        call = "GET /user"
        gh = self._user_github(user, self._app.timeout_s)
        try:
            # A user token spends the person's own budget; the policy keeps it with the
            # installation's, which errs toward waiting, never toward a burst.
            _, data = self._app.attempt(
                call,
                lambda: gh.requester.requestJsonAndCheck("GET", "/user"),
                idempotent=True,
                installation_id=self.installation_id,
                reading=gh.requester,
            )
        finally:
            gh.close()
        a = GitHubAnswer(call, data)
        return a.text("login", pattern=LOGIN), a.text("type", max_len=40)

    def pull_merge_facts(self, repo: str, number: int) -> PullFacts:
        """Read the parts of a pull request a merge needs, ``mergeable`` among them."""
        # https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
        a = self._get(f"{repo_path(repo)}/pulls/{positive('number', number)}")
        if a.integer("number") != number:
            raise GitHubError(a.call, f"field 'number' is not {number}")
        mergeable = a.data.get("mergeable", "missing")
        if mergeable is not None and not isinstance(mergeable, bool):
            raise GitHubError(a.call, "field 'mergeable' is not a boolean or null")
        return PullFacts(
            state="open" if a.one_of("state", ("open", "closed")) == "open" else "closed",
            merged=a.flag("merged"),
            draft=a.flag("draft"),
            head_sha=a.obj("head").text("sha", pattern=OBJECT_ID),
            base_ref=a.obj("base").text("ref"),
            mergeable=mergeable,
            node_id=a.text("node_id", max_len=200),
        )

    def commit_check_runs(self, repo: str, sha: str) -> tuple[CheckRunSeen, ...]:
        """List the check runs on a commit, each with the App that reported it."""
        # https://docs.github.com/en/rest/checks/runs#list-check-runs-for-a-git-reference
        path = f"{repo_path(repo)}/commits/{path_segment(_sha(sha))}/check-runs"
        found = []
        for r in self._pages(path, "check_runs", {"filter": "latest"}):
            app = r.opt_obj("app")
            found.append(
                CheckRunSeen(
                    id=r.positive("id"),
                    name=r.text("name"),
                    app_id=None if app is None else app.positive("id"),
                    status=r.one_of("status", STATUSES_SEEN),
                    conclusion=r.opt_one_of("conclusion", CONCLUSIONS_SEEN),
                )
            )
        return tuple(found)

    def commit_statuses(self, repo: str, sha: str) -> tuple[StatusSeen, ...]:
        """List the latest commit status of each context on a commit."""
        # https://docs.github.com/en/rest/commits/statuses#get-the-combined-status-for-a-specific-reference
        path = f"{repo_path(repo)}/commits/{path_segment(_sha(sha))}/status"
        return tuple(
            StatusSeen(s.text("context"), s.one_of("state", STATUS_STATES))
            for s in self._pages(path, "statuses", {})
        )

    def merge_methods(self, repo: str) -> tuple[str, ...]:
        """Return the merge methods a repository allows, as the REST merge names them."""
        # https://docs.github.com/en/rest/repos/repos#get-a-repository
        a = self._get(repo_path(repo))
        allowed: dict[str, Any] = {
            "merge": a.flag("allow_merge_commit"),
            "squash": a.flag("allow_squash_merge"),
            "rebase": a.flag("allow_rebase_merge"),
        }
        return tuple(m for m in MERGE_METHODS if allowed[m])


def _sha(sha: str) -> str:
    if not OBJECT_ID.fullmatch(sha):
        raise ValueError(f"not a commit SHA: {sha[:80]!r}")
    return sha

"""Merge a pull request with the person's own token, or enqueue it; and read how it settled.

Part of the gateway (``client.py`` composes it). The merge (``PUT …/pulls/{n}/merge``
with ``sha`` pinned to the reviewed head) and the enqueue (GraphQL
``enqueuePullRequest`` with the reviewed head as ``expectedHeadOid``) are sent with the
person's user access token, so GitHub applies their rights and their branch rules, not
the App's. docs/design.md section 12.

These two are the only calls that do NOT go through the one call policy: they are sent
once and never retried, not even after a rate limit, a 5xx or a lost connection: a
retry could merge twice, and a wait could land the merge long after the person clicked.
An answer that never came after the request was sent is ``unknown``: GitHub may have
merged. ``pull_settled`` (through the policy, as the App) tells later what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import requests
import urllib3.exceptions
from github.GithubException import GithubException

from app_relay.github.answers import GitHubAnswer, GitHubError, message_of
from app_relay.github.merge_reads import MergeReads
from app_relay.github.payloads import positive, repo_path
from app_relay.github.signin import UserToken
from app_relay.github.vocab import LOGIN, MERGE_METHODS, OBJECT_ID

MergeOutcome = Literal["merged", "queued", "refused", "unknown"]
Settled = Literal["merged", "closed", "open"]
# https://docs.github.com/en/graphql/reference/mutations#enqueuepullrequest
ENQUEUE: Final = """
mutation($input: EnqueuePullRequestInput!) {
  enqueuePullRequest(input: $input) { mergeQueueEntry { id state position } }
}
""".strip()
# https://docs.github.com/en/graphql/reference/enums#mergequeueentrystate
QUEUE_STATES: Final = frozenset({"QUEUED", "AWAITING_CHECKS", "MERGEABLE", "UNMERGEABLE", "LOCKED"})


@dataclass(frozen=True, slots=True)
class MergeAnswer:
    """What GitHub answered a merge or an enqueue; ``message`` is GitHub's own words.

    ``message`` is GitHub's text (or, with no answer, what went wrong): inert wherever
    it is shown (``words.inert``).
    """

    outcome: MergeOutcome
    status: int | None
    message: str
    merged_sha: str | None = None


@dataclass(frozen=True, slots=True)
class PullSettled:
    """Where a pull request stands after a merge whose answer was lost."""

    state: Settled
    merged_sha: str | None = None
    merged_by: str | None = None


def _not_sent(exc: requests.RequestException) -> bool:
    """Say whether a failure happened before the request could reach GitHub."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if isinstance(exc, requests.ConnectionError):
        reasons = [exc, *exc.args, getattr(exc.args[0], "reason", None) if exc.args else None]
        return any(isinstance(r, urllib3.exceptions.NewConnectionError) for r in reasons)
    return False


class MergeCalls(MergeReads):
    """Merge or enqueue a pull request as the person, and read how a merge settled."""

    def _send_once(
        self, call: str, user: UserToken, timeout_s: float, verb: str, url: str, body: Any
    ) -> tuple[int | None, Any, str]:
        """Send one request as the person, never again; return (status, data, failure).

        ``status`` None with a ``failure`` means no answer came: "not sent" in it when
        the request never reached GitHub.
        """
        try:
            gh = self._user_github(user, timeout_s)
        except GitHubError as exc:
            return exc.status, None, f"not sent: {exc.reason}"
        try:
            # Deliberately not self._app.attempt (the policy): see the module docstring.
            _, data = gh.requester.requestJsonAndCheck(verb, url, input=body)
            return 200, data, ""
        except GithubException as exc:
            return exc.status, exc.data, message_of(exc)
        except requests.RequestException as exc:
            if _not_sent(exc):
                return None, None, f"not sent: GitHub could not be reached ({type(exc).__name__})"
            return None, None, f"no answer within {timeout_s:g}s ({type(exc).__name__})"
        except ValueError as exc:  # an answer that is not JSON
            return None, None, f"the answer could not be read: {exc}"[:200]
        finally:
            gh.close()

    def merge_pull(
        self, repo: str, number: int, *, sha: str, method: str, user: UserToken, timeout_s: float
    ) -> MergeAnswer:
        """Merge a pull request at exactly ``sha`` with ``method``, as the person; never retried."""
        # https://docs.github.com/en/rest/pulls/pulls#merge-a-pull-request
        if not OBJECT_ID.fullmatch(sha):
            raise ValueError(f"not a commit SHA: {sha[:80]!r}")
        if method not in MERGE_METHODS:
            raise ValueError(f"not a merge method: {method[:40]!r}")
        path = f"{repo_path(repo)}/pulls/{positive('number', number)}/merge"
        call = f"PUT {path}"
        body = {"sha": sha, "merge_method": method}
        status, data, failure = self._send_once(call, user, timeout_s, "PUT", path, body)
        if (unanswered := _not_done(status, failure)) is not None:
            return unanswered
        try:
            a = GitHubAnswer(call, data)
            merged = a.flag("merged")
            merged_sha = a.text("sha", pattern=OBJECT_ID) if merged else None
            message = a.opt_text("message") or ""
        except GitHubError as exc:
            return MergeAnswer("unknown", status, f"the answer could not be read: {exc.reason}")
        if not merged:
            return MergeAnswer("refused", status, message or "GitHub did not merge")
        return MergeAnswer("merged", status, message, merged_sha)

    def enqueue_pull(
        self, repo: str, *, pull_node_id: str, expected_head: str, user: UserToken, timeout_s: float
    ) -> MergeAnswer:
        """Add a pull request to its base's merge queue at ``expected_head``; never retried."""
        # https://docs.github.com/en/graphql/reference/mutations#enqueuepullrequest
        if not OBJECT_ID.fullmatch(expected_head):
            raise ValueError(f"not a commit SHA: {expected_head[:80]!r}")
        if not pull_node_id:
            raise ValueError("a pull request node id is needed to enqueue it")
        variables = {"input": {"pullRequestId": pull_node_id, "expectedHeadOid": expected_head}}
        body = {"query": ENQUEUE, "variables": variables}
        call = f"POST /graphql enqueuePullRequest ({repo})"
        url = self._github.requester.graphql_url
        status, data, failure = self._send_once(call, user, timeout_s, "POST", url, body)
        if (unanswered := _not_done(status, failure)) is not None:
            return unanswered
        errors = data.get("errors") if isinstance(data, dict) else None
        if errors:
            # GraphQL answers 200 with its refusals in `errors`: GitHub's words, kept.
            first = errors[0] if isinstance(errors, list) and errors else {}
            said = first.get("message") if isinstance(first, dict) else None
            return MergeAnswer("refused", status, str(said or "GitHub refused")[:500])
        try:
            entry = GitHubAnswer(call, data).obj("data").obj("enqueuePullRequest")
            state = entry.obj("mergeQueueEntry").one_of("state", QUEUE_STATES)
        except GitHubError as exc:
            return MergeAnswer("unknown", status, f"the answer could not be read: {exc.reason}")
        return MergeAnswer("queued", status, f"queued ({state.lower()})")

    def pull_settled(self, repo: str, number: int) -> PullSettled:
        """Read whether a pull request was merged (by whom, to what), closed, or is open."""
        # https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
        a = self._get(f"{repo_path(repo)}/pulls/{positive('number', number)}")
        if a.integer("number") != number:
            raise GitHubError(a.call, f"field 'number' is not {number}")
        state = a.one_of("state", ("open", "closed"))
        if a.flag("merged"):
            by = a.opt_obj("merged_by")
            return PullSettled(
                "merged",
                a.text("merge_commit_sha", pattern=OBJECT_ID),
                None if by is None else by.text("login", pattern=LOGIN),
            )
        return PullSettled("closed" if state == "closed" else "open")


def _not_done(status: int | None, failure: str) -> MergeAnswer | None:
    """Return the answer of a write that got no 200 (None when it did)."""
    if status is None:
        refused = failure.startswith("not sent")
        return MergeAnswer("refused" if refused else "unknown", None, failure)
    if status != 200:
        # A 5xx may come after GitHub merged (a proxy's timeout): unknown, not refused.
        outcome: MergeOutcome = "unknown" if status >= 500 else "refused"
        return MergeAnswer(outcome, status, failure or f"HTTP {status}")
    return None

"""Speak on a pull request's conversation: reviews, comments and reactions.

Part of the gateway (``client.py`` composes it). Reviews leave the relay through exactly
two methods, ``post_advisory_review`` (event COMMENT) and ``post_blocking_review`` (event
REQUEST_CHANGES); no other review event exists here (docs/design.md section 3). What this App
posted is found again only by its marker **and** this App's bot login.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app_relay.github.answers import (
    Comment,
    GitHubAnswer,
    GitHubError,
    Reaction,
    Review,
    answered_at,
    github_time,
)
from app_relay.github.payloads import (
    MAX_BODY,
    OnComment,
    OnIssue,
    ReviewComment,
    capped_text,
    positive,
    repo_path,
    review_payload,
)
from app_relay.github.transport import GatewayTransport
from app_relay.github.vocab import (
    DISMISS,
    DISMISSED,
    OBJECT_ID,
    REACTIONS,
    REVIEW_STATES,
    ReactionContent,
)


class ConversationCalls(GatewayTransport):
    """Post, dismiss and find reviews; post and find comments; add reactions."""

    def post_advisory_review(
        self,
        repo: str,
        number: int,
        commit_sha: str,
        body: str,
        comments: Sequence[ReviewComment] = (),
    ) -> Review:
        """Post an advisory review (event COMMENT) on a commit of a pull request."""
        return self._post_review(
            repo, number, review_payload("COMMENT", commit_sha, body, comments)
        )

    def post_blocking_review(
        self,
        repo: str,
        number: int,
        commit_sha: str,
        body: str,
        comments: Sequence[ReviewComment] = (),
    ) -> Review:
        """Post a blocking review (event REQUEST_CHANGES) on a commit of a pull request."""
        payload = review_payload("REQUEST_CHANGES", commit_sha, body, comments)
        return self._post_review(repo, number, payload)

    def _post_review(self, repo: str, number: int, payload: dict[str, object]) -> Review:
        # https://docs.github.com/en/rest/pulls/reviews#create-a-review-for-a-pull-request
        event = payload["event"]
        if not isinstance(event, str) or event not in REVIEW_STATES:
            raise ValueError(f"review event {event!r} is not one Cujo posts")
        path = f"{repo_path(repo)}/pulls/{positive('number', number)}/reviews"
        # A repeated POST would post a second review: never retried.
        headers, data = self._request("POST", path, body=payload, idempotent=False)
        review = _review(f"POST {path}", data, headers)
        if review.state != REVIEW_STATES[event] or review.commit_id != payload["commit_id"]:
            raise GitHubError(
                f"POST {path}", f"review answered state {review.state!r} on {review.commit_id}"
            )
        return review

    def dismiss_review(self, repo: str, number: int, review_id: int, message: str) -> Review:
        """Dismiss a review with a message saying who lifted it."""
        # https://docs.github.com/en/rest/pulls/reviews#dismiss-a-review-for-a-pull-request
        path = (
            f"{repo_path(repo)}/pulls/{positive('number', number)}"
            f"/reviews/{positive('review_id', review_id)}/dismissals"
        )
        body = {"message": capped_text("message", message, MAX_BODY), "event": DISMISS}
        # Dismissing a dismissed review leaves it dismissed: safe to retry.
        headers, data = self._request("PUT", path, body=body, idempotent=True)
        review = _review(f"PUT {path}", data, headers)
        if review.id != review_id or review.state != DISMISSED:
            raise GitHubError(f"PUT {path}", f"review answered state {review.state!r}")
        return review

    def find_review(self, repo: str, number: int, marker: str) -> Review | None:
        """Return the review on a pull request that this App's bot posted with ``marker``.

        Both are needed: anyone can post a body holding the marker, and the bot posts
        many reviews; a marker alone would let a pull request's author fake Cujo's.
        """
        # https://docs.github.com/en/rest/pulls/reviews#list-reviews-for-a-pull-request
        if not marker:
            raise ValueError("a review marker is not empty")
        login = self._app.bot_login()
        path = f"{repo_path(repo)}/pulls/{positive('number', number)}/reviews"
        for a in self._pages(path, None, {}):
            user = a.opt_obj("user")
            body = a.opt_text("body") or ""
            if user is not None and user.text("login") == login and marker in body:
                return _review(f"GET {path}", a.data)
        return None

    # -- reactions and comments --

    def add_reaction(
        self, repo: str, issue_or_comment: OnIssue | OnComment, content: ReactionContent
    ) -> Reaction:
        """React to the pull request or to an issue comment."""
        if content not in REACTIONS:
            raise ValueError(f"not a GitHub reaction: {content!r}")
        if isinstance(issue_or_comment, OnIssue):
            # https://docs.github.com/en/rest/reactions/reactions#create-reaction-for-an-issue
            number = positive("number", issue_or_comment.number)
            path = f"{repo_path(repo)}/issues/{number}/reactions"
        else:
            # https://docs.github.com/en/rest/reactions/reactions#create-reaction-for-an-issue-comment
            comment_id = positive("comment_id", issue_or_comment.comment_id)
            path = f"{repo_path(repo)}/issues/comments/{comment_id}/reactions"
        # GitHub answers 200 with the existing reaction when it is already there, so
        # repeating this POST cannot add a second one: safe to retry.
        _, data = self._request("POST", path, body={"content": content}, idempotent=True)
        a = GitHubAnswer(f"POST {path}", data)
        reaction = Reaction(id=a.integer("id"), content=a.one_of("content", REACTIONS))
        if reaction.content != content:
            raise GitHubError(a.call, f"reaction answered {reaction.content!r}")
        return reaction

    def comment(self, repo: str, number: int, body: str) -> Comment:
        """Post a comment on the pull request's conversation."""
        # https://docs.github.com/en/rest/issues/comments#create-an-issue-comment
        path = f"{repo_path(repo)}/issues/{positive('number', number)}/comments"
        payload = {"body": capped_text("body", body, MAX_BODY)}
        # A repeated POST would post a second comment: never retried.
        _, data = self._request("POST", path, body=payload, idempotent=False)
        a = GitHubAnswer(f"POST {path}", data)
        return Comment(id=a.integer("id"), html_url=a.text("html_url"))

    def find_comment(self, repo: str, number: int, marker: str) -> Comment | None:
        """Return the comment on a pull request this App's bot posted with ``marker``."""
        # https://docs.github.com/en/rest/issues/comments#list-issue-comments
        if not marker:
            raise ValueError("a comment marker is not empty")
        login = self._app.bot_login()
        path = f"{repo_path(repo)}/issues/{positive('number', number)}/comments"
        for a in self._pages(path, None, {}):
            user = a.opt_obj("user")
            if (
                user is not None
                and user.text("login") == login
                and marker in (a.opt_text("body") or "")
            ):
                return Comment(id=a.integer("id"), html_url=a.text("html_url"))
        return None


def _review(call: str, data: object, headers: Mapping[str, str] | None = None) -> Review:
    a = GitHubAnswer(call, data)
    return Review(
        id=a.integer("id"),
        state=a.text("state"),
        commit_id=a.text("commit_id", pattern=OBJECT_ID),
        # GitHub's own times: a verb's comment must come after the state it answers.
        submitted_at=github_time(a.data.get("submitted_at")),
        answered_at=answered_at(headers),
    )

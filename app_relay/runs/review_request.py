"""A pull request head that asks for a review: read from its webhook, and recorded.

``review_request_of`` reads it from a ``pull_request`` event, fail closed; the webhook's
router hands it to a ``Reviewer`` (the coordinator, or ``RecordingReviewer``, which only
records it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from app_relay.github.event import Event, payload_reader
from app_relay.store import Store
from cujo_action.schema import SHA


@dataclass(frozen=True)
class ReviewRequested:
    """A pull request head that asks for a review, as read from its webhook."""

    delivery_id: str
    installation_id: int | None
    repo: str
    pr_number: int
    action: str
    head_sha: str
    base_sha: str
    base_ref: str
    author: str
    author_type: str  # GitHub's account `type`: User, Bot, Organization
    draft: bool
    # Where the sandbox workflow is dispatched from: the workflow file lives there.
    default_branch: str | None = None
    state: str = "open"


class Reviewer(Protocol):
    """Take a review request further: the seam where the coordinator plugs in."""

    def request_review(self, request: ReviewRequested) -> None:
        """Handle one head that asks for a review; idempotent per delivery."""
        ...


@dataclass(frozen=True)
class RecordingReviewer:
    """The default reviewer: record the session and the request, and do nothing more."""

    store: Store

    def request_review(self, request: ReviewRequested) -> None:
        """Open the pull request's session and record the request in it."""
        record_request(self.store, request)


def record_request(store: Store, request: ReviewRequested) -> str:
    """Open the pull request's session, record the request in it, return the session id."""
    session_id = store.open_session(request.repo, request.pr_number, "github")
    store.request_review(
        delivery_id=request.delivery_id,
        session_id=session_id,
        installation_id=request.installation_id,
        action=request.action,
        head_sha=request.head_sha,
        base_sha=request.base_sha,
        base_ref=request.base_ref,
        author=request.author,
        author_type=request.author_type,
        draft=request.draft,
    )
    return session_id


def review_request_of(event: Event) -> ReviewRequested:
    """Read what a review needs from a ``pull_request`` event; fail closed on gaps."""
    p = payload_reader(event)
    pr = p.obj("pull_request")
    user = pr.obj("user")
    repository = p.data.get("repository")
    default_branch = repository.get("default_branch") if isinstance(repository, Mapping) else None
    state = pr.data.get("state", "open")
    return ReviewRequested(
        delivery_id=event.delivery_id,
        installation_id=event.installation_id,
        # The base repository: where the review and the check are posted.
        repo=p.obj("repository").text("full_name"),
        pr_number=pr.positive("number"),
        action=p.text("action"),
        head_sha=pr.obj("head").text("sha", pattern=SHA, what="a 40-digit commit SHA"),
        base_sha=pr.obj("base").text("sha", pattern=SHA, what="a 40-digit commit SHA"),
        base_ref=pr.obj("base").text("ref"),
        author=user.text("login"),
        author_type=user.text("type"),
        draft=pr.flag("draft"),
        default_branch=default_branch if isinstance(default_branch, str) else None,
        state=state if isinstance(state, str) else "open",
    )

"""Check what the relay sends GitHub before it is sent, and build the request bodies.

The types a caller fills in (a check run's output and buttons, a review's line comments,
where a reaction goes), the checks on every path segment and value (a repository name,
a positive number, a commit SHA, a string within GitHub's cap), and the bodies built
from them. A value GitHub would refuse, or one that could point a call elsewhere,
raises ``ValueError`` here, before any request. Only COMMENT and REQUEST_CHANGES reviews
can be built (docs/design.md section 3).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from app_relay.github.vocab import OBJECT_ID, REVIEW_STATES
from cujo_action.schema import REPO_NAME

MAX_BODY: Final = 65_536
_MAX_SUMMARY: Final = 65_535
_MAX_ACTIONS: Final = 3


# ---- what the relay sends ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckOutput:
    """The title and summary of a check run."""

    title: str
    summary: str
    text: str | None = None


@dataclass(frozen=True, slots=True)
class CheckAction:
    """A button on a check run (https://docs.github.com/en/rest/checks/runs)."""

    label: str
    description: str
    identifier: str


@dataclass(frozen=True, slots=True)
class ReviewComment:
    """A line comment inside a review."""

    path: str
    line: int
    body: str
    side: Literal["LEFT", "RIGHT"] = "RIGHT"


@dataclass(frozen=True, slots=True)
class OnIssue:
    """React to the pull request (or issue) itself."""

    number: int


@dataclass(frozen=True, slots=True)
class OnComment:
    """React to an issue comment."""

    comment_id: int


# ---- validating what is sent ---------------------------------------------------------


def repo_path(repo: str) -> str:
    """Return the API path of a repository, refusing anything but ``owner/name``."""
    if not REPO_NAME.fullmatch(repo):
        raise ValueError(f"not an owner/name repository: {repo!r}")
    return f"/repos/{repo}"


def path_segment(value: str) -> str:
    """Return a value quoted as one path segment (a slash cannot add a segment)."""
    if not value:
        raise ValueError("an empty path segment")
    return urllib.parse.quote(value, safe="")


def positive(name: str, value: int) -> int:
    """Return ``value`` if it is a positive integer (a boolean is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return value


def capped_text(name: str, value: str, cap: int) -> str:
    """Return ``value`` if it is a string of at most ``cap`` characters."""
    if not isinstance(value, str) or len(value) > cap:
        raise ValueError(f"{name} must be a string of at most {cap} characters")
    return value


def checked_sha(name: str, value: str) -> str:
    """Return ``value`` if it is a commit SHA."""
    if not OBJECT_ID.fullmatch(value):
        raise ValueError(f"{name} is not a commit SHA: {value!r}")
    return value


def output_payload(output: CheckOutput) -> dict[str, str]:
    """Build a check run's ``output`` within GitHub's caps."""
    payload = {
        "title": capped_text("output.title", output.title, 1024),
        "summary": capped_text("output.summary", output.summary, _MAX_SUMMARY),
    }
    if output.text is not None:
        payload["text"] = capped_text("output.text", output.text, _MAX_SUMMARY)
    return payload


def actions_payload(actions: Sequence[CheckAction]) -> list[dict[str, str]]:
    """Build a check run's ``actions`` (its buttons) within GitHub's caps."""
    # Limits from https://docs.github.com/en/rest/checks/runs#create-a-check-run
    if len(actions) > _MAX_ACTIONS:
        raise ValueError(f"a check run takes at most {_MAX_ACTIONS} actions")
    return [
        {
            "label": capped_text("action.label", a.label, 20),
            "description": capped_text("action.description", a.description, 40),
            "identifier": capped_text("action.identifier", a.identifier, 20),
        }
        for a in actions
    ]


def _comments_payload(comments: Sequence[ReviewComment]) -> list[dict[str, object]]:
    payload: list[dict[str, object]] = []
    for c in comments:
        if c.side not in ("LEFT", "RIGHT"):
            raise ValueError(f"comment.side must be LEFT or RIGHT, not {c.side!r}")
        payload.append(
            {
                "path": capped_text("comment.path", c.path, 4096),
                "line": positive("comment.line", c.line),
                "side": c.side,
                "body": capped_text("comment.body", c.body, MAX_BODY),
            }
        )
    return payload


def review_payload(
    event: str, commit_sha: str, body: str, comments: Sequence[ReviewComment]
) -> dict[str, object]:
    """Build a review request body; only COMMENT and REQUEST_CHANGES are accepted."""
    if event not in REVIEW_STATES:
        raise ValueError(f"review event {event!r} is not one Cujo posts")
    return {
        "commit_id": checked_sha("commit_sha", commit_sha),
        "body": capped_text("body", body, MAX_BODY),
        "event": event,
        "comments": _comments_payload(comments),
    }

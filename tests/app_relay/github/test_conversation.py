"""Reviews (exactly two kinds), dismissals, reactions and comments.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import requests
from githubworld import HEAD, REPO, World, only

import app_relay.github
from app_relay.github.answers import GitHubError
from app_relay.github.client import GitHubGateway
from app_relay.github.payloads import (
    OnComment,
    OnIssue,
    ReviewComment,
    review_payload,
)

# ---- reviews -------------------------------------------------------------------------


def test_the_advisory_review_is_a_comment(world: World) -> None:
    note = ReviewComment("setup.py", 3, "reaches the network during install")
    review = world.gw.post_advisory_review(REPO, 7, HEAD, "Clean.", [note])
    assert only(world, "POST", "/pulls/7/reviews$") == {
        "commit_id": HEAD,
        "body": "Clean.",
        "event": "COMMENT",
        "comments": [
            {
                "path": "setup.py",
                "line": 3,
                "side": "RIGHT",
                "body": "reaches the network during install",
            }
        ],
    }
    assert (review.state, review.commit_id) == ("COMMENTED", HEAD)


def test_the_blocking_review_requests_changes(world: World) -> None:
    review = world.gw.post_blocking_review(REPO, 7, HEAD, "Blocked: decoy token sent out.")
    assert only(world, "POST", "/pulls/7/reviews$")["event"] == "REQUEST_CHANGES"
    assert review.state == "CHANGES_REQUESTED"


def test_approve_cannot_be_sent() -> None:
    # Every module that talks to GitHub; the vocabulary names APPROVE only to say never.
    talking = [
        importlib.import_module(f"app_relay.github.{m.name}")
        for m in pkgutil.iter_modules(app_relay.github.__path__)
        if m.name != "vocab"
    ]
    assert {m.__name__.rsplit(".", 1)[1] for m in talking} >= {"client", "conversation"}
    for module in talking:
        assert "APPROVE" not in inspect.getsource(module), module.__name__
    assert not [n for n in dir(GitHubGateway) if "approv" in n.lower()]
    posting = [n for n in dir(GitHubGateway) if n.startswith("post_")]
    assert posting == ["post_advisory_review", "post_blocking_review"]
    for event in ("APPROVE", "approve", "DISMISS", "PENDING", ""):
        with pytest.raises(ValueError, match="not one Cujo posts"):
            review_payload(event, HEAD, "body", ())


def test_the_fake_refuses_an_approval_so_any_leak_fails_the_test(world: World) -> None:
    world.gw.pull_request(REPO, 7)  # buy a token
    token = next(iter(world.fake.state.tokens))
    answer = requests.post(
        f"{world.fake.url}/repos/{REPO}/pulls/7/reviews",
        json={"commit_id": HEAD, "event": "APPROVE"},
        headers={"Authorization": f"token {token}"},
        timeout=5,
    )
    assert answer.status_code == 599
    assert [u.reason for u in world.fake.state.unknown_requests] == ["a review with event APPROVE"]
    world.fake.state.unknown_requests.clear()


def test_a_review_answered_in_another_state_fails_closed(world: World) -> None:
    world.fake.state.answer_next(
        "POST", "/reviews$", f'{{"id": 1, "state": "APPROVED", "commit_id": "{HEAD}"}}'
    )
    with pytest.raises(GitHubError, match="'APPROVED'"):
        world.gw.post_advisory_review(REPO, 7, HEAD, "Clean.")


def test_a_blocking_review_is_dismissed_with_a_message(world: World) -> None:
    review = world.gw.post_blocking_review(REPO, 7, HEAD, "Blocked.")
    dismissed = world.gw.dismiss_review(REPO, 7, review.id, "Dismissed by @maintainer")
    assert dismissed.state == "DISMISSED"
    body = only(world, "PUT", f"/reviews/{review.id}/dismissals$")
    assert body == {"message": "Dismissed by @maintainer", "event": "DISMISS"}


# ---- reactions and comments ----------------------------------------------------------


def test_reactions_go_to_the_pull_request_and_to_comments(world: World) -> None:
    comment = world.gw.comment(REPO, 7, "Refused: only a maintainer may dismiss.")
    assert only(world, "POST", "/issues/7/comments$") == {
        "body": "Refused: only a maintainer may dismiss."
    }
    first = world.gw.add_reaction(REPO, OnIssue(7), "eyes")
    again = world.gw.add_reaction(REPO, OnIssue(7), "eyes")
    on_comment = world.gw.add_reaction(REPO, OnComment(comment.id), "confused")
    assert first.id == again.id  # GitHub answers 200 with the one already there
    assert on_comment.content == "confused"
    assert only(world, "POST", f"/issues/comments/{comment.id}/reactions$") == {
        "content": "confused"
    }
    with pytest.raises(ValueError, match="not a GitHub reaction"):
        world.gw.add_reaction(REPO, OnIssue(7), "thumbsup")  # type: ignore[arg-type]

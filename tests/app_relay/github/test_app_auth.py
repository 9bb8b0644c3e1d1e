"""The App's auth and the one call policy in the client: tokens, 401s, retries, deadlines.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from fakegithub import make_key
from github.GithubException import GithubException
from githubworld import HEAD, REPO, World
from repo_paths import SAMPLES

from app_relay.github.answers import GitHubError
from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.github.event import Event
from app_relay.github.payloads import (
    CheckOutput,
)
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store
from app_relay.webhook.events import ROUTER, Context

WEBHOOKS = SAMPLES / "webhooks"


# ---- App auth ------------------------------------------------------------------------


def test_the_app_jwt_buys_an_installation_token_used_for_calls(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    token_calls = world.fake.state.calls("POST", r"^/app/installations/77/access_tokens$")
    assert [c.auth for c in token_calls] == ["jwt"]
    assert [c.auth for c in world.fake.state.calls("GET", "/pulls/7")] == ["installation:77#1"]


def test_a_jwt_signed_by_another_key_is_refused(world: World) -> None:
    stranger = world.app_with(private_key=make_key().private_pem)
    with pytest.raises(GitHubError, match=r"access_tokens: answered HTTP 401") as err:
        stranger.gateway(77).pull_request(REPO, 7)
    assert err.value.status == 401
    assert world.fake.state.calls("GET", "/pulls/") == []


def test_the_token_is_reused_then_refreshed_before_it_expires(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.gw.pull_request(REPO, 7)
    assert len(world.fake.state.calls("POST", "access_tokens")) == 1
    # GitHub's tokens last an hour; four minutes before the end is inside the margin.
    world.clock.now += 3600 - 240
    world.gw.pull_request(REPO, 7)
    assert len(world.fake.state.calls("POST", "access_tokens")) == 2
    assert world.fake.state.calls("GET", "/pulls/7")[-1].auth == "installation:77#2"


def test_a_401_drops_the_kept_token_and_the_call_is_tried_once_more(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.fake.state.expire_tokens()  # GitHub revoked it; our clock did not notice
    assert world.gw.pull_request(REPO, 7).number == 7
    assert len(world.fake.state.calls("POST", "access_tokens")) == 2
    assert [c.auth for c in world.fake.state.calls("GET", "/pulls/7$")] == [
        "installation:77#1",
        "expired-token",
        "installation:77#2",
    ]


def test_a_write_refused_with_401_is_sent_again_once_with_a_fresh_token(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.fake.state.expire_tokens()
    world.gw.comment(REPO, 7, "hello")
    posts = world.fake.state.calls("POST", "/issues/7/comments$")
    assert [c.auth for c in posts] == ["expired-token", "installation:77#2"]
    assert len(world.fake.state.repos[REPO].comments) == 1


def test_a_second_401_fails_closed(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.fake.state.fail_next(2, status=401, method="GET", path="/pulls/7$")
    with pytest.raises(GitHubError, match="HTTP 401") as err:
        world.gw.pull_request(REPO, 7)
    assert err.value.status == 401
    assert len(world.fake.state.calls("GET", "/pulls/7$")) == 3
    assert len(world.fake.state.calls("POST", "access_tokens")) == 2


def deliver(app: GitHubApp, name: str, body: dict[str, object]) -> int:
    """Route a verified event to the handlers, with ``app`` as what is kept per installation."""
    event = Event.parse(f"d-{name}", name, json.dumps(body).encode())
    with Store("sqlite://") as store:
        return ROUTER.dispatch(event, Context(store, RecordingReviewer(store), installations=app))


def test_an_installation_event_drops_the_token_and_the_repositories_kept(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    assert world.app.repo_installation(REPO) == 77
    assert world.app.repo_installation(REPO) == 77  # kept: asked once
    assert len(world.fake.state.calls("GET", "/installation$")) == 1
    body = json.loads((WEBHOOKS / "installation.created.json").read_text())
    body["action"] = "new_permissions_accepted"
    body["installation"]["id"] = 77
    assert deliver(world.app, "installation", body) == 1
    world.gw.pull_request(REPO, 7)
    assert world.app.repo_installation(REPO) == 77
    assert len(world.fake.state.calls("POST", "access_tokens")) == 2
    assert len(world.fake.state.calls("GET", "/installation$")) == 2


def test_installation_repositories_drops_the_repositories_it_names(world: World) -> None:
    other = world.app_with()
    assert other.repo_installation(REPO) == 77
    body = {
        "action": "removed",
        "installation": {"id": 12345},
        "repository_selection": "selected",
        "repositories_added": [],
        "repositories_removed": [{"id": 1, "name": "widgets", "full_name": REPO}],
    }
    assert deliver(other, "installation_repositories", body) == 1
    assert other.repo_installation(REPO) == 77
    assert len(world.fake.state.calls("GET", "/installation$")) == 2
    other.close()


def test_a_gateway_closes_its_connections(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.gw.close()
    world.gw.pull_request(REPO, 7)  # a closed gateway reconnects rather than failing
    assert len(world.fake.state.calls("GET", "/pulls/7$")) == 2


def test_a_bad_private_key_is_refused_at_construction(world: World) -> None:
    with pytest.raises(ValueError, match="private key"):
        world.app_with(private_key="not a key")


def test_the_repository_installation_is_found_with_the_jwt(world: World) -> None:
    assert world.app.repo_installation(REPO) == 77
    assert [c.auth for c in world.fake.state.calls("GET", "/installation$")] == ["jwt"]


# ---- retries and deadlines -----------------------------------------------------------


def test_a_get_is_retried_with_backoff_and_succeeds(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.fake.state.fail_next(2, status=502, method="GET", path="/pulls/7$")
    assert world.gw.pull_request(REPO, 7).head_sha == HEAD
    assert len(world.fake.state.calls("GET", "/pulls/7$")) == 4
    assert world.sleeps == [0.01, 0.02]


def test_retries_are_bounded(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    world.fake.state.fail_next(5, status=503, method="GET", path="/pulls/7$")
    with pytest.raises(GitHubError, match="HTTP 503"):
        world.gw.pull_request(REPO, 7)
    assert len(world.fake.state.calls("GET", "/pulls/7$")) == 1 + 3


def test_a_rate_limit_is_waited_out_within_the_call(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    limited = '{"message": "API rate limit exceeded for installation ID 77."}'
    world.fake.state.answer_next("GET", "/pulls/7$", limited, status=403)
    assert world.gw.pull_request(REPO, 7).head_sha == HEAD
    assert len(world.fake.state.calls("GET", "/pulls/7$")) == 3
    # No header said how long: GitHub asks for at least a minute.
    assert world.sleeps == [60.0]


def test_after_its_last_wait_the_error_keeps_the_headers_that_say_how_long(
    world: World,
) -> None:
    answered = {
        "retry-after": "61",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "1768479000",
        "content-type": "application/json",
        "x-github-request-id": "0400:1234",
    }
    tries = []

    def limited() -> None:
        tries.append(1)
        raise GithubException(
            403, {"message": "You have exceeded a secondary rate limit"}, answered
        )

    with pytest.raises(GitHubError) as caught:
        world.app.attempt("GET /repos/octo/widgets", limited)
    assert caught.value.headers == {
        "retry-after": "61",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "1768479000",
    }
    assert caught.value.status == 403
    # Waited out five times as Retry-After said (the test's clock stands still), then no more.
    assert world.sleeps == [61.0] * 5
    assert len(tries) == 6


def test_a_patch_is_retried(world: World) -> None:
    check_id = world.gw.create_check_run(REPO, HEAD, output=CheckOutput("Cujo", "Running"))
    world.fake.state.fail_next(1, status=502, method="PATCH")
    assert world.gw.update_check_run(REPO, check_id, conclusion="success").conclusion == "success"
    assert len(world.fake.state.calls("PATCH")) == 2


@pytest.mark.parametrize(
    ("post", "path"),
    [
        (lambda gw: gw.post_blocking_review(REPO, 7, HEAD, "Blocked."), "/reviews$"),
        (lambda gw: gw.post_advisory_review(REPO, 7, HEAD, "Clean."), "/reviews$"),
        (lambda gw: gw.comment(REPO, 7, "hello"), "/comments$"),
        (lambda gw: gw.create_check_run(REPO, HEAD, output=CheckOutput("t", "s")), "/check-runs$"),
    ],
)
def test_a_post_that_creates_is_never_retried(
    world: World, post: Callable[[GitHubGateway], object], path: str
) -> None:
    world.gw.pull_request(REPO, 7)
    world.fake.state.fail_next(1, status=502, method="POST", path=path)
    with pytest.raises(GitHubError, match="HTTP 502"):
        post(world.gw)
    assert len(world.fake.state.calls("POST", path)) == 1
    assert world.sleeps == []


def test_a_dispatch_is_never_retried(world: World) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    world.fake.state.fail_next(1, status=502, method="POST", path="/dispatches$")
    with pytest.raises(GitHubError, match="HTTP 502"):
        world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {})
    assert len(world.fake.state.calls("POST", "/dispatches$")) == 1
    assert world.fake.state.repos[REPO].runs == {}


def test_a_deadline_that_passes_fails_closed_and_names_it(world: World) -> None:
    gw = world.app_with(timeout_s=1).gateway(77)
    gw.pull_request(REPO, 7)
    world.fake.state.delay_next(3.0, method="GET", path="/pulls/7$")
    started = time.monotonic()
    with pytest.raises(GitHubError, match=r"pulls/7: deadline of 1s passed"):
        gw.pull_request(REPO, 7)
    assert time.monotonic() - started < 2.5
    assert world.sleeps == []  # a passed deadline is not retried


def test_an_unknown_request_is_recorded_so_the_test_fails(world: World) -> None:
    world.gw.pull_request(REPO, 7)
    requester = world.app.github_for(77).requester
    with pytest.raises(Exception, match="599"):
        requester.requestJsonAndCheck("GET", f"/repos/{REPO}/hooks")
    assert [(u.method, u.path) for u in world.fake.state.unknown_requests] == [
        ("GET", f"/repos/{REPO}/hooks")
    ]
    world.fake.state.unknown_requests.clear()

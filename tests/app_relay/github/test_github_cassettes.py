"""Replay the gateway's calls from cassettes written from GitHub's documentation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import vcr
from fakegithub import make_key
from repo_paths import TESTS

from app_relay.github.answers import DispatchResult, PullRequest
from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.github.payloads import CheckAction, CheckOutput, ReviewComment

CASSETTES = TESTS / "cassettes" / "github"
NOW = 1_768_478_400.0  # 2026-01-15T12:00:00Z, when the cassettes pretend to be captured
REPO = "octo-org/widgets"
HEAD = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
BASE = "c5b97d5ae6c19d5c5df71a34c7fbeeda2479ccbc"


@pytest.fixture(scope="module")
def gateway() -> Callable[[], GitHubGateway]:
    """Build a gateway for api.github.com whose clock stands at the capture time."""
    key = make_key().private_pem

    def build() -> GitHubGateway:
        app = GitHubApp(
            app_id=1_234_567,
            private_key=key,
            seconds_between_requests=None,
            seconds_between_writes=None,
            clock=lambda: NOW,
        )
        return app.gateway(52_173_914)

    return build


def replay(name: str, call: Callable[[GitHubGateway], object], gw: GitHubGateway) -> object:
    """Run one gateway call against a cassette; every recorded request must be made."""
    with vcr.use_cassette(
        str(CASSETTES / f"{name}.yaml"),
        record_mode="none",
        match_on=["method", "scheme", "host", "port", "path", "query", "body"],
        filter_headers=["authorization"],
    ) as cassette:
        result = call(gw)
        assert cassette.all_played
    return result


def test_pull_request(gateway: Callable[[], GitHubGateway]) -> None:
    pr = replay("pull_request", lambda gw: gw.pull_request(REPO, 1347), gateway())
    assert pr == PullRequest(
        number=1347,
        head_sha=HEAD,
        base_sha=BASE,
        base_ref="main",
        head_repo_full_name=REPO,
        author_login="octocat",
        author_type="User",
        draft=False,
        state="open",
        title="Pull request 1347",
        body=None,
        head_ref="fix",
    )


def test_create_check_run(gateway: Callable[[], GitHubGateway]) -> None:
    check_id = replay(
        "create_check_run",
        lambda gw: gw.create_check_run(
            REPO,
            HEAD,
            status="in_progress",
            output=CheckOutput("Cujo is reviewing", "The sandbox is running."),
            actions=[CheckAction("Retry", "Run the review again", "retry")],
        ),
        gateway(),
    )
    assert isinstance(check_id, int)


def test_post_advisory_review(gateway: Callable[[], GitHubGateway]) -> None:
    review = replay(
        "post_advisory_review",
        lambda gw: gw.post_advisory_review(
            REPO,
            1347,
            HEAD,
            "Cujo: clean. Every check produced evidence.",
            [ReviewComment("setup.py", 12, "Reads the environment at install time.")],
        ),
        gateway(),
    )
    assert getattr(review, "state", None) == "COMMENTED"


def test_permission(gateway: Callable[[], GitHubGateway]) -> None:
    assert replay("permission", lambda gw: gw.permission(REPO, "hubot"), gateway()) == "maintain"


def test_dispatch_with_run_details(gateway: Callable[[], GitHubGateway]) -> None:
    result = replay(
        "dispatch_with_run_details",
        lambda gw: gw.dispatch_workflow(
            REPO, "cujo.yml", "main", {"run-id": "r-0001", "head-sha": HEAD}
        ),
        gateway(),
    )
    assert isinstance(result, DispatchResult)
    assert result.workflow_run_id == 1005
    assert result.html_url == f"https://github.com/{REPO}/actions/runs/1005"


def test_a_request_the_cassette_does_not_hold_is_refused(
    gateway: Callable[[], GitHubGateway],
) -> None:
    with pytest.raises(vcr.errors.CannotOverwriteExistingCassetteException):
        replay("permission", lambda gw: gw.permission(REPO, "someone-else"), gateway())

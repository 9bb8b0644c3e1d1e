"""The GitHub gateway, through real PyGithub calls against the fake GitHub on loopback."""

from __future__ import annotations

import inspect
import json
import os
import re
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from fakegithub import Dispatch, FakeGitHub, make_key, zip_bytes
from fakegithub.fixture import fake_github, fake_github_key  # noqa: F401  (fixtures)
from repo_paths import SAMPLES

import app_relay.github.client as github_module
from app_relay.github.client import (
    CheckAction,
    CheckOutput,
    DispatchResult,
    GitHubApp,
    GitHubError,
    GitHubGateway,
    OnComment,
    OnIssue,
    ReviewComment,
    review_payload,
)
from app_relay.store import Store
from app_relay.webhook.events import ROUTER, Context, Event, RecordingReviewer

WEBHOOKS = SAMPLES / "webhooks"
REPO = "octo/widgets"
HEAD = "a" * 40
BASE = "b" * 40


@dataclass
class Clock:
    """A clock the test moves by hand."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """A fake GitHub with one repository, one pull request, and a gateway onto it."""

    fake: FakeGitHub
    app: GitHubApp
    gw: GitHubGateway
    clock: Clock
    sleeps: list[float]

    def app_with(self, **kw: object) -> GitHubApp:
        """Build another App client against the same fake."""
        return make_app(self.fake, self.clock, self.sleeps, **kw)


def make_app(fake: FakeGitHub, clock: Clock, sleeps: list[float], **kw: object) -> GitHubApp:
    """Build an App client for the fake, with no pacing and a recorded backoff."""
    settings: dict[str, object] = {
        "app_id": fake.app_id,
        "private_key": fake.private_key_pem,
        "base_url": fake.url,
        "timeout_s": 5,
        "attempts": 3,
        "backoff_s": 0.01,
        "seconds_between_requests": None,
        "seconds_between_writes": None,
        "clock": clock,
        "sleep": sleeps.append,
    }
    settings.update(kw)
    return GitHubApp(**settings)  # type: ignore[arg-type]


@pytest.fixture
def world(fake_github: FakeGitHub) -> Iterator[World]:  # noqa: F811
    fake_github.add_repo(REPO)
    fake_github.state.add_pull(REPO, 7, head_sha=HEAD, base_sha=BASE, author="alice")
    clock, sleeps = Clock(), []
    app = make_app(fake_github, clock, sleeps)
    gw = app.gateway(fake_github.installation_id)
    yield World(fake_github, app, gw, clock, sleeps)
    gw.close()
    app.close()


def only(world: World, method: str, path: str) -> dict[str, object]:
    """Return the JSON body of the one request that matched."""
    calls = world.fake.state.calls(method, path)
    assert len(calls) == 1, calls
    body = calls[0].body
    assert isinstance(body, dict)
    return body


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


# ---- pull requests and contents ------------------------------------------------------


def test_pull_request_is_read_into_a_typed_answer(world: World) -> None:
    world.fake.state.add_pull(
        REPO, 8, head_sha=HEAD, base_sha=BASE, author="dependabot[bot]", author_type="Bot",
        draft=True, head_repo="fork/widgets", base_ref="release",
    )  # fmt: skip
    pr = world.gw.pull_request(REPO, 8)
    assert (pr.number, pr.head_sha, pr.base_sha, pr.base_ref) == (8, HEAD, BASE, "release")
    assert (pr.head_repo_full_name, pr.author_login, pr.author_type) == (
        "fork/widgets",
        "dependabot[bot]",
        "Bot",
    )
    assert (pr.draft, pr.state) == (True, "open")


def test_a_deleted_fork_reads_as_no_head_repository(world: World) -> None:
    world.fake.state.add_pull(REPO, 9, head_repo=None)
    assert world.gw.pull_request(REPO, 9).head_repo_full_name is None


@pytest.mark.parametrize(
    ("mutate", "field_name"),
    [
        (lambda pr: pr["head"].pop("sha"), "head.sha"),
        (lambda pr: pr["base"].update(sha="not-a-sha"), "base.sha"),
        (lambda pr: pr.update(draft="false"), "draft"),
        (lambda pr: pr.update(state="merged"), "state"),
        (lambda pr: pr.update(user=None), "user"),
    ],
)
def test_a_malformed_pull_request_names_the_field(
    world: World, mutate: Callable[[dict[str, object]], object], field_name: str
) -> None:
    mutate(world.fake.state.repos[REPO].pulls[7])
    with pytest.raises(GitHubError, match=re.escape(f"'{field_name}'")) as err:
        world.gw.pull_request(REPO, 7)
    assert err.value.call == "GET /repos/octo/widgets/pulls/7"


def test_an_answer_that_is_not_json_fails_closed(world: World) -> None:
    world.fake.state.answer_next("GET", "/pulls/7", '{"number": 7, "head": ')
    with pytest.raises(GitHubError, match="not valid JSON"):
        world.gw.pull_request(REPO, 7)
    world.fake.state.answer_next("GET", "/pulls/7", "[]")
    with pytest.raises(GitHubError, match="not a JSON object"):
        world.gw.pull_request(REPO, 7)


def test_file_at_reads_text_at_a_ref_and_none_when_missing(world: World) -> None:
    world.fake.state.put_file(REPO, BASE, ".cujo.yml", "mode: diff\n" * 100)
    assert world.gw.file_at(REPO, ".cujo.yml", BASE) == "mode: diff\n" * 100
    assert world.fake.state.calls("GET", "/contents/")[0].query == {"ref": [BASE]}
    assert world.gw.file_at(REPO, ".cujo.yml", HEAD) is None


def test_file_at_refuses_a_file_over_the_cap(world: World) -> None:
    world.fake.state.put_file(REPO, "main", "big.txt", b"x" * 2000)
    with pytest.raises(GitHubError, match="2000 bytes, over the cap of 1000"):
        world.gw.file_at(REPO, "big.txt", "main", max_bytes=1000)


def test_file_at_fails_closed_on_a_directory_or_a_lying_size(world: World) -> None:
    world.fake.state.answer_next("GET", "/contents/docs", "[]")
    with pytest.raises(GitHubError, match="not a JSON object"):
        world.gw.file_at(REPO, "docs", "main")
    world.fake.state.answer_next(
        "GET",
        "/contents/a.txt",
        '{"type": "file", "encoding": "base64", "size": 9, "content": "eA=="}',
    )
    with pytest.raises(GitHubError, match="holds 1 bytes, 'size' says 9"):
        world.gw.file_at(REPO, "a.txt", "main")


# ---- check runs ----------------------------------------------------------------------


def test_a_check_run_is_created_with_exact_payload(world: World) -> None:
    retry = CheckAction("Retry", "Run the review again", "retry")
    check_id = world.gw.create_check_run(
        REPO, HEAD, status="in_progress", output=CheckOutput("Cujo", "Running"), actions=[retry]
    )
    assert only(world, "POST", "/check-runs$") == {
        "name": "cujo/guard",
        "head_sha": HEAD,
        "status": "in_progress",
        "output": {"title": "Cujo", "summary": "Running"},
        "actions": [
            {"label": "Retry", "description": "Run the review again", "identifier": "retry"}
        ],
    }
    assert world.fake.state.repos[REPO].check_runs[check_id]["status"] == "in_progress"


def test_a_check_run_is_updated_and_the_answer_checked(world: World) -> None:
    check_id = world.gw.create_check_run(REPO, HEAD, output=CheckOutput("Cujo", "Running"))
    run = world.gw.update_check_run(
        REPO, check_id, conclusion="failure", output=CheckOutput("Blocked", "critical")
    )
    assert (run.id, run.status, run.conclusion) == (check_id, "completed", "failure")
    assert only(world, "PATCH", f"/check-runs/{check_id}$") == {
        "conclusion": "failure",
        "output": {"title": "Blocked", "summary": "critical"},
    }


def test_check_run_arguments_are_validated_before_anything_is_sent(world: World) -> None:
    with pytest.raises(ValueError, match="conclusion"):
        world.gw.update_check_run(REPO, 5, conclusion="timed_out")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a conclusion"):
        world.gw.update_check_run(REPO, 5, status="completed")
    with pytest.raises(ValueError, match="at most 3"):
        world.gw.create_check_run(
            REPO, HEAD, output=CheckOutput("t", "s"), actions=[CheckAction("a", "b", "c")] * 4
        )
    with pytest.raises(ValueError, match="at most 20"):
        world.gw.create_check_run(
            REPO, HEAD, output=CheckOutput("t", "s"), actions=[CheckAction("x" * 21, "b", "c")]
        )
    assert world.fake.state.calls(path="check-runs") == []


def test_a_non_string_conclusion_in_the_answer_fails_closed(world: World) -> None:
    check_id = world.gw.create_check_run(REPO, HEAD, output=CheckOutput("Cujo", "Running"))
    world.fake.state.answer_next(
        "PATCH",
        "/check-runs/",
        f'{{"id": {check_id}, "name": "cujo/guard", "head_sha": "{HEAD}",'
        ' "status": "completed", "conclusion": 1}',
    )
    with pytest.raises(GitHubError, match="'conclusion'"):
        world.gw.update_check_run(REPO, check_id, conclusion="success")


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
    source = inspect.getsource(github_module)
    assert "APPROVE" not in source
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


# ---- permissions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("admin", "admin"),
        ("maintain", "maintain"),
        ("write", "write"),
        ("triage", "triage"),
        ("read", "read"),
        ("none", "none"),
        ("custom-reviewer", "write"),  # a custom role: its base permission counts
    ],
)
def test_permission_reads_the_role(world: World, role: str, expected: str) -> None:
    world.fake.state.set_role(REPO, "mona", role)
    assert world.gw.permission(REPO, "mona") == expected


def test_permission_is_read_from_github_every_time(world: World) -> None:
    world.fake.state.set_role(REPO, "mona", "write")
    assert world.gw.permission(REPO, "mona") == "write"
    world.fake.state.set_role(REPO, "mona", "read")
    assert world.gw.permission(REPO, "mona") == "read"
    assert len(world.fake.state.calls("GET", "/collaborators/mona/permission$")) == 2


def test_permission_fails_closed_on_an_unknown_answer(world: World) -> None:
    world.fake.state.answer_next("GET", "/permission$", '{"permission": "owner"}')
    with pytest.raises(GitHubError, match="'permission'"):
        world.gw.permission(REPO, "mona")
    with pytest.raises(GitHubError, match="HTTP 404"):
        world.gw.permission(REPO, "ghost")


# ---- Actions -------------------------------------------------------------------------


def test_dispatch_returns_the_run_details_and_runs_the_actions_behaviour(world: World) -> None:
    state = world.fake.state
    state.add_workflow(REPO, "cujo.yml", run_name=lambda inputs: f"cujo {inputs['run-id']}")
    seen: list[Dispatch] = []
    state.on_dispatch(seen.append, background=False)
    result = world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {"run-id": "r-1"})
    assert result.workflow_run_id is not None
    assert result.html_url == f"https://github.com/{REPO}/actions/runs/{result.workflow_run_id}"
    assert only(world, "POST", "/actions/workflows/cujo.yml/dispatches$") == {
        "ref": "main",
        "inputs": {"run-id": "r-1"},
        "return_run_details": True,
    }
    assert [(d.run_id, d.inputs) for d in seen] == [(result.workflow_run_id, {"run-id": "r-1"})]
    run = world.gw.workflow_run(REPO, result.workflow_run_id)
    assert (run.display_title, run.status, run.conclusion) == ("cujo r-1", "queued", None)


def test_dispatch_without_run_details_falls_back(world: World) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    world.fake.state.dispatch_returns_details = False
    result = world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {})
    assert result == DispatchResult(None, None)


def test_dispatch_details_without_a_run_id_fail_closed(world: World) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    world.fake.state.answer_next("POST", "/dispatches$", '{"run_url": "x", "html_url": "y"}')
    with pytest.raises(GitHubError, match="workflow_run_id"):
        world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {})


def test_workflow_runs_are_listed_since_a_time(world: World) -> None:
    state = world.fake.state
    state.add_workflow(REPO, "cujo.yml")
    now = time.time()
    state.add_run(REPO, "cujo.yml", display_title="old", created_at=now - 7200)
    new = state.add_run(REPO, "cujo.yml", display_title="cujo r-2", created_at=now)
    since = datetime.fromtimestamp(now - 60, UTC)
    runs = world.gw.list_workflow_runs(REPO, "cujo.yml", created_after=since)
    assert [(r.id, r.display_title, r.run_attempt) for r in runs] == [(new["id"], "cujo r-2", 1)]
    query = world.fake.state.calls("GET", "/workflows/cujo.yml/runs$")[0].query
    assert query["created"] == [f">={since.strftime('%Y-%m-%dT%H:%M:%SZ')}"]
    assert len(world.gw.list_workflow_runs(REPO, "cujo.yml")) == 2


def test_a_run_is_cancelled_once_and_a_finished_one_is_reported(world: World) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    run = world.fake.state.add_run(REPO, "cujo.yml", status="waiting")
    assert world.gw.cancel_workflow_run(REPO, run["id"]) is True
    assert world.gw.workflow_run(REPO, run["id"]).conclusion == "cancelled"
    assert world.gw.cancel_workflow_run(REPO, run["id"]) is False


def test_a_workflow_run_with_an_unknown_status_fails_closed(world: World) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    run = world.fake.state.add_run(REPO, "cujo.yml", status="exploded")
    with pytest.raises(GitHubError, match="'status'"):
        world.gw.workflow_run(REPO, run["id"])


# ---- artifacts -----------------------------------------------------------------------


def _run_with_reports(world: World, files: dict[str, bytes | str]) -> tuple[int, int]:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    run = world.fake.state.add_run(REPO, "cujo.yml", status="completed", conclusion="success")
    art = world.fake.state.add_artifact(REPO, run["id"], "cujo-reports", files=files)
    return run["id"], art["id"]


def test_an_artifact_is_listed_and_downloaded_without_credentials(
    world: World, tmp_path: Path
) -> None:
    run_id, art_id = _run_with_reports(world, {"manifest.json": "{}", "detonation.json": "{}"})
    arts = world.gw.run_artifacts(REPO, run_id)
    assert [(a.id, a.name, a.expired) for a in arts] == [(art_id, "cujo-reports", False)]
    dest = world.gw.download_artifact(REPO, art_id, tmp_path / "reports.zip", max_bytes=1 << 20)
    with zipfile.ZipFile(dest) as zf:
        assert sorted(zf.namelist()) == ["detonation.json", "manifest.json"]
    (blob,) = world.fake.state.calls(path="^/blob/")
    assert blob.host == "blob"
    assert blob.auth == "none"  # the fake would also have refused a leaked header
    assert "authorization" not in blob.headers


def test_the_archive_host_refuses_credentials(world: World) -> None:
    location = world.fake.state.blob_for(b"zip")
    answer = requests.get(location, headers={"Authorization": "token ghs_x"}, timeout=5)
    assert answer.status_code == 599
    assert [u.reason for u in world.fake.state.unknown_requests] == [
        "an Authorization header reached the archive host"
    ]
    world.fake.state.unknown_requests.clear()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "streamed"])
def test_an_artifact_over_the_cap_is_refused_and_nothing_is_kept(
    world: World, tmp_path: Path, declared: bool
) -> None:
    _, art_id = _run_with_reports(world, {"big.bin": os.urandom(200_000)})
    world.fake.state.blob_declares_length = declared
    dest = tmp_path / "reports.zip"
    with pytest.raises(GitHubError, match="over the cap of 100000" if declared else "over the cap"):
        world.gw.download_artifact(REPO, art_id, dest, max_bytes=100_000)
    assert list(tmp_path.iterdir()) == []
    world.fake.state.blob_declares_length = True
    world.gw.download_artifact(REPO, art_id, dest, max_bytes=300_000)
    assert dest.stat().st_size > 200_000


def test_an_expired_artifact_fails_closed(world: World, tmp_path: Path) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    run = world.fake.state.add_run(REPO, "cujo.yml", status="completed", conclusion="success")
    art = world.fake.state.add_artifact(REPO, run["id"], archive=zip_bytes({}), expired=True)
    zip_path = rf"^/repos/{REPO}/actions/artifacts/{art['id']}/zip$"
    with pytest.raises(GitHubError, match="HTTP 410") as raised:
        world.gw.download_artifact(REPO, art["id"], tmp_path / "a.zip", max_bytes=1 << 20)

    # What the client does with a gone artifact: it names the call and keeps GitHub's
    # status for its caller, asks once (a 410 is final, not retried), and leaves nothing
    # at the destination, neither the file nor a part of it.
    error = raised.value
    assert error.call == f"GET /repos/{REPO}/actions/artifacts/{art['id']}/zip"
    assert error.status == 410
    assert len(world.fake.state.calls("GET", zip_path)) == 1
    assert list(tmp_path.iterdir()) == []


def test_actions_behaviour_can_upload_the_bundle_in_the_background(
    world: World, tmp_path: Path
) -> None:
    state = world.fake.state
    state.add_workflow(REPO, "cujo.yml")

    def actions(d: Dispatch) -> None:
        state.set_run(d.repo, d.run_id, status="in_progress")
        state.add_artifact(d.repo, d.run_id, files={"manifest.json": d.inputs["run-id"]})
        state.set_run(d.repo, d.run_id, status="completed", conclusion="success")

    state.on_dispatch(actions)
    result = world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {"run-id": "r-9"})
    assert result.workflow_run_id is not None
    state.wait_for_actions(timeout_s=10)
    assert world.gw.workflow_run(REPO, result.workflow_run_id).conclusion == "success"
    (art,) = world.gw.run_artifacts(REPO, result.workflow_run_id)
    path = world.gw.download_artifact(REPO, art.id, tmp_path / "r.zip", max_bytes=4096)
    with zipfile.ZipFile(path) as zf:
        assert zf.read("manifest.json") == b"r-9"


# ---- branch rules and protection -----------------------------------------------------


def test_branch_rules_give_the_required_checks_and_their_apps(world: World) -> None:
    world.fake.state.set_rules(
        REPO,
        "main",
        [
            {"type": "deletion", "ruleset_source_type": "Repository", "ruleset_source": REPO,
             "ruleset_id": 11},
            {"type": "required_status_checks", "ruleset_source_type": "Repository",
             "ruleset_source": REPO, "ruleset_id": 12,
             "parameters": {"strict_required_status_checks_policy": False,
                            "required_status_checks": [
                                {"context": "cujo/guard", "integration_id": 4242},
                                {"context": "ci"}]}},
        ],
    )  # fmt: skip
    rules = world.gw.branch_rules(REPO, "main")
    assert [r.type for r in rules.rules] == ["deletion", "required_status_checks"]
    assert [(c.context, c.app_id) for c in rules.required_checks] == [
        ("cujo/guard", 4242),
        ("ci", None),
    ]
    assert rules.rules[1].strict is False


def test_malformed_branch_rules_fail_closed(world: World) -> None:
    world.fake.state.set_rules(REPO, "main", [{"type": "required_status_checks"}])
    with pytest.raises(GitHubError, match=r"'\[0\].parameters' is missing"):
        world.gw.branch_rules(REPO, "main")


def test_branch_protection_gives_checks_or_none_when_unprotected(world: World) -> None:
    assert world.gw.branch_protection(REPO, "main") is None
    world.fake.state.set_protection(
        REPO,
        "main",
        {
            "required_status_checks": {
                "strict": True,
                "contexts": ["cujo/guard"],
                "checks": [{"context": "cujo/guard", "app_id": 4242}],
            },
            "enforce_admins": {"enabled": True},
        },
    )
    protection = world.gw.branch_protection(REPO, "main")
    assert protection is not None
    assert protection.required_checks == (github_module.RequiredCheck("cujo/guard", 4242),)
    assert (protection.strict, protection.enforce_admins) == (True, True)


def test_branch_protection_that_contradicts_itself_fails_closed(world: World) -> None:
    world.fake.state.set_protection(
        REPO,
        "main",
        {"required_status_checks": {"strict": True, "contexts": ["ci"], "checks": []}},
    )
    with pytest.raises(GitHubError, match="disagree"):
        world.gw.branch_protection(REPO, "main")


def test_a_protection_404_other_than_unprotected_stays_an_error(world: World) -> None:
    world.fake.state.answer_next("GET", "/protection$", '{"message": "Not Found"}', status=404)
    with pytest.raises(GitHubError, match="HTTP 404"):
        world.gw.branch_protection(REPO, "main")


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


def test_arguments_are_checked_before_a_request(world: World) -> None:
    with pytest.raises(ValueError, match="owner/name"):
        world.gw.pull_request("octo/widgets/../x", 7)
    with pytest.raises(ValueError, match="commit SHA"):
        world.gw.post_advisory_review(REPO, 7, "main", "Clean.")
    with pytest.raises(ValueError, match="at most 10 inputs"):
        world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {str(i): "x" for i in range(11)})
    assert world.fake.state.requests == []

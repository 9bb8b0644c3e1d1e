"""Creating and updating check runs, their arguments checked before anything is sent.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import pytest
from githubworld import HEAD, REPO, World, only

from app_relay.github.answers import GitHubError
from app_relay.github.payloads import (
    CheckAction,
    CheckOutput,
)

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

"""Dispatching workflows and following their runs.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from fakegithub import Dispatch
from githubworld import REPO, World, only

from app_relay.github.answers import DispatchResult, GitHubError

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

"""Runs inside GitHub's rate limits: followed by webhooks, polled slowly, limits waited out.

Against the fake GitHub (rate-limit headers, secondary limits, ETags), a real record and
ActionsRunner, through the coordinator. Where GitHub makes the relay wait, the App sleeps
on a clock the test shares with the fake, so the wait is time passing for both.
"""

from __future__ import annotations

from typing import Any

from coordinatorworld import World
from fakegithub import fake_sha
from githubworld import Clock
from relayworld import REPO, sample

from app_relay.github.app_auth import GitHubApp
from app_relay.github.budget import Budget
from app_relay.runs.coordinator import JOBS_POLL_S, Upkeep

INSTALLATION = "installation:77"


def budget_of(app: GitHubApp, key: str) -> Budget:
    """Return the App's budget for ``key``; fail when no call of it was made."""
    found = app.budgets.get(key)
    assert found is not None, f"no budget kept for {key}"
    return found


def on_a_shared_clock(make: Any, **app: Any) -> tuple[World, list[float]]:
    """Build a world whose App sleeps by moving a clock the fake GitHub also reads."""
    clock, sleeps = Clock(), []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    w: World = make(clock=clock, sleep=sleep, jitter=lambda: 0.0, **app)
    w.fake.state.clock = clock
    return w, sleeps


def job_event(w: World, action: str, status: str, steps: list[dict[str, Any]]) -> Any:
    """Return a workflow_job webhook for the one open run, as GitHub sends it."""
    (run,) = w.store.open_runs()
    job = sample("workflow_job.in_progress")
    job["action"] = action
    job["workflow_job"].update(
        run_id=run.workflow_run_id, head_sha=run.head_sha, status=status, steps=steps
    )
    job["repository"]["full_name"] = REPO
    return w.event("workflow_job", job)


def test_a_rate_limited_github_is_waited_out_without_losing_a_run(make: Any) -> None:
    w, sleeps = on_a_shared_clock(make)
    head = fake_sha()
    # The installation's budget is spent when the pull request opens, ten minutes from
    # its reset; when the sandbox is done, reading its workflow run meets a secondary limit.
    w.fake.state.exhaust_rate_limit(w.fake.installation_id, reset_in_s=600)
    w.fake.state.limit_secondary_next(1, retry_after=45, method="GET", path=r"/actions/runs/\d+$")
    w.open(1, head)
    (run,) = w.store.open_runs()
    assert run.state == "running"
    w.complete()
    assert w.store.get_run(run.run_id).state == "clean"
    (check,) = w.checks(head)
    assert check["conclusion"] == "success"
    assert len(w.reviews()) == 1
    assert sleeps == [600.0, 45.0]
    budget = budget_of(w.app, INSTALLATION)
    assert budget.rate_limited == 2


def test_a_reconcile_that_meets_a_rate_limit_leaves_the_run_for_the_next(make: Any) -> None:
    # No waits within a call: the limit reaches the reconcile itself.
    w = make(rate_limit_waits=0)
    head = fake_sha()
    held = w.actions.hold(head)
    w.open(2, head)
    (run,) = w.store.open_runs()
    w.fake.state.limit_secondary_next(1, retry_after=30, method="GET", path=r"/actions/runs/\d+$")
    assert w.coordinator.reconcile() == 0
    assert w.store.get_run(run.run_id).state == "running"
    assert any(
        e.kind == "reconciled" and "rate limited" in e.detail for e in w.store.events(run.run_id)
    )
    held.set()
    w.fake.state.wait_for_actions(timeout_s=60)
    assert w.coordinator.reconcile() == 1
    assert w.store.get_run(run.run_id).state == "clean"


def test_webhooks_advance_a_run_without_any_poll(make: Any) -> None:
    w = make()
    head = fake_sha()
    held = w.actions.hold(head)
    w.open(3, head)
    (run,) = w.store.open_runs()
    w.coordinator.follow(job_event(w, "in_progress", "in_progress", [
        {"name": "prepare", "status": "completed", "conclusion": "success", "number": 1},
        {"name": "arm", "status": "in_progress", "conclusion": None, "number": 2}]))  # fmt: skip
    w.coordinator.follow(job_event(w, "waiting", "waiting", []))
    assert w.store.get_run(run.run_id).state == "waiting"
    w.coordinator.follow(job_event(w, "in_progress", "in_progress", [
        {"name": "arm", "status": "completed", "conclusion": "success", "number": 2}]))  # fmt: skip
    assert w.store.get_run(run.run_id).state == "running"
    steps = [e.detail for e in w.store.events(run.run_id) if e.kind == "step"]
    assert steps == ["prepare: completed (success)", "arm: in_progress", "arm: completed (success)"]
    # Nothing was read from GitHub to follow it.
    assert w.fake.state.calls("GET", r"/jobs$") == []
    assert w.fake.state.calls("GET", r"/actions/runs/\d+$") == []
    held.set()
    w.complete()  # the workflow_run completed webhook finishes it
    assert w.store.get_run(run.run_id).state == "clean"


def test_the_jobs_are_polled_once_a_minute_and_an_unchanged_poll_is_free(make: Any) -> None:
    assert JOBS_POLL_S == 60.0
    w = make()
    head = fake_sha()
    held = w.actions.hold(head)
    w.open(4, head)
    (run,) = w.store.open_runs()
    assert run.workflow_run_id is not None
    w.fake.state.set_jobs(REPO, run.workflow_run_id, [("prepare", "in_progress", None)])
    window = w.fake.state.rate_windows[INSTALLATION]
    plan = Upkeep()  # the maintenance loop's defaults
    used = []
    for second in range(180):  # three minutes of one-second ticks
        w.coordinator.upkeep(plan, float(second))
        used.append(window.used)
    polls = w.fake.state.calls("GET", r"/jobs$")
    assert len(polls) == 3  # at 0, 60 and 120 s: not every 5 s
    assert ["if-none-match" in p.headers for p in polls] == [False, True, True]
    # The jobs did not change: the two later polls were 304s, not counted by GitHub.
    budget = budget_of(w.app, INSTALLATION)
    assert budget.not_modified >= 2
    assert used[-1] - used[0] <= 1  # at most the first reconcile's read of the run
    held.set()
    w.complete()
    assert w.store.get_run(run.run_id).state == "clean"

"""Benchmark GitHub requests per reviewed pull request: today's job polling against after.

Both sides run in process, the same way: the run coordinator over a real SQLite record,
against the loopback fake GitHub (which records every request and counts the 304s it
answered to conditional requests), with GitHub Actions simulated on a clock the bench
moves one second a turn. Each pull request's sandbox run lasts ``run_s`` seconds; its
one job moves through ``STEPS`` steps evenly; GitHub sends the ``workflow_run`` and
``workflow_job`` webhooks as it does (in progress, then completed), and the maintenance
loop turns once a second (``RunCoordinator.upkeep``: poll jobs when due, reconcile every
60 s, make effects).

* today (main before issue 23): the jobs polled every 5 s, every GET in full;
* after: the jobs polled every ``JOBS_POLL_S`` (60 s), by conditional requests.

Printed: API requests per reviewed pull request (the archive host's download excluded),
those that count against the rate limit (all but the 304s), and the ratio of after to
today, both measured in this run.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "fakes"))

from fakegithub import Dispatch, FakeGitHubServer, FakeState, fake_sha, make_key  # noqa: E402
from fakegithub.fixture import APP_ID, INSTALLATION_ID, AppKey, FakeGitHub  # noqa: E402
from relayworld import (  # noqa: E402
    REPO,
    open_pull,
    pull_request_event,
    sample,
    set_up_repo,
    synthetic_bundle,
    workflow_run_event,
    zip_folder,
)

from app_relay.decide.judge import DeterministicJudge  # noqa: E402
from app_relay.github.app_auth import GitHubApp  # noqa: E402
from app_relay.github.event import Event  # noqa: E402
from app_relay.runs.coordinator import JOBS_POLL_S, RunCoordinator, Upkeep  # noqa: E402
from app_relay.runs.effects import OutboxConfig  # noqa: E402
from app_relay.runs.review_request import review_request_of  # noqa: E402
from app_relay.runs.runners import ActionsRunner  # noqa: E402
from app_relay.store import Store  # noqa: E402
from app_relay.verbs.unlock import Unlock  # noqa: E402

STEPS = ("prepare", "arm", "install", "test", "smoke", "build", "bundle", "upload")
TODAY_POLL_S = 5.0  # runs/coordinator.py before issue 23


@dataclass
class Clock:
    """The simulated clock the fake GitHub, the App and Actions share."""

    now: float = 1_768_478_400.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Round:
    """One side's counts over its pull requests."""

    name: str
    prs: int
    requests: int = 0
    not_modified: int = 0
    job_reads: int = 0
    states: list[str] = field(default_factory=list)

    @property
    def counted(self) -> int:
        """Requests that count against the rate limit: all but the 304s."""
        return self.requests - self.not_modified


class _Actions:
    """GitHub Actions on the simulated clock: runs move through their steps, then finish."""

    def __init__(self, fake: FakeGitHub, clock: Clock, run_s: float, out: Path) -> None:
        self.fake, self.state = fake, fake.state
        self.clock, self.run_s, self.out = clock, run_s, out
        self.started: list[tuple[Dispatch, float]] = []
        self.shown: dict[int, int] = {}  # workflow run id → the step its job shows
        self.state.on_dispatch(lambda d: self.started.append((d, clock())), background=False)

    def tick(self) -> list[tuple[str, dict[str, Any]]]:
        """Move every run on to now; return the webhooks GitHub sends for what changed."""
        sent: list[tuple[str, dict[str, Any]]] = []
        for dispatch, t0 in list(self.started):
            run_id, elapsed = dispatch.run_id, self.clock() - t0
            if elapsed >= self.run_s:
                self.started.remove((dispatch, t0))
                sent += self._finish(dispatch)
                continue
            step = min(int(elapsed / (self.run_s / len(STEPS))), len(STEPS) - 1)
            if self.shown.get(run_id) == step:
                continue
            first = run_id not in self.shown
            self.shown[run_id] = step
            self._show(run_id, step, "in_progress")
            if first:
                run = self.state.set_run(REPO, run_id, status="in_progress")
                sent.append(("workflow_run", workflow_run_event(self.fake, dict(run))))
                sent.append(("workflow_job", self._job_event(run_id, "in_progress")))
        return sent

    def _show(self, run_id: int, step: int, status: str) -> None:
        steps: list[tuple[str, str, str | None]] = [
            (name, "completed", "success") for name in STEPS[:step]
        ]
        if step < len(STEPS):
            steps.append((STEPS[step], status, None))
        self.state.set_jobs(REPO, run_id, steps)

    def _finish(self, dispatch: Dispatch) -> list[tuple[str, dict[str, Any]]]:
        folder = self.out / str(dispatch.run_id)
        synthetic_bundle(
            folder,
            run_id=dispatch.inputs["run-id"],
            head=dispatch.inputs["head-sha"],
            base=dispatch.inputs["base-sha"],
        )
        self.state.add_artifact(REPO, dispatch.run_id, archive=zip_folder(folder))
        run = self.state.set_run(REPO, dispatch.run_id, status="completed", conclusion="success")
        self._show(dispatch.run_id, len(STEPS), "completed")
        job = self._job_event(dispatch.run_id, "completed")
        return [
            ("workflow_job", job),
            ("workflow_run", workflow_run_event(self.fake, dict(run))),
        ]

    def _job_event(self, run_id: int, action: str) -> dict[str, Any]:
        with self.state.lock:
            run = self.state.repos[REPO].runs[run_id]
            (job,) = copy.deepcopy(run["_jobs"])
        body = sample("workflow_job.in_progress")
        body["action"] = action
        body["workflow_job"].update(
            id=job["id"], run_id=run_id, name=job["name"], head_sha=run["head_sha"],
            status=run["status"], conclusion=run["conclusion"], steps=job["steps"],
        )  # fmt: skip
        body["repository"]["full_name"] = REPO
        body["installation"] = {"id": INSTALLATION_ID}
        return body


def _round(name: str, key: AppKey, *, poll_s: float, etags: bool, prs: int, run_s: float) -> Round:
    """Review ``prs`` pull requests on a fresh fake GitHub and record; count the requests."""
    clock = Clock()
    state = FakeState(app_id=APP_ID, public_key_pem=key.public_pem, clock=clock)
    state.add_installation(INSTALLATION_ID)
    server = FakeGitHubServer(state).start()
    fake = FakeGitHub(state, server.url, APP_ID, INSTALLATION_ID, key.private_pem)
    base = fake_sha()
    set_up_repo(fake, base_sha=base, policy="{}\n")

    def sleep(seconds: float) -> None:
        """A wait the App makes is simulated time passing."""
        clock.now += seconds

    app = GitHubApp(
        app_id=APP_ID, private_key=key.private_pem, base_url=server.url,
        seconds_between_requests=None, seconds_between_writes=None, clock=clock, sleep=sleep,
        etag_entries=512 if etags else 0,
    )  # fmt: skip
    done = Round(name, prs)
    with tempfile.TemporaryDirectory(prefix="cujo-bench-ratelimit-") as tmp:
        store = Store(f"sqlite:///{tmp}/runs.db")
        coordinator = RunCoordinator(
            store, app.gateway, ActionsRunner.with_gateway(app.gateway(INSTALLATION_ID)),
            DeterministicJudge(require_full_isolation=True), verbs=Unlock,
            bundles=Path(tmp) / "bundles", outbox=OutboxConfig(retry_s=0.0),
        )  # fmt: skip
        actions = _Actions(fake, clock, run_s, Path(tmp) / "actions")
        deliveries = 0

        def deliver(event: str, body: dict[str, Any]) -> Event:
            """Record a delivery, as the webhook does, and return its parsed event."""
            nonlocal deliveries
            deliveries += 1
            raw = json.dumps(body).encode()
            store.record_delivery(f"d-{deliveries}", event, body.get("action"), None, REPO, raw)
            return Event.parse(f"d-{deliveries}", event, raw)

        plan = Upkeep(poll_every_s=poll_s)
        # A pull request opens every 30 s; the clock runs until the last run is decided.
        opened, second = 0, 0
        while opened < prs or store.open_runs():
            if opened < prs and second % 30 == 0:
                opened += 1
                head = fake_sha()
                open_pull(fake, opened, head=head, base=base)
                body = pull_request_event(fake, number=opened, head=head, base=base)
                coordinator.request_review(review_request_of(deliver("pull_request", body)))
            for event, body in actions.tick():
                coordinator.follow(deliver(event, body))
            coordinator.upkeep(plan, float(second))
            second += 1
            clock.now += 1.0
            if second > 10 * 3600:
                raise RuntimeError("bench: the runs never finished")
        done.states = [r.state for r in store.list_runs()]
        store.close()
    app.close()
    server.stop()
    api = [r for r in state.requests if r.host == "api"]
    done.requests = len(api)
    done.not_modified = state.not_modified_answers
    done.job_reads = sum(1 for r in api if r.path.endswith("/jobs"))
    return done


def bench_ratelimit(prs: int = 5, run_s: float = 300.0) -> dict[str, float]:
    """Print GitHub requests per reviewed pull request, today against after; return them."""
    key = make_key()
    today = _round("today", key, poll_s=TODAY_POLL_S, etags=False, prs=prs, run_s=run_s)
    after = _round("after", key, poll_s=JOBS_POLL_S, etags=True, prs=prs, run_s=run_s)
    for side in (today, after):
        if side.states.count("clean") != prs:
            raise RuntimeError(
                f"bench: {side.name} did not review every pull request: {side.states}"
            )
    figures: dict[str, float] = {}
    for side in (today, after):
        per, counted, jobs = side.requests / prs, side.counted / prs, side.job_reads / prs
        figures[f"{side.name}_per_pr"], figures[f"{side.name}_counted_per_pr"] = per, counted
        print(
            f"GitHub requests per reviewed pull request, {side.name}: {per:.1f} "
            f"({counted:.1f} counted against the rate limit, {side.not_modified / prs:.1f} "
            f"answered 304; {jobs:.1f} reads of the jobs) over {prs} pull requests, "
            f"{run_s:g} s sandbox runs"
        )
    ratio = figures["after_counted_per_pr"] / figures["today_counted_per_pr"]
    print(
        f"after / today: {figures['after_per_pr'] / figures['today_per_pr']:.2f}x requests, "
        f"{ratio:.2f}x counted against the rate limit (target: well under 1)"
    )
    figures["ratio_counted"] = ratio
    return figures

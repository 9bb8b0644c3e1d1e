"""Move pull-request runs on GitHub: claim, supersede, dispatch, follow, finish, reconcile.

Thin I/O around ``runstate.machine`` (which decides what each state shows) and ``mode`` (which
decides whether a head is reviewed), wired from one part per step: ``start`` opens a
run for a review request (superseding older ones) and dispatches the sandbox workflow;
``follow`` folds the workflow's webhooks and jobs into the run and, on completion,
judges its bundle; ``finish`` records the verdict with exactly one review through one
of the gateway's two posting functions. Anything that goes wrong is ``error``, never a
review. A run that is no longer undecided (finished, superseded) ignores every later
event, so redeliveries and late reports post nothing.

Every state change goes through the record's conditional moves (``runstate.machine`` says which
exist), together with the GitHub effects that show it, as one transaction; the outbox
(``effects.Outbox``) then makes each effect once, retrying with backoff. Work on one
pull request is serialised by ``lease``: a lock per session in this process and a lease
on the run across relay processes sharing the record. This module keeps runs moving
(``maintain``) and settles what a dead relay left (``reconcile``).
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Final, Protocol

from app_relay.decide.judge import Judge, error_verdict
from app_relay.github.answers import GitHubError
from app_relay.github.client import GitHubGateway
from app_relay.github.event import Event
from app_relay.github.protection import HoldCache
from app_relay.github.retry import is_rate_limited
from app_relay.model.port import ModelPort
from app_relay.runs.desk import RunDesk
from app_relay.runs.effects import Outbox, OutboxConfig
from app_relay.runs.finish import FAILURES, RunFinisher
from app_relay.runs.follow import ActionsFollower
from app_relay.runs.lease import RUN_LEASE_S, RunBusy, RunLeases
from app_relay.runs.review_request import ReviewRequested
from app_relay.runs.runners import SandboxRunner
from app_relay.runs.start import RunStarter
from app_relay.runstate.caps import Caps
from app_relay.runstate.machine import OPEN_STATES
from app_relay.store import RunRecord, Store
from app_relay.store.tables import holder_name

log = logging.getLogger(__name__)
# How often the jobs of running sandbox runs are read, as a fallback: their webhooks
# carry the news (a job's steps too); this fills in the steps between them. Each read is
# conditional, so jobs that did not change cost nothing against the rate limit.
JOBS_POLL_S: Final = 60.0
RECONCILE_S: Final = 60.0


class VerbApplier(Protocol):
    """Apply or refuse the `/cujo` verbs of a comment (``verbs.unlock.Unlock``)."""

    def command(self, event: Event) -> None:
        """Apply or refuse a `/cujo` verb from a pull-request comment."""
        ...


# Makes the verb applier on the coordinator's desk and finisher: the caller passes
# ``verbs.unlock.Unlock``, as verbs/ is a feature above runs/.
VerbsFor = Callable[[RunDesk, RunFinisher], VerbApplier]


@dataclass
class Upkeep:
    """When the maintenance loop next polls jobs and reconciles, on its own clock."""

    poll_every_s: float = JOBS_POLL_S
    reconcile_every_s: float = RECONCILE_S
    next_poll: float = 0.0
    next_reconcile: float = 0.0


class RunCoordinator:
    """Take pull requests from a review request to one review, through the sandbox."""

    def __init__(
        self,
        store: Store,
        github_for: Callable[[int], GitHubGateway],
        runner: SandboxRunner,
        judge: Judge,
        workflow: str = "cujo.yml",
        *,
        verbs: VerbsFor,
        bundles: Path | None = None,
        outbox: OutboxConfig | None = None,
        run_lease_s: float = RUN_LEASE_S,
        model: ModelPort | None = None,
        hold_cache: HoldCache | None = None,
        caps: Caps | None = None,
    ) -> None:
        self.store = store
        self.github_for = github_for
        self.runner = runner
        self.workflow = workflow
        self.name = holder_name()
        self.outbox = Outbox(store, github_for, name=self.name, config=outbox)
        self.leases = RunLeases(store, self.name, run_lease_s)
        # Each step acts on the same desk (leases, outbox) and finishes through one finisher.
        desk = RunDesk(store, github_for, self.leases, self.outbox)
        self.finisher = finisher = RunFinisher(desk, hold_cache or HoldCache())
        self.starter = RunStarter(desk, runner, model, finisher, caps or Caps())
        bundles = bundles or Path(tempfile.gettempdir()) / "cujo-bundles"
        self.follower = ActionsFollower(desk, runner, judge, bundles, finisher)
        self.unlock = verbs(desk, finisher)

    def request_review(self, request: ReviewRequested) -> None:
        """Review a pull request's head, or record why not; idempotent per delivery."""
        self.starter.request_review(request)

    def retry(self, event: Event) -> None:
        """Start a new run on an errored run's commit; the new run owns its check."""
        self.starter.retry(event)

    def follow(self, event: Event) -> None:
        """Fold a workflow webhook into its run; finish the run when the workflow completes."""
        self.follower.follow(event)

    def command(self, event: Event) -> None:
        """Apply or refuse a `/cujo` verb from a pull-request comment (``verbs.unlock``)."""
        self.unlock.command(event)

    def rules_changed(self, repo: str | None) -> None:
        """Forget whether blocks in ``repo`` hold the merge: its rules changed (all: None)."""
        self.finisher.hold_cache.forget(repo)

    def pump_queue(self) -> int:
        """Start the queued heads that fit under the caps now; return how many started."""
        self.starter.queue_due.clear()
        return self.starter.pump()

    def poll_jobs(self) -> int:
        """Read the jobs of sandbox runs in progress and note their steps; return how many."""
        return self.follower.poll_jobs()

    def maintain(
        self,
        stop: threading.Event,
        *,
        tick_s: float = 1.0,
        reconcile_every_s: float = RECONCILE_S,
        poll_every_s: float = JOBS_POLL_S,
        on_reconciled: Callable[[int], None] | None = None,
    ) -> None:
        """Until ``stop``: make due effects every tick, poll jobs and reconcile now and again.

        The first reconcile is at once (a restart settles what the last process left);
        later ones pick up runs a dead peer held once its lease ran out, and runs whose
        webhooks never came.
        """
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(stop,), name="cujo-run-leases", daemon=True
        )
        heartbeat.start()
        plan = Upkeep(poll_every_s=poll_every_s, reconcile_every_s=reconcile_every_s)
        while not stop.is_set():
            try:
                self.upkeep(plan, time.monotonic(), on_reconciled)
            except Exception:  # the loop outlives one bad turn; the record keeps the rest
                log.exception("keeping runs and effects moving failed; trying again")
            stop.wait(tick_s)
        heartbeat.join()

    def upkeep(
        self, plan: Upkeep, now: float, on_reconciled: Callable[[int], None] | None = None
    ) -> None:
        """Do one turn of the maintenance loop at ``now`` (seconds on the plan's clock).

        Poll the jobs when a poll is due; start queued heads when a run ended or at a
        reconcile's turn; then reconcile when due, else make due effects.
        """
        if now >= plan.next_poll:
            plan.next_poll = now + plan.poll_every_s
            self.poll_jobs()
        if self.starter.queue_due.is_set() or now >= plan.next_reconcile:
            # A run ended (here, or at a peer: the reconcile's turn): the next starts.
            self.pump_queue()
        if now >= plan.next_reconcile:
            moved = self.reconcile()
            plan.next_reconcile = now + plan.reconcile_every_s
            if on_reconciled is not None:
                on_reconciled(moved)
        else:
            self.outbox.drain()

    def _heartbeat(self, stop: threading.Event) -> None:
        # A third of the way into each lease, as the delivery leases are renewed.
        while not stop.wait(self.leases.lease_s / 3):
            try:
                self.leases.renew()
            except Exception:
                log.exception("renewing run leases failed")

    def reconcile(self) -> int:
        """Settle undecided runs nobody holds against GitHub; make pending effects.

        Run at a relay's start and then now and again: a run whose relay died mid-act is
        free once its lease runs out, and one a live peer is acting on is left alone.
        Return how many runs were decided.
        """
        moved = 0
        for run in self.store.unleased_open_runs():
            try:
                moved += self._reconcile_one(run)
            except RunBusy:
                continue  # a peer took it between the listing and now
        self.outbox.drain()
        return moved

    def _reconcile_one(self, run: RunRecord) -> int:
        with self.leases.session(run.session_id), self.leases.acting(run.run_id):
            run = self.store.get_run(run.run_id)
            if run.state not in OPEN_STATES:
                return 0
            if run.installation_id is None:
                return int(self.store.mark_abandoned(run.run_id, "it names no installation"))
            if run.workflow_run_id is None:
                # The relay that started it died around the dispatch: find the workflow
                # run it started, or start it now (nothing is lost to a crash).
                since = run.started_at - timedelta(minutes=5)
                try:
                    found_id = self.runner.find_dispatched(run.repo, run.run_id, since)
                except FAILURES as exc:
                    why = f"resuming after a restart: {exc}"
                    self.finisher.finish(run.run_id, error_verdict(why))
                    return 1
                if found_id is None:
                    self.store.add_event(run.run_id, "reconciled", "not dispatched yet: now")
                    self.starter.dispatch(run)
                    return int(self.store.get_run(run.run_id).state not in OPEN_STATES)
                self.store.bind_github(run.run_id, workflow_run_id=found_id)
                self.store.add_event(run.run_id, "reconciled", f"found workflow run {found_id}")
                run = self.store.get_run(run.run_id)
            assert run.installation_id is not None
            assert run.workflow_run_id is not None
            gh = self.github_for(run.installation_id)
            try:
                found = gh.workflow_run(run.repo, run.workflow_run_id)
            except FAILURES as exc:
                if isinstance(exc, GitHubError) and is_rate_limited(
                    exc.status, exc.reason, exc.headers
                ):
                    # GitHub is not saying no, only not now: the next reconcile asks again.
                    self.store.add_event(run.run_id, "reconciled", f"rate limited: {exc}")
                    return 0
                reason = f"its workflow run {run.workflow_run_id} cannot be read: {exc}"
                self.finisher.finish(run.run_id, error_verdict(reason))
                return 1
            if found.status == "completed":
                self.follower.finish_from_actions(run)
                return 1
            self.store.add_event(run.run_id, "reconciled", f"workflow run is {found.status}")
            return 0

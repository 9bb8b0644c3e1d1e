"""Move pull-request runs on GitHub: claim, supersede, dispatch, follow, finish, reconcile.

Thin I/O around ``runstate`` (which decides what each state shows) and ``mode`` (which
decides whether a head is reviewed). A review request opens a run: older undecided runs
of the pull request are superseded (their workflow runs cancelled, their checks
``skipped`` unless the new run reviews the same commit and takes the check over), the
new run is recorded ``running``, ``cujo/guard`` goes ``in_progress`` with an ``eyes``
reaction, and the sandbox workflow is dispatched on the default branch. Its progress
arrives as ``workflow_job``/``workflow_run`` webhooks; on completion the bundle is
fetched, validated and judged, and the run finishes with exactly one review through one
of the gateway's two posting functions. Anything that goes wrong is ``error``, never a
review. A run that is no longer undecided (finished, superseded) ignores every later
event, so redeliveries and late reports post nothing.

Every state change goes through the record's conditional moves (``runstate`` says which
exist), together with the GitHub effects that show it, as one transaction; the outbox
(``effects.Outbox``) then makes each effect once, retrying with backoff. Work on one
pull request is serialised by a lock per session (in this process) and by a lease on
the run (across relay processes sharing the record): a relay acts on a run only while it
holds the run's lease, and reconciles only runs nobody holds.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol

from app_relay.decide.bundle_verdict import verdict_of
from app_relay.decide.judge import Judge, error_verdict
from app_relay.decide.verdict import Verdict
from app_relay.github.client import ChangedFiles, GitHubError, GitHubGateway, JobStep
from app_relay.github.protection import Hold, HoldCache
from app_relay.model.diffreview import read_standards, review_diff
from app_relay.model.port import ModelPort
from app_relay.runs import mode as modes
from app_relay.runs.effects import (
    Outbox,
    OutboxConfig,
    cancel_intent,
    check_intent,
    reaction_intent,
    review_intent,
)
from app_relay.runs.mode import POLICY_FILE
from app_relay.runs.runners import Dispatched, RunnerError, RunProgress
from app_relay.runs.state import GUARD, OPEN_STATES, RETRY_ACTION, RunState, guard_for, reaction_for
from app_relay.runs.state import review_for as review_kind
from app_relay.runs.tamper import described, reconcile, record_verdict, with_tampering
from app_relay.store import Intent, RunClosed, RunRecord, Store
from app_relay.webhook.events import Event, MalformedEvent, ReviewRequested, record_request
from app_relay.words.inert import code_span
from app_relay.words.review_body import render_review
from cujo_action.evidence.reader import Bundle, BundleError
from cujo_action.schema import Policy, PolicyError, load_policy

log = logging.getLogger(__name__)

FAILURES = (GitHubError, RunnerError, BundleError, ValueError, OSError)
# How long a relay holds a run while acting on it; one that dies mid-act lets go after it.
RUN_LEASE_S = 300.0


class RunBusy(RuntimeError):
    """Another relay process holds this run right now; the delivery is tried again later."""


class SandboxRunner(Protocol):
    """Where the sandbox runs: ``runners.ActionsRunner`` on GitHub Actions."""

    def dispatch(
        self,
        repo: str,
        default_branch: str,
        *,
        run_id: str,
        base_sha: str,
        head_sha: str,
        pull_request: int,
    ) -> Dispatched:
        """Start the sandbox workflow for one run."""
        ...

    def fold_event(self, event_name: str, payload: object) -> RunProgress | None:
        """Fold a workflow webhook into progress, or None when it is not one."""
        ...

    def fetch_bundle(
        self,
        repo: str,
        workflow_run_id: int,
        *,
        run_id: str,
        head_sha: str,
        base_sha: str,
        dest: Path,
    ) -> Bundle:
        """Download and validate a finished run's bundle."""
        ...

    def cancel(self, repo: str, workflow_run_id: int) -> bool:
        """Cancel a workflow run (which also ends a wait on a person)."""
        ...

    def find_dispatched(self, repo: str, run_id: str, since: datetime) -> int | None:
        """Return the workflow run a dispatch for ``run_id`` started, if there is one."""
        ...

    def job_log(self, repo: str, workflow_run_id: int) -> str:
        """Return the log of the run's sandbox job (the tamper record is in it)."""
        ...


@dataclass(frozen=True)
class Head:
    """A pull request head about to be reviewed, with everything a run needs."""

    session_id: str
    repo: str
    number: int
    installation_id: int
    base_sha: str
    head_sha: str
    default_branch: str | None
    delivery_id: str
    base_ref: str | None = None


def on_unproven_of(run: RunRecord) -> Literal["hold", "pass"]:
    """Return the run's ``on_unproven`` (hold when its policy is not recorded)."""
    if run.policy_json is None:
        return "hold"
    return Policy.model_validate_json(run.policy_json).on_unproven


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
        bundles: Path | None = None,
        outbox: OutboxConfig | None = None,
        run_lease_s: float = RUN_LEASE_S,
        model: ModelPort | None = None,
    ) -> None:
        self.store = store
        # The cheap model a `mode: diff` review asks; None (no key) reviews in the sandbox.
        self.model = model
        self.run_lease_s = run_lease_s
        self.github_for = github_for
        self.runner = runner
        self.judge = judge
        self.workflow = workflow
        self.bundles = bundles or Path(tempfile.gettempdir()) / "cujo-bundles"
        # Unique per coordinator: a restarted relay must not pass for the one that died.
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.outbox = Outbox(store, github_for, name=self.name, config=outbox)
        self.hold_cache = HoldCache()
        # Re-entrant: starting a run may finish it at once (a policy error) under the lock.
        self._locks: dict[str, threading.RLock] = {}
        self._locks_lock = threading.Lock()
        self._holding: dict[str, int] = {}
        self._holding_lock = threading.Lock()

    @contextmanager
    def _session(self, session_id: str) -> Iterator[None]:
        with self._locks_lock:
            lock = self._locks.setdefault(session_id, threading.RLock())
        with lock:
            yield

    @contextmanager
    def _acting(self, run_id: str) -> Iterator[None]:
        """Hold the run's lease while acting on it (re-entrant); ``RunBusy`` if a peer has it.

        Taken under the session lock, so this relay's own threads never meet here; the
        heartbeat in ``maintain`` renews the leases held while an act lasts.
        """
        with self._holding_lock:
            held = self._holding.get(run_id, 0)
        if held == 0 and not self.store.acquire_run(run_id, self.name, self.run_lease_s):
            raise RunBusy(f"run {run_id} is being acted on by another relay")
        self._hold(run_id, +1)
        try:
            yield
        finally:
            if self._hold(run_id, -1) == 0:
                self.store.release_run(run_id, self.name)

    def _hold(self, run_id: str, step: int) -> int:
        with self._holding_lock:
            count = self._holding.get(run_id, 0) + step
            if count:
                self._holding[run_id] = count
            else:
                self._holding.pop(run_id, None)
            return count

    def renew_leases(self) -> None:
        """Renew the leases on the runs this relay is acting on right now."""
        with self._holding_lock:
            held = list(self._holding)
        for run_id in held:
            self.store.acquire_run(run_id, self.name, self.run_lease_s)

    # What unlock.py uses of the coordinator: the same lock, lease and outbox.
    session_lock = _session
    acting = _acting

    def hold(self, run: RunRecord) -> Hold:
        """Whether a block of ``run`` holds the merge, kept on the run as it is read."""
        hold = self.hold_of(run.installation_id, run.repo, run.base_ref)
        if hold.answer != run.holds:
            self.store.bind_github(run.run_id, holds=hold.answer)
        return hold

    def hold_of(self, installation_id: int | None, repo: str, base_ref: str | None) -> Hold:
        """Whether ``cujo/guard`` holds merges into ``base_ref`` (guard.py, cached a minute)."""
        if installation_id is None or not base_ref:
            return Hold("unknown", "the pull request's base branch is not recorded.")
        gh = self.github_for(installation_id)
        try:
            return self.hold_cache.hold(gh, repo, base_ref, gh.app_id)
        except FAILURES as exc:
            return Hold("unknown", f"the branch rules could not be read: {code_span(str(exc))}")

    def command(self, event: Event) -> None:
        """Apply or refuse a `/cujo` verb from a pull-request comment (unlock.py)."""
        from app_relay.verbs.unlock import Unlock  # noqa: PLC0415  (unlock imports this module's types)

        Unlock(self).command(event)

    # ------------------------------------------------------------------ review requests

    def request_review(self, request: ReviewRequested) -> None:
        """Review a pull request's head, or record why not; idempotent per delivery."""
        session_id = record_request(self.store, request)
        if request.installation_id is None:
            # Without an installation nothing can be read or written as the App.
            self.store.note_request(request.delivery_id, "not reviewed: no installation named")
            raise MalformedEvent("the pull_request event names no installation")
        with self._session(session_id):
            if self.store.run_of_delivery(request.delivery_id) is not None:
                return  # handled before: a redelivery, or a retry after a crash
            gh = self.github_for(request.installation_id)
            pr = gh.pull_request(request.repo, request.pr_number)
            if pr.head_sha != request.head_sha:
                # Only the newest head is reviewed; its own event starts its run.
                self.store.note_request(
                    request.delivery_id,
                    f"not reviewed: the head moved on to {pr.head_sha[:12]}",
                )
                return
            head = Head(
                session_id=session_id,
                repo=request.repo,
                number=request.pr_number,
                installation_id=request.installation_id,
                base_sha=pr.base_sha,
                head_sha=pr.head_sha,
                default_branch=request.default_branch,
                delivery_id=request.delivery_id,
                base_ref=pr.base_ref,
            )
            facts = modes.PullRequestFacts(
                action=request.action,
                state=pr.state,
                draft=pr.draft,
                base_ref=pr.base_ref,
                author_type=pr.author_type,
                changed_files=(),
            )
            self._choose_and_start(gh, head, facts, check_run_id=None)

    def _choose_and_start(
        self,
        gh: GitHubGateway,
        head: Head,
        facts: modes.PullRequestFacts,
        *,
        check_run_id: int | None,
    ) -> None:
        # Policy from base, never head (DESIGN section 4).
        text = gh.file_at(head.repo, POLICY_FILE, head.base_sha)
        try:
            policy: Policy | PolicyError = load_policy(text, POLICY_FILE)
        except PolicyError as exc:
            policy = exc
        if isinstance(policy, PolicyError):
            note = f"the policy at base {head.base_sha[:12]} cannot be used"
            self._start(gh, head, policy, note, check_run_id=check_run_id)
            return
        try:
            files = gh.pull_request_files(head.repo, head.number)
        except GitHubError as exc:
            # Fail closed and visibly: the sandbox review, with the reason on the check.
            files = ChangedFiles((), f"the list could not be read: {code_span(str(exc))}")
        facts = modes.PullRequestFacts(
            action=facts.action,
            state=facts.state,
            draft=facts.draft,
            base_ref=facts.base_ref,
            author_type=facts.author_type,
            changed_files=files.paths,
            files_incomplete=files.incomplete,
        )
        choice = modes.choose(policy, facts)
        if not choice.review:
            self.store.note_request(head.delivery_id, f"not reviewed: {choice.reason}")
            log.info("%s#%d not reviewed: %s", head.repo, head.number, choice.reason)
            return
        if choice.mode == "diff" and self.model is not None:
            note = f"Diff review: {choice.reason}."
            self._start(gh, head, policy, note, check_run_id=check_run_id, diff=files)
            return
        note = f"Sandbox review: {choice.reason}."
        if choice.mode == "diff":
            note = (
                f"`mode: diff` was chosen ({choice.reason}), but a diff review needs a model "
                "key (ANTHROPIC_API_KEY on the relay) and none is set: this head is reviewed "
                "in the sandbox instead."
            )
        self._start(gh, head, policy, note, check_run_id=check_run_id)

    def _start(
        self,
        gh: GitHubGateway,
        head: Head,
        policy: Policy | PolicyError,
        note: str,
        *,
        check_run_id: int | None,
        diff: ChangedFiles | None = None,
    ) -> None:
        """Record a run and start its review: the sandbox, or the diff review with ``diff``."""
        run_id = uuid.uuid4().hex
        owned = self._supersede(head, run_id)
        check_run_id = check_run_id or owned
        on_error = "hold" if isinstance(policy, PolicyError) else policy.on_error
        hold = self.hold_of(head.installation_id, head.repo, head.base_ref)
        view = guard_for(
            "running", summary=note, holds=hold.answer, holds_line=hold.line(),
            diff_review=diff is not None,
        )  # fmt: skip
        self.store.start_run(
            head.session_id,
            run_id,
            head.base_sha,
            head.head_sha,
            "sandbox" if diff is None else "diff",
            # The verdict is judged under this policy, never the bundle's copy of it.
            policy_json=None if isinstance(policy, PolicyError) else policy.model_dump_json(),
            github={
                "installation_id": head.installation_id,
                "delivery_id": head.delivery_id,
                "default_branch": head.default_branch,
                "on_error": on_error,
                # The new run on the same commit owns the check: it goes back in progress.
                "check_run_id": check_run_id,
                "base_ref": head.base_ref,
                "holds": hold.answer,
            },
            lease=(self.name, self.run_lease_s),
            effects=[check_intent(view, head.head_sha), *self._reaction(head.number, "running")],
        )
        self._hold(run_id, +1)  # start_run took the lease
        try:
            self.store.note_request(head.delivery_id, f"reviewed in run {run_id}", run_id)
            self.store.add_event(run_id, "mode", note)
            self.outbox.drain(run_id)
            if isinstance(policy, PolicyError):
                self._finish(run_id, error_verdict(f"{POLICY_FILE} at base: {policy}"))
                return
            if diff is not None:
                self._review_diff(gh, head, policy, diff, run_id)
                return
            self._dispatch(self.store.get_run(run_id))
        finally:
            if self._hold(run_id, -1) == 0:
                self.store.release_run(run_id, self.name)

    def _review_diff(
        self, gh: GitHubGateway, head: Head, policy: Policy, files: ChangedFiles, run_id: str
    ) -> None:
        """Review the pull request's diff with the cheap model: no dispatch, no sandbox."""
        assert self.model is not None
        try:
            # Standards files (AGENTS.md, CONTRIBUTING.md, ...) are read at base, never head.
            standards = read_standards(functools.partial(gh.file_at, head.repo), head.base_sha)
        except FAILURES as exc:
            self._finish(run_id, error_verdict(f"reading the standards files at base: {exc}"))
            return
        done = review_diff(
            self.model, diff=files.unified_diff(), standards=standards, policy=policy
        )
        self._finish(run_id, done.verdict, evidence=done.evidence(), ran=done.ran())

    def _dispatch(self, run: RunRecord) -> None:
        """Start the sandbox workflow for a recorded run; an error verdict when it cannot."""
        try:
            if not run.default_branch:
                raise RunnerError("the webhook named no default branch to dispatch the sandbox on")
            assert run.pr_number is not None
            dispatched = self.runner.dispatch(
                run.repo,
                run.default_branch,
                run_id=run.run_id,
                base_sha=run.base_sha,
                head_sha=run.head_sha,
                pull_request=run.pr_number,
            )
        except FAILURES as exc:
            log.warning("run %s could not start: %s", run.run_id, exc)
            self._finish(run.run_id, error_verdict(f"starting the sandbox: {exc}"))
            return
        self.store.bind_github(run.run_id, workflow_run_id=dispatched.workflow_run_id)
        self.store.add_event(
            run.run_id,
            "dispatched",
            f"workflow run {dispatched.workflow_run_id} {dispatched.html_url or ''}".strip(),
        )

    def _supersede(self, head: Head, new_run: str) -> int | None:
        """Stop the pull request's undecided runs; return a check the new run takes over."""
        owned: int | None = None
        for old in self.store.open_runs(head.session_id):
            effects: list[Intent] = []
            if old.workflow_run_id is not None:
                # Cancelling also answers a wait on a person (an environment approval).
                effects.append(cancel_intent(old.workflow_run_id))
            same_commit = old.head_sha == head.head_sha
            if not same_commit:
                effects.append(check_intent(guard_for("superseded"), old.head_sha))
            if not self.store.supersede(old.run_id, new_run, effects=effects):
                continue  # decided meanwhile: its outcome stands for its commit
            if same_commit and old.check_run_id is not None:
                owned = old.check_run_id
            self.outbox.drain(old.run_id)
        return owned

    # ------------------------------------------------------------------ progress

    def follow(self, event: Event) -> None:
        """Fold a workflow webhook into its run; finish the run when the workflow completes."""
        progress = self.runner.fold_event(event.name, event.payload)
        if progress is None:
            return
        run = self._run_of(progress)
        if run is None:
            log.info("workflow run %s is not one of Cujo's runs", progress.workflow_run_id)
            return
        with self._session(run.session_id), self._acting(run.run_id):
            run = self.store.get_run(run.run_id)
            if run.workflow_run_id != progress.workflow_run_id or run.state not in OPEN_STATES:
                # A decided or superseded run ignores late and repeated events.
                return
            self.store.add_event(
                run.run_id,
                "sandbox",
                f"{progress.event} {progress.action}: {progress.status}"
                + (f" ({progress.conclusion})" if progress.conclusion else ""),
            )
            if progress.event == "workflow_job":
                self._follow_job(run, progress)
                return
            if progress.action == "completed":
                self.finish_from_actions(run)

    def _run_of(self, progress: RunProgress) -> RunRecord | None:
        found = self.store.run_of_workflow_run(progress.repo, progress.workflow_run_id)
        if found is not None or progress.cujo_run_id is None:
            return found
        # The webhook can arrive before the dispatch's answer was recorded; the run-name
        # names the run, and the session lock waits for the dispatch to be recorded.
        try:
            run = self.store.get_run(progress.cujo_run_id)
        except LookupError:
            return None
        return run if run.repo == progress.repo else None

    def _note_steps(self, run_id: str, steps: Sequence[JobStep]) -> None:
        """Add a ``step`` event for each step whose progress changed since the last one."""
        if not steps:
            return
        shown = [e.detail for e in self.store.events(run_id) if e.kind == "step"]
        for step in steps:
            last = next((d for d in reversed(shown) if d.startswith(f"{step.name}: ")), None)
            if last != step.line():
                self.store.add_event(run_id, "step", step.line())

    def poll_jobs(self) -> int:
        """Read the jobs of sandbox runs in progress and note their steps; return how many.

        Between webhooks GitHub says nothing of a job's steps; the run page shows them
        as they go (prepare, arm, each check, bundle) from this poll, every few seconds.
        """
        polled = 0
        for run in self.store.open_runs():
            if run.state != "running" or run.workflow_run_id is None:
                continue
            if run.installation_id is None:
                continue
            try:
                with self._session(run.session_id), self._acting(run.run_id):
                    gh = self.github_for(run.installation_id)
                    for job in gh.workflow_jobs(run.repo, run.workflow_run_id):
                        self._note_steps(run.run_id, job.steps)
                    polled += 1
            except RunBusy:
                continue
            except FAILURES as exc:
                log.info("run %s: its job's steps could not be read: %s", run.run_id, exc)
        return polled

    def _follow_job(self, run: RunRecord, progress: RunProgress) -> None:
        self._note_steps(run.run_id, progress.steps)
        if progress.waiting and run.state == "running":
            who = (
                f"the required reviewers of environment {code_span(progress.environment)}"
                if progress.environment
                else "a required reviewer"
            )
            hold = self.hold(run)
            view = guard_for("waiting", waiting_on=who, holds=hold.answer, holds_line=hold.line())
            effects = [check_intent(view, run.head_sha)]
            if self.store.move_open(run.run_id, "running", "waiting", who, effects=effects):
                self.outbox.drain(run.run_id)
        elif not progress.waiting and run.state == "waiting" and progress.status != "completed":
            hold = self.hold(run)
            view = guard_for(
                "running", summary="The sandbox job was approved.", holds=hold.answer,
                holds_line=hold.line(),
            )  # fmt: skip
            effects = [check_intent(view, run.head_sha)]
            if self.store.move_open(run.run_id, "waiting", "running", "approved", effects=effects):
                self.outbox.drain(run.run_id)

    # ------------------------------------------------------------------ finishing

    def finish_from_actions(self, run: RunRecord) -> None:
        """Fetch a completed workflow run's bundle, judge it and finish the run."""
        if run.installation_id is None or run.workflow_run_id is None:
            return
        with self._session(run.session_id), self._acting(run.run_id):
            if self.store.get_run(run.run_id).state not in OPEN_STATES:
                return  # decided meanwhile (a redelivery, or a peer was first)
            gh = self.github_for(run.installation_id)
            self.bundles.mkdir(parents=True, exist_ok=True)
            dest = Path(tempfile.mkdtemp(prefix=f"{run.run_id}-", dir=self.bundles))
            bundle: Bundle | None = None
            try:
                bundle = self.runner.fetch_bundle(
                    run.repo,
                    run.workflow_run_id,
                    run_id=run.run_id,
                    head_sha=run.head_sha,
                    base_sha=run.base_sha,
                    dest=dest,
                )
                self.store.add_event(
                    run.run_id,
                    "reports",
                    f"{len(bundle.reports)} reports from workflow run {run.workflow_run_id}"
                    if bundle.failure is None
                    else f"the sandbox failed at {bundle.failure.stage}",
                )
                verdict = verdict_of(bundle, self.judge, policy=self._policy_of(gh, run))
                verdict, lost = self._against_the_record(
                    run, run.workflow_run_id, bundle, dest, verdict
                )
            except FAILURES as exc:
                log.warning("run %s: the bundle cannot be used: %s", run.run_id, exc)
                self.store.add_event(run.run_id, "reports", f"unusable: {exc}")
                verdict, lost = self._from_the_record(run, run.workflow_run_id, str(exc))
                bundle = None
            self._finish(
                run.run_id,
                verdict,
                bundle=bundle,
                reports_dir=str(dest) if bundle is not None else None,
                evidence=lost,
            )

    def _against_the_record(
        self, run: RunRecord, workflow_run_id: int, bundle: Bundle, folder: Path, verdict: Verdict
    ) -> tuple[Verdict, dict[str, str]]:
        """Reconcile the job's log with the bundle; block on evidence the bundle lost."""
        try:
            log_text = self.runner.job_log(run.repo, workflow_run_id)
        except FAILURES as exc:
            # Named, not guessed: the bundle stands on its own seals (tamper.py).
            self.store.add_event(run.run_id, "log-unread", f"the job's log cannot be read: {exc}")
            return verdict, {}
        found = reconcile(log_text, bundle, folder)
        self.store.add_event(run.run_id, "tamper" if found.lost else "log", found.line())
        if found.lost:
            log.warning("run %s: %s", run.run_id, found.line())
        return with_tampering(verdict, found), described(found)

    def _from_the_record(
        self, run: RunRecord, workflow_run_id: int, why: str
    ) -> tuple[Verdict, dict[str, str]]:
        """Decide from the job's log alone when the bundle cannot be used: blocked when
        it records a decoy leaving or a critical event (``tamper.record_verdict``), else
        the error it was."""
        error = error_verdict(f"the sandbox's reports cannot be used: {why}")
        try:
            log_text = self.runner.job_log(run.repo, workflow_run_id)
        except FAILURES as exc:
            self.store.add_event(run.run_id, "log-unread", f"the job's log cannot be read: {exc}")
            return error, {}
        verdict, said = record_verdict(log_text, run.run_id, why)
        if verdict is None:
            self.store.add_event(run.run_id, "log", "the job's log records nothing that blocks")
            return error, {}
        found = f"blocked from the job's log: {len(said)} events"
        self.store.add_event(run.run_id, "tamper", found)
        return verdict, said

    def _policy_of(self, gh: GitHubGateway, run: RunRecord) -> Policy:
        """Return the policy the relay read at the run's base (read again if not recorded)."""
        if run.policy_json is not None:
            return Policy.model_validate_json(run.policy_json)
        # A run recorded before the relay kept its policy: read it at base once more (the
        # file at a commit cannot change), never from the bundle.
        text = gh.file_at(run.repo, POLICY_FILE, run.base_sha)
        try:
            return load_policy(text, POLICY_FILE)
        except PolicyError as exc:
            raise ValueError(f"{POLICY_FILE} at base: {exc}") from None

    def _finish(
        self,
        run_id: str,
        verdict: Verdict,
        *,
        bundle: Bundle | None = None,
        reports_dir: str | None = None,
        evidence: Mapping[str, str] | None = None,
        ran: Sequence[str] = (),
    ) -> None:
        """Record a decided run and the effects that show it; nothing if it was decided.

        The verdict, the one review, the check's final face and the reaction are one
        transaction: a crash after it loses nothing (the outbox makes them later), a
        crash before it leaves the run undecided for ``reconcile``.
        """
        run = self.store.get_run(run_id)
        with self._session(run.session_id), self._acting(run_id):
            run = self.store.get_run(run_id)
            if run.state not in OPEN_STATES or run.pr_number is None:
                return  # superseded or already finished
            effects: list[Intent] = []
            kind = review_kind(verdict.state)
            if kind is not None:
                body = render_review(
                    verdict,
                    head_sha=run.head_sha,
                    mode=run.mode,
                    reports=bundle.reports if bundle else (),
                    evidence=evidence,
                    ran=ran,
                )
                effects.append(review_intent(run_id, kind, body, run.head_sha))
            on_error: Literal["hold", "pass"] = "pass" if run.on_error == "pass" else "hold"
            hold = self.hold(run)
            view = guard_for(
                verdict.state,
                summary=verdict.summary,
                on_error=on_error,
                on_unproven=on_unproven_of(run),
                holds=hold.answer,
                holds_line=hold.line(),
                diff_review=run.mode == "diff",
            )
            effects.append(check_intent(view, run.head_sha))
            effects.extend(self._reaction(run.pr_number, verdict.state))
            plan_json = (
                bundle.plan.model_dump_json(by_alias=True) if bundle and bundle.plan else None
            )
            try:
                self.store.finish_run(
                    run_id, verdict, plan_json=plan_json, reports_dir=reports_dir, effects=effects
                )
            except RunClosed:
                return
            self.outbox.drain(run_id)

    @staticmethod
    def _reaction(number: int, state: RunState) -> list[Intent]:
        content = reaction_for(state)
        return [] if content is None else [reaction_intent(content, number=number)]

    # ------------------------------------------------------------------ retry

    def retry(self, event: Event) -> None:
        """Start a new run on an errored run's commit; the new run owns its check."""
        check = event.payload.get("check_run")
        if not isinstance(check, Mapping) or check.get("name") != GUARD:
            return
        if event.action == "requested_action":
            requested = event.payload.get("requested_action")
            if not isinstance(requested, Mapping) or requested.get("identifier") != RETRY_ACTION:
                return
        check_id = check.get("id")
        if event.repo is None or not isinstance(check_id, int) or isinstance(check_id, bool):
            raise MalformedEvent("the check_run event names no repository or check run id")
        run = self.store.run_of_check(event.repo, check_id)
        if run is None or run.installation_id is None or run.pr_number is None:
            log.info("check run %s is not one of Cujo's", check_id)
            return
        with self._session(run.session_id):
            if self.store.run_of_delivery(event.delivery_id) is not None:
                return
            newest = self.store.run_of_check(event.repo, check_id)
            if newest is None or newest.state != "error":
                log.info("check run %s: only an errored run is retried", check_id)
                return
            gh = self.github_for(run.installation_id)
            pr = gh.pull_request(run.repo, run.pr_number)
            if pr.head_sha != run.head_sha:
                log.info("check run %s: the head moved on; its own run reviews it", check_id)
                return
            head = Head(
                session_id=run.session_id,
                repo=run.repo,
                number=run.pr_number,
                installation_id=run.installation_id,
                base_sha=run.base_sha,
                head_sha=run.head_sha,
                default_branch=run.default_branch,
                delivery_id=event.delivery_id,
                base_ref=pr.base_ref,
            )
            facts = modes.PullRequestFacts(
                action="synchronize",  # a retry reviews the head as a new push would
                state=pr.state,
                draft=pr.draft,
                base_ref=pr.base_ref,
                author_type=pr.author_type,
                changed_files=(),
            )
            self._choose_and_start(gh, head, facts, check_run_id=check_id)

    # ------------------------------------------------------------------ restart

    def maintain(
        self,
        stop: threading.Event,
        *,
        tick_s: float = 1.0,
        reconcile_every_s: float = 60.0,
        poll_every_s: float = 5.0,
        on_reconciled: Callable[[int], None] | None = None,
    ) -> None:
        """Until ``stop``: make due effects every tick, reconcile now and again.

        The first reconcile is at once (a restart settles what the last process left);
        later ones pick up runs a dead peer held once its lease ran out, and runs whose
        webhooks never came.
        """
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(stop,), name="cujo-run-leases", daemon=True
        )
        heartbeat.start()
        next_reconcile = next_poll = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + poll_every_s
                    self.poll_jobs()
                if time.monotonic() >= next_reconcile:
                    moved = self.reconcile()
                    next_reconcile = time.monotonic() + reconcile_every_s
                    if on_reconciled is not None:
                        on_reconciled(moved)
                else:
                    self.outbox.drain()
            except Exception:  # the loop outlives one bad turn; the record keeps the rest
                log.exception("keeping runs and effects moving failed; trying again")
            stop.wait(tick_s)
        heartbeat.join()

    def _heartbeat(self, stop: threading.Event) -> None:
        # A third of the way into each lease, as the delivery leases are renewed.
        while not stop.wait(self.run_lease_s / 3):
            try:
                self.renew_leases()
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
        with self._session(run.session_id), self._acting(run.run_id):
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
                    self._finish(run.run_id, error_verdict(f"resuming after a restart: {exc}"))
                    return 1
                if found_id is None:
                    self.store.add_event(run.run_id, "reconciled", "not dispatched yet: now")
                    self._dispatch(run)
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
                reason = f"its workflow run {run.workflow_run_id} cannot be read: {exc}"
                self._finish(run.run_id, error_verdict(reason))
                return 1
            if found.status == "completed":
                self.finish_from_actions(run)
                return 1
            self.store.add_event(run.run_id, "reconciled", f"workflow run is {found.status}")
            return 0

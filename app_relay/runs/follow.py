"""Follow a sandbox run on Actions: its webhooks, its jobs' steps, and its end.

A dispatched run's progress arrives as ``workflow_job``/``workflow_run`` webhooks (a
job's carry its steps), and between them a slow poll (``coordinator.JOBS_POLL_S``) reads
its jobs' steps for the run page, by conditional requests. A job waiting on a person
(an environment's required reviewers) shows ``waiting``, and ``running`` again once
approved. When the workflow run completes, its bundle is fetched, validated and judged
under the policy read at base, reconciled with the tamper record in the job's log, and
the run is finished (``finish.RunFinisher``). A run that is no longer undecided ignores
every later event, so redeliveries and late reports post nothing.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app_relay.decide.bundle_verdict import pull_fields_read, verdict_of
from app_relay.decide.hits import PullText
from app_relay.decide.judge import Judge, error_verdict
from app_relay.github.answers import JobStep
from app_relay.github.client import GitHubGateway
from app_relay.github.event import Event
from app_relay.runs.desk import RunDesk
from app_relay.runs.effects import check_intent
from app_relay.runs.finish import FAILURES, RunFinisher
from app_relay.runs.lease import RunBusy
from app_relay.runs.runners import RunProgress, SandboxRunner
from app_relay.runs.tamper import described, reconcile, record_verdict, with_tampering
from app_relay.runstate.machine import OPEN_STATES, guard_for
from app_relay.store import RunRecord
from app_relay.verdict import Verdict
from app_relay.words.inert import code_span
from cujo_action.evidence.reader import Bundle
from cujo_action.schema import POLICY_FILE, Policy, PolicyError, load_policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActionsFollower:
    """Take dispatched runs from their workflow's webhooks and jobs to a finished run."""

    desk: RunDesk
    runner: SandboxRunner
    judge: Judge
    bundles: Path  # where a finished run's bundle is unpacked
    finisher: RunFinisher

    def follow(self, event: Event) -> None:
        """Fold a workflow webhook into its run; finish the run when the workflow completes."""
        progress = self.runner.fold_event(event.name, event.payload)
        if progress is None:
            return
        run = self._run_of(progress)
        if run is None:
            log.info("workflow run %s is not one of Cujo's runs", progress.workflow_run_id)
            return
        with self.desk.leases.session(run.session_id), self.desk.leases.acting(run.run_id):
            run = self.desk.store.get_run(run.run_id)
            if run.workflow_run_id != progress.workflow_run_id or run.state not in OPEN_STATES:
                # A decided or superseded run ignores late and repeated events.
                return
            self.desk.store.add_event(
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
        found = self.desk.store.run_of_workflow_run(progress.repo, progress.workflow_run_id)
        if found is not None or progress.cujo_run_id is None:
            return found
        # The webhook can arrive before the dispatch's answer was recorded; the run-name
        # names the run, and the session lock waits for the dispatch to be recorded.
        try:
            run = self.desk.store.get_run(progress.cujo_run_id)
        except LookupError:
            return None
        return run if run.repo == progress.repo else None

    def _note_steps(self, run_id: str, steps: Sequence[JobStep]) -> None:
        """Add a ``step`` event for each step whose progress changed since the last one."""
        if not steps:
            return
        shown = [e.detail for e in self.desk.store.events(run_id) if e.kind == "step"]
        for step in steps:
            last = next((d for d in reversed(shown) if d.startswith(f"{step.name}: ")), None)
            if last != step.line():
                self.desk.store.add_event(run_id, "step", step.line())

    def poll_jobs(self) -> int:
        """Read the jobs of sandbox runs in progress and note their steps; return how many.

        Between webhooks GitHub says nothing of a job's steps; the run page shows them
        as they go (prepare, arm, each check, bundle) from this poll, a slow fallback (a
        minute by default). The read is conditional: jobs unchanged since the last poll
        are answered 304, at no cost to the rate limit.
        """
        polled = 0
        for run in self.desk.store.open_runs():
            if run.state != "running" or run.workflow_run_id is None:
                continue
            if run.installation_id is None:
                continue
            try:
                with self.desk.leases.session(run.session_id), self.desk.leases.acting(run.run_id):
                    gh = self.desk.github_for(run.installation_id)
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
            hold = self.finisher.hold(run)
            view = guard_for("waiting", waiting_on=who, holds=hold.answer, holds_line=hold.line())
            effects = [check_intent(view, run.head_sha)]
            if self.desk.store.move_open(run.run_id, "running", "waiting", who, effects=effects):
                self.desk.outbox.drain(run.run_id)
        elif not progress.waiting and run.state == "waiting" and progress.status != "completed":
            hold = self.finisher.hold(run)
            view = guard_for(
                "running", summary="The sandbox job was approved.", holds=hold.answer,
                holds_line=hold.line(),
            )  # fmt: skip
            effects = [check_intent(view, run.head_sha)]
            if self.desk.store.move_open(
                run.run_id, "waiting", "running", "approved", effects=effects
            ):
                self.desk.outbox.drain(run.run_id)

    # ------------------------------------------------------------------ finishing

    def finish_from_actions(self, run: RunRecord) -> None:
        """Fetch a completed workflow run's bundle, judge it and finish the run."""
        if run.installation_id is None or run.workflow_run_id is None:
            return
        with self.desk.leases.session(run.session_id), self.desk.leases.acting(run.run_id):
            if self.desk.store.get_run(run.run_id).state not in OPEN_STATES:
                return  # decided meanwhile (a redelivery, or a peer was first)
            gh = self.desk.github_for(run.installation_id)
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
                self.desk.store.add_event(
                    run.run_id,
                    "reports",
                    f"{len(bundle.reports)} reports from workflow run {run.workflow_run_id}"
                    if bundle.failure is None
                    else f"the sandbox failed at {bundle.failure.stage}",
                )
                verdict = self._verdict(gh, run, bundle)
                verdict, lost = self._against_the_record(
                    run, run.workflow_run_id, bundle, dest, verdict
                )
            except FAILURES as exc:
                log.warning("run %s: the bundle cannot be used: %s", run.run_id, exc)
                self.desk.store.add_event(run.run_id, "reports", f"unusable: {exc}")
                verdict, lost = self._from_the_record(run, run.workflow_run_id, str(exc))
                bundle = None
            self.finisher.finish(
                run.run_id,
                verdict,
                bundle=bundle,
                reports_dir=str(dest) if bundle is not None else None,
                evidence=lost,
            )

    def _verdict(self, gh: GitHubGateway, run: RunRecord, bundle: Bundle) -> Verdict:
        """Judge the bundle under the base's policy, with the pull request's own text as
        GitHub holds it now when the base's workflows read it (an error when unread)."""
        policy = self._policy_of(gh, run)
        needed = pull_fields_read(bundle)
        if not needed:
            return verdict_of(bundle, self.judge, policy=policy)
        pull = self._pull_text(gh, run, needed)
        if isinstance(pull, str):
            return error_verdict(
                f"the pull request's {', '.join(needed)}, which the base's workflows paste into "
                f"a shell, could not be read to judge them: {pull}"
            )
        return verdict_of(bundle, self.judge, policy=policy, pull=pull)

    def _pull_text(
        self, gh: GitHubGateway, run: RunRecord, needed: Sequence[str]
    ) -> PullText | str:
        """Return the pull request's title, body and branch from GitHub, or why not."""
        if run.pr_number is None:
            return "the run names no pull request"
        try:
            pr = gh.pull_request(run.repo, run.pr_number)
        except FAILURES as exc:
            return f"GitHub did not answer ({exc})"
        pull = PullText(title=pr.title, body=pr.body, branch=pr.head_ref)
        missing = [f for f in needed if pull.text_of(f) is None]
        return f"GitHub's answer has no {', '.join(missing)}" if missing else pull

    def _against_the_record(
        self, run: RunRecord, workflow_run_id: int, bundle: Bundle, folder: Path, verdict: Verdict
    ) -> tuple[Verdict, dict[str, str]]:
        """Reconcile the job's log with the bundle; block on evidence the bundle lost."""
        try:
            log_text = self.runner.job_log(run.repo, workflow_run_id)
        except FAILURES as exc:
            # Named, not guessed: the bundle stands on its own seals (tamper.py).
            self.desk.store.add_event(
                run.run_id, "log-unread", f"the job's log cannot be read: {exc}"
            )
            return verdict, {}
        found = reconcile(log_text, bundle, folder)
        self.desk.store.add_event(run.run_id, "tamper" if found.lost else "log", found.line())
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
            self.desk.store.add_event(
                run.run_id, "log-unread", f"the job's log cannot be read: {exc}"
            )
            return error, {}
        verdict, said = record_verdict(log_text, run.run_id, why)
        if verdict is None:
            self.desk.store.add_event(
                run.run_id, "log", "the job's log records nothing that blocks"
            )
            return error, {}
        found = f"blocked from the job's log: {len(said)} events"
        self.desk.store.add_event(run.run_id, "tamper", found)
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

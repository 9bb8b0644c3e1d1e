"""Start a pull request's run: choose the review, supersede older runs, record it, dispatch.

A review request (or a Retry on an errored run) opens a run on the pull request's
newest head. The policy is read at base, never head, and ``mode`` chooses the review:
none, the diff review (with a model), or the sandbox. Older undecided runs of the pull
request are superseded (their workflow runs cancelled, their checks ``skipped`` unless
the new run reviews the same commit and takes the check over); the new run is recorded
``running`` with ``cujo/guard`` ``in_progress`` and an ``eyes`` reaction, and the sandbox
workflow is dispatched on the default branch. Anything that goes wrong is ``error``,
never a review.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from app_relay.decide.judge import error_verdict
from app_relay.github.answers import ChangedFiles, GitHubError, PullRequest
from app_relay.github.client import GitHubGateway
from app_relay.model.diffreview import review_diff
from app_relay.model.port import ModelPort
from app_relay.model.standards import read_standards
from app_relay.runs import mode as modes
from app_relay.runs.catchup import is_catch_up
from app_relay.runs.desk import RunDesk
from app_relay.runs.effects import cancel_intent, check_intent
from app_relay.runs.finish import FAILURES, RunFinisher, reaction_effects
from app_relay.runs.runners import RunnerError, SandboxRunner
from app_relay.runs.state import GUARD, RETRY_ACTION, guard_for
from app_relay.store import Intent, RunRecord
from app_relay.webhook.events import Event, MalformedEvent, ReviewRequested, record_request
from app_relay.words.inert import code_span
from cujo_action.schema import POLICY_FILE, Policy, PolicyError, load_policy

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class RunStarter:
    """Open runs for review requests and retries, and dispatch their sandbox workflows."""

    desk: RunDesk
    runner: SandboxRunner
    # The cheap model a `mode: diff` review asks; None (no key) reviews in the sandbox.
    model: ModelPort | None
    finisher: RunFinisher

    def request_review(self, request: ReviewRequested) -> None:
        """Review a pull request's head, or record why not; idempotent per delivery."""
        session_id = record_request(self.desk.store, request)
        if request.installation_id is None:
            # Without an installation nothing can be read or written as the App.
            self.desk.store.note_request(request.delivery_id, "not reviewed: no installation named")
            raise MalformedEvent("the pull_request event names no installation")
        with self.desk.leases.session(session_id):
            if self.desk.store.run_of_delivery(request.delivery_id) is not None:
                return  # handled before: a redelivery, or a retry after a crash
            if covered := self._covered_by_catch_up(session_id, request):
                self.desk.store.note_request(request.delivery_id, covered)
                return
            gh = self.desk.github_for(request.installation_id)
            pr = gh.pull_request(request.repo, request.pr_number)
            if pr.head_sha != request.head_sha:
                # Only the newest head is reviewed; its own event starts its run.
                self.desk.store.note_request(
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
            self._choose_and_start(gh, head, request.action, pr, check_run_id=None)

    def _covered_by_catch_up(self, session_id: str, request: ReviewRequested) -> str:
        """Say why a head needs no run of its own because of a catch-up ("" when it does).

        A catch-up event stands in for a pull request's webhook that never came; the
        webhook may come after all (GitHub's redelivery, asked by the same catch-up).
        Between the two, one run: a catch-up event is not reviewed when the pull
        request's newest run is on its head already, and no event is reviewed when the
        newest run on its head was started by a catch-up.
        """
        newest = self.desk.store.newest_run(session_id)
        if newest is None or newest.head_sha != request.head_sha:
            return ""
        if is_catch_up(request.delivery_id):
            return f"not reviewed: run {newest.run_id} already reviews this head"
        if is_catch_up(newest.delivery_id):
            return f"not reviewed: run {newest.run_id}, started by a catch-up, reviews this head"
        return ""

    def _choose_and_start(
        self,
        gh: GitHubGateway,
        head: Head,
        action: str,
        pr: PullRequest,
        *,
        check_run_id: int | None,
    ) -> None:
        """Choose the review ``action`` on ``pr`` asks for under the base's policy; start it."""
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
            action=action,
            state=pr.state,
            draft=pr.draft,
            base_ref=pr.base_ref,
            author_type=pr.author_type,
            changed_files=files.paths,
            files_incomplete=files.incomplete,
        )
        choice = modes.choose(policy, facts)
        if not choice.review:
            self.desk.store.note_request(head.delivery_id, f"not reviewed: {choice.reason}")
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
        hold = self.finisher.hold_of(head.installation_id, head.repo, head.base_ref)
        view = guard_for(
            "running", summary=note, holds=hold.answer, holds_line=hold.line(),
            diff_review=diff is not None,
        )  # fmt: skip
        self.desk.store.start_run(
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
            lease=(self.desk.leases.name, self.desk.leases.lease_s),
            effects=[check_intent(view, head.head_sha), *reaction_effects(head.number, "running")],
        )
        with self.desk.leases.taken(run_id):  # start_run took the lease
            self.desk.store.note_request(head.delivery_id, f"reviewed in run {run_id}", run_id)
            self.desk.store.add_event(run_id, "mode", note)
            self.desk.outbox.drain(run_id)
            if isinstance(policy, PolicyError):
                self.finisher.finish(run_id, error_verdict(f"{POLICY_FILE} at base: {policy}"))
                return
            if diff is not None:
                self._review_diff(gh, head, policy, diff, run_id)
                return
            self.dispatch(self.desk.store.get_run(run_id))

    def _review_diff(
        self, gh: GitHubGateway, head: Head, policy: Policy, files: ChangedFiles, run_id: str
    ) -> None:
        """Review the pull request's diff with the cheap model: no dispatch, no sandbox."""
        assert self.model is not None
        try:
            # Standards files (AGENTS.md, CONTRIBUTING.md, ...) are read at base, never head.
            standards = read_standards(functools.partial(gh.file_at, head.repo), head.base_sha)
        except FAILURES as exc:
            why = f"reading the standards files at base: {exc}"
            self.finisher.finish(run_id, error_verdict(why))
            return
        done = review_diff(
            self.model, diff=files.unified_diff(), standards=standards, policy=policy
        )
        self.finisher.finish(run_id, done.verdict, evidence=done.evidence(), ran=done.ran())

    def dispatch(self, run: RunRecord) -> None:
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
            self.finisher.finish(run.run_id, error_verdict(f"starting the sandbox: {exc}"))
            return
        self.desk.store.bind_github(run.run_id, workflow_run_id=dispatched.workflow_run_id)
        self.desk.store.add_event(
            run.run_id,
            "dispatched",
            f"workflow run {dispatched.workflow_run_id} {dispatched.html_url or ''}".strip(),
        )

    def _supersede(self, head: Head, new_run: str) -> int | None:
        """Stop the pull request's undecided runs; return a check the new run takes over."""
        owned: int | None = None
        for old in self.desk.store.open_runs(head.session_id):
            effects: list[Intent] = []
            if old.workflow_run_id is not None:
                # Cancelling also answers a wait on a person (an environment approval).
                effects.append(cancel_intent(old.workflow_run_id))
            same_commit = old.head_sha == head.head_sha
            if not same_commit:
                effects.append(check_intent(guard_for("superseded"), old.head_sha))
            if not self.desk.store.supersede(old.run_id, new_run, effects=effects):
                continue  # decided meanwhile: its outcome stands for its commit
            if same_commit and old.check_run_id is not None:
                owned = old.check_run_id
            self.desk.outbox.drain(old.run_id)
        return owned

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
        run = self.desk.store.run_of_check(event.repo, check_id)
        if run is None or run.installation_id is None or run.pr_number is None:
            log.info("check run %s is not one of Cujo's", check_id)
            return
        with self.desk.leases.session(run.session_id):
            if self.desk.store.run_of_delivery(event.delivery_id) is not None:
                return
            newest = self.desk.store.run_of_check(event.repo, check_id)
            if newest is None or newest.state != "error":
                log.info("check run %s: only an errored run is retried", check_id)
                return
            gh = self.desk.github_for(run.installation_id)
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
            # A retry reviews the head as a new push would.
            self._choose_and_start(gh, head, "synchronize", pr, check_run_id=check_id)

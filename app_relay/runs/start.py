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
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from app_relay.decide.judge import error_verdict
from app_relay.github.answers import ChangedFiles, GitHubError, PullRequest
from app_relay.github.client import GitHubGateway
from app_relay.github.event import Event, MalformedEvent
from app_relay.github.payloads import CheckOutput
from app_relay.github.vocab import GUARD
from app_relay.model.diffreview import review_diff
from app_relay.model.port import ModelPort
from app_relay.model.standards import read_standards
from app_relay.runs import mode as modes
from app_relay.runs.desk import RunDesk
from app_relay.runs.effects import cancel_intent, check_intent
from app_relay.runs.finish import FAILURES, RunFinisher, reaction_effects
from app_relay.runs.missed_webhooks import is_catch_up
from app_relay.runs.review_request import ReviewRequested, record_request
from app_relay.runs.runners import RunnerError, SandboxRunner
from app_relay.runstate.caps import Caps, caps_for, is_first_timer, queued_view
from app_relay.runstate.machine import OPEN_STATES, RETRY_ACTION, GuardView, guard_for
from app_relay.store import Intent, NewQueued, Queued, RunRecord
from app_relay.words.inert import code_span
from cujo_action.schema import POLICY_FILE, Policy, PolicyError, load_policy

log = logging.getLogger(__name__)
SUPERSEDED_IN_QUEUE = (
    "A newer commit was pushed while this one waited in the queue; it is not reviewed."
)


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
    # Who opened the pull request, and GitHub's author_association of them (the caps).
    author: str = ""
    association: str = "NONE"


@dataclass(frozen=True)
class RunStarter:
    """Open runs for review requests and retries, and dispatch their sandbox workflows."""

    desk: RunDesk
    runner: SandboxRunner
    # The cheap model a `mode: diff` review asks; None (no key) reviews in the sandbox.
    model: ModelPort | None
    finisher: RunFinisher
    # The relay's ceiling on sandbox runs in flight (``.cujo.yml`` may only lower it).
    caps: Caps = field(default_factory=Caps)

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
                author=pr.author_login,
                association=pr.author_association,
            )
            self._choose_and_start(gh, head, request.action, pr, check_run_id=None)

    def _covered_by_catch_up(self, session_id: str, request: ReviewRequested) -> str:
        """Say why a head needs no run of its own ("" when it does): a run of that head is
        in flight, or a catch-up stands in for its webhook.

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
        if newest.state in OPEN_STATES:
            # Whatever asked first, one run of a head at a time: a second event for it (a
            # duplicate, a reopen) must not wait in the queue beside it.
            return f"not reviewed: run {newest.run_id} already reviews this head"
        return ""

    def _choose_and_start(
        self,
        gh: GitHubGateway,
        head: Head,
        action: str,
        pr: PullRequest,
        *,
        check_run_id: int | None,
        queued: Queued | None = None,
    ) -> None:
        """Choose the review ``action`` on ``pr`` asks for under the base's policy; start it.

        A sandbox review waits in the queue beyond the caps; ``queued`` is a head the
        queue admitted, started now.
        """
        if queued is None:
            self._drop_older_queued(gh, head)
        # Policy from base, never head (docs/design.md section 4).
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
            if queued is not None:
                self._settle_queued(gh, queued, f"Not reviewed: {choice.reason}.")
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
        if queued is not None:
            self._start(gh, head, policy, note, check_run_id=check_run_id)
            return
        entry = self._admit(gh, head, policy, action, check_run_id)
        if entry is None:
            return  # it waits in the queue, its check saying why
        run_id = self._start(
            gh, head, policy, note, check_run_id=check_run_id or entry.check_run_id
        )
        self.desk.store.drop_queued(entry.id)
        if entry.delivery_id != head.delivery_id:
            # The head waited in the queue for an earlier event of it (a redelivery beside
            # a catch-up's): this one started it, and that one is told which run it is.
            self.desk.store.note_request(
                entry.delivery_id, f"not reviewed: run {run_id} already reviews this head"
            )

    def _start(
        self,
        gh: GitHubGateway,
        head: Head,
        policy: Policy | PolicyError,
        note: str,
        *,
        check_run_id: int | None,
        diff: ChangedFiles | None = None,
    ) -> str:
        """Record a run and start its review: the sandbox, or the diff review with
        ``diff``; return the run's id."""
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
                "author": head.author or None,
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
                return run_id
            if diff is not None:
                self._review_diff(gh, head, policy, diff, run_id)
                return run_id
            self.dispatch(self.desk.store.get_run(run_id))
        return run_id

    # ------------------------------------------------------------------ the queue

    def _admit(
        self,
        gh: GitHubGateway,
        head: Head,
        policy: Policy,
        action: str,
        check_run_id: int | None,
    ) -> Queued | None:
        """Queue a sandbox review; return its entry when the caps let it start now.

        Every sandbox head passes through the queue, so the record alone decides (for
        every relay sharing it) who starts: a head starts at once only when no head
        before it in the queue could take the place.
        """
        caps = caps_for(self.caps, policy)
        entry = self.desk.store.enqueue(
            NewQueued(
                session_id=head.session_id,
                repo=head.repo,
                pr_number=head.number,
                installation_id=head.installation_id,
                base_sha=head.base_sha,
                head_sha=head.head_sha,
                base_ref=head.base_ref,
                default_branch=head.default_branch,
                delivery_id=head.delivery_id,
                action=action,
                author=head.author,
                first_timer=is_first_timer(head.association),
                repo_cap=caps.repo,
                author_cap=caps.author,
                check_run_id=check_run_id,
            )
        )
        leases = self.desk.leases
        admission = self.desk.store.admit_queued(head.repo, leases.name, leases.lease_s)
        if any(q.id != entry.id for q in admission.admitted):
            self.queue_due.set()  # heads before this one fit too: the pump starts them
        if any(q.id == entry.id for q in admission.admitted):
            return entry
        reason = admission.reason_of(entry.id)
        if not reason:
            # Another relay admitted this head and is starting it: its check is theirs.
            self.desk.store.note_request(head.delivery_id, "queued: another relay starts it")
            return None
        if entry.delivery_id != head.delivery_id:
            # The same head waits already, queued by an earlier event of it: that request
            # starts it; this one adds nothing.
            self.desk.store.note_request(
                head.delivery_id,
                f"not reviewed: the queued request of delivery {entry.delivery_id} "
                "reviews this head",
            )
            return None
        self._show_queued(gh, entry, reason)
        self.desk.store.note_request(head.delivery_id, f"queued: {reason}")
        log.info("%s#%d queued: %s", head.repo, head.number, reason)
        return None

    @property
    def queue_due(self) -> threading.Event:
        """Set when a run ended or a head fit: the coordinator pumps the queue soon."""
        return self.finisher.ended

    def pump(self) -> int:
        """Start the queued heads that fit under the caps now; return how many started.

        Called when a run ends and now and again (a peer's run may have ended); takes
        each pull request's lock in turn, never two at once.
        """
        started = 0
        leases = self.desk.leases
        for repo in self.desk.store.queued_repos():
            admission = self.desk.store.admit_queued(repo, leases.name, leases.lease_s)
            for queued in admission.admitted:
                started += self.start_queued(queued)
            for queued in admission.changed:
                self._refresh_queued(queued)
        return started

    def start_queued(self, queued: Queued) -> int:
        """Start a head the queue admitted; 1 when it left the queue by starting or not."""
        with self.desk.leases.session(queued.session_id):
            current = self.desk.store.queued_of(queued.session_id)
            if current is None or current.id != queued.id:
                return 0  # started, or taken over by a newer head, meanwhile
            newest = self.desk.store.newest_run(queued.session_id)
            started = self.desk.store.run_of_delivery(queued.delivery_id) is not None
            if started or (
                newest and newest.head_sha == queued.head_sha and newest.state in OPEN_STATES
            ):
                # Started before a crash took the relay before the entry was dropped; the
                # run may even be decided by now: its outcome stands, never a second run.
                self.desk.store.drop_queued(queued.id)
                if not started and newest is not None:
                    self.desk.store.note_request(
                        queued.delivery_id,
                        f"not reviewed: run {newest.run_id} already reviews this head",
                    )
                return 0
            try:
                gh = self.desk.github_for(queued.installation_id)
                pr = gh.pull_request(queued.repo, queued.pr_number)
                if pr.head_sha != queued.head_sha:
                    # The newer head's own event queues or starts it.
                    self._settle_queued(gh, queued, SUPERSEDED_IN_QUEUE)
                    self.desk.store.drop_queued(queued.id)
                    return 0
                head = Head(
                    session_id=queued.session_id,
                    repo=queued.repo,
                    number=queued.pr_number,
                    installation_id=queued.installation_id,
                    base_sha=pr.base_sha,
                    head_sha=queued.head_sha,
                    default_branch=queued.default_branch,
                    delivery_id=queued.delivery_id,
                    base_ref=pr.base_ref,
                    author=pr.author_login,
                    association=pr.author_association,
                )
                self._choose_and_start(
                    gh, head, queued.action, pr, check_run_id=_queue_check(gh, queued),
                    queued=queued,
                )  # fmt: skip
            except FAILURES as exc:
                # Left admitted: when the admission's lease ends it is tried again.
                where = f"{queued.repo}#{queued.pr_number}"
                log.warning("%s could not leave the queue: %s", where, exc)
                return 0
            self.desk.store.drop_queued(queued.id)
            return 1

    def _drop_older_queued(self, gh: GitHubGateway, head: Head) -> None:
        """Take an older head of the pull request off the queue: this newer one replaces it."""
        older = self.desk.store.queued_of(head.session_id)
        if older is None or older.head_sha == head.head_sha:
            return
        if self.desk.store.drop_queued(older.id):
            self._settle_queued(gh, older, SUPERSEDED_IN_QUEUE)

    def _refresh_queued(self, queued: Queued) -> None:
        """Show a waiting head's new reason on its check (under its pull request's lock)."""
        with self.desk.leases.session(queued.session_id):
            current = self.desk.store.queued_of(queued.session_id)
            if current is None or current.id != queued.id or current.admitted_by is not None:
                return
            try:
                gh = self.desk.github_for(queued.installation_id)
                self._show_queued(gh, queued, queued.reason)
            except FAILURES as exc:
                log.warning("the queued check of %s#%d: %s", queued.repo, queued.pr_number, exc)

    def _show_queued(self, gh: GitHubGateway, queued: Queued, reason: str) -> None:
        """Show ``cujo/guard`` ``queued`` with ``reason`` on the head (created if need be)."""
        try:
            check_id = self._show(gh, queued, queued_view(reason))
        except GitHubError as exc:
            # The head stays queued in the record; its check shows up when it starts.
            log.warning("the queued check of %s#%d: %s", queued.repo, queued.pr_number, exc)
            self.desk.store.set_queued_check(queued.id, queued.check_run_id, reason)
            return
        self.desk.store.set_queued_check(queued.id, check_id, reason)

    def _settle_queued(self, gh: GitHubGateway, queued: Queued, why: str) -> None:
        """Close the check of a head that left the queue without a run (skipped, with why)."""
        view = GuardView("completed", "skipped", "Cujo: not reviewed", why)
        try:
            if _queue_check(gh, queued) is None:
                return
            self._show(gh, queued, view)
        except GitHubError as exc:
            log.warning("the queued check of %s#%d: %s", queued.repo, queued.pr_number, exc)

    def _show(self, gh: GitHubGateway, queued: Queued, view: GuardView) -> int:
        """Create or update a queued head's check to ``view``; return its id."""
        output = CheckOutput(title=view.title, summary=view.summary)
        check_run_id = _queue_check(gh, queued)
        if check_run_id is None:
            made = gh.create_check_run_answer(
                queued.repo,
                queued.head_sha,
                name=GUARD,
                status=view.status,
                conclusion=view.conclusion,
                output=output,
                external_id=f"queue-{queued.id}",
            )
            return made.id
        gh.update_check_run(
            queued.repo,
            check_run_id,
            status=view.status,
            conclusion=view.conclusion,
            output=output,
            actions=[],
        )
        return check_run_id

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
                author=pr.author_login,
                association=pr.author_association,
            )
            # A retry reviews the head as a new push would.
            self._choose_and_start(gh, head, "synchronize", pr, check_run_id=check_id)


def _queue_check(gh: GitHubGateway, queued: Queued) -> int | None:
    """Return the check a queued head shows: the one the record names, else one a relay
    made (by its ``external_id``) and died before it could record; None if there is none.

    Without this a relay killed between creating the queued check and recording it left
    that check ``queued`` on the head for ever, beside the run's own.
    """
    if queued.check_run_id is not None:
        return queued.check_run_id
    return gh.find_check_run(
        queued.repo, queued.head_sha, name=GUARD, external_id=f"queue-{queued.id}"
    )

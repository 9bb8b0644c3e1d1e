"""Finish a run: its verdict, the one review, the check's last face and the reaction, at once.

A run's check says on every face whether its block holds the merge; ``hold`` reads that
from GitHub (``github.protection``, kept 15 s or until the repository's rules change) and
keeps the answer on the run.
Finishing records the verdict together with the effects that show it as one
transaction: a crash after it loses nothing (the outbox makes them later), a crash
before it leaves the run undecided for the coordinator's ``reconcile``. A run that is no
longer undecided (finished, superseded) is left as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from app_relay.github.answers import GitHubError
from app_relay.github.protection import Hold, HoldCache
from app_relay.observe import metrics
from app_relay.runs.desk import RunDesk
from app_relay.runs.effects import check_intent, reaction_intent, review_intent
from app_relay.runs.runners import RunnerError
from app_relay.runstate.machine import OPEN_STATES, RunState, guard_for, reaction_for
from app_relay.runstate.machine import review_for as review_kind
from app_relay.store import Intent, RunClosed, RunRecord
from app_relay.verdict import Verdict
from app_relay.words.inert import code_span
from app_relay.words.review_body import render_review
from cujo_action.evidence.reader import Bundle, BundleError
from cujo_action.schema import Policy, utcnow

# What going wrong while moving a run looks like: the run ends ``error``, the relay goes on.
FAILURES = (GitHubError, RunnerError, BundleError, ValueError, OSError)


def on_unproven_of(run: RunRecord) -> Literal["hold", "pass"]:
    """Return the run's ``on_unproven`` (hold when its policy is not recorded)."""
    if run.policy_json is None:
        return "hold"
    return Policy.model_validate_json(run.policy_json).on_unproven


def reaction_effects(number: int, state: RunState) -> list[Intent]:
    """Return the reaction that shows ``state`` on pull request ``number``, if it has one."""
    content = reaction_for(state)
    return [] if content is None else [reaction_intent(content, number=number)]


@dataclass(frozen=True)
class RunFinisher:
    """Record decided runs with the effects that show them, saying whether the block holds."""

    desk: RunDesk
    hold_cache: HoldCache = field(default_factory=HoldCache)
    # Set when a run ends: its place may go to a queued head (the coordinator pumps).
    ended: threading.Event = field(default_factory=threading.Event)

    def hold(self, run: RunRecord) -> Hold:
        """Whether a block of ``run`` holds the merge, kept on the run as it is read."""
        hold = self.hold_of(run.installation_id, run.repo, run.base_ref)
        if hold.answer != run.holds:
            self.desk.store.bind_github(run.run_id, holds=hold.answer)
        return hold

    def hold_of(self, installation_id: int | None, repo: str, base_ref: str | None) -> Hold:
        """Whether ``cujo/guard`` holds merges into ``base_ref`` (kept 15 s at most)."""
        if installation_id is None or not base_ref:
            return Hold("unknown", "the pull request's base branch is not recorded.")
        gh = self.desk.github_for(installation_id)
        try:
            return self.hold_cache.hold(gh, repo, base_ref, gh.app_id)
        except FAILURES as exc:
            return Hold("unknown", f"the branch rules could not be read: {code_span(str(exc))}")

    def finish(
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
        run = self.desk.store.get_run(run_id)
        with self.desk.leases.session(run.session_id), self.desk.leases.acting(run_id):
            run = self.desk.store.get_run(run_id)
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
            effects.extend(reaction_effects(run.pr_number, verdict.state))
            plan_json = (
                bundle.plan.model_dump_json(by_alias=True) if bundle and bundle.plan else None
            )
            try:
                self.desk.store.finish_run(
                    run_id, verdict, plan_json=plan_json, reports_dir=reports_dir, effects=effects
                )
            except RunClosed:
                return
            self.ended.set()
            took = (utcnow() - run.started_at).total_seconds()
            metrics.run_finished(verdict.state, run.mode, took)
            self.desk.outbox.drain(run_id)

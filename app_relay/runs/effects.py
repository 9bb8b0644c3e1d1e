"""The outbox's effects: what each GitHub write of a run is, and making each one once.

A run's writes (its ``cujo/guard`` check, its one review, reactions, a cancelled workflow
run) are recorded as *intended* in the same transaction as the state they show
(``Store.finish_run(..., effects=...)`` and friends), then made here and marked done.
A crash, a 502 or a dropped connection leaves an effect pending or in hand under a
lease; the drainer makes it again later with backoff, and before making a write that
cannot be repeated it looks on GitHub for what an earlier attempt did:

* a check run is created with ``external_id`` = the run id, and found by it;
* a review carries a marker naming the run, and is found by the marker **and** this
  App's bot login (anyone can post a body holding the marker);
* reactions and cancellations are idempotent on GitHub's side.

The intent builders are pure; ``Outbox`` is the thin I/O that drains.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from app_relay.github.answers import GitHubError
from app_relay.github.client import GitHubGateway
from app_relay.github.payloads import CheckAction, CheckOutput, OnComment, OnIssue
from app_relay.github.retry import RATE_LIMITED_S, retry_later_s
from app_relay.github.vocab import GUARD, ReactionContent
from app_relay.observe.logs import about
from app_relay.runstate.machine import GuardView
from app_relay.store import MAX_EFFECT_ATTEMPTS, Effect, Intent, RunRecord, Store

log = logging.getLogger(__name__)


def review_marker(run_id: str, key: str = "review") -> str:
    """Return the hidden line that names the run (and effect) a review or reply is for."""
    return (
        f"<!-- cujo-run: {run_id} -->" if key == "review" else f"<!-- cujo-run: {run_id} {key} -->"
    )


# ---------------------------------------------------------------------- intents (pure)


def check_intent(view: GuardView, head_sha: str) -> Intent:
    """Intend ``cujo/guard`` to show ``view`` (created on ``head_sha`` if the run has none).

    Each face is its own effect; a newer one overtakes those not yet sent.
    """
    return Intent(
        "check",
        f"check:{uuid.uuid4().hex[:16]}",
        {
            "head_sha": head_sha,
            "status": view.status,
            "conclusion": view.conclusion,
            "title": view.title,
            "summary": view.summary,
            "actions": [dict(a) for a in view.actions],
        },
    )


def review_intent(
    run_id: str,
    kind: Literal["advisory", "blocking"],
    body: str,
    head_sha: str,
    *,
    key: str = "review",
) -> Intent:
    """Intend a review; its key makes a second intent of it a no-op.

    ``key`` is "review" for the run's verdict; a reinstated block is its own review.
    """
    marker = review_marker(run_id, key)
    return Intent(
        "review",
        key,
        {"kind": kind, "body": f"{body}\n\n{marker}", "head_sha": head_sha, "marker": marker},
    )


def dismiss_intent(review_id: int, message: str, *, key: str) -> Intent:
    """Intend to dismiss a blocking review with a message naming who lifted it."""
    return Intent("dismiss", key, {"review_id": review_id, "message": message})


def comment_intent(run_id: str, number: int, body: str, *, key: str) -> Intent:
    """Intend a reply on the pull request's conversation (found again by its marker)."""
    marker = review_marker(run_id, key)
    return Intent(
        "comment", key, {"number": number, "body": f"{body}\n\n{marker}", "marker": marker}
    )


def reaction_intent(
    content: str, *, number: int | None = None, comment_id: int | None = None
) -> Intent:
    """Intend a reaction on the pull request (``number``) or on a comment."""
    if (number is None) == (comment_id is None):
        raise ValueError("a reaction goes on the pull request or on a comment, not both")
    where = f"issue:{number}" if number is not None else f"comment:{comment_id}"
    return Intent(
        "reaction",
        f"reaction:{where}:{content}",
        {"content": content, "number": number, "comment_id": comment_id},
    )


def cancel_intent(workflow_run_id: int) -> Intent:
    """Intend to cancel a workflow run (which also answers a wait on a person)."""
    return Intent("cancel", f"cancel:{workflow_run_id}", {"workflow_run_id": workflow_run_id})


# ---------------------------------------------------------------------- making them


@dataclass(frozen=True)
class OutboxConfig:
    """How patient the drainer is."""

    lease_s: float = 60.0
    retry_s: float = 2.0  # the first retry's delay, doubled each further attempt
    max_retry_s: float = 300.0
    max_attempts: int = MAX_EFFECT_ATTEMPTS
    # A rate limit's wait when GitHub's headers do not say how long (github/retry.py).
    rate_limited_s: float = RATE_LIMITED_S

    def __post_init__(self) -> None:
        if self.lease_s <= 0:
            raise ValueError("an outbox lease lasts more than 0 seconds")
        if not 0 <= self.retry_s <= self.max_retry_s:
            raise ValueError("a retry waits 0 seconds or more, and at most max_retry_s")
        if self.max_attempts < 1:
            raise ValueError("an effect gets at least one attempt")


@dataclass(frozen=True)
class Made:
    """What making an effect produced: a result to keep, and run fields to bind."""

    result: Mapping[str, Any]
    bind: Mapping[str, int | str | None]


class Outbox:
    """Make pending effects, once each, across crashes and relay processes."""

    def __init__(
        self,
        store: Store,
        github_for: Callable[[int], GitHubGateway],
        *,
        name: str,
        config: OutboxConfig | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.github_for = github_for
        self.name = name
        self.config = config or OutboxConfig()
        # Draws in [0, 1) that spread the backoff of effects that failed together.
        self.jitter = jitter

    def drain(self, run_id: str | None = None) -> int:
        """Make every due effect (of one run); return how many were made.

        Claims in rounds: finishing the oldest effect of a lane makes the next one due.
        """
        made = 0
        while True:
            claimed = self.store.claim_effects(self.name, self.config.lease_s, run_id=run_id)
            if not claimed:
                return made
            for effect in claimed:
                made += self._make_one(effect)

    def _make_one(self, effect: Effect) -> int:
        with about(run=effect.run_id):  # the lines logged meanwhile name the run
            return self._make_logged(effect)

    def _make_logged(self, effect: Effect) -> int:
        try:
            run = self.store.get_run(effect.run_id)
            if run.installation_id is None or run.pr_number is None:
                raise ValueError("the run names no installation or pull request")
            done = self._make(self.github_for(run.installation_id), run, effect)
        except GitHubError as exc:
            # Which answers are worth trying again, and when: the one GitHub call policy.
            delay = retry_later_s(
                exc.status,
                exc.reason,
                exc.headers,
                effect.attempts,
                first_s=self.config.retry_s,
                cap_s=self.config.max_retry_s,
                now=time.time(),
                rate_limited_s=self.config.rate_limited_s,
                jitter=self.jitter(),
            )
            if delay is not None:
                log.warning("effect %s %s: %s; again in %.1fs", effect.kind, effect.key, exc, delay)
                self.store.finish_effect(
                    effect.id, self.name, ok=False, error=str(exc), retry_in_s=delay,
                    max_attempts=self.config.max_attempts,
                )  # fmt: skip
            else:
                log.error("effect %s %s failed for good: %s", effect.kind, effect.key, exc)
                self.store.finish_effect(effect.id, self.name, ok=False, error=str(exc), final=True)
            return 0
        except ValueError as exc:  # a payload the gateway refuses: trying again cannot help
            log.error("effect %s %s cannot be made: %s", effect.kind, effect.key, exc)
            self.store.finish_effect(effect.id, self.name, ok=False, error=str(exc), final=True)
            return 0
        return int(
            self.store.finish_effect(
                effect.id, self.name, ok=True, result=done.result, bind=done.bind
            )
        )

    def _make(self, gh: GitHubGateway, run: RunRecord, effect: Effect) -> Made:
        p = effect.payload
        # An effect tried before may have been applied although its answer was lost.
        again = effect.attempts > 1
        if effect.kind == "check":
            return _make_check(gh, run, p, again=again)
        if effect.kind == "review":
            return _make_review(gh, run, p, again=again)
        if effect.kind == "reaction":
            content = cast(ReactionContent, p["content"])
            target = OnIssue(p["number"]) if p.get("number") else OnComment(p["comment_id"])
            reaction = gh.add_reaction(run.repo, target, content)
            return Made({"reaction_id": reaction.id}, {})
        if effect.kind == "dismiss":
            assert run.pr_number is not None
            try:
                dismissed = gh.dismiss_review(
                    run.repo, run.pr_number, int(p["review_id"]), p["message"]
                )
            except GitHubError as exc:
                # GitHub refuses to dismiss what is not a live blocking review (dismissed
                # already, say): there is nothing left to lift, which is what was wanted.
                if exc.status != 422:
                    raise
                return Made({"already": exc.reason[:200]}, {})
            # A dismissal's answer holds no time of its own: GitHub's Date of it stands in.
            return Made(_at({"dismissed": int(p["review_id"])}, dismissed.answered_at), {})
        if effect.kind == "comment":
            number = int(p["number"])
            found = gh.find_comment(run.repo, number, p["marker"]) if again else None
            made = found or gh.comment(run.repo, number, p["body"])
            return Made({"comment_id": made.id}, {})
        if effect.kind == "cancel":
            cancelled = gh.cancel_workflow_run(run.repo, int(p["workflow_run_id"]))
            return Made({"cancelled": cancelled}, {})
        raise ValueError(f"no maker for effects of kind {effect.kind!r} yet")


def _make_check(gh: GitHubGateway, run: RunRecord, p: Mapping[str, Any], *, again: bool) -> Made:
    output = CheckOutput(title=p["title"], summary=p["summary"])
    actions = [CheckAction(a["label"], a["description"], a["identifier"]) for a in p["actions"]]
    check_id = run.check_run_id
    if check_id is None and again:
        check_id = gh.find_check_run(run.repo, p["head_sha"], name=GUARD, external_id=run.run_id)
    if check_id is None:
        made = gh.create_check_run_answer(
            run.repo,
            p["head_sha"],
            name=GUARD,
            status=p["status"],
            conclusion=p["conclusion"],
            output=output,
            actions=actions,
            external_id=run.run_id,
        )
        result = {"check_run_id": made.id, "created": True}
        return Made(_at(result, made.answered_at), {"check_run_id": made.id})
    updated = gh.update_check_run(
        run.repo,
        check_id,
        status=p["status"],
        conclusion=p["conclusion"],
        output=output,
        actions=actions,
    )
    return Made(_at({"check_run_id": check_id}, updated.answered_at), {"check_run_id": check_id})


def _make_review(gh: GitHubGateway, run: RunRecord, p: Mapping[str, Any], *, again: bool) -> Made:
    assert run.pr_number is not None
    if again:
        marker = p.get("marker") or review_marker(run.run_id)
        found = gh.find_review(run.repo, run.pr_number, marker)
        if found is not None:
            result = _at({"review_id": found.id, "found": True}, found.submitted_at)
            return Made(result, {"review_id": found.id})
    post = gh.post_blocking_review if p["kind"] == "blocking" else gh.post_advisory_review
    review = post(run.repo, run.pr_number, p["head_sha"], p["body"])
    # The review's own time as GitHub returned it (its Date if it named none).
    at = review.submitted_at or review.answered_at
    return Made(_at({"review_id": review.id}, at), {"review_id": review.id})


def _at(result: dict[str, Any], github_at: datetime | None) -> dict[str, Any]:
    """Keep GitHub's time of an effect in its result (``github_at``); the record stamps it."""
    return {**result, "github_at": github_at.isoformat()} if github_at is not None else result

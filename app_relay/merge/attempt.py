"""Turn one click on a run page into at most one merge: read twice, claim, call once.

docs/design.md section 12. A click is an attempt in the record; the gate is read
twice without a cache (each pass with its own deadline) and both passes must be ready
and agree on the head and the base; the run is read again from the record; the record's
claim admits one attempt per head; then the merge is made with the person's own token,
pinned to the reviewed head (or the pull request is enqueued with it as expected head).
GitHub's answer is recorded in its own words. An answer lost after the call was sent is
``unknown``: it stays in flight until GitHub shows the pull request merged or closed
(``settle``, on a page view or a periodic pass; ``settle_from_event`` on webhooks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from app_relay.github.answers import GitHubError
from app_relay.github.merging import MergeAnswer, PullSettled
from app_relay.github.signin import UserToken
from app_relay.github.vocab import MERGE_METHODS
from app_relay.merge.gate import GateReading, RunFacts
from app_relay.merge.reading import DEADLINE_S, GateReads, read_gate
from app_relay.observe import metrics
from app_relay.store import MergeAttempt, MergeClaimed, RunRecord, Store
from app_relay.words.inert import code_span

log = logging.getLogger(__name__)

# The merge call's own deadline: under the relay's graceful stop (30 s), so a stopping
# relay still records what GitHub answered to a call already sent.
CALL_TIMEOUT_S: Final = 10.0
# Blockers about the person rather than the pull request: the attempt is refused.
REFUSING: Final = frozenset({"bot", "no-write"})
# Verdicts a merge may follow; the gate says the same from GitHub's side of things.
Outcome = Literal["merged", "queued", "unknown", "failed", "blocked", "refused"]


class Reader(Protocol):
    """One pass of the gate (``reading.read_gate``)."""

    def __call__(
        self,
        gh: GateReads,
        user: UserToken,
        run: RunFacts,
        *,
        app_id: int,
        deadline_s: float,
        clock: Callable[[], float],
        pause: Callable[[float], None],
    ) -> GateReading: ...


class Stopping(Exception):
    """The relay is stopping: no new merge starts (resend the request to another relay)."""


class MergeGateway(GateReads, Protocol):
    """What a click asks GitHub, for one repository (``GitHubGateway`` has it all)."""

    def merge_pull(
        self, repo: str, number: int, *, sha: str, method: str, user: UserToken, timeout_s: float
    ) -> MergeAnswer: ...

    def enqueue_pull(
        self, repo: str, *, pull_node_id: str, expected_head: str, user: UserToken, timeout_s: float
    ) -> MergeAnswer: ...

    def pull_settled(self, repo: str, number: int) -> PullSettled: ...


class MergeGitHub(Protocol):
    """The App's side: a gateway onto a repository, and whether it may merge there."""

    def gateway_for(self, repo: str) -> MergeGateway:
        """Return a gateway acting on ``repo`` through the App's installation."""

    def merge_offered(self, repo: str) -> bool:
        """Say whether the installation holds ``contents: write`` (the opt-in) on ``repo``."""


class AppMerges:
    """The App's side over ``GitHubApp``: its installation's gateway and permissions."""

    def __init__(self, app: Any) -> None:
        self.app = app  # github.app_auth.GitHubApp

    def gateway_for(self, repo: str) -> MergeGateway:
        """Return a gateway acting on ``repo`` through the App's installation there."""
        gateway: MergeGateway = self.app.gateway(self.app.repo_installation(repo))
        return gateway

    def merge_offered(self, repo: str) -> bool:
        """Say whether the installation on ``repo`` holds ``contents: write`` (read each time)."""
        permissions = self.app.installation_of(repo).permissions
        return bool(permissions.get("contents") == "write")


@dataclass(frozen=True)
class Clicked:
    """What became of a click: the attempt as recorded, and its outcome in a word."""

    attempt: MergeAttempt | None
    outcome: Outcome
    words: str


def facts_of(run: RunRecord) -> RunFacts:
    """Return what the gate needs to know of a run, from its record."""
    if run.pr_number is None:
        raise ValueError(f"run {run.run_id} is not a pull request's")
    return RunFacts(
        repo=run.repo,
        number=run.pr_number,
        head_sha=run.head_sha,
        base_ref=run.base_ref or "",
        state=run.state,
        lifted=run.lifted,
    )


def between_passes(first: GateReading, second: GateReading) -> str:
    """Say what changed between two ready passes ("" when they agree)."""
    changed = []
    if first.head_sha != second.head_sha:
        changed.append(f"the head moved from {first.head_sha[:12]} to {second.head_sha[:12]}")
    if (first.base_ref, first.base_sha) != (second.base_ref, second.base_sha):
        changed.append(
            f"the base moved from {code_span(first.base_ref)} at {first.base_sha[:12]} "
            f"to {code_span(second.base_ref)} at {second.base_sha[:12]}"
        )
    if first.queue != second.queue:
        changed.append("the base's merge queue rule changed")
    if first.methods != second.methods:
        changed.append("the repository's merge methods changed")
    return "; ".join(changed)


def _blocked_words(reading: GateReading, which: str) -> str:
    return f"the {which} pass: " + " ".join(b.words for b in reading.blockers)


class MergeDesk:
    """Take merge clicks for the board: the record, GitHub, and whether the relay stops."""

    def __init__(
        self,
        store: Store,
        github: MergeGitHub,
        *,
        app_id: int,
        deadline_s: float = DEADLINE_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], None] = time.sleep,
        reader: Reader | None = None,
    ) -> None:
        self.store = store
        self.reader: Reader = reader or read_gate
        self.github = github
        self.app_id = app_id
        self.deadline_s = deadline_s
        self.call_timeout_s = call_timeout_s
        self.clock = clock
        self.pause = pause
        self.stopping = threading.Event()

    # ------------------------------------------------------------ the click

    def click(self, run_id: str, *, login: str, user: UserToken, method: str) -> Clicked:
        """Read the gate twice, claim the head, merge it once; record every step.

        Raise ``Stopping`` (nothing recorded) when the relay is stopping.
        """
        if self.stopping.is_set():
            raise Stopping("the relay is stopping")
        if method not in MERGE_METHODS:
            raise ValueError(f"not a merge method: {method[:40]!r}")
        attempt = self.store.begin_merge(run_id, login=login, method=method)
        holder = self.store.live_merge(attempt.repo, attempt.pr_number, attempt.head_sha)
        if holder is not None:
            said = f"attempt {holder.id} by {holder.login} is {holder.state} on this head"
            return self._end(attempt, "refused", f"not sent: {said}")
        run = self.store.get_run(run_id)
        facts = facts_of(run)
        gh = self.github.gateway_for(run.repo)
        passes = [self.read(gh, user, facts) for _ in range(2)]
        first, second = passes
        self.store.record_readings(
            attempt.id, first.to_json(), second.to_json(), base_sha=second.base_sha or None
        )
        for reading, which in ((first, "first"), (second, "second")):
            if not reading.ready:
                # Who may not merge is refused; anything else about GitHub blocks.
                who = any(b.code in REFUSING for b in reading.blockers)
                return self._end(
                    attempt, "refused" if who else "blocked", _blocked_words(reading, which)
                )
        if changed := between_passes(first, second):
            return self._end(attempt, "blocked", f"between the two passes {changed}")
        if second.head_sha != facts.head_sha:
            return self._end(attempt, "blocked", "the pull request's head is not the reviewed one")
        if not second.queue and method not in second.methods:
            allowed = ", ".join(second.methods) or "none"
            return self._end(
                attempt, "refused", f"the repository does not allow {method} (allowed: {allowed})"
            )
        again = self.store.get_run(run_id)
        if (again.state, again.lifted, again.head_sha) != (run.state, run.lifted, run.head_sha):
            return self._end(
                attempt, "blocked", f"the run changed while GitHub was read: it is {again.state}"
            )
        if self.stopping.is_set():
            return self._end(attempt, "refused", "not sent: the relay is stopping")
        try:
            self.store.claim_merge(attempt.id)
        except MergeClaimed as exc:
            metrics.merge_attempt("refused")
            return Clicked(self.store.get_merge(attempt.id), "refused", str(exc))
        answer = self._call(gh, facts, second, method, user)
        return self._answered(attempt.id, answer, login)

    def read(self, gh: MergeGateway, user: UserToken, facts: RunFacts) -> GateReading:
        """Make one full pass of the gate's reads (no cache), within its own deadline."""
        return self.reader(
            gh,
            user,
            facts,
            app_id=self.app_id,
            deadline_s=self.deadline_s,
            clock=self.clock,
            pause=self.pause,
        )

    def _call(
        self,
        gh: MergeGateway,
        facts: RunFacts,
        reading: GateReading,
        method: str,
        user: UserToken,
    ) -> MergeAnswer:
        try:
            if reading.queue:
                return gh.enqueue_pull(
                    facts.repo,
                    pull_node_id=reading.pull_node_id,
                    expected_head=facts.head_sha,
                    user=user,
                    timeout_s=self.call_timeout_s,
                )
            return gh.merge_pull(
                facts.repo,
                facts.number,
                sha=facts.head_sha,
                method=method,
                user=user,
                timeout_s=self.call_timeout_s,
            )
        except Exception as exc:  # the call may have left: fail closed, as unknown
            log.exception("merge: the call on %s#%s failed", facts.repo, facts.number)
            return MergeAnswer("unknown", None, f"the call failed: {type(exc).__name__}")

    def _answered(self, attempt_id: int, answer: MergeAnswer, login: str) -> Clicked:
        words = code_span(answer.message) if answer.message else ""
        if answer.outcome == "merged":
            done = self.store.settle_merge(
                attempt_id,
                "merged",
                words,
                status=answer.status,
                merged_sha=answer.merged_sha,
                merged_by=login,
            )
            return self._count(done, "merged", words)
        state: Literal["queued", "unknown", "failed"] = (
            "failed" if answer.outcome == "refused" else answer.outcome
        )
        done = self.store.settle_merge(attempt_id, state, words, status=answer.status)
        return self._count(done, state, words)

    def _end(
        self, attempt: MergeAttempt, state: Literal["blocked", "refused"], words: str
    ) -> Clicked:
        done = self.store.settle_merge(attempt.id, state, words)
        return self._count(done, state, words)

    def _count(self, attempt: MergeAttempt, outcome: Outcome, words: str) -> Clicked:
        metrics.merge_attempt(outcome)
        log.info(
            "merge attempt %s on %s#%s at %s by %s: %s",
            attempt.id,
            attempt.repo,
            attempt.pr_number,
            attempt.head_sha[:12],
            attempt.login,
            outcome,
        )
        return Clicked(attempt, outcome, words)

    # ------------------------------------------------------------ settling

    def settle(self, attempt: MergeAttempt) -> MergeAttempt:
        """Ask GitHub how an ``unknown`` attempt ended; keep it unknown while the PR is open."""
        if attempt.state != "unknown":
            return attempt
        try:
            settled = self.github.gateway_for(attempt.repo).pull_settled(
                attempt.repo, attempt.pr_number
            )
        except (GitHubError, ValueError) as exc:
            log.warning("merge attempt %s: could not read how it ended: %s", attempt.id, exc)
            return attempt
        return settle_from(self.store, attempt, settled)

    def settle_all(self, repo: str | None = None) -> int:
        """Settle every ``unknown`` attempt GitHub has an answer for; return how many moved."""
        moved = 0
        for attempt in self.store.unsettled_merges(repo):
            if attempt.state == "unknown" and self.settle(attempt).state != "unknown":
                moved += 1
        return moved


def settle_from(store: Store, attempt: MergeAttempt, settled: PullSettled) -> MergeAttempt:
    """Move an unknown or queued attempt by how GitHub shows its pull request now."""
    if settled.state == "merged":
        return store.settle_merge(
            attempt.id,
            "merged",
            "GitHub shows the pull request merged",
            merged_sha=settled.merged_sha,
            merged_by=settled.merged_by,
        )
    if settled.state == "closed":
        return store.settle_merge(attempt.id, "failed", "GitHub shows it closed, not merged")
    return attempt


def settle_from_event(store: Store, name: str, payload: Mapping[str, Any]) -> int:
    """Fold a ``pull_request`` (closed, dequeued) or ``merge_group`` webhook into attempts.

    Return how many attempts moved. Only attempts in flight on that pull request move.
    """
    repository = payload.get("repository")
    repo = repository.get("full_name") if isinstance(repository, Mapping) else None
    action = payload.get("action")
    if not isinstance(repo, str):
        return 0
    if name == "merge_group":
        group = payload.get("merge_group")
        head_ref = group.get("head_ref") if isinstance(group, Mapping) else None
        # A merge group's head_ref names its pull request: gh-readonly-queue/<base>/pr-<n>-<sha>.
        number = _queued_number(head_ref) if isinstance(head_ref, str) else None
        if action != "destroyed" or number is None:
            return 0
        reason = payload.get("reason")
        if reason == "merged":
            return 0  # the pull_request closed event says who merged it and to what
        return _move_all(store, repo, number, "failed", f"removed from the merge queue: {reason}")
    pull = payload.get("pull_request")
    number = pull.get("number") if isinstance(pull, Mapping) else None
    if not isinstance(pull, Mapping) or not isinstance(number, int):
        return 0
    if action == "dequeued":
        reason = payload.get("reason")
        return _move_all(
            store, repo, number, "failed", f"removed from the merge queue: {reason or 'dequeued'}"
        )
    if action != "closed":
        return 0
    if pull.get("merged") is True:
        by = pull.get("merged_by")
        login = by.get("login") if isinstance(by, Mapping) else None
        sha = pull.get("merge_commit_sha")
        return _move_all(
            store,
            repo,
            number,
            "merged",
            "GitHub says the pull request was merged",
            merged_sha=sha if isinstance(sha, str) else None,
            merged_by=login if isinstance(login, str) else None,
        )
    return _move_all(store, repo, number, "failed", "GitHub says it was closed, not merged")


def _queued_number(head_ref: str) -> int | None:
    _, _, tail = head_ref.rpartition("/pr-")
    number, _, _ = tail.partition("-")
    return int(number) if number.isdigit() else None


def _move_all(
    store: Store,
    repo: str,
    number: int,
    state: Literal["merged", "failed"],
    words: str,
    **found: Any,
) -> int:
    moved = 0
    for attempt in store.unsettled_merges(repo):
        if attempt.pr_number != number or attempt.state == "sent":
            continue  # a call still being answered records its own answer
        store.settle_merge(attempt.id, state, words, **found)
        metrics.merge_attempt(f"settled-{state}")
        moved += 1
    return moved

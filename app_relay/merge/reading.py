"""Make one full pass of the gate's reads, uncached, within a deadline, and judge it.

docs/design.md section 12: the person first (``GET /user`` with their own token: a Bot is
refused before anything else is read), their permission through the App, the pull
request, the base branch's rulesets and classic protection (read as the guard reads
them, ``github/protection.py``), the check runs and commit statuses on the reviewed
head, and the repository's merge methods. ``mergeable`` that GitHub is still computing
(null) is read again until the pass's deadline. Nothing is cached: a click runs two
passes, and each must see GitHub as it is. A read that fails is kept as ``Unreadable``
and blocks; a pass that reaches its deadline stops and blocks with ``deadline``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Final, Protocol, TypeVar

from app_relay.github.answers import GitHubError
from app_relay.github.branch_rules import Branch, BranchProtection, BranchRules, Unreadable
from app_relay.github.protection import read_classic, read_rules
from app_relay.github.signin import UserToken
from app_relay.merge.gate import (
    CheckRunSeen,
    GateAnswers,
    GateReading,
    Person,
    PullFacts,
    RunFacts,
    StatusSeen,
    judge_gate,
)
from app_relay.words.inert import code_span

DEADLINE_S: Final = 6.0
# GitHub computes `mergeable` in the background after a push; asked again this often
# (doubling) while it says null, within the pass's deadline.
# https://docs.github.com/en/rest/guides/using-the-rest-api-to-interact-with-your-git-database#checking-mergeability-of-pull-requests
FIRST_PAUSE_S: Final = 0.2
MAX_PAUSE_S: Final = 1.0

T = TypeVar("T")


class GateReads(Protocol):
    """The GitHub reads one pass makes (``GitHubGateway`` has them)."""

    def user_identity(self, user: UserToken) -> tuple[str, str]: ...

    def permission(self, repo: str, login: str) -> str: ...

    def pull_merge_facts(self, repo: str, number: int) -> PullFacts: ...

    def branch_rules(self, repo: str, branch: str) -> BranchRules: ...

    def branch_protection(self, repo: str, branch: str) -> BranchProtection | None: ...

    def branch(self, repo: str, branch: str) -> Branch: ...

    def commit_check_runs(self, repo: str, sha: str) -> tuple[CheckRunSeen, ...]: ...

    def commit_statuses(self, repo: str, sha: str) -> tuple[StatusSeen, ...]: ...

    def merge_methods(self, repo: str) -> tuple[str, ...]: ...


class _Late(Exception):
    """The pass reached its deadline before the named read."""


def _kept(read: Callable[[], T]) -> T | Unreadable:
    """Run a read; a failure is kept as why (inert: GitHub's words may be in it)."""
    try:
        return read()
    except GitHubError as exc:
        return Unreadable(code_span(f"{exc.call}: {exc.reason}"))
    except ValueError as exc:
        return Unreadable(code_span(str(exc)))


class _Pass:
    """One pass's answers so far, and its deadline: what was read is kept when it passes."""

    def __init__(self, clock: Callable[[], float], deadline_s: float) -> None:
        self.clock = clock
        self.ends = clock() + deadline_s
        self.answers = GateAnswers()

    def left_s(self) -> float:
        """Return the seconds left before the deadline."""
        return self.ends - self.clock()

    def step(self, before: str) -> None:
        """Stop the pass if its deadline passed before the read named ``before``."""
        if self.clock() >= self.ends:
            self.answers = replace(self.answers, stopped=before)
            raise _Late(before)

    def keep(self, **found: object) -> None:
        """Keep what a read found."""
        self.answers = replace(self.answers, **found)  # type: ignore[arg-type]


def read_gate(
    gh: GateReads,
    user: UserToken,
    run: RunFacts,
    *,
    app_id: int,
    deadline_s: float = DEADLINE_S,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> GateReading:
    """Read everything the gate needs once, without a cache, and judge it."""
    p = _Pass(clock, deadline_s)
    try:
        if _read(gh, user, run, p):
            # An answer that came after the deadline is late, and so is the pass.
            p.step("whether the pull request merges cleanly")
            _await_mergeable(gh, run, p, pause)
    except _Late:
        pass
    return judge_gate(run, p.answers, app_id=app_id)


def _read(gh: GateReads, user: UserToken, run: RunFacts, p: _Pass) -> bool:
    """Make the pass's reads in order; False when the person is refused before the rest."""
    repo, base = run.repo, run.base_ref
    p.step("who you are on GitHub")
    identity = _kept(lambda: gh.user_identity(user))
    if isinstance(identity, Unreadable):
        p.keep(person=identity)
        return False
    login, kind = identity
    p.keep(person=Person(login, kind))
    if kind != "User":
        return False  # a Bot (or anything not a person) is refused before more is read
    p.step("your permission on the repository")
    p.keep(person=Person(login, kind, _kept(lambda: gh.permission(repo, login))))
    p.step("the pull request")
    p.keep(pull=_kept(lambda: gh.pull_merge_facts(repo, run.number)), mergeable_reads=1)
    p.step("the base branch's rulesets")
    p.keep(rules=read_rules(gh, repo, base))
    p.step("the base branch's classic protection")
    protection, branch_info = read_classic(gh, repo, base)
    p.keep(protection_read=True, protection=protection, base=branch_info)
    if branch_info is None:
        p.step("the base branch")
        p.keep(base=_kept(lambda: gh.branch(repo, base)))
    p.step("the check runs on the head")
    p.keep(check_runs=_kept(lambda: gh.commit_check_runs(repo, run.head_sha)))
    p.step("the commit statuses on the head")
    p.keep(statuses=_kept(lambda: gh.commit_statuses(repo, run.head_sha)))
    p.step("the repository's merge methods")
    p.keep(methods=_kept(lambda: gh.merge_methods(repo)))
    return True


def _await_mergeable(
    gh: GateReads, run: RunFacts, p: _Pass, pause: Callable[[float], None]
) -> None:
    """Read the pull request again while GitHub says ``mergeable`` null, until the deadline.

    Still null when the deadline comes is ``mergeable-unknown``, not a late pass.
    """
    wait = FIRST_PAUSE_S
    while True:
        pull = p.answers.pull
        if not isinstance(pull, PullFacts) or pull.mergeable is not None:
            return
        if pull.merged or pull.state != "open":
            return
        left = p.left_s()
        if left <= wait:
            return
        pause(wait)
        wait = min(wait * 2, MAX_PAUSE_S)
        p.keep(
            pull=_kept(lambda: gh.pull_merge_facts(run.repo, run.number)),
            mergeable_reads=p.answers.mergeable_reads + 1,
        )

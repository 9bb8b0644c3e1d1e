"""Answer whether ``cujo/guard`` holds the merge of a branch: holds, does not, or unknown.

DESIGN section 8 "Does the block hold?". ``judge_hold`` is pure: it takes what GitHub
answered (the branch's ruleset rules, its classic protection or, when that read is
refused, the branch read) and follows the reading rules written from recorded answers.
``read_hold`` makes the reads; ``HoldCache`` keeps an answer at most 60 seconds per
branch, for check summaries and the run page. A merge decision reads again, uncached.
Every answer that cannot be read, is malformed, or contradicts itself is ``unknown``
with why, never ``holds``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from app_relay.github.client import (
    Branch,
    BranchProtection,
    BranchRules,
    GitHubError,
    RequiredCheck,
    answer_message,
)
from app_relay.runs.state import GUARD
from app_relay.words.inert import code_span

Answer = Literal["holds", "does-not-hold", "unknown"]
ENFORCED: Final = frozenset({"non_admins", "everyone"})
CACHE_S: Final = 60.0
# A token without admin rights gets 404 "Not Found" from the protection read; an App
# token without the Administration permission may get this 403 instead. Both mean: read
# the branch instead. https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
_NO_ADMIN: Final = frozenset({(404, "Not Found"), (403, "Resource not accessible by integration")})


@dataclass(frozen=True, slots=True)
class Hold:
    """Whether ``cujo/guard`` holds the merge, why, and what setting to change if not."""

    answer: Answer
    reason: str
    fix: str = ""

    def line(self) -> str:
        """Return one Markdown line for a check summary or the run page."""
        if self.answer == "holds":
            return f"This block holds the merge: {self.reason}"
        if self.answer == "does-not-hold":
            return f"This block does NOT hold the merge: {self.reason} To fix: {self.fix}"
        return f"Whether this block holds the merge is unknown: {self.reason} {self.fix}".strip()


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A read that failed or answered something that cannot be trusted.

    ``no_admin``: the protection read was refused for want of admin rights, so the
    branch read stands in for it.
    """

    why: str
    no_admin: bool = False


Protection = BranchProtection | None | Unreadable


class BranchReader(Protocol):
    """The three GitHub reads this module needs (``GitHubGateway`` has them)."""

    def branch_rules(self, repo: str, branch: str) -> BranchRules: ...

    def branch_protection(self, repo: str, branch: str) -> BranchProtection | None: ...

    def branch(self, repo: str, branch: str) -> Branch: ...


# ---- judging --------------------------------------------------------------------------


def judge_hold(
    rules: BranchRules | Unreadable,
    protection: Protection,
    branch_info: Branch | Unreadable | None,
    app_id: int,
    *,
    branch: str,
) -> Hold:
    """Judge from GitHub's answers whether ``cujo/guard`` from this App must pass to merge.

    ``protection`` is None when GitHub says the branch has no classic protection;
    ``branch_info`` is the branch read, used only when ``protection`` is ``Unreadable``
    for want of admin rights. ``holds`` needs ``cujo/guard`` required and pinned to
    ``app_id``.
    """
    where = code_span(branch)
    if isinstance(rules, Unreadable):
        return _unknown(f"the rulesets of {where} could not be read ({rules.why}).")
    classic = _classic_checks(protection, branch_info)
    if isinstance(classic, Unreadable):
        return _unknown(f"the classic protection of {where} could not be read ({classic.why}).")
    required = [c for c in (*rules.required_checks, *classic) if c.context == GUARD]
    fix_ruleset = f"require `{GUARD}` from the Cujo app in a ruleset on {where}."
    if any(c.app_id == app_id for c in required):
        return Hold("holds", f"`{GUARD}` is a required check on {where}, pinned to the Cujo app.")
    if any(c.app_id is None for c in required):
        return Hold(
            "does-not-hold",
            f"`{GUARD}` is required on {where} but not pinned to an app, so any workflow job "
            f"named `{GUARD}` (one a pull request adds, say) satisfies it.",
            f"set the Cujo app as the expected source of `{GUARD}` (or {fix_ruleset[:-1]}).",
        )
    if required:
        others = ", ".join(sorted({str(c.app_id) for c in required}))
        return Hold(
            "does-not-hold",
            f"`{GUARD}` is required on {where} from another app (id {others}), not from "
            f"this Cujo app (id {app_id}).",
            fix_ruleset,
        )
    return Hold("does-not-hold", f"`{GUARD}` is not a required check on {where}.", fix_ruleset)


def _unknown(why: str) -> Hold:
    return Hold("unknown", why, "`cujo doctor` reads the branch again and says what it found.")


def _classic_checks(
    protection: Protection, branch_info: Branch | Unreadable | None
) -> tuple[RequiredCheck, ...] | Unreadable:
    """Return the checks classic protection requires, or why that cannot be told."""
    if protection is None:
        return ()
    if isinstance(protection, BranchProtection):
        return protection.required_checks or ()
    if not protection.no_admin:
        return protection
    if branch_info is None:
        return Unreadable(f"{protection.why}, and the branch was not read")
    if isinstance(branch_info, Unreadable):
        return Unreadable(f"{protection.why}, and the branch read failed: {branch_info.why}")
    return _branch_checks(branch_info)


def _branch_checks(b: Branch) -> tuple[RequiredCheck, ...] | Unreadable:
    """Read the branch read's classic checks by DESIGN section 8's rules, or say why not."""
    level = b.enforcement_level
    listed = bool(b.contexts or b.checks)
    if sorted(b.contexts) != sorted(c.context for c in b.checks):
        return Unreadable("the branch read's 'contexts' and 'checks' name different checks")
    if level == "off":
        if listed:
            return Unreadable("the branch read lists required checks with enforcement off")
        return ()
    if level not in ENFORCED:
        return Unreadable(f"the branch read has an unknown enforcement level {code_span(level)}")
    if not b.protection_enabled:
        return Unreadable("the branch read enforces checks on a branch it says is unprotected")
    return b.checks


# ---- reading --------------------------------------------------------------------------


def read_hold(gh: BranchReader, repo: str, branch: str, app_id: int) -> Hold:
    """Read a branch's rules and protection from GitHub and judge whether the guard holds.

    What GitHub said goes into the reason as an inert code span (it ends up in Markdown).
    """
    rules: BranchRules | Unreadable
    try:
        rules = gh.branch_rules(repo, branch)
    except GitHubError as exc:
        rules = Unreadable(code_span(exc.reason))
    protection: Protection
    branch_info: Branch | Unreadable | None = None
    try:
        protection = gh.branch_protection(repo, branch)
    except GitHubError as exc:
        if (exc.status, answer_message(exc)) in _NO_ADMIN:
            protection = Unreadable(f"the protection read answered HTTP {exc.status}", True)
            try:
                branch_info = gh.branch(repo, branch)
            except GitHubError as again:
                branch_info = Unreadable(code_span(again.reason))
        else:
            protection = Unreadable(code_span(exc.reason))
    return judge_hold(rules, protection, branch_info, app_id, branch=branch)


class HoldCache:
    """Keep each branch's answer at most ``ttl_s`` seconds (a check summary's, never a merge's)."""

    def __init__(
        self, *, ttl_s: float = CACHE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not 0 <= ttl_s <= CACHE_S:
            raise ValueError(f"an answer may be kept 0 to {CACHE_S:.0f} seconds, not {ttl_s}")
        self._ttl_s = ttl_s
        self._clock = clock
        self._kept: dict[tuple[str, str], tuple[float, Hold]] = {}
        self._lock = threading.Lock()

    def hold(self, gh: BranchReader, repo: str, branch: str, app_id: int) -> Hold:
        """Return the kept answer for a branch if it is fresh, or read it again."""
        key = (repo, branch)
        now = self._clock()
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and 0 <= now - kept[0] < self._ttl_s:
            return kept[1]
        answer = read_hold(gh, repo, branch, app_id)
        with self._lock:
            self._kept[key] = (now, answer)
        return answer

    def forget(self, repo: str, branch: str | None = None) -> None:
        """Drop what is kept for a repository (a branch protection or ruleset event)."""
        with self._lock:
            for key in [k for k in self._kept if k[0] == repo and branch in (None, k[1])]:
                del self._kept[key]

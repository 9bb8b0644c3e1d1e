"""Read a branch's protection from GitHub and answer whether ``cujo/guard`` holds its merge.

docs/design.md section 8.3, "Does the block hold?". ``BranchReads`` (part of the gateway,
``client.py`` composes it) reads the branch's ruleset rules, its classic protection and,
when that read is refused for want of admin rights, the branch itself. ``judge_hold`` is
pure: it takes those answers and follows the reading rules written from recorded
answers. ``read_hold`` makes the reads; ``HoldCache`` keeps an answer at most 15 seconds
per branch, for check summaries and the run page, and forgets a repository's answers
when GitHub says its rulesets or branch protection changed (the ``repository_ruleset``
and ``branch_protection_rule`` webhooks). A merge decision reads again, uncached.
Every answer that cannot be read, is malformed, or contradicts itself is ``unknown``
with why, never ``holds``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from github.GithubException import GithubException

from app_relay.github.answers import GitHubError, answer_message, message_of
from app_relay.github.branch_rules import (
    MERGE_QUEUE,
    REQUIRED_CHECKS,
    Branch,
    BranchProtection,
    BranchRule,
    BranchRules,
    MergeQueue,
    Protection,
    RequiredCheck,
    Unreadable,
    classic_checks,
)
from app_relay.github.payloads import path_segment, repo_path
from app_relay.github.transport import GatewayTransport
from app_relay.github.vocab import GUARD, OBJECT_ID, Reader
from app_relay.words.hold import hold_sentence
from app_relay.words.inert import code_span

Answer = Literal["holds", "does-not-hold", "unknown"]
# Short: a ruleset edit also drops the answer at once (its webhook), but a webhook can be
# lost, and the answer must not stay wrong for long either way.
CACHE_S: Final = 15.0
# A token without admin rights gets 404 "Not Found" from the protection read; an App
# token without the Administration permission may get this 403 instead. Both mean: read
# the branch instead. https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
# A queue's merge method as GitHub writes it, and as the REST merge names it.
_QUEUE_METHODS: Final = {"MERGE": "merge", "SQUASH": "squash", "REBASE": "rebase"}
_NO_ADMIN: Final = frozenset({(404, "Not Found"), (403, "Resource not accessible by integration")})


# ---- what GitHub answers about a branch: branch_rules.py (pure, shared with merge/) ----


@dataclass(frozen=True, slots=True)
class Hold:
    """Whether ``cujo/guard`` holds the merge, why, and what setting to change if not."""

    answer: Answer
    reason: str
    fix: str = ""

    def line(self) -> str:
        """Return one Markdown line for a check summary or the run page (``words.hold``)."""
        return hold_sentence(self.answer, self.reason, self.fix)


class BranchReader(Protocol):
    """The three GitHub reads this module needs (``GitHubGateway`` has them)."""

    def branch_rules(self, repo: str, branch: str) -> BranchRules: ...

    def branch_protection(self, repo: str, branch: str) -> BranchProtection | None: ...

    def branch(self, repo: str, branch: str) -> Branch: ...


# ---- reading the branch ---------------------------------------------------------------


class BranchReads(GatewayTransport):
    """Read a branch's ruleset rules, its classic protection, and the branch itself."""

    def branch_rules(self, repo: str, branch: str) -> BranchRules:
        """Read the active ruleset rules that apply to a branch."""
        # https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch
        path = f"{repo_path(repo)}/rules/branches/{path_segment(branch)}"
        rules = []
        for r in self._pages(path, None, {}):
            kind = r.text("type")
            checks: tuple[RequiredCheck, ...] = ()
            strict: bool | None = None
            queue = _merge_queue(r) if kind == MERGE_QUEUE else None
            if kind == REQUIRED_CHECKS:
                params = r.obj("parameters")
                checks = tuple(
                    RequiredCheck(c.text("context"), _opt_app_id(c, "integration_id"))
                    for c in params.items("required_status_checks")
                )
                strict = params.flag("strict_required_status_checks_policy")
            rules.append(
                BranchRule(
                    type=kind,
                    ruleset_id=r.opt_integer("ruleset_id") if "ruleset_id" in r.data else None,
                    ruleset_source=(
                        r.opt_text("ruleset_source") if "ruleset_source" in r.data else None
                    ),
                    required_checks=checks,
                    strict=strict,
                    queue=queue,
                )
            )
        return BranchRules(tuple(rules))

    def branch_protection(self, repo: str, branch: str) -> BranchProtection | None:
        """Read classic branch protection; None when GitHub says the branch has none."""
        # https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
        path = f"{repo_path(repo)}/branches/{path_segment(branch)}/protection"
        try:
            a = self._get(path)
        except GitHubError as exc:
            # Only this exact answer means "not protected"; any other 404 (no access,
            # no branch) stays an error so it can never read as "unprotected, fine".
            cause = exc.__cause__
            if (
                exc.status == 404
                and isinstance(cause, GithubException)
                and message_of(cause) == "Branch not protected"
            ):
                return None
            raise
        enforce = a.opt_obj("enforce_admins") if "enforce_admins" in a.data else None
        checks: tuple[RequiredCheck, ...] | None = None
        strict: bool | None = None
        rsc = a.opt_obj("required_status_checks") if "required_status_checks" in a.data else None
        if rsc is not None:
            strict = rsc.flag("strict")
            contexts = [c if isinstance(c, str) else "" for c in rsc.array("contexts")]
            if not all(contexts):
                raise GitHubError(
                    a.call, "field 'required_status_checks.contexts' holds a non-string"
                )
            if "checks" in rsc.data:
                checks = tuple(
                    RequiredCheck(c.text("context"), _opt_app_id(c, "app_id"))
                    for c in rsc.items("checks")
                )
                if sorted(c.context for c in checks) != sorted(contexts):
                    raise GitHubError(a.call, "'checks' and 'contexts' disagree")
            else:
                checks = tuple(RequiredCheck(c, None) for c in contexts)
        return BranchProtection(
            required_checks=checks,
            strict=strict,
            enforce_admins=enforce.flag("enabled") if enforce is not None else False,
        )

    def branch(self, repo: str, branch: str) -> Branch:
        """Read a branch and the classic status checks it requires (read access is enough)."""
        # https://docs.github.com/en/rest/branches/branches#get-a-branch
        a = self._get(f"{repo_path(repo)}/branches/{path_segment(branch)}")
        name = a.text("name")
        if name != branch:
            raise GitHubError(a.call, f"field 'name' is {name[:80]!r}, asked for {branch[:80]!r}")
        protection = a.obj("protection")
        rsc = protection.obj("required_status_checks")
        contexts = [c if isinstance(c, str) else "" for c in rsc.array("contexts")]
        if not all(contexts):
            raise GitHubError(a.call, "field 'protection.required_status_checks.contexts' "
                              "holds a non-string")  # fmt: skip
        checks = []
        for c in rsc.items("checks"):
            # Each check names its app; null means any app (docs/design.md section 8.3).
            if "app_id" not in c.data:
                raise GitHubError(a.call, f"field '{c.where}.app_id' is missing")
            checks.append(RequiredCheck(c.text("context"), _opt_app_id(c, "app_id")))
        return Branch(
            name=name,
            sha=a.obj("commit").text("sha", pattern=OBJECT_ID),
            protected=a.flag("protected"),
            protection_enabled=protection.flag("enabled"),
            enforcement_level=rsc.text("enforcement_level"),
            contexts=tuple(contexts),
            checks=tuple(checks),
        )


def _merge_queue(rule: Reader) -> MergeQueue:
    """Read a merge queue rule's method; a part that cannot be read is kept as why, not raised.

    The gate blocks a queue it cannot read as ``queue-unknown`` (docs/design.md section 12); the
    guard's reading does not need the queue at all, so this never fails the whole read.
    https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch
    """
    params = rule.data.get("parameters")
    method = params.get("merge_method") if isinstance(params, dict) else None
    if not isinstance(params, dict):
        return MergeQueue(None, "its 'parameters' are not an object")
    if method not in _QUEUE_METHODS:
        return MergeQueue(None, f"its merge method is {code_span(str(method)[:40])}")
    return MergeQueue(_QUEUE_METHODS[method])


def _opt_app_id(a: Reader, key: str) -> int | None:
    # GitHub writes "any source" as a missing id, null, or -1.
    if key not in a.data:
        return None
    value = a.opt_integer(key)
    return None if value is None or value == -1 else value


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
    classic = classic_checks(protection, branch_info)
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


# ---- reading and judging --------------------------------------------------------------


def read_rules(gh: BranchReader, repo: str, branch: str) -> BranchRules | Unreadable:
    """Read a branch's ruleset rules; a failed or malformed read is ``Unreadable`` with why."""
    try:
        return gh.branch_rules(repo, branch)
    except GitHubError as exc:
        return Unreadable(code_span(exc.reason))


def read_classic(
    gh: BranchReader, repo: str, branch: str
) -> tuple[Protection, Branch | Unreadable | None]:
    """Read a branch's classic protection, and the branch itself when that read is refused.

    The branch read stands in only when the protection read was refused for want of
    admin rights (``_NO_ADMIN``); every other failure is ``Unreadable`` with why.
    """
    try:
        return gh.branch_protection(repo, branch), None
    except GitHubError as exc:
        if (exc.status, answer_message(exc)) not in _NO_ADMIN:
            return Unreadable(code_span(exc.reason)), None
        status = exc.status
    protection = Unreadable(f"the protection read answered HTTP {status}", True)
    try:
        return protection, gh.branch(repo, branch)
    except GitHubError as again:
        return protection, Unreadable(code_span(again.reason))


def read_hold(gh: BranchReader, repo: str, branch: str, app_id: int) -> Hold:
    """Read a branch's rules and protection from GitHub and judge whether the guard holds.

    What GitHub said goes into the reason as an inert code span (it ends up in Markdown).
    """
    rules = read_rules(gh, repo, branch)
    protection, branch_info = read_classic(gh, repo, branch)
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

    def forget(self, repo: str | None, branch: str | None = None) -> None:
        """Drop what is kept for a repository (a branch protection or ruleset event).

        ``repo`` None drops every answer: an organization's ruleset names no repository.
        """
        with self._lock:
            for key in [k for k in self._kept if repo in (None, k[0]) and branch in (None, k[1])]:
                del self._kept[key]

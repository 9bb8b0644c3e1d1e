"""Read a branch's protection from GitHub and answer whether ``cujo/guard`` holds its merge.

DESIGN section 8 "Does the block hold?". ``BranchReads`` (part of the gateway,
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
from app_relay.github.payloads import path_segment, repo_path
from app_relay.github.transport import GatewayTransport
from app_relay.github.vocab import OBJECT_ID, Reader
from app_relay.runs.state import GUARD
from app_relay.words.hold import hold_sentence
from app_relay.words.inert import code_span

Answer = Literal["holds", "does-not-hold", "unknown"]
ENFORCED: Final = frozenset({"non_admins", "everyone"})
# Short: a ruleset edit also drops the answer at once (its webhook), but a webhook can be
# lost, and the answer must not stay wrong for long either way.
CACHE_S: Final = 15.0
# A token without admin rights gets 404 "Not Found" from the protection read; an App
# token without the Administration permission may get this 403 instead. Both mean: read
# the branch instead. https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
_NO_ADMIN: Final = frozenset({(404, "Not Found"), (403, "Resource not accessible by integration")})


# ---- what GitHub answers about a branch -----------------------------------------------


@dataclass(frozen=True, slots=True)
class RequiredCheck:
    """A required status check; ``app_id`` None means any source may satisfy it."""

    context: str
    app_id: int | None


@dataclass(frozen=True, slots=True)
class BranchRule:
    """One active rule on a branch, from a ruleset."""

    type: str
    ruleset_id: int | None
    ruleset_source: str | None
    required_checks: tuple[RequiredCheck, ...]
    strict: bool | None


@dataclass(frozen=True, slots=True)
class BranchRules:
    """The active ruleset rules on a branch."""

    rules: tuple[BranchRule, ...]

    @property
    def required_checks(self) -> tuple[RequiredCheck, ...]:
        """Return every required status check any rule names."""
        return tuple(c for r in self.rules for c in r.required_checks)


@dataclass(frozen=True, slots=True)
class BranchProtection:
    """Classic branch protection; ``required_checks`` None when it requires no checks."""

    required_checks: tuple[RequiredCheck, ...] | None
    strict: bool | None
    enforce_admins: bool


@dataclass(frozen=True, slots=True)
class Branch:
    """A branch as its read shows it: classic protection's checks, readable without admin."""

    name: str
    sha: str
    protected: bool  # also true when only a ruleset applies
    protection_enabled: bool
    enforcement_level: str  # checked by judge_hold: off, non_admins or everyone
    contexts: tuple[str, ...]
    checks: tuple[RequiredCheck, ...]


@dataclass(frozen=True, slots=True)
class Hold:
    """Whether ``cujo/guard`` holds the merge, why, and what setting to change if not."""

    answer: Answer
    reason: str
    fix: str = ""

    def line(self) -> str:
        """Return one Markdown line for a check summary or the run page (``words.hold``)."""
        return hold_sentence(self.answer, self.reason, self.fix)


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
            if kind == "required_status_checks":
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
            # Each check names its app; null means any app (DESIGN section 8).
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


# ---- reading and judging --------------------------------------------------------------


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

    def forget(self, repo: str | None, branch: str | None = None) -> None:
        """Drop what is kept for a repository (a branch protection or ruleset event).

        ``repo`` None drops every answer: an organization's ruleset names no repository.
        """
        with self._lock:
            for key in [k for k in self._kept if repo in (None, k[0]) and branch in (None, k[1])]:
                del self._kept[key]

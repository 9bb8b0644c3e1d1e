"""What GitHub answers about a branch's rules, and the fail-closed reading of its classic checks.

Pure (no I/O): the typed answers ``protection.py`` reads (``BranchReads``) and the rules,
written from recorded answers (docs/design.md section 8.3), that turn classic protection, or the
branch read standing in for it, into the checks it requires, or why that cannot be
told. Both the guard's reading (``protection.judge_hold``) and the merge gate
(``merge/gate.py``) judge from these, so the two never read a branch differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app_relay.words.inert import code_span

ENFORCED: Final = frozenset({"non_admins", "everyone"})
# The rule type of a ruleset's merge queue.
# https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch
MERGE_QUEUE: Final = "merge_queue"
REQUIRED_CHECKS: Final = "required_status_checks"


@dataclass(frozen=True, slots=True)
class RequiredCheck:
    """A required status check; ``app_id`` None means any source may satisfy it."""

    context: str
    app_id: int | None


@dataclass(frozen=True, slots=True)
class MergeQueue:
    """A ruleset's merge queue; ``unread`` says why its parameters could not be read."""

    merge_method: str | None
    unread: str = ""


@dataclass(frozen=True, slots=True)
class BranchRule:
    """One active rule on a branch, from a ruleset."""

    type: str
    ruleset_id: int | None
    ruleset_source: str | None
    required_checks: tuple[RequiredCheck, ...]
    strict: bool | None
    queue: MergeQueue | None = None  # set for a merge_queue rule only


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
    enforcement_level: str  # checked by classic_checks: off, non_admins or everyone
    contexts: tuple[str, ...]
    checks: tuple[RequiredCheck, ...]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A read that failed or answered something that cannot be trusted.

    ``no_admin``: the protection read was refused for want of admin rights, so the
    branch read stands in for it.
    """

    why: str
    no_admin: bool = False


Protection = BranchProtection | None | Unreadable


def classic_checks(
    protection: Protection, branch_info: Branch | Unreadable | None
) -> tuple[RequiredCheck, ...] | Unreadable:
    """Return the checks classic protection requires, or why that cannot be told.

    ``protection`` is None when GitHub says the branch has no classic protection;
    ``branch_info`` is the branch read, used only when the protection read was refused
    for want of admin rights.
    """
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
    """Read the branch read's classic checks (docs/design.md section 8.3), or say why not."""
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

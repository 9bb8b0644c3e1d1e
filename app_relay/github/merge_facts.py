"""What one pass of the merge gate read from GitHub, as plain values; pure.

``merge/reading.py`` fills ``GateAnswers`` (the gateway's ``merge_reads.py`` answers the
parts no other reader has); ``merge/gate.judge_gate`` judges it. None stands for a read not made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app_relay.github.branch_rules import Branch, BranchRules, Protection, Unreadable


@dataclass(frozen=True, slots=True)
class Person:
    """Who clicked: GitHub's ``type`` for them, and their permission (None: not read)."""

    login: str
    type: str
    permission: str | Unreadable | None = None


@dataclass(frozen=True, slots=True)
class PullFacts:
    """The pull request as a merge needs it; ``mergeable`` None while GitHub computes it."""

    state: Literal["open", "closed"]
    merged: bool
    draft: bool
    head_sha: str
    base_ref: str
    mergeable: bool | None
    node_id: str = ""


@dataclass(frozen=True, slots=True)
class CheckRunSeen:
    """A check run on the head: its name, the App that reported it, where it stands."""

    id: int
    name: str
    app_id: int | None
    status: str
    conclusion: str | None


@dataclass(frozen=True, slots=True)
class StatusSeen:
    """A commit status on the head (the combined status: the latest per context)."""

    context: str
    state: str


@dataclass(frozen=True, slots=True)
class GateAnswers:
    """Everything one pass read; None for a read not made (refused earlier, or too late).

    ``base`` is the base branch read (its SHA, and classic protection's checks when the
    protection read is refused for want of admin rights); ``stopped`` names the read the
    pass's deadline cut off, if it did.
    """

    person: Person | Unreadable | None = None
    pull: PullFacts | Unreadable | None = None
    mergeable_reads: int = 0
    rules: BranchRules | Unreadable | None = None
    protection_read: bool = False
    protection: Protection = None
    base: Branch | Unreadable | None = None
    check_runs: tuple[CheckRunSeen, ...] | Unreadable | None = None
    statuses: tuple[StatusSeen, ...] | Unreadable | None = None
    methods: tuple[str, ...] | Unreadable | None = None
    stopped: str = ""

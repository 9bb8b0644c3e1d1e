"""How many sandbox runs may be in flight, and why a pull request waits; pure, no I/O.

The relay's settings give the ceiling (``CUJO_MAX_RUNS_PER_REPO``,
``CUJO_MAX_RUNS_PER_AUTHOR``); a repository's ``.cujo.yml`` at base may only lower it
(``caps: {repo: 2, author: 1}``). Beyond the caps a pull request waits in the queue
(``store/queue.py``) with its ``cujo/guard`` check ``queued`` and the reason in words;
first-time contributors wait behind everyone else (``is_first_timer``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app_relay.runstate.machine import GuardView
from cujo_action.schema import Policy

DEFAULT_REPO_CAP = 4
DEFAULT_AUTHOR_CAP = 2
# GitHub's author_association of someone with no history in the repository.
# https://docs.github.com/en/graphql/reference/enums#commentauthorassociation
FIRST_TIMERS = frozenset({"FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE"})


@dataclass(frozen=True)
class Caps:
    """At most ``repo`` sandbox runs of one repository in flight, ``author`` of one author."""

    repo: int = DEFAULT_REPO_CAP
    author: int = DEFAULT_AUTHOR_CAP

    def __post_init__(self) -> None:
        if self.repo < 1 or self.author < 1:
            raise ValueError("a cap on runs in flight is 1 or more")


def caps_for(ceiling: Caps, policy: Policy) -> Caps:
    """Return the caps a repository's policy sets under the relay's ``ceiling``.

    ``.cujo.yml`` is the repository's own word, read at base: it may lower a cap, never
    raise one past what the relay's operator allows.
    """
    repo = policy.caps.repo if policy.caps.repo is not None else ceiling.repo
    author = policy.caps.author if policy.caps.author is not None else ceiling.author
    return Caps(repo=min(repo, ceiling.repo), author=min(author, ceiling.author))


def is_first_timer(association: str) -> bool:
    """Say whether GitHub's ``author_association`` names someone new to the repository.

    An association that is missing or unknown counts as new (fail closed: it waits).
    """
    known = {"OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "MANNEQUIN"}
    return association in FIRST_TIMERS or association not in known


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def why_wait(caps: Caps, *, repo_busy: int, author_busy: int, first_timer: bool = False) -> str:
    """Say why a pull request waits with these runs in flight ("" when it may start)."""
    if author_busy >= caps.author:
        why = (
            f"waiting: {_runs(author_busy)} of this author in flight "
            f"(at most {caps.author} per author)"
        )
    elif repo_busy >= caps.repo:
        why = (
            f"waiting: {_runs(repo_busy)} of this repository in flight "
            f"(at most {caps.repo} per repository)"
        )
    else:
        return ""
    if first_timer:
        why += "; a first-time contributor's pull request waits behind everyone else's"
    return why


def queued_view(reason: str) -> GuardView:
    """Return ``cujo/guard``'s face while a pull request waits in the queue."""
    text = (
        f"{reason}.\n\n"
        "This pull request is reviewed when a run in flight ends; nothing is needed from "
        "anyone. The caps are the relay's settings, lowered by `caps:` in `.cujo.yml` at base."
    )
    return GuardView("queued", None, "Cujo: queued", text)

"""Decide whether a `/cujo` verb applies: who may use it, and what applying it changes.

Pure: no HTTP client, no clock, no store. docs/design.md section 8.2 and
invariant 6: a bot is refused before any permission is read; the pull request's author
may not dismiss; the permission is read from GitHub on every command (the caller hands
a reader that asks at that moment). ``decide`` says whether a comment is a command and
whether its author may use it; ``change_for`` says what applying it does to the run it
targets, or why it does nothing; the rest words the answers. The relay does the writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from app_relay.github.vocab import PERMISSIONS
from app_relay.runstate.machine import RunState
from app_relay.verbs.parse import Verb
from app_relay.words.inert import code_span

# Who may use a verb: https://docs.github.com/en/rest/collaborators/collaborators
MAY: Final[frozenset[str]] = frozenset({"admin", "maintain", "write"})
MAY_NOT: Final = frozenset(PERMISSIONS) - MAY

Outcome = Literal["ignored", "refused", "allowed"]


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a comment is a command, and whether its author may use it.

    ``ignored``: not a command; say nothing. ``refused``: react ``confused`` and reply
    ``reason``. ``allowed``: go on to ``change_for``; ``permission`` is what GitHub said.
    """

    outcome: Outcome
    verb: Verb | None = None
    reason: str = ""
    permission: str | None = None


def decide(
    verbs: Sequence[Verb],
    *,
    event: str,
    action: str,
    is_pull_request: bool,
    commenter_login: str,
    commenter_type: str,
    pr_author: str,
    permission_reader: Callable[[], str],
) -> Decision:
    """Decide, stopping at the first refusal, whether a comment's verb may be used.

    The order is docs/design.md section 8.2's: only a new comment on a pull request is a command;
    one verb line at most; a bot is refused before ``permission_reader`` is called; the
    author may not dismiss; then the permission GitHub gives at this moment. An
    exception from ``permission_reader`` propagates: the caller retries or refuses.
    """
    if event != "issue_comment" or action != "created" or not is_pull_request or not verbs:
        return Decision("ignored")
    if len(verbs) > 1:
        return Decision(
            "refused",
            reason="The comment holds more than one command line, so none was applied; "
            "write one command alone on its line.",
        )
    verb = verbs[0]
    if commenter_type == "Bot" or commenter_login.endswith("[bot]"):
        return Decision("refused", verb, "Commands from bot accounts are never applied.")
    if commenter_type != "User":
        return Decision("refused", verb, "Commands are applied only from user accounts.")
    if verb is Verb.DISMISS and commenter_login.casefold() == pr_author.casefold():
        return Decision("refused", verb, "The pull request's author may not dismiss its block.")
    permission = permission_reader()
    if permission in MAY:
        return Decision("allowed", verb, permission=permission)
    if permission in MAY_NOT:
        return Decision(
            "refused",
            verb,
            f"Only someone with write, maintain or admin access may use `/cujo {verb}`; "
            f"GitHub says your access is {permission}.",
            permission,
        )
    return Decision(
        "refused",
        verb,
        "GitHub answered an access level Cujo does not know, so the command was not applied.",
    )


# ---- what applying does ---------------------------------------------------------------

ReviewChange = Literal["dismiss", "block", "none"]
_HOLDS: Final = frozenset({"unproven", "error"})


@dataclass(frozen=True, slots=True)
class Change:
    """What an allowed verb does to the run it targets, or why it does nothing.

    ``to_state`` is the run's next state (``runstate.guard_for`` gives the check for it);
    ``review`` is ``dismiss`` (dismiss the blocking review), ``block`` (post a new
    blocking review with the same findings) or ``none`` (the check alone changes).
    """

    applies: bool
    reason: str = ""
    to_state: RunState | None = None
    review: ReviewChange = "none"


def change_for(
    verb: Verb,
    *,
    state: RunState,
    held: bool,
    dismissed_from: RunState | None,
    run_head_sha: str,
    pr_head_sha: str,
    posted_at: datetime | None,
    comment_created_at: datetime,
) -> Change:
    """Return what applying ``verb`` to the newest run of a pull request does.

    ``held`` says whether an ``unproven`` or ``error`` run holds the merge
    (``on_unproven`` / ``on_error``: ``hold``); ``dismissed_from`` is the state a
    ``dismissed`` run was lifted from; ``posted_at`` is when the run's current verdict
    (or dismissal) was posted on GitHub, by GitHub's clock as ``comment_created_at`` is
    (whole seconds: a comment of the same second is not after it). Order: the head, the
    state, the time.
    """
    short = run_head_sha[:12]
    if run_head_sha != pr_head_sha:
        return Change(
            False,
            f"Commit `{short}` is no longer the pull request's head (now "
            f"`{pr_head_sha[:12]}`); a command applies only to the head's review.",
        )
    if verb is Verb.DISMISS:
        if state == "blocked":
            change = Change(True, to_state="dismissed", review="dismiss")
        elif state in _HOLDS and held:
            # An unproven or error hold has no blocking review: GitHub answers 422 to
            # dismissing a COMMENT review, so only the check changes.
            change = Change(True, to_state="dismissed")
        else:
            return Change(False, _nothing_to(verb, state, short, held))
    elif state == "dismissed" and dismissed_from == "blocked":
        change = Change(True, to_state="blocked", review="block")
    elif state == "dismissed" and dismissed_from in _HOLDS:
        change = Change(True, to_state=dismissed_from)
    elif state == "dismissed":
        return Change(
            False, f"Cujo does not know what the dismissal of `{short}` lifted, so it stays."
        )
    else:
        return Change(False, _nothing_to(verb, state, short, held))
    if posted_at is None:
        return Change(
            False,
            f"The review of `{short}` is not shown on GitHub yet; "
            "comment again once it is if you still mean it.",
        )
    if not posted_at < comment_created_at:
        return Change(
            False,
            f"The review of `{short}` was posted after this comment was written; "
            "comment again if you still mean it.",
        )
    return change


def _nothing_to(verb: Verb, state: RunState, short: str, held: bool) -> str:
    what = "lift" if verb is Verb.DISMISS else "reinstate"
    why = {
        "running": "its review is still running",
        "waiting": "its review is waiting to run",
        "clean": "its review is clean",
        "superseded": "its review was superseded",
        "blocked": "its block was never dismissed",
        "dismissed": "its block is already dismissed",
    }.get(state, "its check does not hold the merge" if not held else f"it is {state}")
    return f"There is nothing to {what} on `{short}`: {why}."


# ---- what the relay writes ------------------------------------------------------------


def reaction(applied: bool) -> Literal["+1", "confused"]:
    """Return the reaction the command's comment gets."""
    return "+1" if applied else "confused"


def refusal_reply(verb: Verb | None, reason: str) -> str:
    """Return the reply to a refused command: what was not applied and why."""
    what = f"`/cujo {verb}`" if verb is not None else "The command"
    return f"{what} was not applied. {reason}"


def dismissal_message(login: str, head_sha: str) -> str:
    """Return the message of a dismissed block: who lifted it, on which commit."""
    return (
        f"Dismissed by {code_span(login)} with `/cujo dismiss` on `{head_sha[:12]}`; "
        "the findings stand. `/cujo reinstate` puts the block back."
    )

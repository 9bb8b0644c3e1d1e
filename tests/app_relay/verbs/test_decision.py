"""The `/cujo` verbs: who may use them, and what applying one does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from app_relay.runstate.machine import RunState
from app_relay.verbs.decision import (
    Change,
    Decision,
    change_for,
    decide,
    dismissal_message,
    reaction,
    refusal_reply,
)
from app_relay.verbs.parse import Verb

D, R = Verb.DISMISS, Verb.REINSTATE


# ---- who may --------------------------------------------------------------------------


class Reader:
    """A permission reader that counts its calls."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return self.answer


def ask(
    verbs: list[Verb],
    reader: Callable[[], str],
    *,
    event: str = "issue_comment",
    action: str = "created",
    is_pull_request: bool = True,
    login: str = "maria",
    kind: str = "User",
    author: str = "alice",
) -> Decision:
    return decide(
        verbs,
        event=event,
        action=action,
        is_pull_request=is_pull_request,
        commenter_login=login,
        commenter_type=kind,
        pr_author=author,
        permission_reader=reader,
    )


@pytest.mark.parametrize("permission", ["admin", "maintain", "write"])
def test_write_access_may_use_either_verb(permission: str) -> None:
    for verb in Verb:
        reader = Reader(permission)
        decision = ask([verb], reader)
        assert decision == Decision("allowed", verb, permission=permission)
        assert reader.calls == 1


@pytest.mark.parametrize("permission", ["triage", "read", "none"])
def test_less_than_write_is_refused_after_reading(permission: str) -> None:
    reader = Reader(permission)
    decision = ask([D], reader)
    assert (decision.outcome, decision.verb, decision.permission) == ("refused", D, permission)
    assert f"your access is {permission}" in decision.reason
    assert reader.calls == 1


@pytest.mark.parametrize("permission", ["", "Admin", "owner", "custom-role", "WRITE"])
def test_an_unknown_permission_fails_closed(permission: str) -> None:
    decision = ask([D], Reader(permission))
    assert decision.outcome == "refused"
    assert decision.permission is None
    assert "does not know" in decision.reason


@pytest.mark.parametrize(
    ("event", "action", "is_pull_request"),
    [
        ("issue_comment", "edited", True),
        ("issue_comment", "deleted", True),
        ("issue_comment", "created", False),
        ("pull_request_review_comment", "created", True),
        ("pull_request_review", "submitted", True),
    ],
)
def test_only_a_new_comment_on_a_pull_request_is_a_command(
    event: str, action: str, is_pull_request: bool
) -> None:
    reader = Reader("admin")
    decision = ask([D], reader, event=event, action=action, is_pull_request=is_pull_request)
    assert decision == Decision("ignored")
    assert reader.calls == 0


def test_a_comment_without_a_verb_is_no_command_and_says_nothing() -> None:
    reader = Reader("admin")
    assert ask([], reader, kind="Bot") == Decision("ignored")
    assert reader.calls == 0


def test_two_verb_lines_are_ambiguous_before_anything_is_read() -> None:
    reader = Reader("admin")
    for verbs in ([D, R], [D, D], [R, D, R]):
        decision = ask(verbs, reader)
        assert (decision.outcome, decision.verb) == ("refused", None)
        assert "more than one command" in decision.reason
    assert reader.calls == 0


def test_a_bot_with_admin_rights_is_refused_without_reading_a_permission() -> None:
    reader = Reader("admin")
    for verb in Verb:
        decision = ask([verb], reader, login="helper[bot]", kind="Bot")
        assert decision == Decision(
            "refused", verb, "Commands from bot accounts are never applied."
        )
    # The type decides, whatever the name; a [bot] name decides too, whatever the type.
    assert ask([D], reader, login="renovate", kind="Bot").outcome == "refused"
    assert ask([D], reader, login="renovate[bot]", kind="User").outcome == "refused"
    assert reader.calls == 0


@pytest.mark.parametrize("kind", ["Organization", "Mannequin", "", "user"])
def test_an_account_that_is_not_a_user_is_refused_without_reading(kind: str) -> None:
    reader = Reader("admin")
    assert ask([D], reader, kind=kind).outcome == "refused"
    assert reader.calls == 0


def test_a_bot_is_refused_before_the_author_rule() -> None:
    decision = ask([D], Reader("admin"), login="alice[bot]", kind="Bot", author="alice[bot]")
    assert "bot" in decision.reason


def test_the_author_may_not_dismiss_even_as_admin_and_nothing_is_read() -> None:
    reader = Reader("admin")
    for login in ("alice", "Alice", "ALICE"):
        decision = ask([D], reader, login=login, author="alice")
        assert decision == Decision(
            "refused", D, "The pull request's author may not dismiss its block."
        )
    assert reader.calls == 0


def test_the_author_with_write_access_may_reinstate() -> None:
    # docs/design.md section 8.2 refuses only `dismiss` by the author: putting a block back is safe.
    reader = Reader("write")
    assert ask([R], reader, login="alice", author="alice") == Decision(
        "allowed", R, permission="write"
    )
    assert reader.calls == 1


def test_the_author_without_write_access_may_not_reinstate() -> None:
    assert ask([R], Reader("read"), login="alice", author="alice").outcome == "refused"


def test_the_permission_is_read_at_every_command() -> None:
    answers = iter(["write", "read"])
    assert ask([D], lambda: next(answers)).outcome == "allowed"
    assert ask([D], lambda: next(answers)).outcome == "refused"


def test_a_reader_that_fails_propagates() -> None:
    def broken() -> str:
        raise TimeoutError("GitHub did not answer")

    with pytest.raises(TimeoutError):
        ask([D], broken)


# ---- what applying does ---------------------------------------------------------------

HEAD = "a" * 40
OTHER = "b" * 40
T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def apply(
    verb: Verb,
    state: RunState,
    *,
    held: bool = True,
    dismissed_from: RunState | None = None,
    run_head: str = HEAD,
    pr_head: str = HEAD,
    posted_at: datetime | None = T0,
    commented_at: datetime = T0 + timedelta(minutes=5),
) -> Change:
    return change_for(
        verb,
        state=state,
        held=held,
        dismissed_from=dismissed_from,
        run_head_sha=run_head,
        pr_head_sha=pr_head,
        posted_at=posted_at,
        comment_created_at=commented_at,
    )


def test_dismiss_lifts_a_block_by_dismissing_its_review() -> None:
    assert apply(D, "blocked") == Change(True, to_state="dismissed", review="dismiss")


@pytest.mark.parametrize("state", ["unproven", "error"])
def test_dismiss_lifts_a_hold_with_the_check_alone(state: RunState) -> None:
    assert apply(D, state) == Change(True, to_state="dismissed", review="none")


@pytest.mark.parametrize("state", ["unproven", "error"])
def test_a_hold_that_passes_has_nothing_to_lift(state: RunState) -> None:
    change = apply(D, state, held=False)
    assert not change.applies
    assert "nothing to lift" in change.reason
    assert "does not hold" in change.reason


def test_reinstate_puts_a_dismissed_block_back_with_a_new_blocking_review() -> None:
    assert apply(R, "dismissed", dismissed_from="blocked") == Change(
        True, to_state="blocked", review="block"
    )


@pytest.mark.parametrize("state", ["unproven", "error"])
def test_reinstate_puts_a_dismissed_hold_back(state: RunState) -> None:
    assert apply(R, "dismissed", dismissed_from=state) == Change(
        True, to_state=state, review="none"
    )


def test_reinstate_of_a_dismissal_cujo_cannot_place_is_refused() -> None:
    for source in (None, "clean", "running"):
        change = apply(R, "dismissed", dismissed_from=source)  # type: ignore[arg-type]
        assert not change.applies
        assert "does not know" in change.reason


@pytest.mark.parametrize(
    ("verb", "state", "why"),
    [
        (D, "clean", "clean"),
        (D, "running", "still running"),
        (D, "waiting", "waiting"),
        (D, "superseded", "superseded"),
        (D, "dismissed", "already dismissed"),
        (R, "blocked", "never dismissed"),
        (R, "clean", "clean"),
        (R, "running", "still running"),
        (R, "waiting", "waiting"),
        (R, "superseded", "superseded"),
        (R, "unproven", "unproven"),
        (R, "error", "error"),
    ],
)
def test_nothing_to_lift_or_reinstate(verb: Verb, state: RunState, why: str) -> None:
    change = apply(verb, state)
    assert not change.applies
    assert change.to_state is None
    assert "nothing to" in change.reason
    assert why in change.reason


def test_a_command_for_a_commit_that_is_no_longer_the_head_is_refused_first() -> None:
    for verb, state in ((D, "blocked"), (R, "dismissed"), (D, "clean")):
        change = apply(verb, state, dismissed_from="blocked", pr_head=OTHER)  # type: ignore[arg-type]
        assert not change.applies
        assert "no longer the pull request's head" in change.reason
        assert OTHER[:12] in change.reason


@pytest.mark.parametrize("posted_at", [T0 + timedelta(minutes=5), T0 + timedelta(minutes=6)])
def test_a_verb_applies_only_to_a_verdict_posted_before_the_comment(
    posted_at: datetime | None,
) -> None:
    change = apply(D, "blocked", posted_at=posted_at)
    assert not change.applies
    assert "after this comment was written" in change.reason


def test_a_verb_waits_for_a_verdict_not_yet_shown_on_github() -> None:
    change = apply(D, "blocked", posted_at=None)
    assert not change.applies
    assert "not shown on GitHub yet" in change.reason


# ---- what the relay writes ------------------------------------------------------------


def test_every_outcome_speaks() -> None:
    assert reaction(True) == "+1"
    assert reaction(False) == "confused"
    refused = ask([D], Reader("admin"), login="alice")
    assert refusal_reply(refused.verb, refused.reason) == (
        "`/cujo dismiss` was not applied. The pull request's author may not dismiss its block."
    )
    assert refusal_reply(None, "Two lines.").startswith("The command was not applied.")


def test_the_dismissal_names_who_without_a_mention() -> None:
    message = dismissal_message("maria", HEAD)
    assert "`maria`" in message
    assert "@" not in message
    assert HEAD[:12] in message

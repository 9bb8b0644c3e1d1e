"""The run state machine and GitHub's view of each state (docs/design.md section 3)."""

from __future__ import annotations

from typing import get_args

import pytest

from app_relay import store
from app_relay.runstate.machine import (
    RETRY_ACTION,
    TRANSITIONS,
    IllegalTransition,
    RunState,
    guard_for,
    is_path,
    reaction_for,
    review_for,
    sources,
    transition,
)

STATES: tuple[RunState, ...] = get_args(RunState)


def test_the_states_are_the_records_states() -> None:
    assert set(STATES) == set(store.RUN_STATES)


def test_no_state_can_approve() -> None:
    assert {review_for(s) for s in STATES} == {"advisory", "blocking", None}


def test_only_blocked_is_red() -> None:
    red = [s for s in STATES if guard_for(s).conclusion == "failure"]
    assert red == ["blocked"]


@pytest.mark.parametrize(
    ("state", "status", "conclusion", "review", "reaction"),
    [
        ("running", "in_progress", None, None, "eyes"),
        ("waiting", "in_progress", None, None, None),
        ("clean", "completed", "success", "advisory", "+1"),
        ("unproven", "completed", "action_required", "advisory", "+1"),
        ("blocked", "completed", "failure", "blocking", "-1"),
        ("dismissed", "completed", "success", None, None),
        ("error", "completed", "action_required", None, "confused"),
        ("superseded", "completed", "skipped", None, None),
    ],
)
def test_the_table(state: RunState, status: str, conclusion: str | None, review: str | None,
                   reaction: str | None) -> None:  # fmt: skip
    view = guard_for(state)
    assert (view.status, view.conclusion) == (status, conclusion)
    assert review_for(state) == review
    assert reaction_for(state) == reaction


def test_unproven_holds_saying_how_it_is_lifted_or_passes_when_the_policy_says_so() -> None:
    held = guard_for("unproven")
    assert held.conclusion == "action_required"  # never neutral: that passes a required check
    assert "`/cujo dismiss`" in held.summary
    assert "not the pull request's author" in held.summary
    passed = guard_for("unproven", on_unproven="pass")
    assert passed.conclusion == "neutral"
    assert "on_unproven: pass" in passed.summary


def test_every_hold_says_how_it_is_lifted_and_by_whom() -> None:
    for state in ("blocked", "unproven", "error"):
        assert "`/cujo dismiss`" in guard_for(state).summary, state  # type: ignore[arg-type]
    assert "dismissed by `octo-maint`" in guard_for("dismissed", dismissed_by="octo-maint").summary


def test_error_holds_with_a_retry_button_or_passes() -> None:
    held = guard_for("error")
    assert [a["identifier"] for a in held.actions] == [RETRY_ACTION]
    passed = guard_for("error", on_error="pass")
    assert (passed.conclusion, passed.actions) == ("neutral", ())


def test_the_summary_says_whether_the_block_holds() -> None:
    assert "holds the merge" in guard_for("blocked", holds="holds").summary
    assert "does NOT hold" in guard_for("blocked", holds="does-not-hold").summary
    assert "unknown" in guard_for("blocked", holds="garbage").summary


def test_waiting_names_who_and_dismissed_names_by_whom() -> None:
    assert "octocat" in guard_for("waiting", waiting_on="octocat").summary
    assert "hubot" in guard_for("dismissed", dismissed_by="hubot").title


@pytest.mark.parametrize(
    ("current", "target"),
    [("running", "blocked"), ("blocked", "dismissed"), ("dismissed", "blocked"),
     ("error", "dismissed"), ("unproven", "dismissed"), ("dismissed", "unproven"),
     ("waiting", "running"), ("waiting", "superseded")],
)  # fmt: skip
def test_allowed_moves(current: RunState, target: RunState) -> None:
    assert transition(current, target) == target


@pytest.mark.parametrize(
    ("current", "target"),
    [("superseded", "running"), ("clean", "blocked"), ("blocked", "clean"),
     ("clean", "dismissed"), ("superseded", "clean"),
     # a retry is a new run; a decided run is never superseded: it stands for its commit
     ("error", "running"), ("blocked", "superseded"), ("clean", "superseded"),
     ("dismissed", "clean"), ("dismissed", "superseded")],
)  # fmt: skip
def test_refused_moves(current: RunState, target: RunState) -> None:
    with pytest.raises(IllegalTransition, match=f"from {current} to {target}"):
        transition(current, target)


def test_superseded_is_final() -> None:
    assert TRANSITIONS["superseded"] == frozenset()


def test_sources_are_the_table_read_backwards() -> None:
    for target in STATES:
        assert sources(target) == {s for s in STATES if target in TRANSITIONS[s]}
    assert sources("dismissed") == {"blocked", "unproven", "error"}
    assert sources("running") == {"waiting"}


def test_a_path_starts_running_and_takes_only_allowed_steps() -> None:
    assert is_path(["running", "waiting", "running", "blocked", "dismissed", "blocked"])
    assert not is_path(["running", "error", "running"])
    assert not is_path(["waiting", "clean"])
    assert not is_path([])

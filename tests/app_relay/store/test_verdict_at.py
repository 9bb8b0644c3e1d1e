"""The record keeps GitHub's time of a run's verdict or dismissal, as its effects are made.

A verb compares a comment's GitHub ``created_at`` with this (issue 23): never the
relay's clock. Only an effect that shows the run's current state stamps it; a review's
or dismissal's time wins over the check's; a state not shown yet has no time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app_relay.runs.effects import check_intent, dismiss_intent, reaction_intent, review_intent
from app_relay.runstate.machine import guard_for
from app_relay.store import Effect, Store
from app_relay.verdict import Finding, Verdict

BASE, HEAD = "b" * 40, "a" * 40
RELAY = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the relay's clock: far from GitHub's
GITHUB = datetime(2026, 12, 1, 12, 7, 30, tzinfo=UTC)
FINDING = Finding(
    id="F1", rule="decoy-egress", severity="critical", check="install", title="egress",
    evidence=["install:egress:1"],
)  # fmt: skip
VERDICT = Verdict(state="blocked", summary="Blocked.", findings=[FINDING], judge="deterministic")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/cujo.db", clock=lambda: RELAY) as opened:
        yield opened


def blocked(store: Store) -> None:
    session_id = store.open_session("octo/repo", 7, "github")
    store.start_run(session_id, "r", BASE, HEAD, "sandbox")
    store.finish_run(
        "r",
        VERDICT,
        effects=[
            review_intent("r", "blocking", "Blocked.", HEAD),
            check_intent(guard_for("blocked"), HEAD),
            reaction_intent("-1", number=7),
        ],
    )


def make(store: Store, kind: str, at: datetime | None) -> Effect:
    """Claim and finish the run's next effect of ``kind``, GitHub answering at ``at``."""
    found = None
    for effect in store.claim_effects("w", 60, run_id="r"):
        if effect.kind != kind or found is not None:
            # Not this one: hand it back, due at once.
            store.finish_effect(effect.id, "w", ok=False, error="later", retry_in_s=0)
            continue
        result = {"github_at": at.isoformat()} if at is not None else {}
        assert store.finish_effect(effect.id, "w", ok=True, result=result)
        found = effect
    if found is None:
        raise AssertionError(f"no {kind} effect was due")
    return found


def test_a_verdict_has_no_time_until_github_shows_it(store: Store) -> None:
    blocked(store)
    assert store.verdict_posted_at("r") is None  # not the relay's clock


def test_the_reviews_time_wins_over_the_checks(store: Store) -> None:
    blocked(store)
    make(store, "check", GITHUB)
    assert store.verdict_posted_at("r") == GITHUB
    make(store, "review", GITHUB + timedelta(seconds=1))
    assert store.verdict_posted_at("r") == GITHUB + timedelta(seconds=1)


def test_a_dismissal_is_timed_anew_and_an_older_states_effect_stamps_nothing(
    store: Store,
) -> None:
    blocked(store)
    review = make(store, "review", GITHUB)
    assert review.payload["shows"]
    # The check of the verdict is still pending when a maintainer's dismissal moves the run.
    assert store.move(
        "r",
        "dismissed",
        "by maint",
        effects=[
            dismiss_intent(1, "lifted", key="dismiss:1"),
            check_intent(guard_for("dismissed"), HEAD),
        ],
    )
    assert store.verdict_posted_at("r") is None
    later = GITHUB + timedelta(minutes=1)
    make(store, "dismiss", later)
    assert store.verdict_posted_at("r") == later
    make(store, "check", later + timedelta(seconds=5))
    assert store.verdict_posted_at("r") == later  # the dismissal's own time stands


def test_a_state_recorded_before_github_times_were_kept_falls_back_to_the_relays(
    store: Store,
) -> None:
    session_id = store.open_session("octo/repo", 7, "github")
    store.start_run(session_id, "r", BASE, HEAD, "sandbox")
    store.finish_run("r", VERDICT)  # no effects name the state: an older relay's run
    assert store.verdict_posted_at("r") == RELAY

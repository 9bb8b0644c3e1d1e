"""The guard's answer stays true: a ruleset or branch protection edit shows on the next check.

The relay keeps "does the block hold?" a short while per branch (``HoldCache``). Here
its clock stands still, so only the ``repository_ruleset`` / ``branch_protection_rule``
webhook (which the fake GitHub sends when a test edits the rules, routed as the relay's
workers route it) can make the next check summary read the rules again (issue 23).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinatorworld import World
from fakegithub import FakeGitHub
from fakegithub.state import classic_protection, required_checks_rules
from relayworld import REPO, synthetic

from app_relay.github.event import Event
from app_relay.github.protection import HoldCache
from app_relay.runs.review_request import RecordingReviewer
from app_relay.store import Store
from app_relay.webhook.events import ROUTER, Context, merges

EXFIL = "collector.exfil.test"
HOLDS = "This block holds the merge"
NOT = "This block does NOT hold the merge"


def frozen_world(make: Any) -> World:
    """A world whose kept answers never age: only a webhook can drop them."""
    w: World = make(hold_cache=HoldCache(clock=lambda: 1000.0))
    return w


def beside_merges(event: Event) -> int:
    """Return how many of the merge panel's handlers an event also runs (they note news)."""
    return len(merges.handlers_for(event.name, event.action))


def deliver_webhooks(w: World) -> None:
    """Route the fake GitHub's webhooks to the coordinator, as the relay's workers do."""
    context = Context(
        store=w.store, reviewer=w.coordinator, runs=w.coordinator, guard_rules=w.coordinator
    )

    def sink(name: str, payload: dict[str, Any]) -> None:
        event: Event = w.event(name, payload)
        # One handler of its own, beside the run page's merge panel's (told to read again).
        assert ROUTER.dispatch(event, context) == 1 + beside_merges(event)

    w.fake.state.on_webhook(sink)


def summary_of_next_block(w: World, number: int) -> str:
    head = w.review(number, synthetic(install_egress_to=EXFIL))
    (check,) = w.checks(head)
    assert check["conclusion"] == "failure"
    summary: str = check["output"]["summary"]
    return summary


def pinned(w: World) -> list[dict[str, Any]]:
    return required_checks_rules(REPO, {"context": "cujo/guard", "integration_id": w.fake.app_id})


def test_a_ruleset_edit_shows_on_the_next_check_summary_in_both_directions(make: Any) -> None:
    w = frozen_world(make)
    deliver_webhooks(w)
    w.fake.state.set_rules(REPO, "main", pinned(w))
    assert HOLDS in summary_of_next_block(w, 60)

    # The rule pinning the guard to the App is removed: the next summary says so.
    w.fake.state.set_rules(REPO, "main", [])
    summary = summary_of_next_block(w, 61)
    assert NOT in summary
    assert HOLDS not in summary
    assert w.store.list_runs()[0].holds == "does-not-hold"

    # And back: the rule is added again.
    w.fake.state.set_rules(REPO, "main", pinned(w))
    assert HOLDS in summary_of_next_block(w, 62)
    sent = [(name, p["action"]) for name, p in w.fake.state.sent_webhooks]
    assert sent == [
        ("repository_ruleset", "created"),
        ("repository_ruleset", "deleted"),
        ("repository_ruleset", "created"),
    ]


def test_a_branch_protection_edit_shows_on_the_next_check_summary(make: Any) -> None:
    w = frozen_world(make)
    deliver_webhooks(w)
    assert NOT in summary_of_next_block(w, 63)  # nothing requires the guard yet

    check = {"context": "cujo/guard", "app_id": w.fake.app_id}
    w.fake.state.set_protection(REPO, "main", classic_protection(REPO, "main", check))
    assert HOLDS in summary_of_next_block(w, 64)

    w.fake.state.set_protection(REPO, "main", None)
    assert NOT in summary_of_next_block(w, 65)
    assert [p["action"] for _, p in w.fake.state.sent_webhooks] == ["created", "deleted"]


def test_without_the_webhook_the_kept_answer_goes_stale(make: Any) -> None:
    # What the relay did before issue 23: no subscription, so the removed rule still
    # "holds" for as long as the answer is kept (here, with time standing still, forever).
    w = frozen_world(make)
    w.fake.state.set_rules(REPO, "main", pinned(w))
    assert HOLDS in summary_of_next_block(w, 66)
    w.fake.state.set_rules(REPO, "main", [])
    assert HOLDS in summary_of_next_block(w, 67)


class Noted:
    """A ``GuardRules`` port that notes what it was told."""

    def __init__(self) -> None:
        self.changed: list[str | None] = []

    def rules_changed(self, repo: str | None) -> None:
        self.changed.append(repo)


def test_both_events_and_every_action_drop_the_answers(
    tmp_path: Path, fake_github: FakeGitHub
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    noted = Noted()
    context = Context(store=store, reviewer=RecordingReviewer(store), guard_rules=noted)
    state = fake_github.state
    fake_github.add_repo("octo/rules")
    for action in ("created", "edited", "deleted"):
        ruleset = state.ruleset_event("octo/rules", "main", [], action)
        rule = state.protection_rule_event("octo/rules", "main", {}, action)
        ROUTER.dispatch(Event("d", "repository_ruleset", ruleset), context)
        ROUTER.dispatch(Event("d", "branch_protection_rule", rule), context)
    # An organization's ruleset names no repository: every kept answer goes.
    org = state.ruleset_event("octo/rules", "main", [], "edited")
    del org["repository"]
    ROUTER.dispatch(Event("d", "repository_ruleset", org), context)
    assert noted.changed == ["octo/rules"] * 6 + [None]
    # Without the runs wired in, the event is only noted.
    bare = Context(store, RecordingReviewer(store))
    event = Event("d", "repository_ruleset", org)
    assert ROUTER.dispatch(event, bare) == 1 + beside_merges(event)
    store.close()

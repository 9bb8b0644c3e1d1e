"""Catch-up in process: failed webhooks asked again, pull requests nothing reviewed swept.

The coordinator, a real record and the relay's webhook app (on loopback, so GitHub's
redeliveries arrive as they would) against the fake GitHub. Deliveries the catch-up
hands to the workers are worked here, one by one, as a worker would.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from boardworld import Served, relay_settings
from coordinatorworld import BASE, World
from fakegithub import HookLog, fake_sha, hook_log
from relayworld import REPO, open_pull, pull_request_event

from app_relay.board.catchup_view import catch_up_line
from app_relay.github.event import Event
from app_relay.github.payloads import CheckOutput
from app_relay.runs.missed_webhooks import CatchUp, CatchUpConfig, is_catch_up
from app_relay.runs.review_request import review_request_of
from app_relay.runstate.machine import OPEN_STATES
from app_relay.store import CatchUpTally, Store
from app_relay.webhook.app import create_app
from app_relay.webhook.events import ROUTER, Context

WORKER = "test-worker"


class Relay:
    """A world with the relay's webhook served, GitHub's hook pointed at it, a catch-up."""

    def __init__(self, world: World, served: Served, secret: str) -> None:
        self.w = world
        self.served = served
        self.log: HookLog = hook_log(world.fake.state)
        self.log.url = lambda: served.url
        self.log.secret = secret
        self.context = Context(
            store=world.store, reviewer=world.coordinator, runs=world.coordinator
        )

    def catch_up(self, **config: Any) -> CatchUp:
        """Return a catch-up over this relay (no grace: every pull request is settled)."""
        return CatchUp(self.w.store, self.w.app, CatchUpConfig(**{"grace_s": 0.0, **config}))

    def deliver_while_down(self, number: int, head: str, **kw: Any) -> dict[str, Any]:
        """Open a pull request while the relay is down: GitHub's webhook fails."""
        open_pull(self.w.fake, number, head=head, base=BASE)
        self.log.url = lambda: None
        try:
            body = pull_request_event(self.w.fake, number=number, head=head, base=BASE, **kw)
            return self.log.deliver("pull_request", body)
        finally:
            self.log.url = lambda: self.served.url

    def work(self) -> list[str]:
        """Work every pending delivery as a worker does; return their ids."""
        done: list[str] = []
        while claimed := self.w.store.claim_deliveries(WORKER, 30, limit=10):
            for d in claimed:
                ROUTER.dispatch(Event.parse(d.id, d.event, d.body), self.context)
                self.w.store.finish_delivery(d.id, True, worker_id=WORKER)
                done.append(d.id)
        return done

    def redelivered(self, n: int) -> None:
        """Wait until GitHub has made ``n`` redeliveries (each answered by the relay)."""
        self.log.wait_for(lambda: sum(d["redelivery"] for d in self.log.deliveries) >= n)

    def asked(self) -> list[str]:
        """Return the guids GitHub was asked to redeliver, in order."""
        ids = {d["id"]: d["guid"] for d in self.log.deliveries}
        calls = self.w.fake.state.calls("POST", r"^/app/hook/deliveries/\d+/attempts$")
        return [ids[int(c.path.split("/")[4])] for c in calls]

    def runs_of(self, number: int) -> list[Any]:
        return [r for r in self.w.store.list_runs() if r.pr_number == number]


@pytest.fixture
def relay(make: Any) -> Iterator[Relay]:
    w: World = make()
    settings = relay_settings(w.store)
    with Served(create_app(settings, w.store)) as served:
        yield Relay(w, served, settings.webhook_secret.reveal())


# ---------------------------------------------------------------------- redeliveries


def test_a_pass_asks_again_for_each_failed_delivery_the_record_lacks_and_only_those(
    relay: Relay,
) -> None:
    # Older than GitHub keeps deliveries for (the list is newest first: it ends here).
    relay.log.add(
        "pull_request", {"action": "opened"}, status_code=0, delivered_at=time.time() - 4 * 86_400
    )
    lost = relay.deliver_while_down(1, fake_sha())
    # Failed, then delivered by hand: one attempt was OK.
    healed = relay.deliver_while_down(2, fake_sha())
    relay.log.deliver(
        "pull_request",
        pull_request_event(relay.w.fake, number=2, head=fake_sha(), base=BASE),
        guid=healed["guid"],
    )
    # GitHub saw no answer in time, yet the relay recorded it.
    slow = relay.log.add("pull_request", {"action": "opened"}, status_code=0)
    relay.w.store.record_delivery(slow["guid"], "pull_request", "opened", None, REPO, b"{}")
    # The relay refused it (a signature): asking again would be refused again.
    relay.log.add("pull_request", {"action": "opened"}, status_code=401)

    tally = relay.catch_up().pass_once(first=True)

    assert tally is not None
    assert relay.asked() == [lost["guid"]]
    assert (tally.redeliveries_asked, tally.redeliveries_skipped) == (1, 1)
    relay.redelivered(1)
    assert relay.w.store.get_delivery(lost["guid"]).event == "pull_request"
    # The second pass finds nothing left to ask.
    again = relay.catch_up().pass_once(first=True)
    assert again is not None
    assert again.redeliveries_asked == 0
    assert relay.asked() == [lost["guid"]]


def test_the_deliveries_are_read_page_by_page_by_their_cursor(relay: Relay) -> None:
    lost = [relay.deliver_while_down(n, fake_sha()) for n in range(1, 6)]
    tally = relay.catch_up(per_page=2).pass_once(first=True)
    assert tally is not None
    assert tally.deliveries_listed == 5
    # Asked oldest first, each once.
    assert relay.asked() == [d["guid"] for d in lost]
    pages = relay.w.fake.state.calls("GET", r"^/app/hook/deliveries$")
    assert [p.query.get("cursor") is not None for p in pages] == [False, True, True]


def test_the_redelivery_cap_is_loud_and_the_next_pass_takes_the_rest(
    relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    lost = [relay.deliver_while_down(n, fake_sha()) for n in range(1, 4)]
    with caplog.at_level(logging.WARNING, logger="app_relay.runs.missed_webhooks"):
        tally = relay.catch_up(max_redeliveries=2, every_s=0.001).pass_once(first=True)
    assert tally is not None
    assert relay.asked() == [d["guid"] for d in lost[:2]]
    assert "3 failed deliveries, 2 asked again (CUJO_CATCH_UP_MAX_REDELIVERIES)" in tally.capped
    assert "CUJO_CATCH_UP_MAX_REDELIVERIES" in caplog.text
    last = relay.w.store.last_catch_up()
    assert last is not None
    assert last.tally.capped == tally.capped
    assert last.tally.deliveries_through is None  # the next pass looks as far back again
    assert last.finished_at is not None
    shown = catch_up_line(last, last.finished_at + timedelta(seconds=90))
    assert shown.capped == tally.capped
    assert "last pass 1 min 30 s ago: 2 redeliveries asked" in shown.said
    relay.redelivered(2)
    tally = relay.catch_up(max_redeliveries=2, every_s=0.001).pass_once()
    assert tally is not None
    assert (tally.redeliveries_asked, tally.capped) == (1, "")
    assert relay.asked() == [d["guid"] for d in lost]


# ---------------------------------------------------------------------- the sweep


def test_the_sweep_reviews_each_open_pull_request_nothing_reviewed_once(relay: Relay) -> None:
    heads = {n: fake_sha() for n in (1, 2, 3)}
    for n, head in heads.items():
        open_pull(relay.w.fake, n, head=head, base=BASE)
    # One already carries this App's guard (the record was lost, say): left alone.
    reviewed = fake_sha()
    open_pull(relay.w.fake, 4, head=reviewed, base=BASE)
    gateway = relay.w.app.gateway(relay.w.fake.installation_id)
    gateway.create_check_run(REPO, reviewed, output=CheckOutput("cujo/guard", "done before"))
    gateway.close()

    tally = relay.catch_up().pass_once(first=True)

    assert tally is not None
    assert (tally.full, tally.pulls_listed, tally.pulls_swept) == (True, 4, 3)
    worked = relay.work()
    assert len(worked) == 3
    assert all(is_catch_up(d) for d in worked)
    relay.w.complete()
    for n, head in heads.items():
        (run,) = relay.runs_of(n)
        assert run.head_sha == head
        assert run.state == "clean"
        (check,) = relay.w.checks(head)
        assert check["conclusion"] == "success"
    assert len(relay.w.reviews()) == 3
    assert relay.runs_of(4) == []
    # A second pass, full or not, adds nothing.
    recorded = relay.w.store.count_deliveries()
    for first in (True, False):
        again = relay.catch_up(every_s=0.001).pass_once(first=first)
        assert again is not None
        assert again.pulls_swept == 0
    assert relay.w.store.count_deliveries() == recorded
    assert len(relay.w.reviews()) == 3


def test_a_redelivery_after_the_sweep_and_a_sweep_after_a_webhook_make_one_run(
    relay: Relay,
) -> None:
    # 1: the sweep reviews the head first, then GitHub's redelivery of its webhook lands.
    first_head = fake_sha()
    lost = relay.deliver_while_down(1, first_head)
    relay.catch_up(max_redeliveries=0).pass_once(first=True)  # the sweep alone
    relay.work()
    relay.catch_up(every_s=0.001).pass_once(first=True)  # now the redelivery, too
    relay.redelivered(1)
    relay.work()
    (run,) = relay.runs_of(1)
    assert is_catch_up(run.delivery_id)
    (request,) = [r for r in relay.w.store.review_requests() if r.delivery_id == lost["guid"]]
    assert (
        request.outcome
        == f"not reviewed: run {run.run_id}, started by a catch-up, reviews this head"
    )
    # 2: the webhook starts the run; a catch-up event for the same head arrives later.
    second_head = fake_sha()
    relay.w.open(2, second_head)
    (run,) = relay.runs_of(2)
    body = pull_request_event(relay.w.fake, number=2, head=second_head, base=BASE)
    relay.w.store.record_delivery("catchup-late", "pull_request", "synchronize", None, REPO, b"{}")
    relay.w.coordinator.request_review(
        review_request_of(Event("catchup-late", "pull_request", body))
    )
    assert relay.runs_of(2) == [run]
    relay.w.complete()
    assert len(relay.w.checks(first_head)) == len(relay.w.checks(second_head)) == 1


def test_a_second_webhook_for_a_head_under_review_waits_for_nothing(relay: Relay) -> None:
    # A second event for the head (a reopen, a duplicate) while its run is in flight: it is
    # not reviewed, and says so; no second run, nothing queued beside it (with the author
    # at the cap, it used to wait in the queue and keep "queued" as its outcome).
    head = fake_sha()
    relay.w.open(1, head)
    (run,) = relay.runs_of(1)
    assert run.state in OPEN_STATES
    body = pull_request_event(relay.w.fake, number=1, head=head, base=BASE, action="reopened")
    relay.w.store.record_delivery("again", "pull_request", "reopened", None, REPO, b"{}")
    relay.w.coordinator.request_review(review_request_of(Event("again", "pull_request", body)))
    (request,) = [r for r in relay.w.store.review_requests() if r.delivery_id == "again"]
    assert request.outcome == f"not reviewed: run {run.run_id} already reviews this head"
    assert relay.w.store.queued_repos() == []
    assert relay.runs_of(1) == [run]


def test_a_pull_request_updated_within_the_grace_is_left_to_its_own_webhook(relay: Relay) -> None:
    head = fake_sha()
    open_pull(relay.w.fake, 1, head=head, base=BASE)
    now = [time.time()]
    catch_up = CatchUp(
        relay.w.store, relay.w.app, CatchUpConfig(grace_s=600, every_s=0.001), clock=lambda: now[0]
    )
    tally = catch_up.pass_once(first=True)
    assert tally is not None
    assert (tally.pulls_listed, tally.pulls_swept) == (1, 0)
    assert relay.w.store.count_deliveries() == 0
    # No webhook came after all: once the grace is over, the next (incremental) pass
    # still reaches back to it and asks for its review.
    now[0] += 700
    tally = catch_up.pass_once()
    assert tally is not None
    assert (tally.full, tally.pulls_swept) == (False, 1)
    relay.work()
    (run,) = relay.runs_of(1)
    assert run.head_sha == head


def test_the_sweep_cap_is_loud_and_the_next_pass_sweeps_the_rest(relay: Relay) -> None:
    for n in (1, 2):
        open_pull(relay.w.fake, n, head=fake_sha(), base=BASE)
    tally = relay.catch_up(max_pulls=1, every_s=0.001).pass_once(first=True)
    assert tally is not None
    assert tally.pulls_swept == 1
    assert "1 pull requests swept and more wait (CUJO_CATCH_UP_MAX_PULLS)" in tally.capped
    assert tally.pulls_through is None
    tally = relay.catch_up(max_pulls=1, every_s=0.001).pass_once()
    assert tally is not None
    assert (tally.pulls_swept, tally.capped) == (1, "")
    relay.work()
    assert {r.pr_number for r in relay.w.store.list_runs()} == {1, 2}


# ---------------------------------------------------------------------- taking turns


def test_relays_sharing_a_record_take_turns(tmp_path: Path) -> None:
    now = [datetime(2026, 12, 1, 12, tzinfo=UTC)]

    def clock() -> datetime:
        return now[0]

    with Store(f"sqlite:///{tmp_path / 'r.db'}", clock=clock) as store:
        a = store.begin_catch_up("a", lease_s=60, every_s=300, first=True)
        assert a is not None
        assert store.begin_catch_up("b", lease_s=60, every_s=300, first=True) is None
        now[0] += timedelta(seconds=61)  # a died mid-pass: its lease ran out
        b = store.begin_catch_up("b", lease_s=60, every_s=300, first=True)
        assert b is not None
        # a was only slow: what it did is still recorded, once; nobody ends another's pass.
        assert not store.finish_catch_up(b.pass_id, "a", CatchUpTally())
        assert store.finish_catch_up(a.pass_id, "a", CatchUpTally(redeliveries_asked=1))
        assert not store.finish_catch_up(a.pass_id, "a", CatchUpTally())
        assert store.finish_catch_up(b.pass_id, "b", CatchUpTally(pulls_swept=2))
        last = store.last_catch_up()
        assert last is not None
        assert (last.holder, last.tally.pulls_swept) == ("b", 2)
        # b's pass stands for everyone until the interval has passed, but a relay's
        # first pass after its start does not wait.
        assert store.begin_catch_up("c", lease_s=60, every_s=300, first=False) is None
        assert store.begin_catch_up("c", lease_s=60, every_s=300, first=True) is not None

"""Caps on sandbox runs in flight and the queue beyond them (issue 23, item 3).

Against the fake GitHub and a real record: a head over its author's or its repository's
cap waits with ``cujo/guard`` ``queued`` and the reason, starts when a run ends,
first-time contributors wait behind everyone else, the queue lives in the record (a
restarted relay and a second relay see it, and start each head once), and `.cujo.yml`
at base may only lower the relay's caps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from coordinatorworld import BASE, World
from fakegithub import FakeGitHub, fake_sha
from relayworld import REPO, pull_request_event, sample, synthetic, wait_for

from app_relay.decide.judge import DeterministicJudge
from app_relay.runs.coordinator import RunCoordinator
from app_relay.runs.effects import OutboxConfig
from app_relay.runs.review_request import review_request_of
from app_relay.runs.runners import ActionsRunner
from app_relay.runstate.caps import Caps, caps_for, is_first_timer, why_wait
from app_relay.store import Store
from app_relay.verbs.unlock import Unlock
from app_relay.webhook.health import RecordCollector
from cujo_action.schema import load_policy


@pytest.fixture(autouse=True)
def release_held_runs(fake_github: FakeGitHub) -> Iterator[None]:
    """Release every run a test held, even when it fails, so the fake can stop."""
    yield
    for w in WORLDS:
        for gate in w.actions.gates.values():
            gate.set()
    WORLDS.clear()


WORLDS: list[World] = []


def held(w: World, number: int, **kw: Any) -> str:
    """Open pull request ``number`` on a new head whose sandbox run waits until released."""
    head = fake_sha()
    WORLDS.append(w)
    w.actions.hold(head)
    w.open(number, head, **kw)
    return head


def end(w: World, head: str, coordinator: RunCoordinator | None = None) -> None:
    """Let the held run of ``head`` complete and hand its webhook to the coordinator."""
    done = len(w.actions.undelivered)
    w.actions.gates[head].set()
    wait_for("the run's completion", lambda: len(w.actions.undelivered) > done, 60)
    _, body = w.actions.undelivered[done]
    (coordinator or w.coordinator).follow(w.event("workflow_run", body))


def queued_gauge(w: World) -> float:
    """Return what /metrics says of the heads waiting (``cujo_heads_queued``)."""
    (family,) = [m for m in RecordCollector(w.store).collect() if m.name == "cujo_heads_queued"]
    (sample,) = family.samples
    return float(sample.value)


def guard(w: World, head: str) -> dict[str, Any]:
    """Return the one `cujo/guard` check on ``head``."""
    (check,) = w.checks(head)
    return check


def test_the_fourth_run_of_one_author_waits_with_the_reason_and_starts_when_one_ends(
    make: Any,
) -> None:
    w = make(caps=Caps(repo=10, author=3))
    heads = [held(w, n) for n in (1, 2, 3)]
    assert [guard(w, h)["status"] for h in heads] == ["in_progress"] * 3
    fourth = held(w, 4)
    check = guard(w, fourth)
    assert (check["status"], check["conclusion"]) == ("queued", None)
    assert "waiting: 3 runs of this author in flight" in check["output"]["summary"]
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 3
    (queued,) = w.store.queued(REPO)
    assert queued.head_sha == fourth
    assert queued_gauge(w) == 1.0
    # Another author is not held up by alice's cap.
    other = held(w, 5, author="bob")
    assert guard(w, other)["status"] == "in_progress"

    end(w, heads[0])
    assert w.coordinator.starter.queue_due.is_set()  # the maintain loop pumps at once
    assert w.coordinator.pump_queue() == 1
    check = guard(w, fourth)  # the same check, taken over by the run
    assert check["id"] == queued.check_run_id
    assert check["status"] == "in_progress"
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 5
    assert w.store.queued() == []
    assert queued_gauge(w) == 0.0
    for head in (*heads[1:], fourth, other):
        end(w, head)
    assert guard(w, fourth)["conclusion"] == "success"
    assert sorted(r.state for r in w.store.list_runs()) == ["clean"] * 5


def test_a_first_time_contributor_waits_behind_a_members_pull_request(make: Any) -> None:
    w = make(caps=Caps(repo=1, author=5))
    first = held(w, 1)
    newcomer = held(w, 2, author="newbie", association="FIRST_TIME_CONTRIBUTOR")
    member = held(w, 3, author="bob", association="MEMBER")
    summary = guard(w, newcomer)["output"]["summary"]
    assert "waiting: 1 run of this repository in flight" in summary
    assert "first-time contributor" in summary
    assert guard(w, member)["status"] == "queued"
    # The newcomer was queued first, and still the member's pull request goes first.
    assert [q.pr_number for q in w.store.queued(REPO)] == [3, 2]

    end(w, first)
    assert w.coordinator.pump_queue() == 1
    assert guard(w, member)["status"] == "in_progress"
    assert guard(w, newcomer)["status"] == "queued"
    end(w, member)
    assert w.coordinator.pump_queue() == 1
    assert guard(w, newcomer)["status"] == "in_progress"
    end(w, newcomer)
    assert guard(w, newcomer)["conclusion"] == "success"


def second_relay(w: World) -> tuple[Store, RunCoordinator]:
    """A relay started afresh on the same record (as after a restart, or a replica)."""
    store = Store(w.store.url)
    coordinator = RunCoordinator(
        store,
        w.app.gateway,
        ActionsRunner.with_gateway(w.app.gateway(w.fake.installation_id)),
        DeterministicJudge(require_full_isolation=True),
        verbs=Unlock,
        outbox=OutboxConfig(retry_s=0.0),
        caps=Caps(repo=10, author=1),
    )
    return store, coordinator


def test_the_queue_survives_a_restart_and_two_relays_start_a_head_once(make: Any) -> None:
    w = make(caps=Caps(repo=10, author=1))
    first = held(w, 1)
    waiting = held(w, 2)
    assert guard(w, waiting)["status"] == "queued"
    # The first relay stops; a new one opens the record and finds the queue there.
    w.coordinator.starter.queue_due.clear()
    store, restarted = second_relay(w)
    try:
        assert [q.head_sha for q in store.queued()] == [waiting]
        assert restarted.pump_queue() == 0  # the cap still holds it
        end(w, first, restarted)
        # Both relays pump (a replica's turn comes with its reconcile): one start.
        assert restarted.pump_queue() + w.coordinator.pump_queue() == 1
        assert len(w.fake.state.calls("POST", r"/dispatches$")) == 2
        assert guard(w, waiting)["status"] == "in_progress"
        assert store.queued() == []
        end(w, waiting, restarted)
        assert guard(w, waiting)["conclusion"] == "success"
    finally:
        store.close()


@pytest.mark.parametrize(
    ("policy", "settings_cap", "told"),
    [
        # .cujo.yml lowers the relay's cap of 2 to 1.
        ("caps: {author: 1}\n", 2, "at most 1 per author"),
        # .cujo.yml cannot raise the relay's cap of 1.
        ("caps: {author: 5, repo: 50}\n", 1, "at most 1 per author"),
    ],
)
def test_caps_in_cujo_yml_at_base_only_lower_the_relays(
    make: Any, policy: str, settings_cap: int, told: str
) -> None:
    w = make(policy=policy, caps=Caps(repo=10, author=settings_cap))
    held(w, 1)
    second = fake_sha()
    # The head's own .cujo.yml is never read: it cannot raise the cap either.
    w.fake.state.put_file(REPO, second, ".cujo.yml", "caps: {author: 9}\n")
    w.actions.hold(second)
    w.open(2, second)
    check = guard(w, second)
    assert check["status"] == "queued"
    assert "waiting: 1 run of this author in flight" in check["output"]["summary"]
    assert told in check["output"]["summary"]


def test_a_newer_head_takes_its_queued_heads_place_and_the_old_check_is_skipped(
    make: Any,
) -> None:
    w = make(caps=Caps(repo=10, author=1))
    first = held(w, 1)
    old = held(w, 2)
    new = held(w, 2, action="synchronize")
    assert guard(w, old)["conclusion"] == "skipped"
    assert guard(w, new)["status"] == "queued"
    assert [q.head_sha for q in w.store.queued()] == [new]
    end(w, first)
    assert w.coordinator.pump_queue() == 1
    assert guard(w, new)["status"] == "in_progress"
    end(w, new)


def test_caps_for_takes_the_lower_and_new_authors_count_as_first_timers() -> None:
    ceiling = Caps(repo=4, author=2)
    assert caps_for(ceiling, load_policy("")) == ceiling
    assert caps_for(ceiling, load_policy("caps: {repo: 3}\n")) == Caps(repo=3, author=2)
    assert caps_for(ceiling, load_policy("caps: {repo: 9, author: 9}\n")) == ceiling
    assert [is_first_timer(a) for a in ("FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE")] == [
        True
    ] * 3
    assert not is_first_timer("MEMBER")
    assert not is_first_timer("CONTRIBUTOR")
    assert is_first_timer("")  # unknown: it waits last
    assert why_wait(ceiling, repo_busy=3, author_busy=1) == ""
    assert why_wait(ceiling, repo_busy=4, author_busy=0).startswith("waiting: 4 runs of this rep")


def test_the_relays_maintain_loop_starts_the_next_head_when_a_run_ends(make: Any) -> None:
    w = make(caps=Caps(repo=10, author=1))
    first = held(w, 1)
    waiting = held(w, 2)
    assert guard(w, waiting)["status"] == "queued"
    stop, reconciled = threading.Event(), threading.Event()
    # Reconciling (and its pump) only at the start: the run's end must wake the pump.
    loop = threading.Thread(
        target=w.coordinator.maintain,
        args=(stop,),
        kwargs={
            "tick_s": 0.01,
            "reconcile_every_s": 3600.0,
            "poll_every_s": 3600.0,
            "on_reconciled": lambda _: reconciled.set(),
        },
    )
    loop.start()
    try:
        assert reconciled.wait(10)
        assert guard(w, waiting)["status"] == "queued"
        end(w, first)
        wait_for("the queued head to start", lambda: guard(w, waiting)["status"] != "queued", 10)
        assert guard(w, waiting)["status"] == "in_progress"
    finally:
        stop.set()
        loop.join()
    end(w, waiting)


def test_a_retry_beyond_the_caps_waits_on_its_own_check_and_reviews_on_it(make: Any) -> None:
    w = make(caps=Caps(repo=10, author=1))
    errored = fake_sha()
    w.actions.producers[errored] = synthetic(bound_to="forged")
    w.open(7, errored)
    w.complete()
    check = guard(w, errored)
    assert check["conclusion"] == "action_required"
    w.actions.producers.clear()
    w.actions.undelivered.clear()
    first = held(w, 1)  # alice's one run in flight
    body = sample("check_run.rerequested")
    body["action"] = "requested_action"
    body["requested_action"] = {"identifier": "retry"}
    body["check_run"].update(id=check["id"], name="cujo/guard", head_sha=errored)
    body["repository"]["full_name"] = REPO
    w.coordinator.retry(w.event("check_run", body))
    again = guard(w, errored)  # still the one check, now queued
    assert (again["id"], again["status"]) == (check["id"], "queued")
    end(w, first)
    assert w.coordinator.pump_queue() == 1
    assert guard(w, errored)["status"] in ("in_progress", "completed")
    w.complete()
    assert guard(w, errored)["conclusion"] == "success"
    assert len(w.checks(errored)) == 1


def test_a_head_started_before_a_crash_lost_its_queue_drop_is_never_started_again(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The relay started the head and died before it dropped the queue entry; the run
    # was then decided (by whichever relay took its callback). The entry, still admitted,
    # must leave the queue without a second run, whatever state the first run is in.
    w = make(caps=Caps(repo=10, author=3))
    with monkeypatch.context() as m:
        m.setattr(w.store, "drop_queued", lambda _id: False)  # the write the crash lost
        head = held(w, 1)
    assert [q.head_sha for q in w.store.queued()] == [head]
    end(w, head)
    assert guard(w, head)["conclusion"] == "success"
    assert w.coordinator.pump_queue() == 0
    assert w.store.queued() == []
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 1
    assert [r.state for r in w.store.list_runs()] == ["clean"]


def test_a_queued_check_made_before_a_crash_lost_its_record_is_the_one_the_run_takes(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The relay made the head's queued check on GitHub and died before it wrote the
    # check's id down. When the head starts, the run takes that check over (found by its
    # external_id): the head never shows a second cujo/guard, one of them queued for ever.
    w = make(caps=Caps(repo=10, author=1))
    first = held(w, 1)
    with monkeypatch.context() as m:
        real = w.store.set_queued_check
        m.setattr(w.store, "set_queued_check", lambda qid, _cid, why: real(qid, None, why))
        waiting = held(w, 2)
    (queued,) = w.store.queued(REPO)
    assert queued.check_run_id is None  # the write the crash lost
    (made,) = w.checks(waiting)
    assert made["status"] == "queued"
    end(w, first)
    assert w.coordinator.pump_queue() == 1
    (check,) = w.checks(waiting)
    assert check["id"] == made["id"]
    assert check["status"] == "in_progress"
    end(w, waiting)
    (check,) = w.checks(waiting)
    assert (check["id"], check["conclusion"]) == (made["id"], "success")


def _again(w: World, number: int, head: str) -> str:
    """Hand the coordinator a second event for ``number``'s head (a redelivery, a catch-up's
    own); return its delivery id."""
    body = pull_request_event(w.fake, number=number, head=head, base=BASE, action="synchronize")
    event = w.event("pull_request", body)
    w.coordinator.request_review(review_request_of(event))
    return event.delivery_id


def _outcomes(w: World, number: int) -> dict[str, str]:
    return {
        r.delivery_id: r.outcome or "" for r in w.store.review_requests() if r.pr_number == number
    }


def test_a_second_event_for_a_waiting_head_adds_nothing_and_says_whose_request_stands(
    make: Any,
) -> None:
    w = make(caps=Caps(repo=10, author=1))
    first = held(w, 1)
    waiting = held(w, 2)
    (queued,) = _outcomes(w, 2)
    second = _again(w, 2, waiting)
    outcomes = _outcomes(w, 2)
    assert outcomes[queued].startswith("queued: ")
    assert (
        outcomes[second]
        == f"not reviewed: the queued request of delivery {queued} reviews this head"
    )
    end(w, first)
    assert w.coordinator.pump_queue() == 1
    (run,) = [r for r in w.store.list_runs() if r.pr_number == 2]
    assert _outcomes(w, 2)[queued] == f"reviewed in run {run.run_id}"


def test_a_second_event_that_starts_a_waiting_head_tells_the_request_that_queued_it(
    make: Any,
) -> None:
    # The head waits (its author at the cap); the cap frees, and before the queue is pumped
    # a second event of the head comes (GitHub's redelivery beside a catch-up's event): it
    # starts the head, and the request that queued it is told which run reviews it.
    w = make(caps=Caps(repo=10, author=1))
    first = held(w, 1)
    waiting = held(w, 2)
    (queued,) = _outcomes(w, 2)
    end(w, first)
    second = _again(w, 2, waiting)
    (run,) = [r for r in w.store.list_runs() if r.pr_number == 2]
    outcomes = _outcomes(w, 2)
    assert outcomes[second] == f"reviewed in run {run.run_id}"
    assert outcomes[queued] == f"not reviewed: run {run.run_id} already reviews this head"
    assert w.store.queued() == []
    assert w.coordinator.pump_queue() == 0

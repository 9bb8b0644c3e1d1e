"""The run record on both stores: one state machine, the outbox of effects, run leases.

Every test here runs on SQLite and on a throwaway PostgreSQL cluster (``database_url``),
so the record behaves the same on the store a single relay uses and the one several
relays share.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from cujorun import cujo_relay
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine

from app_relay.decide.judge import error_verdict
from app_relay.runstate.machine import TRANSITIONS, RunState, is_path
from app_relay.store import MIGRATIONS, Base, Intent, RunClosed, Store
from app_relay.verdict import Finding, Verdict

BASE = "b" * 40
HEAD = "a" * 40
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STATES: list[RunState] = list(TRANSITIONS)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(database_url: str, clock: Clock) -> Any:
    with Store(database_url, clock=clock) as opened:
        yield opened


def started(store: Store, run_id: str | None = None, **kw: Any) -> str:
    run_id = run_id or uuid.uuid4().hex
    session_id = store.open_session("octo/repo", 7, "github")
    store.start_run(session_id, run_id, BASE, HEAD, "sandbox", **kw)
    return run_id


def verdict(state: RunState) -> Verdict:
    if state == "error":
        return error_verdict("the runner vanished")
    findings = []
    if state == "blocked":
        findings = [
            Finding(id="F1", rule="decoy-egress", severity="critical", check="install",
                    title="a decoy left the sandbox", evidence=["install:egress:1"])
        ]  # fmt: skip
    unproven = ["smoke: no report came back"] if state == "unproven" else []
    return Verdict(
        state=state, summary=f"{state}.", findings=findings, unproven=unproven,
        judge="deterministic",
    )  # fmt: skip


def history(store: Store, run_id: str) -> list[str]:
    return [e.detail.split(":")[0] for e in store.events(run_id) if e.kind == "state"]


def check(key: str = "") -> Intent:
    return Intent("check", key or f"check:{uuid.uuid4().hex[:8]}", {"face": key})


# ------------------------------------------------------------------ one state machine

OPS = st.lists(
    st.tuples(
        st.sampled_from(["move", "move_open", "supersede", "finish", "abandon"]),
        st.integers(0, 2),  # which of three runs
        st.sampled_from(STATES),
        st.sampled_from(STATES),
    ),
    max_size=25,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_every_stored_history_is_a_path_of_the_table(store: Store, ops: list[Any]) -> None:
    runs = [started(store) for _ in range(3)]
    for op, n, a, b in ops:
        run_id = runs[n]
        if op == "move":
            store.move(run_id, a, "by the test")
        elif op == "move_open" and a in ("running", "waiting"):
            store.move_open(run_id, a, b)
        elif op == "supersede":
            store.supersede(run_id, "newer")
        elif op == "finish" and a in ("clean", "unproven", "blocked", "error"):
            with contextlib.suppress(RunClosed):
                store.finish_run(run_id, verdict(a))
        elif op == "abandon":
            store.mark_abandoned(run_id, "the relay restarted")
    for run_id in runs:
        states = history(store, run_id)
        assert is_path(states), states  # type: ignore[arg-type]
        assert store.get_run(run_id).state == states[-1]


def test_a_refused_move_writes_nothing_not_even_its_effects(store: Store) -> None:
    run_id = started(store)
    store.finish_run(run_id, verdict("clean"))

    assert not store.move(run_id, "blocked", "late", effects=[check("late")])
    assert not store.supersede(run_id, "newer", effects=[check("skipped")])
    with pytest.raises(RunClosed):
        store.finish_run(run_id, verdict("blocked"), effects=[check("late-finish")])

    assert store.get_run(run_id).state == "clean"
    assert store.effects(run_id) == []


# ------------------------------------------------------------------ the outbox


def test_effects_are_recorded_with_the_move_that_shows_them(store: Store) -> None:
    run_id = started(store, effects=[check("running"), Intent("reaction", "eyes", {})])
    review = Intent("review", "review", {"body": "b"})
    store.finish_run(run_id, verdict("blocked"), effects=[review, check("blocked")])

    effects = store.effects(run_id)
    assert [(e.kind, e.key, e.state) for e in effects] == [
        ("check", "running", "cancelled"),  # overtaken by the final face, never sent
        ("reaction", "eyes", "pending"),
        ("review", "review", "pending"),
        ("check", "blocked", "pending"),
    ]


def test_a_newer_check_face_overtakes_one_not_yet_sent(store: Store) -> None:
    run_id = started(store, effects=[check("running")])
    store.move(run_id, "waiting", "approval", effects=[check("waiting")])

    assert [(e.key, e.state) for e in store.effects(run_id)] == [
        ("running", "cancelled"),
        ("waiting", "pending"),
    ]


def test_an_effect_intended_twice_is_recorded_once(store: Store) -> None:
    run_id = started(store)
    review = Intent("review", "review", {"body": "first"})
    store.add_effects(run_id, [review])
    store.add_effects(run_id, [Intent("review", "review", {"body": "second"})])

    assert [e.payload for e in store.effects(run_id)] == [{"body": "first"}]


def test_effects_of_one_lane_go_in_order_and_lanes_do_not_wait(store: Store) -> None:
    run_id = started(store)
    store.add_effects(
        run_id,
        [
            Intent("review", "review", {}),
            Intent("dismiss", "dismiss:1", {}),  # same lane as the review: waits for it
            Intent("reaction", "eyes", {}),
        ],
    )

    first = store.claim_effects("w1", 30)
    assert [e.key for e in first] == ["review", "eyes"]
    assert store.claim_effects("w2", 30) == []  # the dismissal waits for the review
    store.finish_effect(first[0].id, "w1", ok=True, result={"review_id": 5})

    assert [e.key for e in store.claim_effects("w2", 30)] == ["dismiss:1"]


def test_a_failed_effect_is_retried_after_its_delay_then_fails_for_good(
    store: Store, clock: Clock
) -> None:
    run_id = started(store, effects=[check("running")])
    for attempt in range(1, 4):
        (effect,) = store.claim_effects("w", 30)
        assert effect.attempts == attempt
        assert store.finish_effect(
            effect.id, "w", ok=False, error="HTTP 502", retry_in_s=10, max_attempts=3
        )
        assert store.claim_effects("w", 30) == []  # not before its delay
        clock.advance(11)

    (failed,) = store.effects(run_id)
    assert failed.state == "failed"
    assert "failed after 3 attempt(s): HTTP 502" in (failed.error or "")
    assert store.events(run_id)[-1].kind == "effect-failed"


def test_a_dead_workers_effect_is_taken_over_and_its_late_finish_is_refused(
    store: Store, clock: Clock
) -> None:
    run_id = started(store, effects=[check("running")])
    (first,) = store.claim_effects("dead", 30)
    clock.advance(31)

    (again,) = store.claim_effects("alive", 30)
    assert (again.id, again.attempts) == (first.id, 2)
    assert not store.finish_effect(first.id, "dead", ok=True)
    assert store.finish_effect(again.id, "alive", ok=True, bind={"check_run_id": 77})
    assert store.get_run(run_id).check_run_id == 77


def test_superseding_drops_what_the_run_meant_to_post(store: Store) -> None:
    run_id = started(store, effects=[check("running"), Intent("reaction", "eyes", {})])

    assert store.supersede(run_id, "newer", effects=[Intent("cancel", "cancel:9", {})])

    assert [(e.key, e.state) for e in store.effects(run_id)] == [
        ("running", "cancelled"),
        ("eyes", "cancelled"),
        ("cancel:9", "pending"),
    ]


# ------------------------------------------------------------------ run leases


def test_a_run_is_acted_on_by_one_relay_at_a_time(store: Store, clock: Clock) -> None:
    run_id = started(store, lease=("relay-a", 60))

    assert store.unleased_open_runs() == []
    assert not store.acquire_run(run_id, "relay-b", 60)
    assert store.acquire_run(run_id, "relay-a", 60)  # its holder may renew it

    store.release_run(run_id, "relay-b")  # not b's to release
    assert not store.acquire_run(run_id, "relay-b", 60)

    clock.advance(61)  # relay-a died: its lease ran out
    assert [r.run_id for r in store.unleased_open_runs()] == [run_id]
    assert store.acquire_run(run_id, "relay-b", 60)
    store.release_run(run_id, "relay-b")
    assert store.get_run(run_id).lease_owner is None


def test_a_decided_run_is_never_reconciled(store: Store) -> None:
    run_id = started(store)
    store.finish_run(run_id, verdict("clean"))
    assert store.unleased_open_runs() == []


# ------------------------------------------------------------------ migrations


def test_the_migrations_build_exactly_the_models(store: Store, database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_cujo_relay_migrate_brings_an_empty_record_to_the_newest_revision(
    database_url: str,
) -> None:
    done = cujo_relay("migrate", database_url=database_url)
    assert done.returncode == 0, done.stderr
    assert "newest revision" in done.stdout
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            (revision,) = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
    finally:
        engine.dispose()
    heads = ScriptDirectory(str(MIGRATIONS)).get_heads()
    assert [revision[0]] == heads

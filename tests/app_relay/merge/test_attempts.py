"""Merge attempts in the record: one live merge per head, kept by the database itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from boardworld import clean_verdict, pull_request_run
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app_relay.store import MergeClaimed, Store, StoreError


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    with Store(database_url) as opened:
        yield opened


def reviewed(store: Store, run_id: str = "run-1", number: int = 7) -> str:
    """Record a pull request's clean run and return its id."""
    pull_request_run(store, "octo/app", number, run_id)
    store.finish_run(run_id, clean_verdict())
    return run_id


def test_an_attempt_pins_the_runs_head_and_base_from_the_record(store):
    run_id = reviewed(store)
    run = store.get_run(run_id)

    attempt = store.begin_merge(run_id, login="maya", method="squash")

    assert (attempt.repo, attempt.pr_number, attempt.head_sha, attempt.base_ref) == (
        "octo/app",
        7,
        run.head_sha,
        "main",
    )
    assert attempt.state == "reading"
    assert attempt.in_flight
    assert not attempt.live


def test_a_local_run_has_nothing_to_merge(store):
    session = store.open_session("octo/app", None, "local")
    store.start_run(session, "run-local", "b" * 40, "c" * 40, "sandbox")
    with pytest.raises(StoreError, match="not a pull request"):
        store.begin_merge("run-local", login="maya", method="merge")


def test_two_clicks_on_one_head_make_one_claim(store):
    run_id = reviewed(store)
    first = store.begin_merge(run_id, login="maya", method="merge")
    second = store.begin_merge(run_id, login="maya", method="merge")

    assert store.claim_merge(first.id).state == "sent"
    with pytest.raises(MergeClaimed) as lost:
        store.claim_merge(second.id)

    assert lost.value.holder is not None
    assert lost.value.holder.id == first.id
    refused = store.get_merge(second.id)
    assert refused.state == "refused"
    assert f"attempt {first.id}" in refused.words


def test_two_sessions_racing_make_one_claim(store):
    run_id = reviewed(store)
    attempts = [store.begin_merge(run_id, login=who, method="merge") for who in ("maya", "ola")]
    won: list[int] = []
    lost: list[int] = []
    gate = threading.Barrier(2)

    def click(attempt_id: int) -> None:
        gate.wait()
        try:
            store.claim_merge(attempt_id)
            won.append(attempt_id)
        except MergeClaimed:
            lost.append(attempt_id)

    threads = [threading.Thread(target=click, args=(a.id,)) for a in attempts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(won) == 1
    assert len(lost) == 1
    assert store.live_merge("octo/app", 7, attempts[0].head_sha).id == won[0]  # type: ignore[union-attr]


def test_the_database_itself_refuses_a_second_live_merge_of_a_head(store):
    # The rule is the record's, not the code's: raw SQL meets it too.
    run_id = reviewed(store)
    first = store.begin_merge(run_id, login="maya", method="merge")
    second = store.begin_merge(run_id, login="ola", method="merge")
    store.claim_merge(first.id)
    with pytest.raises(IntegrityError), store._engine.begin() as connection:
        connection.execute(
            text("UPDATE merge_attempts SET state = 'queued' WHERE id = :id"), {"id": second.id}
        )


def test_a_failed_merge_lets_the_head_go_and_a_merged_one_keeps_it(store):
    run_id = reviewed(store)
    first = store.begin_merge(run_id, login="maya", method="merge")
    store.claim_merge(first.id)
    store.settle_merge(first.id, "failed", "Pull Request is not mergeable", status=405)

    second = store.begin_merge(run_id, login="maya", method="merge")
    store.claim_merge(second.id)
    merged = store.settle_merge(
        second.id, "merged", "Pull Request successfully merged", status=200, merged_sha="d" * 40
    )
    assert merged.settled_at is not None
    assert not merged.in_flight

    third = store.begin_merge(run_id, login="ola", method="merge")
    with pytest.raises(MergeClaimed):
        store.claim_merge(third.id)
    assert store.merged_runs([run_id])[run_id].id == second.id


def test_unknown_stays_in_flight_until_settled(store):
    run_id = reviewed(store)
    attempt = store.begin_merge(run_id, login="maya", method="merge")
    store.claim_merge(attempt.id)
    unknown = store.settle_merge(attempt.id, "unknown", "no answer within 10 s after the call")

    assert unknown.in_flight
    assert unknown.settled_at is None
    assert [a.id for a in store.unsettled_merges("octo/app")] == [attempt.id]

    settled = store.settle_merge(attempt.id, "merged", "merged on GitHub", merged_by="maya")
    assert settled.state == "merged"
    assert settled.settled_at is not None
    assert store.unsettled_merges() == []


def test_a_queued_merge_is_followed_to_its_end(store):
    run_id = reviewed(store)
    attempt = store.begin_merge(run_id, login="maya", method="merge")
    store.claim_merge(attempt.id)
    store.settle_merge(attempt.id, "queued", "QUEUED")
    assert store.unsettled_merges()[0].state == "queued"

    store.settle_merge(attempt.id, "failed", "removed from the merge queue")
    assert store.get_merge(attempt.id).state == "failed"
    # The queue let go of the head: it may be merged again.
    again = store.begin_merge(run_id, login="maya", method="merge")
    assert store.claim_merge(again.id).state == "sent"


def test_a_settled_attempt_never_moves_again(store):
    run_id = reviewed(store)
    attempt = store.begin_merge(run_id, login="maya", method="merge")
    store.settle_merge(attempt.id, "blocked", "the head moved")
    with pytest.raises(StoreError, match="cannot move from blocked"):
        store.claim_merge(attempt.id)


def test_the_timeline_says_what_became_of_each_attempt(store):
    run_id = reviewed(store)
    attempt = store.begin_merge(run_id, login="maya", method="merge")
    store.record_readings(attempt.id, {"blockers": []}, {"blockers": []}, base_sha="e" * 40)
    store.claim_merge(attempt.id)
    store.settle_merge(attempt.id, "merged", "Pull Request successfully merged")

    kept = store.get_merge(attempt.id)
    assert kept.first_reading == {"blockers": []}
    assert kept.base_sha == "e" * 40
    lines = [e.detail for e in store.timeline(run_id) if e.kind == "merge"]
    assert lines == [f"attempt {attempt.id} by maya: merged (Pull Request successfully merged)"]


def test_a_webhook_about_the_repository_is_news_for_open_pages(store):
    from app_relay.github.event import Event
    from app_relay.runs.review_request import RecordingReviewer
    from app_relay.webhook.events import ROUTER, Context

    context = Context(store=store, reviewer=RecordingReviewer(store))
    before = store.merge_news("octo/app")
    for name in ("check_run", "status", "repository_ruleset"):
        payload = {"action": "completed", "repository": {"full_name": "octo/app"}}
        ROUTER.dispatch(Event(f"d-{name}", name, payload), context)
    ROUTER.dispatch(Event("d-other", "status", {"repository": {"full_name": "octo/else"}}), context)
    # An organisation's ruleset names no repository: news for every one.
    ROUTER.dispatch(Event("d-org", "repository_ruleset", {"action": "edited"}), context)

    assert store.merge_news("octo/app") == before + 4
    assert store.merge_news("octo/else") == 2


def test_workers_noting_a_repositorys_first_news_at_once_all_count(store):
    # Each of them would make the repository's row: none may fail on the others' insert.
    count, repos = 4, [f"octo/new-{n}" for n in range(10)]
    gate = threading.Barrier(count)
    failed: list[BaseException] = []

    def note() -> None:
        for repo in repos:
            gate.wait()
            try:
                store.note_merge_news(repo)
            except BaseException as exc:
                failed.append(exc)

    threads = [threading.Thread(target=note) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failed == []
    assert [store.merge_news(repo) for repo in repos] == [count] * len(repos)


def test_finishing_deliveries_counts_the_news_of_those_done_and_ours(store):
    from app_relay.store import Finished

    for name in ("d-done", "d-retry", "d-theirs"):
        assert store.record_delivery(name, "status", None, 1, "octo/app", b"{}")
    claimed = {d.id for d in store.claim_deliveries("w-1", 60, limit=3)}
    assert claimed == {"d-done", "d-retry", "d-theirs"}
    store.release_deliveries(["d-theirs"], "w-1")
    store.claim_deliveries("w-2", 60, limit=1)  # another worker holds d-theirs now

    ours = store.finish_deliveries(
        [
            Finished("d-done", True, news=("octo/app", "octo/app", None)),
            Finished("d-retry", False, "502", news=("octo/app",)),
            Finished("d-theirs", True, news=("octo/app",)),
        ],
        worker_id="w-1",
    )

    assert ours == [True, True, False]
    assert store.merge_news("octo/app") == 3  # two of its own and one for every repository
    assert store.merge_news("octo/else") == 1

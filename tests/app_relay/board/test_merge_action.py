"""The run page's merge action against the loopback fake GitHub (docs/design.md section 12)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import requests
from boardmerge import CHECK, HEAD, NUMBER, REPO, BoardMerge, ready_world
from boardworld import Served
from fakegithub import FakeGitHub
from fakegithub.merging import HEAD_MODIFIED, hang_next_merge, push_head
from fakegithub.state import required_checks_rules

from app_relay.observe import metrics
from app_relay.store import Store

ORIGIN = ""  # the served board's own, set per test


@pytest.fixture
def world(fake_github: FakeGitHub, tmp_path) -> Iterator[BoardMerge]:
    global ORIGIN  # noqa: PLW0603 (one board per test)
    with Store(f"sqlite:///{tmp_path}/cujo.db") as store:
        made = ready_world(fake_github, store)
        with Served(made.app) as served:
            ORIGIN = served.url
            made.url = served.url  # type: ignore[attr-defined]
            yield made
        made.github.close()


class Browser:
    """A browser's requests to the served board, with its cookies."""

    def __init__(self, world: BoardMerge, cookies: dict[str, str]) -> None:
        self.url = world.url  # type: ignore[attr-defined]
        self.http = requests.Session()
        self.http.cookies.update(cookies)

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.url + path, timeout=30)

    def post(self, path: str, *, data, headers=None, follow_redirects=False) -> requests.Response:
        return self.http.post(
            self.url + path,
            data=data,
            headers=headers or {},
            allow_redirects=follow_redirects,
            timeout=30,
        )


def click(world: BoardMerge, login: str = "maya", *, origin: str | None = None, **form: str):
    client = Browser(world, world.cookies(login))
    body = {**world.form(), **form}
    return client.post(
        f"/runs/{world.run_id}/merge", data=body, headers={"Origin": origin or ORIGIN}
    )


def last(world: BoardMerge):
    return world.store.run_merges(world.run_id)[-1]


def test_ready_merges_the_reviewed_head_pinned_by_sha(world):
    answer = click(world)

    assert answer.status_code == 303
    assert answer.headers["location"] == f"/runs/{world.run_id}?merge=merged#merge"
    calls = world.fake.state.calls("PUT", f"/repos/{REPO}/pulls/{NUMBER}/merge")
    assert [c.body for c in calls] == [{"sha": HEAD, "merge_method": "merge"}]
    attempt = last(world)
    assert attempt.state == "merged"
    assert attempt.merged_by == "maya"
    assert attempt.first_reading is not None
    assert attempt.second_reading is not None
    assert "Pull Request successfully merged" in attempt.words


def test_the_page_names_the_short_sha_it_will_merge(world):
    client = Browser(world, world.cookies("maya"))
    page = client.get(f"/runs/{world.run_id}").text
    assert f"Merge {HEAD[:12]}" in page
    assert world.form()["token"] in page


def test_another_origin_is_refused(world):
    answer = click(world, origin="https://evil.test")
    assert answer.status_code == 403
    assert world.puts() == 0
    assert world.store.run_merges(world.run_id) == []


def test_no_origin_is_refused(world):
    client = Browser(world, world.cookies("maya"))
    answer = client.post(f"/runs/{world.run_id}/merge", data=world.form())
    assert answer.status_code == 403


def test_a_token_of_another_session_or_run_is_refused(world):
    other_session = click(world, token=world.form(session_id="s-2")["token"])
    other_run = click(world, token=world.form(run_id="run-2")["token"])
    assert other_session.status_code == 403
    assert other_run.status_code == 403
    assert world.puts() == 0


def test_the_lax_cookie_alone_makes_no_merge(world):
    # A cross-site navigation carries the Lax cookie but never the Strict one.
    from app_relay.board.access import SESSION_COOKIE

    client = Browser(world, {SESSION_COOKIE: world.cookies("maya")[SESSION_COOKIE]})
    answer = client.post(
        f"/runs/{world.run_id}/merge", data=world.form(), headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 403


def test_a_stopping_relay_answers_a_resendable_503(world):
    world.desk.stopping.set()
    answer = click(world)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "5"
    assert world.store.run_merges(world.run_id) == []


@pytest.mark.parametrize(
    ("login", "code"), [("rita", "no-write"), ("alice", "no-write"), ("deploy[bot]", "bot")]
)
def test_reader_author_without_write_and_bot_are_refused(world, login, code):
    answer = click(world, login)
    assert answer.headers["location"].endswith("?merge=refused#merge")
    attempt = last(world)
    assert attempt.state == "refused"
    assert code in [b["code"] for b in attempt.first_reading["blockers"]]
    assert world.puts() == 0


def test_a_head_pushed_after_the_page_loaded_blocks_naming_the_new_head(world):
    new = push_head(world.fake.state, REPO, NUMBER)
    answer = click(world)
    assert answer.headers["location"].endswith("?merge=blocked#merge")
    assert new[:7] in last(world).words
    assert world.puts() == 0


def test_rules_changed_between_the_two_passes_block(world):
    reads = world.desk.reader
    passes = []

    def reader(*args, **kw):
        passes.append(1)
        if len(passes) == 2:  # the base's rules lose their strict guard between passes
            world.fake.state.set_rules(
                REPO, "main", required_checks_rules(REPO, {"context": CHECK}, strict=False)
            )
        return reads(*args, **kw)

    world.desk.reader = reader
    answer = click(world)
    assert answer.headers["location"].endswith("?merge=blocked#merge")
    attempt = last(world)
    assert attempt.first_reading["blockers"] == []
    assert "base-guard" in [b["code"] for b in attempt.second_reading["blockers"]]
    assert world.puts() == 0


def test_a_timeout_after_the_merge_call_is_unknown_then_settled(world):
    release = hang_next_merge(world.fake.state)
    try:
        answer = click(world)
    finally:
        release.set()
    assert answer.headers["location"].endswith("?merge=unknown#merge")
    assert last(world).state == "unknown"
    # The action stays off while in flight; a page view asks GitHub how it ended.
    client = Browser(world, world.cookies("maya"))
    page = client.get(f"/runs/{world.run_id}").text
    assert "merged" in page
    settled = last(world)
    assert settled.state == "merged"
    assert settled.merged_by == "maya"


def test_two_sessions_clicking_at_once_make_one_merge(world):
    gate = threading.Barrier(2)
    answers = []
    # Both clicks read GitHub ready twice, then reach the claim together.
    reads = world.desk.reader
    together = threading.Barrier(2)
    passes: dict[int, int] = {}

    def reader(*args, **kw):
        found = reads(*args, **kw)
        me = threading.get_ident()
        passes[me] = passes.get(me, 0) + 1
        if passes[me] == 2:
            together.wait(10)
        return found

    world.desk.reader = reader

    def one(login: str) -> None:
        client = Browser(world, world.cookies(login, session_id=login))
        gate.wait()
        answers.append(
            client.post(
                f"/runs/{world.run_id}/merge",
                data=world.form(session_id=login),
                headers={"Origin": ORIGIN},
            )
        )

    threads = [threading.Thread(target=one, args=(who,)) for who in ("maya", "ola")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert world.puts() == 1
    attempts = world.store.run_merges(world.run_id)
    assert sorted(a.state for a in attempts) == ["merged", "refused"]
    both = [a.second_reading for a in attempts]
    assert all(r is not None and r["blockers"] == [] for r in both)


def test_github_refusal_is_kept_in_its_own_words(world):
    # The head moves after the second pass: GitHub's own pin refuses with 409.
    calls = world.desk.reader
    passes = []

    def reader(*args, **kw):
        found = calls(*args, **kw)
        passes.append(1)
        if len(passes) == 2:
            push_head(world.fake.state, REPO, NUMBER)
        return found

    world.desk.reader = reader
    click(world)
    attempt = last(world)
    assert attempt.state == "failed"
    assert attempt.status == 409
    assert HEAD_MODIFIED in attempt.words


def test_every_attempt_is_counted_by_outcome(world):
    def counted() -> dict[str, float]:
        text = metrics.exposition()[0].decode()
        return {k["outcome"]: v for k, v in metrics.samples(text, "cujo_merge_attempts_total")}

    before = counted()
    click(world)
    click(world, origin="https://evil.test")
    after = counted()
    assert after["merged"] == before.get("merged", 0) + 1
    assert after["forbidden"] == before.get("forbidden", 0) + 1


def feed_webhooks(world: BoardMerge) -> list[tuple[str, int]]:
    """Hand every webhook the fake sends to the relay's router, as a worker would."""
    from app_relay.github.event import Event
    from app_relay.runs.review_request import RecordingReviewer
    from app_relay.webhook.events import ROUTER, Context

    context = Context(store=world.store, reviewer=RecordingReviewer(world.store))
    seen: list[tuple[str, int]] = []

    def sink(name: str, payload: dict) -> None:
        seen.append((name, ROUTER.dispatch(Event(f"d-{len(seen)}", name, payload), context)))

    world.fake.state.webhook_sinks.append(sink)
    return seen


@pytest.mark.parametrize(("ending", "state"), [("merged", "merged"), ("removed", "failed")])
def test_a_merge_queue_enqueues_the_reviewed_head_and_follows_it(world, ending, state):
    from fakegithub.merging import finish_queue, merge_queue_rule

    rules = required_checks_rules(REPO, {"context": CHECK}, strict=False)
    world.fake.state.set_rules(REPO, "main", [*rules, merge_queue_rule(REPO)])
    feed_webhooks(world)

    answer = click(world)

    assert answer.headers["location"].endswith("?merge=queued#merge")
    assert world.puts() == 0
    (call,) = [c for c in world.fake.state.calls("POST", "/graphql") if "enqueue" in str(c.body)]
    assert call.body["variables"]["input"]["expectedHeadOid"] == HEAD
    page = Browser(world, world.cookies("maya")).get(f"/runs/{world.run_id}").text
    assert 'id="merge-button" disabled' in page

    finish_queue(world.fake.state, REPO, NUMBER, ending)

    assert last(world).state == state


def test_the_closed_webhook_settles_an_unknown_attempt(world):
    seen = feed_webhooks(world)
    release = hang_next_merge(world.fake.state)
    try:
        click(world)
        # The answer was lost (the call's deadline passed): in flight, action off.
        assert last(world).state == "unknown"
    finally:
        release.set()
    # GitHub's `pull_request` closed webhook (sent once the merge answered) settles it.
    deadline = time.monotonic() + 10
    while not any(name == "pull_request" for name, _ in seen) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ("pull_request", 2) in seen  # the merges router: settle, and news for pages
    assert last(world).state == "merged"
    assert last(world).merged_by == "maya"


def test_without_contents_write_the_page_links_to_githubs_own_button(fake_github, tmp_path):
    with Store(f"sqlite:///{tmp_path}/cujo.db") as store:
        made = ready_world(fake_github, store, contents="read")
        with Served(made.app) as served:
            made.url = served.url  # type: ignore[attr-defined]
            page = Browser(made, made.cookies("maya")).get(f"/runs/{made.run_id}").text
        made.github.close()
    assert "merge on GitHub" in page
    assert f"{fake_github.url}/{REPO}/pull/{NUMBER}" in page
    assert "merge-form" not in page
    assert "GitHub&#39;s gate reads ready" in page or "gate reads ready" in page


def test_each_blocker_is_shown_in_words(world):
    from fakegithub.merging import set_conflicting

    set_conflicting(world.fake.state, REPO, NUMBER)
    world.fake.state.set_rules(
        REPO, "main", required_checks_rules(REPO, {"context": CHECK}, strict=False)
    )
    page = Browser(world, world.cookies("maya")).get(f"/runs/{world.run_id}").text
    assert 'data-code="conflict"' in page
    assert 'data-code="base-guard"' in page
    assert "require branches to be up to date" in page
    assert "merge-form" not in page


def test_the_sign_in_opens_a_strict_action_cookie_beside_the_lax_one(
    fake_github, tmp_path, monkeypatch
):
    from boardworld import alice_signs_in, relay_settings

    from app_relay.webhook.app import create_app

    people = alice_signs_in(fake_github, monkeypatch.setenv)
    with (
        Store(f"sqlite:///{tmp_path}/cujo.db") as store,
        Served(create_app(relay_settings(store, fake_github.url), store)) as relay,
    ):
        people.callback_urls = {f"{relay.url}/signin/callback"}
        http = requests.Session()
        back = http.get(f"{relay.url}/signin?next=/", timeout=10, allow_redirects=False)
        github = http.get(back.headers["location"], timeout=10, allow_redirects=False)
        landed = http.get(github.headers["location"], timeout=10, allow_redirects=False)
        # A relay serving no merge desk has no merge action at all.
        none = http.post(
            f"{relay.url}/runs/run-1/merge", data={"run": "run-1"}, headers={"Origin": relay.url}
        )
    cookies = landed.raw.headers.getlist("set-cookie")
    action = next(c for c in cookies if c.startswith("cujo_board_act="))
    view = next(c for c in cookies if c.startswith("cujo_board="))
    assert "SameSite=strict" in action
    assert "HttpOnly" in action
    assert "SameSite=lax" in view
    assert action.split(";")[0].partition("=")[2] == view.split(";")[0].partition("=")[2]
    assert none.status_code == 404


def test_a_local_review_has_nothing_to_merge(world):
    session = world.store.open_session(REPO, None, "local")
    world.store.start_run(session, "run-local", "b" * 40, "c" * 40, "sandbox")
    answer = click(world, token=world.form(run_id="run-local")["token"], run="run-local")
    assert answer.status_code == 403  # the form names run-1's path: run and path disagree
    client = Browser(world, world.cookies("maya"))
    local = client.post(
        "/runs/run-local/merge", data=world.form(run_id="run-local"), headers={"Origin": ORIGIN}
    )
    assert local.status_code == 409
    assert world.puts() == 0


def test_the_relays_settling_pass_moves_an_unknown_attempt_once(world):
    release = hang_next_merge(world.fake.state)
    try:
        click(world)
    finally:
        release.set()
    assert last(world).state == "unknown"
    # What `cujo relay serve` runs every MERGE_SETTLE_EVERY_S, with no page open and the
    # webhook lost: GitHub shows the pull request merged, so the attempt settles, once.
    assert world.desk.settle_all() == 1
    assert last(world).state == "merged"
    assert last(world).merged_by == "maya"
    assert world.desk.settle_all() == 0

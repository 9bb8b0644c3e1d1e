"""The board says what the relay's catch-up last did, and says a reached cap loudly."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from boardworld import Served

from app_relay.board import board_app
from app_relay.store import CatchUpTally, Store

DEADLINE_S = 10.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/cujo.db") as opened:
        yield opened


@pytest.fixture
def board(store: Store) -> Iterator[str]:
    with Served(board_app(store, poll_s=0.05, stream_s=5)) as served:
        yield served.url


def section(board: str) -> str:
    page = requests.get(f"{board}/", timeout=DEADLINE_S)
    assert page.status_code == 200
    found = re.search(r'<section class="catch-up".*?</section>', page.text, re.S)
    assert found is not None, page.text
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(0))))


def test_before_any_pass_the_board_says_none_ran(board: str) -> None:
    assert "Catch-up" in section(board)
    assert "no pass has run yet" in section(board)


def test_the_last_pass_is_shown_with_what_it_did(store: Store, board: str) -> None:
    started = store.begin_catch_up("relay-a", lease_s=60, every_s=300, first=True)
    assert started is not None
    # A pass under way is not the last pass yet.
    assert "no pass has run yet" in section(board)
    tally = CatchUpTally(
        full=True, deliveries_listed=7, redeliveries_asked=2, redeliveries_skipped=1,
        pulls_listed=9, pulls_swept=3,
    )  # fmt: skip
    store.finish_catch_up(started.pass_id, "relay-a", tally)
    said = section(board)
    assert "2 redeliveries asked of GitHub (7 deliveries listed)" in said
    assert "3 pull requests swept (of 9 read: every open pull request)" in said
    assert "1 delivery the relay had refused not asked again" in said
    assert "reached a cap" not in said
    assert "trouble" not in said


def test_a_reached_cap_and_trouble_are_loud_and_name_no_repository(
    store: Store, board: str
) -> None:
    started = store.begin_catch_up("relay-a", lease_s=60, every_s=300, first=True)
    assert started is not None
    tally = CatchUpTally(pulls_swept=50)
    tally.cap("50 pull requests swept and more wait (CUJO_CATCH_UP_MAX_PULLS)")
    tally.fail("sweeping installation 7: GET /repos/secret-org/hidden/pulls: answered HTTP 502")
    store.finish_catch_up(started.pass_id, "relay-a", tally)
    page = requests.get(f"{board}/", timeout=DEADLINE_S).text
    assert 'class="problem catch-up-capped"' in page
    said = section(board)
    assert "reached a cap and left work for the next pass" in said
    assert "CUJO_CATCH_UP_MAX_PULLS" in said
    assert "met trouble talking to GitHub; the relay's log says what" in said
    assert "secret-org" not in page

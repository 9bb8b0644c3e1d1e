"""The run page's merge in a real headless browser (Debian's chromium), on the fake GitHub.

Screenshots go under ``build/test-output/board/`` as the board's browser tests put them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import test_board_browser
from boardmerge import CHECK, HEAD, NUMBER, REPO, BoardMerge, ready_world
from boardworld import Served
from fakegithub import FakeGitHub
from fakegithub.merging import set_conflicting
from fakegithub.state import required_checks_rules
from test_board_browser import shot, wait_for

from app_relay.store import Store

browser = test_board_browser.browser  # the board's own chromium fixture


@pytest.fixture
def world(fake_github: FakeGitHub, tmp_path: Path) -> Iterator[tuple[BoardMerge, str]]:
    with Store(f"sqlite:///{tmp_path}/cujo.db") as store:
        made = ready_world(fake_github, store)
        with Served(made.app) as served:
            yield made, served.url
        made.github.close()


def signed_in(driver: object, url: str, world: BoardMerge, login: str = "maya") -> None:
    """Give the browser the board's two session cookies, as the sign-in would."""
    driver.get(f"{url}/static/board.css")  # type: ignore[attr-defined]
    for name, value in world.cookies(login).items():
        same_site = "Strict" if name.endswith("_act") else "Lax"
        driver.add_cookie(  # type: ignore[attr-defined]
            {"name": name, "value": value, "path": "/", "httpOnly": True, "sameSite": same_site}
        )


def test_blockers_are_shown_in_words_and_no_action_is_offered(world, browser):
    from selenium.webdriver.common.by import By

    made, url = world
    set_conflicting(made.fake.state, REPO, NUMBER)
    made.fake.state.set_rules(
        REPO, "main", required_checks_rules(REPO, {"context": CHECK}, strict=False)
    )
    signed_in(browser, url, made)
    browser.get(f"{url}/runs/{made.run_id}")
    items = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#blockers li"))
    codes = {item.get_attribute("data-code") for item in items}
    shot(browser, "merge-blocked")
    assert {"conflict", "base-guard"} <= codes
    assert all(item.is_displayed() and item.text for item in items)
    assert browser.find_elements(By.ID, "merge-button") == []


def test_the_ready_action_names_the_reviewed_sha_and_a_double_click_merges_once(world, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    made, url = world
    signed_in(browser, url, made)
    browser.get(f"{url}/runs/{made.run_id}")
    button = wait_for(browser, lambda d: d.find_element(By.ID, "merge-button"))
    assert button.text == f"Merge {HEAD[:12]}"
    shot(browser, "merge-ready")

    ActionChains(browser).double_click(button).perform()

    merged = wait_for(browser, lambda d: d.find_element(By.ID, "merged"))
    shot(browser, "merge-done")
    assert "by maya" in merged.text
    assert made.puts() == 1
    assert [a.state for a in made.store.run_merges(made.run_id)] == ["merged"]


def test_a_merge_made_elsewhere_reaches_an_open_page_live(world, browser):
    from selenium.webdriver.common.by import By

    made, url = world
    signed_in(browser, url, made)
    browser.get(f"{url}/runs/{made.run_id}")
    wait_for(browser, lambda d: d.find_element(By.ID, "merge-button"))
    wait_for(browser, lambda d: d.find_element(By.ID, "live-status").text == "live")

    # Another tab (another session) merges: this page's panel follows without a reload.
    attempt = made.store.begin_merge(made.run_id, login="ola", method="merge")
    made.store.claim_merge(attempt.id)
    made.store.settle_merge(attempt.id, "merged", "done", merged_by="ola")

    merged = wait_for(browser, lambda d: d.find_element(By.ID, "merged"))
    assert "by ola" in merged.text


def test_a_push_seen_by_its_webhook_turns_the_open_page_blocked(world, browser):
    from fakegithub.merging import push_head
    from selenium.webdriver.common.by import By

    made, url = world
    signed_in(browser, url, made)
    browser.get(f"{url}/runs/{made.run_id}")
    wait_for(browser, lambda d: d.find_element(By.ID, "merge-button"))

    new = push_head(made.fake.state, REPO, NUMBER)
    made.store.note_merge_news(REPO)  # what the `pull_request` synchronize webhook does

    moved = wait_for(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#blockers li[data-code="head-moved"]')
    )
    shot(browser, "merge-head-moved")
    assert new[:7] in moved[0].text
    assert browser.find_elements(By.ID, "merge-button") == []

"""The board in a real headless browser: Debian's chromium, driven through its chromedriver.

Each test saves a screenshot under ``build/test-output/board/`` (or ``$CUJO_TEST_OUTPUT``).
Without chromium the tests skip with the reason, except under CI (``CUJO_REQUIRE_BROWSER``),
where ``.ci/run`` installs it and a skip fails the build.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from boardworld import (
    Served,
    alice_signs_in,
    blocked_verdict,
    clean_verdict,
    errored,
    pull_request_run,
    relay_settings,
)
from fakegithub import FakeGitHub
from repo_paths import TOP

from app_relay.board import board_app
from app_relay.store import Store
from app_relay.webhook.app import create_app

SHOTS = Path(os.environ.get("CUJO_TEST_OUTPUT") or TOP / "build" / "test-output") / "board"
WAIT_S = 10.0
# docs/design.md section 3's colours, as board.css writes them: red, blue, and blue faded.
RED = (207, 34, 46, 1.0)
BLUE = (31, 111, 235, 1.0)
BLUE_FADED = (31, 111, 235, 0.45)


def rgba(css: str) -> tuple[int, int, int, float]:
    """Read a computed colour, ``rgb(r, g, b)`` or ``rgba(r, g, b, a)``."""
    found = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", css)
    assert found, css
    r, g, b, a = found.groups()
    return int(r), int(g), int(b), float(a or 1)


def chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture
def browser() -> Iterator[object]:
    found = chromium()
    if found is None:
        why = "chromium and chromedriver are not installed (apt install chromium-driver)"
        if os.environ.get("CUJO_REQUIRE_BROWSER"):
            pytest.fail(f"the browser tests must run here: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where chromium's own sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1200,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=found[1]))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: object, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"  # type: ignore[attr-defined]
    return path


def wait_for(driver: object, condition: object) -> object:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The run's body is replaced whole when the run changes: an element found just
    # before is stale, and the condition is simply asked again.
    return WebDriverWait(
        driver, WAIT_S, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/cujo.db") as opened:
        yield opened


def test_the_board_draws_blocked_in_red_and_an_error_in_faded_blue(store, browser):
    from selenium.webdriver.common.by import By

    for number, run_id, mode, verdict in (
        (1, "run-clean", "diff", clean_verdict()),
        (2, "run-error", "sandbox", errored()),
        (3, "run-blocked", "sandbox", blocked_verdict()),
    ):
        pull_request_run(store, "octo/app", number, run_id, mode=mode)
        store.finish_run(run_id, verdict)
    pull_request_run(store, "octo/app", 4, "run-running")

    with Served(board_app(store)) as board:
        browser.get(f"{board.url}/")  # type: ignore[attr-defined]
        rows = {
            row.get_attribute("data-run"): row
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.run")  # type: ignore[attr-defined]
        }
        badge = {run: row.find_element(By.CSS_SELECTOR, ".badge") for run, row in rows.items()}
        colour = {
            run: rgba(b.value_of_css_property("background-color")) for run, b in badge.items()
        }
        mode = {run: row.find_element(By.CSS_SELECTOR, "td.mode").text for run, row in rows.items()}
        painted = [
            (b.get_attribute("class"), rgba(b.value_of_css_property("background-color")))
            for b in browser.find_elements(By.CSS_SELECTOR, ".badge")  # type: ignore[attr-defined]
        ]
        words = {run: b.text for run, b in badge.items()}
        animation = badge["run-running"].value_of_css_property("animation-name")
        path = shot(browser, "board-list")
        browser.get("about:blank")  # type: ignore[attr-defined]

    assert colour["run-blocked"] == RED
    assert colour["run-error"] == BLUE_FADED  # the clean blue at reduced strength
    assert colour["run-clean"] == BLUE
    # The state is written too, never colour alone.
    assert words == {
        "run-running": "running",
        "run-blocked": "blocked",
        "run-error": "error",
        "run-clean": "clean",
    }
    assert animation == "cujo-running"
    # Red only for blocked, anywhere on the page (the filter's chips included).
    assert {cls for cls, bg in painted if bg == RED} == {"badge st-blocked"}
    assert mode["run-clean"] == "diff review"
    assert mode["run-blocked"] == "sandbox review"
    assert path.stat().st_size > 0


def test_a_run_page_grows_live_without_a_reload(store, browser):
    from selenium.webdriver.common.by import By

    pull_request_run(store, "octo/app", 7, "run-live")
    browser.set_window_size(1400, 1000)  # type: ignore[attr-defined]
    with Served(board_app(store, poll_s=0.1)) as board:
        browser.get(f"{board.url}/runs/run-live")  # type: ignore[attr-defined]
        wait_for(browser, lambda d: d.find_element(By.ID, "live-status").text == "live")
        browser.execute_script("window.cujoSamePage = 42;")  # type: ignore[attr-defined]

        store.add_event("run-live", "dispatched", "workflow run 31337")
        wait_for(browser, lambda d: "workflow run 31337" in d.find_element(By.ID, "timeline").text)
        store.move_open("run-live", "running", "waiting", "the required reviewers")
        wait_for(browser, lambda d: d.find_element(By.ID, "state").text == "waiting")
        store.finish_run("run-live", blocked_verdict())
        wait_for(browser, lambda d: d.find_element(By.ID, "state").text == "blocked")
        wait_for(browser, lambda d: "verdict: blocked" in d.find_element(By.ID, "timeline").text)

        lines = [
            li.find_element(By.CSS_SELECTOR, ".what").text
            for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")  # type: ignore[attr-defined]
        ]
        same_page = browser.execute_script("return window.cujoSamePage;")  # type: ignore[attr-defined]
        red, finding = wait_for(
            browser,
            lambda d: (
                rgba(d.find_element(By.ID, "state").value_of_css_property("background-color")),
                d.find_element(By.ID, "finding-F1").text,
            ),
        )  # type: ignore[misc]
        shot(browser, "run-live")
        browser.get("about:blank")  # type: ignore[attr-defined]

    assert same_page == 42  # appended in place: the page was never loaded again
    assert lines == [
        "claimed",
        "dispatched to the sandbox",
        "waiting on a person",
        "verdict: blocked",
    ]
    assert red == RED
    assert "POST to collector.exfil.test carried a decoy" in finding


def test_a_signed_out_visitor_sees_no_run_until_github_signs_them_in(
    store: Store, browser: object, fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.common.by import By

    alice_signs_in(fake_github, monkeypatch.setenv)
    pull_request_run(store, "octo/open", 1, "run-open")
    pull_request_run(store, "octo/secret", 2, "run-secret")
    store.finish_run("run-secret", blocked_verdict())

    with Served(create_app(relay_settings(store, fake_github.url), store)) as relay:
        browser.get(f"{relay.url}/")  # type: ignore[attr-defined]
        signed_out = browser.page_source  # type: ignore[attr-defined]
        shot(browser, "signed-out")
        browser.get(f"{relay.url}/runs/run-secret")  # type: ignore[attr-defined]
        direct = browser.page_source  # type: ignore[attr-defined]

        browser.find_element(By.ID, "signin").click()  # type: ignore[attr-defined]
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".who"))
        landed = browser.current_url  # type: ignore[attr-defined]
        browser.get(f"{relay.url}/")  # type: ignore[attr-defined]
        listed = [
            row.get_attribute("data-run")
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.run")  # type: ignore[attr-defined]
        ]
        shot(browser, "signed-in")
        browser.get("about:blank")  # type: ignore[attr-defined]

    for page in (signed_out, direct):
        assert "Sign in with GitHub" in page
        assert "octo/" not in page
        assert "data-run=" not in page
    assert landed == f"{relay.url}/runs/run-secret"  # where the visitor began; they cannot see it
    assert listed == ["run-open"]

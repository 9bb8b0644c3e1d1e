"""The relay's log lines: JSON naming the delivery and the run, or plain text for a person."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from boardworld import Served, relay_settings
from hooksignature import github_signature
from repo_paths import SAMPLES

from app_relay.github.event import Event
from app_relay.observe.logs import about, handler
from app_relay.runs.lease import RunLeases
from app_relay.runs.review_request import RecordingReviewer
from app_relay.settings import SettingsError, load_settings
from app_relay.store import Store
from app_relay.webhook.app import create_app
from app_relay.webhook.events import Context, Router
from app_relay.webhook.workers import PoolConfig, WorkerPool

OPENED = (SAMPLES / "webhooks" / "pull_request.opened.json").read_bytes()
DEADLINE_S = 10.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/relay.db") as opened:
        yield opened


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the root logger writes as JSON while the test runs."""
    out = io.StringIO()
    made = handler("json", out)
    root = logging.getLogger()
    level = root.level
    root.addHandler(made)
    root.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.removeHandler(made)
        root.setLevel(level)


def read(out: io.StringIO) -> list[dict[str, object]]:
    """Parse every line written; each must be one JSON object."""
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_webhook_logs_a_json_line_naming_the_delivery(store, lines):
    with Served(create_app(relay_settings(store), store)) as relay:
        answer = requests.post(
            f"{relay.url}/webhook", data=OPENED, timeout=DEADLINE_S,
            headers={"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-json-1",
                     "X-Hub-Signature-256": github_signature("test-webhook-secret", OPENED)},
        )  # fmt: skip
    assert answer.status_code == 202
    said = [line for line in read(lines) if line["logger"] == "app_relay.webhook.receive"]
    [recorded] = [line for line in said if "recorded" in str(line["message"])]
    assert recorded["delivery"] == "d-json-1"
    assert recorded["run"] is None
    assert recorded["level"] == "INFO"
    assert {"time", "process", "thread"} <= set(recorded)


def test_a_worker_and_a_run_name_their_delivery_and_run_on_every_line(store, lines):
    router = Router()
    leases = RunLeases(store, "relay-a")
    said = logging.getLogger("test.handler")
    handled = threading.Event()

    @router.register("pull_request")
    def handle(event: Event, context: Context) -> None:
        said.info("handling")
        session = store.open_session("o/r", 2, "github")
        store.start_run(session, "run-logged", "b" * 40, "a" * 40, "sandbox")
        with leases.acting("run-logged"):
            said.info("acting on the run")
        said.warning("after the run")
        handled.set()

    store.record_delivery("d-json-2", "pull_request", "opened", 1, "o/r", OPENED)
    pool = WorkerPool(
        store, Context(store=store, reviewer=RecordingReviewer(store)), router,
        PoolConfig(workers=1, idle_s=0.05),
    )  # fmt: skip
    pool.start()
    try:
        assert handled.wait(DEADLINE_S)
    finally:
        assert pool.stop(DEADLINE_S)  # lets the delivery in hand finish
    mine = [(line["message"], line["delivery"], line["run"]) for line in read(lines)
            if line["logger"] == "test.handler"]  # fmt: skip
    assert mine == [
        ("handling", "d-json-2", None),
        ("acting on the run", "d-json-2", "run-logged"),
        ("after the run", "d-json-2", None),
    ]


def test_an_exception_stays_inside_its_one_json_line(lines):
    log = logging.getLogger("test.boom")
    with about(delivery="d-boom"):
        try:
            raise ValueError("line one\nline two")
        except ValueError:
            log.exception("it broke")
    [line] = [x for x in read(lines) if x["logger"] == "test.boom"]
    assert line["delivery"] == "d-boom"
    assert "ValueError: line one\nline two" in str(line["exception"])


def test_text_lines_are_for_a_person_and_name_the_ids_when_there_are_some():
    out = io.StringIO()
    log = logging.getLogger("test.text")
    made = handler("text", out)
    log.addHandler(made)
    log.propagate = False
    try:
        with about(delivery="d-text", run="run-text"):
            log.warning("hello")
        log.warning("plain")
    finally:
        log.removeHandler(made)
        log.propagate = True
    first, second = out.getvalue().splitlines()
    assert first.endswith("WARNING test.text [delivery=d-text run=run-text] hello")
    assert second.endswith("WARNING test.text plain")
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)


def test_the_log_format_is_a_setting_that_names_a_wrong_value():
    key = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"
    base = {"CUJO_APP_ID": "1", "CUJO_WEBHOOK_SECRET": "s", "CUJO_PRIVATE_KEY": key}
    assert load_settings(base).log_format == "json"
    assert load_settings({**base, "CUJO_LOG_FORMAT": "TEXT"}).log_format == "text"
    with pytest.raises(SettingsError) as caught:
        load_settings({**base, "CUJO_LOG_FORMAT": "xml", "CUJO_BUNDLE_DAYS": "-1"})
    said = str(caught.value)
    assert "CUJO_LOG_FORMAT: is 'xml'; use json" in said
    assert "CUJO_BUNDLE_DAYS: must be more than 0" in said

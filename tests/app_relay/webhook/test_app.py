"""POST /webhook under a real uvicorn server on loopback, over a real SQLite file."""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import uvicorn
from fastapi import FastAPI
from hooksignature import EXAMPLE_PAYLOAD, EXAMPLE_SECRET, EXAMPLE_SIGNATURE, github_signature
from repo_paths import SAMPLES

from app_relay.settings import RelaySettings, Secret
from app_relay.store import Finished, NewDelivery, Store, intake_path
from app_relay.webhook import intake as webhook_intake
from app_relay.webhook.app import create_app
from app_relay.webhook.intake import DeliveryIntake
from app_relay.webhook.receive import MAX_BODY
from app_relay.webhook.signature import signature_matches, signature_of

WEBHOOKS = SAMPLES / "webhooks"
SECRET = "test-webhook-secret-4d1b"
KEY = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
DEADLINE_S = 10.0


def sample(name: str) -> bytes:
    return (WEBHOOKS / f"{name}.json").read_bytes()


def settings_for(database_url: str, secret: str = SECRET) -> RelaySettings:
    return RelaySettings(
        app_id=1,
        private_key=Secret(KEY),
        webhook_secret=Secret(secret),
        github_api_url="http://127.0.0.1:9",
        database_url=database_url,
        workflow="cujo.yml",
        anthropic_api_key=None,
    )


class Served:
    """An ASGI app under uvicorn in a thread, on a loopback port bound before it starts."""

    def __init__(self, app: FastAPI) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True
        )

    def __enter__(self) -> Served:
        self.thread.start()
        # The socket already listens, so this waits for the server, not for a retry loop.
        answer = requests.get(f"{self.url}/healthz", timeout=DEADLINE_S)
        assert answer.status_code == 200
        assert answer.json() == {"status": "ok"}
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(DEADLINE_S)
        self.listener.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"


class Relay:
    """The relay's web app over a store, with what it woke the workers for."""

    def __init__(self, store: Store, url: str) -> None:
        self.store = store
        self.url = url
        self.http = requests.Session()

    def post(
        self,
        body: bytes,
        *,
        event: str | None = "pull_request",
        delivery: str | None = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        signature: str | None = None,
        sign: bool = True,
    ) -> requests.Response:
        headers = {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/test"}
        if event is not None:
            headers["X-GitHub-Event"] = event
        if delivery is not None:
            headers["X-GitHub-Delivery"] = delivery
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        elif sign:
            headers["X-Hub-Signature-256"] = github_signature(SECRET, body)
        return self.http.post(f"{self.url}/webhook", data=body, headers=headers, timeout=60)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/relay.db") as opened:
        yield opened


@pytest.fixture
def woken() -> list[int]:
    return []


@pytest.fixture
def relay(store: Store, woken: list[int]) -> Iterator[Relay]:
    app = create_app(settings_for(store.url), store, on_recorded=lambda: woken.append(1))
    with Served(app) as served:
        yield Relay(store, served.url)


def test_a_signed_delivery_is_recorded_and_answered_202(relay, woken):
    body = sample("pull_request.opened")

    answer = relay.post(body, delivery="d-opened-1")

    assert answer.status_code == 202
    assert answer.json() == {"delivery": "d-opened-1", "recorded": True}
    recorded = relay.store.get_delivery("d-opened-1")
    assert (recorded.event, recorded.action, recorded.state) == (
        "pull_request",
        "opened",
        "pending",
    )
    assert (recorded.installation_id, recorded.repo) == (1, "Codertocat/Hello-World")
    assert recorded.body == body
    assert recorded.attempts == 0
    assert woken == [1]


def test_a_redelivery_keeps_its_id_and_is_recorded_once(relay, woken):
    body = sample("pull_request.synchronize")

    first = relay.post(body, delivery="d-sync-1")
    again = relay.post(body, delivery="d-sync-1")

    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json()["recorded"] is True
    assert again.json() == {"delivery": "d-sync-1", "recorded": False}
    assert relay.store.count_deliveries() == 1
    assert woken == [1]


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "sha256=" + "0" * 64,
        "sha1=" + "0" * 40,
        github_signature("another-secret", sample("pull_request.opened")),
        github_signature(SECRET, sample("pull_request.opened")).upper(),
    ],
    ids=["missing", "empty", "zeros", "sha1", "other-secret", "uppercase"],
)
def test_a_missing_or_wrong_signature_is_401_and_nothing_is_recorded(relay, signature):
    answer = relay.post(sample("pull_request.opened"), signature=signature, sign=False)

    assert answer.status_code == 401
    assert "X-Hub-Signature-256" in answer.json()["error"]
    assert relay.store.count_deliveries() == 0


def test_the_test_signer_gives_githubs_published_example() -> None:
    assert github_signature(EXAMPLE_SECRET, EXAMPLE_PAYLOAD) == EXAMPLE_SIGNATURE


def test_the_relay_signs_and_verifies_githubs_published_example() -> None:
    secret = EXAMPLE_SECRET.encode()
    assert signature_of(secret, EXAMPLE_PAYLOAD) == EXAMPLE_SIGNATURE
    assert signature_matches(secret, EXAMPLE_PAYLOAD, EXAMPLE_SIGNATURE)
    flipped = EXAMPLE_SIGNATURE[:-1] + ("0" if EXAMPLE_SIGNATURE[-1] != "0" else "1")
    assert not signature_matches(secret, EXAMPLE_PAYLOAD, flipped)
    assert not signature_matches(secret, EXAMPLE_PAYLOAD + b" ", EXAMPLE_SIGNATURE)
    assert not signature_matches(b"It's a secret to everybody", EXAMPLE_PAYLOAD, EXAMPLE_SIGNATURE)


def test_the_served_relay_takes_githubs_published_example_past_the_signature(tmp_path):
    with Store(f"sqlite:///{tmp_path}/example.db") as store:
        app = create_app(settings_for(store.url, EXAMPLE_SECRET), store)
        with Served(app) as served:
            relay = Relay(store, served.url)
            # "Hello, World!" is no JSON: a 400 says the signature was accepted.
            good = relay.post(EXAMPLE_PAYLOAD, signature=EXAMPLE_SIGNATURE)
            bad = relay.post(EXAMPLE_PAYLOAD, signature=EXAMPLE_SIGNATURE.replace("757", "758"))
        assert (good.status_code, bad.status_code) == (400, 401)
        assert "JSON" in good.json()["error"]
        assert store.count_deliveries() == 0


def test_a_body_changed_after_signing_is_401(relay):
    body = sample("pull_request.opened")
    signature = github_signature(SECRET, body)

    answer = relay.post(body.replace(b'"opened"', b'"closed"', 1), signature=signature)

    assert answer.status_code == 401
    assert relay.store.count_deliveries() == 0


def test_the_signature_is_checked_before_the_body_is_parsed(relay):
    answer = relay.post(b"{not json", signature="sha256=" + "1" * 64)

    assert answer.status_code == 401


def test_a_signed_body_that_is_not_json_is_400(relay):
    for body in (b"{not json", b"\xff\xfe\x00", b"[1, 2]", b""):
        answer = relay.post(body, delivery="d-bad")

        assert answer.status_code == 400, body
        assert "JSON" in answer.json()["error"]
    assert relay.store.count_deliveries() == 0


def test_a_body_over_25_mb_is_413_by_its_declared_length(relay):
    body = b"{" + b" " * (26 * 1024 * 1024) + b"}"
    with socket.create_connection(relay.url.removeprefix("http://").split(":"), 10) as sock:
        # Declare 26 MB and send none of it: the answer must come from the length alone.
        sock.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n"
            b"X-GitHub-Event: pull_request\r\nX-GitHub-Delivery: d-big\r\n"
            + b"X-Hub-Signature-256: "
            + github_signature(SECRET, body).encode()
            + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        head = sock.recv(4096)

    assert head.startswith(b"HTTP/1.1 413 ")
    assert relay.store.count_deliveries() == 0


def test_a_streamed_body_over_25_mb_is_413_while_it_arrives(relay):
    chunk = b" " * (1024 * 1024)
    body_size = MAX_BODY + len(chunk)
    sent = 0

    def body() -> Iterator[bytes]:
        # Chunked, so no Content-Length: the cap has to be counted on the stream.
        nonlocal sent
        yield b"{"
        while sent < body_size:
            sent += len(chunk)
            yield chunk
        yield b"}"

    try:
        answer = relay.http.post(
            f"{relay.url}/webhook",
            data=body(),
            headers={
                "X-GitHub-Event": "pull_request",
                "X-GitHub-Delivery": "d-big-stream",
                "X-Hub-Signature-256": "sha256=" + "2" * 64,
            },
            timeout=60,
        )
    except requests.ConnectionError:
        # The server may answer and close before the client has sent the rest; either
        # way it stopped reading past the cap and recorded nothing.
        pass
    else:
        assert answer.status_code == 413
    assert relay.store.count_deliveries() == 0


def test_a_body_of_exactly_the_cap_is_read(relay):
    payload = json.loads(sample("pull_request.opened"))
    body = json.dumps(payload).encode()
    body += b" " * (MAX_BODY - len(body))

    answer = relay.post(body, delivery="d-at-cap")

    assert answer.status_code == 202
    assert relay.store.get_delivery("d-at-cap").body == body


def test_ping_is_answered_and_not_queued(relay, woken):
    answer = relay.post(sample("ping"), event="ping", delivery="d-ping")

    assert answer.status_code == 200
    assert answer.json()["ok"] is True
    assert answer.json()["zen"] == json.loads(sample("ping"))["zen"]
    assert relay.store.count_deliveries() == 0
    assert woken == []


@pytest.mark.parametrize(
    ("event", "delivery", "names"),
    [
        (None, "d-1", "X-GitHub-Event"),
        ("pull_request", None, "X-GitHub-Delivery"),
        ("Pull Request!", "d-1", "X-GitHub-Event"),
        ("pull_request", "x" * 65, "X-GitHub-Delivery"),
        ("pull_request", "../d-1", "X-GitHub-Delivery"),
    ],
)
def test_missing_or_malformed_github_headers_are_400_with_why(relay, event, delivery, names):
    answer = relay.post(sample("pull_request.opened"), event=event, delivery=delivery)

    assert answer.status_code == 400
    assert names in answer.json()["error"]
    assert relay.store.count_deliveries() == 0


def test_other_events_are_recorded_with_what_they_name(relay):
    relay.post(sample("installation.created"), event="installation", delivery="d-inst")
    relay.post(sample("workflow_run.completed"), event="workflow_run", delivery="d-wr")

    installed = relay.store.get_delivery("d-inst")
    assert (installed.action, installed.installation_id, installed.repo) == (
        "created",
        957387,
        None,
    )
    run = relay.store.get_delivery("d-wr")
    assert (run.action, run.installation_id, run.repo) == ("completed", None, "octo-org/octo-repo")


def test_neither_the_secret_nor_the_signature_is_logged(relay, caplog):
    caplog.set_level(logging.DEBUG)
    body = sample("pull_request.opened")
    good = github_signature(SECRET, body)
    bad = github_signature("guess", body)

    relay.post(body, delivery="d-log-1")
    relay.post(body, delivery="d-log-2", signature=bad)

    assert "d-log-1" in caplog.text
    for never in (SECRET, good.removeprefix("sha256="), bad.removeprefix("sha256=")):
        assert never not in caplog.text


def test_healthz_answers_ok(relay):
    assert requests.get(f"{relay.url}/healthz", timeout=DEADLINE_S).json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"a": ' * 999 + b"1" + b"}" * 999, "nested deeper than 64"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),
        (b'{"a": ' * 65 + b"1" + b"}" * 65, "nested deeper than 64"),
        (b'{"n": ' + b"9" * 5_000 + b"}", "integer of 5000 digits"),
        (b'{"n": -' + b"9" * 21 + b"}", "integer of 21 digits"),
        (b'{"n": NaN}', "NaN"),
        (b'{"n": -Infinity}', "Infinity"),
        (b'{"n": 1e999}', "out of range"),
    ],
    ids=["999-deep", "100000-deep", "65-deep", "5000-digits", "21-digits", "nan", "inf", "1e999"],
)
def test_signed_json_too_deep_too_long_or_not_json_numbers_is_400_with_why(relay, body, why):
    answer = relay.post(body, delivery="d-hostile")

    assert answer.status_code == 400
    assert why in answer.json()["error"]
    assert relay.store.count_deliveries() == 0
    # The same bodies unsigned (or signed wrong) are refused for the signature first.
    for signature in (None, "sha256=" + "3" * 64):
        answer = relay.post(body, delivery="d-hostile", signature=signature, sign=False)
        assert answer.status_code == 401


def test_json_nested_64_deep_is_taken_and_65_deep_is_not() -> None:
    from app_relay.github.event import MalformedEvent, parse_json

    deepest = b'{"a": [' * 32 + b"1" + b"]}" * 32  # objects and arrays, 64 of them nested
    assert parse_json(deepest) is not None
    assert parse_json(b'{"wide": [1, {"b": []}], ' + deepest[1:]) is not None
    with pytest.raises(MalformedEvent, match="nested deeper than 64"):
        parse_json(b"[" + deepest + b"]")


def test_signed_json_at_the_limits_is_recorded(relay):
    body = b'{"action": "x", "a": ' * 63 + b"-" + b"9" * 20 + b"}" * 63
    assert relay.post(body, event="ping", delivery="d-limits").status_code == 200


def test_a_delivery_answered_202_is_committed_on_either_store(database_url):
    # Another connection (a worker, another relay) reads it as soon as it is answered.
    with Store(database_url) as store, Store(database_url) as other:
        app = create_app(settings_for(database_url), store)
        with Served(app) as served:
            relay = Relay(store, served.url)
            body = sample("pull_request.opened")
            first = relay.post(body, delivery="d-both-1")
            assert (first.status_code, first.json()["recorded"]) == (202, True)
            assert other.get_delivery("d-both-1").state == "pending"
            assert other.get_delivery("d-both-1").body == body
            again = relay.post(body, delivery="d-both-1")
            assert (again.status_code, again.json()["recorded"]) == (202, False)
        app.state.intake.close()
        assert other.count_deliveries() == 1


def queued(delivery_id: str) -> NewDelivery:
    return NewDelivery(delivery_id, "pull_request", "opened", 1, "o/r", b"{}")


def queued_ids(store: Store) -> list[str]:
    path = intake_path(store.url)
    assert path is not None
    with sqlite3.connect(path) as raw:
        return [row[0] for row in raw.execute("SELECT id FROM queue ORDER BY seq")]


def test_an_answer_never_waits_for_the_look_at_how_far_the_record_has_worked(store, monkeypatch):
    # That look scans every delivery still waiting: the writer takes it after answering.
    looking, release = threading.Event(), threading.Event()

    def slow_look() -> int:
        looking.set()
        assert release.wait(DEADLINE_S)
        return 0

    monkeypatch.setattr(store, "intake_finished_through", slow_look)
    intake = DeliveryIntake(store)
    try:
        assert intake.submit(queued("d-1")).result(DEADLINE_S) is True
        assert looking.wait(DEADLINE_S)
    finally:
        release.set()
        intake.close()


def test_the_writer_drops_the_bodies_the_record_finished_once_it_has_looked(store, monkeypatch):
    monkeypatch.setattr(webhook_intake, "LOOK_BACK_EVERY_S", 0.0)  # a look after every batch
    intake = DeliveryIntake(store)
    try:
        assert intake.submit(queued("d-1")).result(DEADLINE_S)
        [claimed] = store.claim_deliveries("w", 30, limit=8)
        assert store.finish_deliveries([Finished(claimed.id, True)], worker_id="w") == [True]
        assert intake.submit(queued("d-2")).result(DEADLINE_S)
        assert queued_ids(store) == ["d-1", "d-2"]  # appended before the look saw d-1 done
        assert intake.submit(queued("d-3")).result(DEADLINE_S)
        assert queued_ids(store) == ["d-2", "d-3"]
    finally:
        intake.close()
    assert store.get_delivery("d-1").state == "done"
    assert store.count_deliveries("pending") == 2

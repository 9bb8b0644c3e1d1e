"""The Anthropic adapter, through the real SDK, against the fake Messages API on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from fakeanthropic import FakeAnthropic, running, text, tool_use

from app_relay.model.claude import ModelClient, ModelConfig, cost_usd
from app_relay.model.fromenv import model_client_from_env
from app_relay.model.port import ModelError
from app_relay.model.tools import ADVISORY, BLOCKING, review_tool

TOOLS = [
    review_tool(ADVISORY, ("info", "warn"), "advise"),
    review_tool(BLOCKING, ("info", "warn", "critical"), "block"),
]
ASK = {"messages": [{"role": "user", "content": "judge this"}], "tools": TOOLS, "system": "s"}


@pytest.fixture
def api():
    yield from running()


def client(api: FakeAnthropic, **config: float) -> ModelClient:
    return ModelClient("sk-ant-test", base_url=api.url, config=ModelConfig(**config))  # type: ignore[arg-type]


def test_no_key_means_no_model():
    assert model_client_from_env({}) is None
    assert model_client_from_env({"ANTHROPIC_API_KEY": "  "}) is None
    env = {"ANTHROPIC_API_KEY": "sk-ant-secret", "ANTHROPIC_BASE_URL": "http://x"}
    made = model_client_from_env(env)
    assert isinstance(made, ModelClient)
    assert "sk-ant-secret" not in repr(made)


def test_a_review_without_a_key_never_imports_the_sdk():
    # It takes about a second to import: a local review with no key does without it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from app_relay.cli.review import local_judge; "
         "local_judge({}); print('anthropic' in sys.modules)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr


def test_one_ask_is_one_forced_tool_call_and_its_cost_is_recorded(api):
    api.call(BLOCKING, {"summary": "s", "findings": []}, input_tokens=12_000, output_tokens=800)
    ask = client(api, max_tokens=999)

    reply = ask.ask(model="claude-sonnet-4-5", deadline=ask.deadline(), **ASK)

    [request] = api.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert "anthropic-version" in request.headers
    assert request.body["model"] == "claude-sonnet-4-5"
    assert request.body["max_tokens"] == 999
    assert request.tools == [ADVISORY, BLOCKING]
    assert request.body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    [call] = reply.calls
    assert (call.name, call.input) == (BLOCKING, {"summary": "s", "findings": []})
    assert reply.stop_reason == "tool_use"
    assert reply.content == ({"type": "tool_use", "id": call.id, "name": BLOCKING,
                              "input": {"summary": "s", "findings": []}},)  # fmt: skip
    use = reply.use
    assert (use.input_tokens, use.output_tokens, use.asks, use.attempts) == (12_000, 800, 1, 1)
    # $3 and $15 per million tokens (Anthropic's list price for Sonnet 4.5), by hand.
    assert use.cost_usd == pytest.approx(0.036 + 0.012)
    assert use.outcome == "answered"


def test_text_and_every_call_of_a_reply_are_kept(api):
    api.reply(text("thinking aloud"), tool_use(ADVISORY, {}), tool_use(BLOCKING, {}))
    ask = client(api)

    reply = ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    assert reply.text == "thinking aloud"
    assert [c.name for c in reply.calls] == [ADVISORY, BLOCKING]


def test_an_overloaded_api_is_retried_by_the_sdk(api):
    api.overloaded()
    api.call(ADVISORY, {"summary": "ok", "findings": []})
    ask = client(api, max_retries=1)

    reply = ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    assert len(api.requests) == 2
    assert reply.use.attempts == 2
    assert reply.use.outcome == "answered"


def test_an_api_that_stays_overloaded_is_a_failure_that_says_so(api):
    api.overloaded(2)
    ask = client(api, max_retries=1)

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    use = caught.value.use
    assert (use.outcome, use.attempts, use.asks) == ("overloaded", 2, 1)
    assert "529" in use.detail
    assert (use.input_tokens, use.output_tokens) == (0, 0)


def test_an_answer_withheld_past_the_timeout_is_a_timeout(api):
    api.hang()
    ask = client(api, request_timeout_s=0.3, max_retries=0)

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    assert caught.value.use.outcome == "timeout"
    assert caught.value.use.attempts == 1


def test_each_attempt_gets_only_the_time_left_before_the_deadline(api):
    # The request timeout alone would wait a minute; the deadline cuts it short.
    api.hang()
    ask = client(api, request_timeout_s=60, max_retries=0)
    started = time.monotonic()

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=time.monotonic() + 0.3, **ASK)

    assert caught.value.use.outcome == "timeout"
    assert time.monotonic() - started < 30


def test_no_retry_starts_once_the_deadline_has_passed(api):
    now = [100.0]
    ask = ModelClient(
        "k", base_url=api.url, config=ModelConfig(max_retries=3), clock=lambda: now[0]
    )

    def the_clock_runs_out(_):
        now[0] = 200.0

    api.on_request = the_clock_runs_out
    api.overloaded(4)

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=150.0, **ASK)

    # The SDK would have tried four times; the deadline stopped it after the first.
    assert len(api.requests) == 1
    assert caught.value.use.outcome == "timeout"
    assert caught.value.use.attempts == 1


def test_an_ask_after_the_deadline_sends_nothing(api):
    ask = ModelClient("k", base_url=api.url, clock=lambda: 10.0)

    with pytest.raises(ModelError) as caught:
        ask.ask(model="m", deadline=5.0, **ASK)

    assert api.requests == []
    assert (caught.value.use.outcome, caught.value.use.attempts) == ("timeout", 0)


@pytest.mark.parametrize(
    ("model", "usd"),
    [
        ("claude-haiku-4-5", 1.0 + 5.0),
        ("claude-haiku-4-5-20251001", 1.0 + 5.0),
        ("claude-sonnet-4-5-20250929", 3.0 + 15.0),
        ("claude-sonnet-4", 3.0 + 15.0),
        ("claude-opus-4-5", 5.0 + 25.0),
        ("claude-opus-4-1", 15.0 + 75.0),
        ("claude-3-5-haiku-latest", 0.8 + 4.0),
        ("some-other-model", None),
        ("claude-sonnet-4-6", None),
        ("claude-sonnet-4-5x", None),
    ],
)
def test_cost_of_a_million_tokens_each_way(model, usd):
    assert cost_usd(model, 1_000_000, 1_000_000) == usd


def test_an_error_the_sdk_does_not_retry_is_an_error_that_says_so(api):
    api.status(400, "invalid_request_error", "tools: bad schema")
    ask = client(api, max_retries=2)

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    assert len(api.requests) == 1  # a 400 is not retried
    assert (caught.value.use.outcome, caught.value.use.detail) == (
        "error",
        "the API answered HTTP 400",
    )


def test_a_reply_that_is_not_a_message_is_an_error(api):
    api.garbled()
    ask = client(api)

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    assert caught.value.use.outcome == "error"
    assert caught.value.use.detail.startswith("the reply could not be read")


def test_an_api_that_cannot_be_reached_is_an_error():
    with FakeAnthropic() as gone:
        url = gone.url
    ask = ModelClient("k", base_url=url, config=ModelConfig(max_retries=0))

    with pytest.raises(ModelError) as caught:
        ask.ask(model="claude-haiku-4-5", deadline=ask.deadline(), **ASK)

    assert (caught.value.use.outcome, caught.value.use.detail) == (
        "error",
        "the API could not be reached",
    )

"""What the relay's parts record in its metrics: model tokens and cost, runs and their time."""

from __future__ import annotations

from typing import Any

import pytest
from fakeanthropic import FakeAnthropic, running
from fakegithub import fake_sha
from prometheus_client.parser import text_string_to_metric_families

from app_relay.model.claude import ModelClient, ModelConfig
from app_relay.model.port import ModelError
from app_relay.model.tools import ADVISORY, review_tool
from app_relay.observe import metrics

TOOLS = [review_tool(ADVISORY, ("info", "warn"), "advise")]
ASK = {"messages": [{"role": "user", "content": "judge this"}], "tools": TOOLS, "system": "s"}


@pytest.fixture
def api():
    yield from running()


def now() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse this process's metrics as /metrics serves them."""
    text, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def delta(before: dict[Any, float], after: dict[Any, float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_a_model_answer_counts_its_tokens_and_cost_and_a_failure_its_outcome(
    api: FakeAnthropic,
) -> None:
    api.call(ADVISORY, {"summary": "s", "findings": []}, input_tokens=12_000, output_tokens=800)
    api.status(400, "invalid_request_error")
    ask = ModelClient("sk-ant-test", base_url=api.url, config=ModelConfig(max_retries=0))
    before = now()

    ask.ask(model="claude-sonnet-4-5", deadline=ask.deadline(), **ASK)
    with pytest.raises(ModelError):
        ask.ask(model="claude-sonnet-4-5", deadline=ask.deadline(), **ASK)

    after = now()
    model = "claude-sonnet-4-5"
    assert delta(before, after, "cujo_model_tokens_total", model=model, kind="input") == 12_000
    assert delta(before, after, "cujo_model_tokens_total", model=model, kind="output") == 800
    # $3 and $15 per million tokens at list price: 0.036 + 0.012.
    assert delta(before, after, "cujo_model_cost_usd_total", model=model) == pytest.approx(0.048)
    assert delta(before, after, "cujo_model_asks_total", model=model, outcome="answered") == 1
    assert delta(before, after, "cujo_model_asks_total", model=model, outcome="error") == 1


def test_a_finished_run_counts_by_verdict_and_its_duration(make: Any) -> None:
    before = now()
    w = make()
    w.open(1, fake_sha())
    w.complete()
    after = now()
    assert delta(before, after, "cujo_runs_finished_total", state="clean", mode="sandbox") == 1
    assert delta(before, after, "cujo_run_duration_seconds_count", mode="sandbox") == 1
    took = delta(before, after, "cujo_run_duration_seconds_sum", mode="sandbox")
    assert 0 < took < 300

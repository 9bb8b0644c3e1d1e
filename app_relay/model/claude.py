"""Ask Claude through the Anthropic SDK with tool use: a deadline, bounded retries, cost.

The adapter behind ``modelport.ModelPort``. Each ask is one Messages call
(https://docs.anthropic.com/en/api/messages) forced to use a tool
(``tool_choice: any`` with parallel tool use off, so one call is all a reply may make).
The SDK retries what it retries (429, 5xx, 529 overloaded, timeouts, connection errors)
``max_retries`` times; an overall deadline bounds the whole decision: every attempt's
timeout is cut to the time that is left, and no attempt starts once it has passed. The
one overrun left is a retry's back-off sleep, which the SDK caps at 8 s (or a
``retry-after`` the API sends, at most 60 s).

No ``ANTHROPIC_API_KEY``: ``fromenv.model_client_from_env`` returns None, without
importing this module, and callers use the deterministic judge; nothing else changes
(docs/design.md section 7).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anthropic
import httpx

from app_relay.model.port import Message, ModelError, Reply, Tool, ToolCall
from app_relay.observe import metrics
from app_relay.verdict import ModelOutcome, ModelUse

DEFAULT_JUDGE_MODEL: Final = "claude-sonnet-4-5"
DEFAULT_DIFF_MODEL: Final = "claude-haiku-4-5"

# US dollars per million input and output tokens, from Anthropic's price list
# (https://docs.anthropic.com/en/docs/about-claude/pricing, as of 2025-11). A dated id
# (claude-sonnet-4-5-20250929) or a `-latest` alias is priced as its model; a model not
# listed (a newer one, say) is recorded with its tokens and no cost, never a guess.
PRICES_PER_MTOK: Final[Mapping[str, tuple[float, float]]] = {
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-haiku": (0.25, 1.25),
}


_DATED = re.compile(r"-(?:[0-9]{8}|latest)$")


def cost_usd(model: str, input_tokens: int, output_tokens: int) -> float | None:
    """Return what the tokens cost at ``model``'s list price; None for an unlisted model."""
    name = _DATED.sub("", model)
    if name not in PRICES_PER_MTOK:
        return None
    per_in, per_out = PRICES_PER_MTOK[name]
    return (input_tokens * per_in + output_tokens * per_out) / 1_000_000


@dataclass(frozen=True)
class ModelConfig:
    """How the relay asks: output cap, per-request timeout, overall deadline, retries."""

    max_tokens: int = 2_048
    request_timeout_s: float = 60.0
    deadline_s: float = 180.0
    max_retries: int = 2


class DeadlinePassed(anthropic.AnthropicError):
    """No attempt may start: the decision's deadline has passed."""


class ModelClient:
    """The Anthropic SDK, asked one forced tool call at a time."""

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        config: ModelConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self.config = config or ModelConfig()
        self._clock = clock

    def __repr__(self) -> str:
        return f"ModelClient(base_url={self._base_url!r}, config={self.config!r})"

    def deadline(self) -> float:
        """Return when a decision that starts now must be done."""
        return self._clock() + self.config.deadline_s

    def ask(
        self,
        *,
        model: str,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        deadline: float,
    ) -> Reply:
        """Return the reply to one Messages call; raise ModelError when there is none."""
        attempts = 0

        def before_each_attempt(request: httpx.Request) -> None:
            nonlocal attempts
            left = deadline - self._clock()
            if left <= 0:
                raise DeadlinePassed("the deadline passed before this attempt")
            attempts += 1
            # httpx reads each request's timeouts from its extensions when it sends it.
            request.extensions["timeout"] = httpx.Timeout(
                min(self.config.request_timeout_s, left)
            ).as_dict()

        def failed(outcome: ModelOutcome, detail: str) -> ModelError:
            use = ModelUse(
                model=model,
                cost_usd=cost_usd(model, 0, 0),
                asks=1,
                attempts=attempts,
                outcome=outcome,
                detail=detail,
            )
            _observed(use)
            return ModelError(use)

        if deadline - self._clock() <= 0:
            raise failed("timeout", "the deadline passed before the model was asked")
        # Plain JSON-shaped values; the SDK's TypedDicts describe the same shapes.
        request: dict[str, Any] = {
            "model": model,
            "max_tokens": self.config.max_tokens,
            "system": system,
            "messages": list(messages),
            "tools": list(tools),
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        }
        http = anthropic.DefaultHttpxClient(event_hooks={"request": [before_each_attempt]})
        client = anthropic.Anthropic(
            api_key=self._api_key,
            base_url=self._base_url,
            max_retries=self.config.max_retries,
            timeout=self.config.request_timeout_s,
            http_client=http,
            # A reply that is not the shape the API documents is an error, never read
            # loosely (the SDK builds its models unchecked otherwise).
            _strict_response_validation=True,
        )
        try:
            message = client.messages.create(**request)
        except (DeadlinePassed, anthropic.APITimeoutError):
            raise failed("timeout", f"no answer in time ({attempts} attempts)") from None
        except anthropic.APIStatusError as exc:
            outcome: ModelOutcome = "overloaded" if exc.status_code in (429, 529) else "error"
            raise failed(outcome, f"the API answered HTTP {exc.status_code}") from None
        except anthropic.APIConnectionError as exc:
            if isinstance(exc.__cause__, DeadlinePassed):
                raise failed("timeout", "no answer within the deadline") from None
            raise failed("error", "the API could not be reached") from None
        except anthropic.AnthropicError as exc:
            # A reply the SDK could not read is an answer we cannot use.
            raise failed("error", f"the reply could not be read ({type(exc).__name__})") from None
        finally:
            client.close()
        try:
            reply = _reply(model, message, attempts)
        except ValueError as exc:  # a reply whose fields do not fit the record
            raise failed("error", f"the reply could not be read ({type(exc).__name__})") from None
        _observed(reply.use)
        return reply


def _observed(use: ModelUse) -> None:
    """Count one ask's tokens and cost in ``/metrics``."""
    metrics.model_used(use.model, use.outcome, use.input_tokens, use.output_tokens, use.cost_usd)


def _reply(model: str, message: anthropic.types.Message, attempts: int) -> Reply:
    calls: list[ToolCall] = []
    texts: list[str] = []
    content: list[Mapping[str, object]] = []
    for block in message.content:
        if block.type == "tool_use":
            calls.append(ToolCall(block.id, block.name, block.input))
            content.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
            )
        elif block.type == "text":
            texts.append(block.text)
            content.append({"type": "text", "text": block.text})
    usage = message.usage
    return Reply(
        calls=tuple(calls),
        text="\n".join(texts),
        stop_reason=message.stop_reason,
        content=tuple(content),
        use=ModelUse(
            model=message.model or model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=cost_usd(message.model or model, usage.input_tokens, usage.output_tokens),
            asks=1,
            attempts=attempts,
            outcome="answered",
        ),
    )

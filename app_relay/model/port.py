"""The port a judge or a diff review asks a model through: replies, tool calls, failures.

Pure. ``claude.py`` is the adapter on the Anthropic SDK; tests pass fakes of this port or
point the adapter at a fake Messages API on loopback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from app_relay.verdict import ModelUse

Message = Mapping[str, object]
Tool = Mapping[str, object]


@dataclass(frozen=True)
class ToolCall:
    """One ``tool_use`` block of a reply: its id, the tool's name and the input given."""

    id: str
    name: str
    input: object


@dataclass(frozen=True)
class Reply:
    """What the model answered to one ask, and what that ask cost."""

    calls: tuple[ToolCall, ...]
    text: str
    stop_reason: str | None
    # The assistant turn as the API wants it back when the model is asked again.
    content: tuple[Mapping[str, object], ...]
    use: ModelUse


class ModelError(Exception):
    """The model gave no answer: a deadline passed, it was overloaded, or the API failed."""

    def __init__(self, use: ModelUse) -> None:
        super().__init__(use.detail or use.outcome)
        self.use = use


class ModelPort(Protocol):
    """Ask a model, with tools, before a deadline."""

    def deadline(self) -> float:
        """Return when a decision that starts now must be done (``time.monotonic`` seconds)."""
        ...

    def ask(
        self,
        *,
        model: str,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        deadline: float,
    ) -> Reply:
        """Return the reply, forced to call one of ``tools``; raise ModelError without one."""
        ...

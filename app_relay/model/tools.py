"""The two tools a model reviews through, and reading a reply: which tool, what it cites.

Pure but for the port it is handed. The tool that was called is the verdict
(docs/design.md section 7): ``post_blocking_review`` blocks, ``post_advisory_review``
does not, and no later text changes that. A reply is accepted only when it makes exactly
one call, to an offered tool, with input of the tool's shape, citing only evidence ids
that exist; anything else is rejected with Cujo's reason and the model is asked again, a
bounded number of times. Nothing is ever guessed from a reply that was rejected.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app_relay.model.port import Message, ModelError, ModelPort, Reply, Tool
from app_relay.verdict import MAX_TITLE, SEVERITIES, ModelUse, Severity
from cujo_action.schema import clip

ADVISORY: Final = "post_advisory_review"
BLOCKING: Final = "post_blocking_review"
ToolName = Literal["post_advisory_review", "post_blocking_review"]
MAX_PROPOSED = 20
MAX_CITED = 20
MAX_SAID = 1_000


def review_tool(name: ToolName, severities: Sequence[Severity], description: str) -> Tool:
    """Return a review tool's definition: a summary and findings that cite evidence ids."""
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["summary", "findings"],
            "properties": {
                "summary": {
                    "type": "string",
                    "maxLength": MAX_SAID,
                    "description": "Two or three sentences a maintainer reads first.",
                },
                "findings": {
                    "type": "array",
                    "maxItems": MAX_PROPOSED,
                    "minItems": 1 if name == BLOCKING else 0,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["title", "severity", "evidence"],
                        "properties": {
                            "title": {"type": "string", "maxLength": MAX_TITLE},
                            "severity": {"type": "string", "enum": list(severities)},
                            "evidence": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_CITED,
                                "items": {"type": "string"},
                                "description": "Evidence ids exactly as given, e.g. "
                                "install:egress:1.",
                            },
                        },
                    },
                },
            },
        },
    }


class ProposedFinding(BaseModel):
    """One finding as the model proposed it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    title: str = Field(min_length=1)
    severity: Severity
    evidence: list[str] = Field(min_length=1, max_length=MAX_CITED)

    @field_validator("title", mode="before")
    @classmethod
    def _cap_title(cls, value: object) -> object:
        return clip(value, MAX_TITLE) if isinstance(value, str) else value


class ReviewCall(BaseModel):
    """A review tool's input as the model gave it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    summary: str
    findings: list[ProposedFinding] = Field(max_length=MAX_PROPOSED)

    @field_validator("summary", mode="before")
    @classmethod
    def _cap_summary(cls, value: object) -> object:
        return clip(value, MAX_SAID) if isinstance(value, str) else value


@dataclass(frozen=True)
class Accepted:
    """A reply that holds: the tool called (the verdict) and its input, clamped."""

    tool: ToolName
    call: ReviewCall
    # How many findings said more than the tool allows and were lowered to its highest.
    clamped: int = 0


@dataclass(frozen=True)
class Rejected:
    """A reply that does not hold, and why, in Cujo's own words (no model text)."""

    reason: str


def read_reply(
    reply: Reply,
    *,
    offered: Mapping[ToolName, Sequence[Severity]],
    known: Collection[str],
) -> Accepted | Rejected:
    """Accept a reply making one call to an offered tool that cites only ``known`` ids."""
    if not reply.calls:
        return Rejected("the reply called no tool")
    if len(reply.calls) > 1:
        return Rejected(f"the reply made {len(reply.calls)} tool calls; exactly one is allowed")
    [call] = reply.calls
    tool: ToolName
    if call.name == ADVISORY and ADVISORY in offered:
        tool = ADVISORY
    elif call.name == BLOCKING and BLOCKING in offered:
        tool = BLOCKING
    else:
        return Rejected(f"the reply called a tool that was not offered ({_names(offered)} were)")
    try:
        said = ReviewCall.model_validate(call.input)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        return Rejected(f"the tool input is malformed at {where}: {first['type']}")
    invented = sorted({e for f in said.findings for e in f.evidence} - set(known))
    if invented:
        return Rejected(
            f"the call cites {len(invented)} evidence id(s) that the reports do not hold"
        )
    highest = max(offered[tool], key=SEVERITIES.index)
    clamped = [f for f in said.findings if SEVERITIES.index(f.severity) > SEVERITIES.index(highest)]
    if clamped:
        lowered = [
            f.model_copy(update={"severity": highest}) if f in clamped else f for f in said.findings
        ]
        said = said.model_copy(update={"findings": lowered})
    if tool == BLOCKING and not any(f.severity == "critical" for f in said.findings):
        return Rejected("a blocking review must name at least one critical finding")
    return Accepted(tool, said, len(clamped))


def _names(offered: Mapping[ToolName, object]) -> str:
    return " and ".join(offered)


def ask_again(reply: Reply, reason: str) -> list[Message]:
    """Return the turns that hand a rejected reply back: its content, then why it failed."""
    told = (
        f"That answer was rejected: {reason}. Call exactly one of the offered tools, once, "
        "citing only evidence ids that appear in the evidence."
    )
    results: list[object] = [
        {"type": "tool_result", "tool_use_id": call.id, "is_error": True, "content": told}
        for call in reply.calls
    ]
    content: list[object] = results or [{"type": "text", "text": told}]
    return [
        {"role": "assistant", "content": list(reply.content) or [{"type": "text", "text": "…"}]},
        {"role": "user", "content": content},
    ]


@dataclass(frozen=True)
class Asked:
    """How asking ended: the accepted reply (or None), what it all cost, and why not."""

    accepted: Accepted | None
    use: ModelUse | None
    why_not: str = ""


def ask_for_review(
    port: ModelPort,
    *,
    model: str,
    system: str,
    prompt: str,
    offered: Mapping[ToolName, Sequence[Severity]],
    descriptions: Mapping[ToolName, str],
    known: Collection[str],
    asks: int,
    deadline: float,
) -> Asked:
    """Ask up to ``asks`` times for one acceptable review call, before ``deadline``."""
    tools = [review_tool(name, offered[name], descriptions[name]) for name in offered]
    messages: list[Message] = [{"role": "user", "content": prompt}]
    use: ModelUse | None = None
    why_not = "the model was not asked"
    for _ in range(max(asks, 1)):
        try:
            reply = port.ask(
                model=model, system=system, messages=messages, tools=tools, deadline=deadline
            )
        except ModelError as exc:
            return Asked(None, _then(use, exc.use), exc.use.detail or exc.use.outcome)
        result = read_reply(reply, offered=offered, known=known)
        if isinstance(result, Accepted):
            return Asked(result, _then(use, reply.use))
        why_not = result.reason
        rejected = reply.use.model_copy(update={"outcome": "rejected", "detail": why_not})
        use = _then(use, rejected)
        messages += ask_again(reply, why_not)
    return Asked(None, use, why_not)


def _then(before: ModelUse | None, after: ModelUse) -> ModelUse:
    return after if before is None else before.plus(after)

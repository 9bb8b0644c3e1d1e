"""Define what deciding produces: findings that cite evidence, and one verdict per run.

Pure, and below every folder of the relay: the judges (``decide/``, ``model/``) make a
``Verdict``, the record keeps it, ``words/`` renders it. ``evidence_items`` indexes the
evidence a finding cites by its id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from cujo_action.schema import (
    MAX_TEXT,
    CheckName,
    Cut,
    DecoyEvent,
    Egress,
    EvidenceId,
    Observation,
    Report,
    clip,
)

Severity = Literal["info", "warn", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warn", "critical")
VerdictState = Literal["clean", "unproven", "blocked", "error"]
# Who decided: the hard rules alone (no model key), the model's tool call, or the hard
# rules after the model was asked and gave no usable answer (a timeout, an overload,
# a reply that called no offered tool or cited evidence that does not exist).
JudgeKind = Literal["deterministic", "model", "deterministic-fallback"]
# Where a finding's evidence came from: a sandbox check, or the diff a diff review read.
FindingSource = CheckName | Literal["diff", "record"]
ModelOutcome = Literal["answered", "rejected", "timeout", "overloaded", "error"]

MAX_TITLE = 200
MAX_SUMMARY = MAX_TEXT
# A finding cites at most this many evidence ids; its title says how many there were.
MAX_EVIDENCE = 50
# Rules that can name one behaviour (every hard rule, with room to grow).
MAX_RULES = 32
MAX_UNPROVEN = 20

# An evidence item a finding may cite, by its id.
Item = Egress | DecoyEvent | Observation | Cut

RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=64)]
FindingId = Annotated[str, StringConstraints(pattern=r"^F[1-9][0-9]*$", max_length=8)]


class Finding(BaseModel):
    """One thing a rule (or the judge) found, resting on evidence ids from the reports."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: FindingId
    # The strongest rule that found it; `rules` names every rule that found the same
    # behaviour (one finding per behaviour), this one first.
    rule: RuleId
    severity: Severity
    check: FindingSource
    title: str
    # min_length=1: a finding that cites no evidence cannot be built at all.
    evidence: list[EvidenceId] = Field(min_length=1, max_length=MAX_EVIDENCE)
    rules: list[RuleId] = Field(default_factory=list, max_length=MAX_RULES)

    @field_validator("title", mode="before")
    @classmethod
    def _cap_title(cls, value: object) -> object:
        # Titles quote hosts and paths chosen by the pull request; clip, never reject.
        return clip(value, MAX_TITLE) if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _rules_default(cls, data: object) -> object:
        # A finding one rule made (or one read back from a record that kept only `rule`).
        if isinstance(data, dict) and not data.get("rules") and "rule" in data:
            return {**data, "rules": [data["rule"]]}
        return data

    @model_validator(mode="after")
    def _rule_first(self) -> Finding:
        if self.rules[0] != self.rule or len(set(self.rules)) != len(self.rules):
            raise ValueError("`rules` must start with `rule` and name each rule once")
        return self


class ModelUse(BaseModel):
    """What one decision cost at the model: tokens, dollars, attempts and how it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Annotated[str, StringConstraints(max_length=128)]
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    # None when the model is not in the price table (the tokens are still recorded).
    cost_usd: float | None = Field(None, ge=0)
    # Messages calls made (a rejected answer is asked again) and HTTP requests sent
    # (the SDK's retries of a 529 or a timeout included).
    asks: int = Field(0, ge=0)
    attempts: int = Field(0, ge=0)
    outcome: ModelOutcome
    detail: str = ""

    @field_validator("detail", mode="before")
    @classmethod
    def _cap_detail(cls, value: object) -> object:
        return clip(value, MAX_TITLE) if isinstance(value, str) else value

    def plus(self, later: ModelUse) -> ModelUse:
        """Return this use followed by ``later`` (a second ask): sums, and its outcome."""
        cost = (
            None
            if self.cost_usd is None or later.cost_usd is None
            else self.cost_usd + later.cost_usd
        )
        return ModelUse(
            model=later.model,
            input_tokens=self.input_tokens + later.input_tokens,
            output_tokens=self.output_tokens + later.output_tokens,
            cost_usd=cost,
            asks=self.asks + later.asks,
            attempts=self.attempts + later.attempts,
            outcome=later.outcome,
            detail=later.detail,
        )


class Verdict(BaseModel):
    """The decision on one run: its state, why, and the findings it rests on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: VerdictState
    summary: str
    # Uncapped: the reports' own caps bound it, and dropping a finding would hide evidence.
    findings: list[Finding] = Field(default_factory=list)
    # One line per check that produced no evidence, saying why (plus one for the plan).
    unproven: list[str] = Field(default_factory=list, max_length=MAX_UNPROVEN)
    judge: JudgeKind
    # What the model judge or the diff review spent; None when no model was asked.
    model_use: ModelUse | None = None

    @field_validator("summary", mode="before")
    @classmethod
    def _cap_summary(cls, value: object) -> object:
        return clip(value, MAX_SUMMARY) if isinstance(value, str) else value

    @field_validator("unproven", mode="before")
    @classmethod
    def _cap_unproven(cls, value: object) -> object:
        if isinstance(value, list):
            return [clip(line, MAX_TITLE) if isinstance(line, str) else line for line in value]
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Verdict:
        # These hold for any judge, so a model verdict cannot talk its way past them.
        ids = [f.id for f in self.findings]
        if len(ids) != len(set(ids)):
            raise ValueError("finding ids must be unique within a verdict")
        critical = any(f.severity == "critical" for f in self.findings)
        if critical and self.state != "blocked":
            raise ValueError(f"a critical finding makes the verdict blocked, not {self.state}")
        if self.state == "blocked" and not self.findings:
            raise ValueError("a blocked verdict must cite at least one finding")
        if self.state == "unproven" and not self.unproven:
            raise ValueError("an unproven verdict must say what is unproven")
        if self.state == "clean" and self.unproven:
            raise ValueError("a clean verdict cannot leave anything unproven")
        if not self.summary.strip():
            raise ValueError("a verdict needs a summary")
        if self.judge != "deterministic" and self.state != "error" and self.model_use is None:
            raise ValueError(f"a {self.judge} verdict must record what the model was asked")
        return self


def evidence_items(reports: Sequence[Report]) -> dict[str, tuple[Report, Item]]:
    """Return every evidence id the reports hold, with the report and the item."""
    index: dict[str, tuple[Report, Item]] = {}
    for report in reports:
        items: list[Item] = [
            *report.egress, *report.decoy_events, *report.observations, *report.cuts
        ]  # fmt: skip
        for item in items:
            index[item.id] = (report, item)
    return index

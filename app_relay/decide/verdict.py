"""Define what deciding produces: findings that cite evidence, and one verdict per run."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from cujo_action.schema import MAX_TEXT, CheckName, EvidenceId, clip

Severity = Literal["info", "warn", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warn", "critical")
VerdictState = Literal["clean", "unproven", "blocked", "error"]
JudgeKind = Literal["deterministic", "model"]

MAX_TITLE = 200
MAX_SUMMARY = MAX_TEXT
# A finding cites at most this many evidence ids; its title says how many there were.
MAX_EVIDENCE = 50
MAX_UNPROVEN = 20

RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=64)]
FindingId = Annotated[str, StringConstraints(pattern=r"^F[1-9][0-9]*$", max_length=8)]


class Finding(BaseModel):
    """One thing a rule (or the judge) found, resting on evidence ids from the reports."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: FindingId
    rule: RuleId
    severity: Severity
    check: CheckName
    title: str
    # min_length=1: a finding that cites no evidence cannot be built at all.
    evidence: list[EvidenceId] = Field(min_length=1, max_length=MAX_EVIDENCE)

    @field_validator("title", mode="before")
    @classmethod
    def _cap_title(cls, value: object) -> object:
        # Titles quote hosts and paths chosen by the pull request; clip, never reject.
        return clip(value, MAX_TITLE) if isinstance(value, str) else value


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
        return self

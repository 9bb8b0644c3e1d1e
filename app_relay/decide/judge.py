"""Decide a run's verdict from its reports: hard rules first, then the judge.

The deterministic judge is what runs without a model key: it blocks exactly when a hard
rule found a critical. The model judge (``ClaudeJudge``) implements the same ``Judge``
protocol, so the relay takes either as a parameter. It runs the hard rules first, then
asks the model, which must call one of two tools; which one it calls is the verdict.
When a hard rule found a critical only the blocking tool is offered, so the model can
add to a block but never lift one. A reply that cannot be used (no call, two calls, a
tool not offered, malformed input, evidence that does not exist), asked again a bounded
number of times, or no reply at all (a deadline, an overload), leaves the decision to
the hard rules, and the verdict says so (``judge="deterministic-fallback"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

from app_relay.decide.behaviour import one_per_behaviour
from app_relay.decide.hits import RuleContext
from app_relay.decide.prompt import judge_prompt
from app_relay.decide.rules import apply_rules
from app_relay.model.port import ModelPort
from app_relay.model.tools import ADVISORY, BLOCKING, Accepted, Asked, ToolName, ask_for_review
from app_relay.verdict import (
    MAX_SUMMARY,
    SEVERITIES,
    Finding,
    Item,
    ModelUse,
    Severity,
    Verdict,
    VerdictState,
    evidence_items,
)
from app_relay.words.inert import code_span
from app_relay.words.review_body import with_model_words
from app_relay.words.untrusted import Fence
from cujo_action.limits import LIMITS
from cujo_action.schema import CheckName, Report, clip

_MAX_CMD = 80
# Error reasons quote what failed (file names, answers, bundle contents) at this length.
_MAX_REASON = 1_000
_INSTALLS = frozenset({"install", "detonation"})


class Judge(Protocol):
    """Turn a run's reports into its verdict."""

    def decide(
        self,
        reports: Sequence[Report],
        *,
        expected: Sequence[CheckName],
        ctx: RuleContext,
        plan_unproven: str = "",
    ) -> Verdict:
        """Return the verdict on these reports."""
        ...


@dataclass(frozen=True)
class DeterministicJudge:
    """The judge without a model: hard rules decide, completeness decides the rest."""

    require_full_isolation: bool = False

    def decide(
        self,
        reports: Sequence[Report],
        *,
        expected: Sequence[CheckName],
        ctx: RuleContext,
        plan_unproven: str = "",
    ) -> Verdict:
        """Return the verdict on these reports."""
        return decide(
            reports,
            expected=expected,
            ctx=ctx,
            plan_unproven=plan_unproven,
            require_full_isolation=self.require_full_isolation,
        )


def decide(
    reports: Sequence[Report],
    *,
    expected: Sequence[CheckName],
    ctx: RuleContext,
    plan_unproven: str = "",
    require_full_isolation: bool = False,
) -> Verdict:
    """Return blocked on any critical finding, else unproven on missing evidence, else clean."""
    findings = one_per_behaviour(apply_rules(reports, ctx), reports)
    unproven = unproven_lines(
        reports,
        expected=expected,
        plan_unproven=plan_unproven,
        require_full_isolation=require_full_isolation,
    )
    critical = [f for f in findings if f.severity == "critical"]
    state: VerdictState
    if critical:
        # What is unproven still goes on the record: a maintainer weighing a dismissal
        # should know which checks never finished.
        state, summary = "blocked", _blocked_summary(critical, findings)
    elif unproven:
        state, summary = "unproven", _unproven_summary(unproven, findings)
    else:
        state, summary = "clean", _clean_summary(expected, findings)
    return Verdict(
        state=state, summary=summary, findings=findings, unproven=unproven, judge="deterministic"
    )


def error_verdict(reason: str) -> Verdict:
    """Return the verdict for a run Cujo could not decide (bad reports, a deadline)."""
    # The reason quotes what failed, which a pull request or its bundle may have chosen.
    why = code_span(reason.strip().rstrip("."), cap=_MAX_REASON) if reason.strip() else ""
    return Verdict(
        state="error",
        summary=(
            f"Cujo could not finish this review: {why or 'no reason was given'}. "
            "This says nothing about the pull request itself."
        ),
        findings=[],
        unproven=[],
        judge="deterministic",
    )


def unproven_lines(
    reports: Sequence[Report],
    *,
    expected: Sequence[CheckName],
    plan_unproven: str = "",
    require_full_isolation: bool = False,
) -> list[str]:
    """Return one line per expected check that produced no evidence, saying why."""
    lines = []
    if plan_unproven.strip():
        lines.append(f"plan: {plan_unproven.strip()}")
    if not expected:
        # Nothing ran, so nothing was shown; an empty plan must never read as clean.
        lines.append("checks: none was expected to run, so nothing was proven")
    for check in dict.fromkeys(expected):
        got = [r for r in reports if r.check == check]
        if not got:
            lines.append(f"{check}: no report came back")
            continue
        reasons = [
            reason
            for report in got
            for reason in _report_gaps(report, require_full_isolation=require_full_isolation)
        ]
        if reasons:
            lines.append(f"{check}: {'; '.join(dict.fromkeys(reasons))}")
    return lines


def _report_gaps(report: Report, *, require_full_isolation: bool) -> list[str]:
    gaps = []
    said = report.summary.strip() or "no reason given"
    if report.status == "skipped":
        gaps.append(f"skipped ({said})")
    elif report.status == "error":
        gaps.append(f"no usable evidence ({said})")
    elif report.status == "failed" and report.check in _INSTALLS:
        # An install that failed is a gap: nothing it would have installed ran or imported.
        gaps.append(f"the install failed, so what it installs never ran ({said})")
    # A failed suite or probe is not a gap: it ran, and that is evidence.
    gaps.extend(
        f"`{clip(c.cmd, _MAX_CMD)}` timed out after {c.duration_s:.0f}s"
        for c in report.commands
        if c.timed_out
    )
    gaps.extend(cut_gaps(report))
    if require_full_isolation and report.isolation == "partial":
        gaps.append("ran with partial isolation")
    return gaps


def cut_gaps(report: Report) -> list[str]:
    """Return what a report's cuts leave unproven, naming each limit (``limits.py``).

    A cut whose dropped part could have hidden danger is a gap; one that dropped only
    what the rules cannot tell from what was kept is named in the report and no more.
    Evidence marked incomplete with no such cut to say why is a gap too (fail closed).
    """
    gaps = [
        f"evidence cut by the limit {cut.limit} ({LIMITS[cut.limit].what}: "
        f"{cut.dropped} dropped{', ' + cut.detail if cut.detail else ''})"
        for cut in report.cuts
        if cut.hides_danger
    ]
    if not report.evidence_complete and not gaps:
        gaps.append("evidence incomplete (a harness process died or a log overflowed)")
    return gaps


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _below_critical(findings: Sequence[Finding]) -> str:
    warn = sum(1 for f in findings if f.severity == "warn")
    info = sum(1 for f in findings if f.severity == "info")
    parts = [_count(n, word) for n, word in ((warn, "warning"), (info, "note")) if n]
    return " and ".join(parts)


def _also(findings: Sequence[Finding]) -> str:
    below = _below_critical(findings)
    if not below:
        return ""
    return f" There {'is' if below.startswith('1 ') else 'are'} also {below} to read."


def _blocked_summary(critical: Sequence[Finding], findings: Sequence[Finding]) -> str:
    first = critical[0]
    return (
        f"Blocked by {_count(len(critical), 'critical finding')}, "
        f"first {first.id}: {code_span(first.title)}.{_also(findings)}"
    )


def _unproven_summary(unproven: Sequence[str], findings: Sequence[Finding]) -> str:
    head = "Nothing critical was found, but not everything was proven:"
    tail = f".{_also(findings)}"
    # Whole quoted lines only: the verdict clips its summary, and a cut inside a code
    # span would un-quote the rest.
    room = MAX_SUMMARY - len(head) - len(tail) - 40
    quoted: list[str] = []
    for n, line in enumerate(unproven):
        span = code_span(line)
        if sum(len(q) + 2 for q in quoted) + len(span) > room:
            quoted.append(f"and {len(unproven) - n} more")
            break
        quoted.append(span)
    return f"{head} {'; '.join(quoted)}{tail}"


def _clean_summary(expected: Sequence[CheckName], findings: Sequence[Finding]) -> str:
    checks = ", ".join(dict.fromkeys(expected))
    return (
        f"Every expected check ({checks}) produced evidence and nothing critical was found."
        f"{_also(findings)}"
    )


# --------------------------------------------------------------------------- the model judge

JUDGE_RULE = "judge"
# The first ask, and one more after an answer that was rejected.
JUDGE_ASKS = 2
ADVISORY_SEVERITIES: tuple[Severity, ...] = ("info", "warn")
TOOL_DESCRIPTIONS: Mapping[ToolName, str] = {
    ADVISORY: (
        "Post an advisory review (a comment that does not hold the merge): the evidence "
        "shows nothing dangerous. Findings are info or warn and cite evidence ids."
    ),
    BLOCKING: (
        "Post a blocking review (request changes; the merge is held): the evidence shows "
        "dangerous behaviour. At least one finding is critical; each cites evidence ids."
    ),
}


def load_rubric() -> str:
    """Return the rubric kept beside this module (``rubric.md``)."""
    return resources.files(__package__).joinpath("rubric.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class ClaudeJudge:
    """The model judge: the hard rules, then one of two review tools called by the model."""

    model: ModelPort
    require_full_isolation: bool = False
    asks: int = JUDGE_ASKS
    # Empty: the rubric kept in the repository (``rubric.md``).
    rubric: str = ""

    def decide(
        self,
        reports: Sequence[Report],
        *,
        expected: Sequence[CheckName],
        ctx: RuleContext,
        plan_unproven: str = "",
    ) -> Verdict:
        """Return the verdict on these reports."""
        rules = decide(
            reports,
            expected=expected,
            ctx=ctx,
            plan_unproven=plan_unproven,
            require_full_isolation=self.require_full_isolation,
        )
        critical = any(f.severity == "critical" for f in rules.findings)
        offered: dict[ToolName, Sequence[Severity]] = (
            {BLOCKING: SEVERITIES}
            if critical
            else {ADVISORY: ADVISORY_SEVERITIES, BLOCKING: SEVERITIES}
        )
        index = evidence_items(reports)
        system, prompt = judge_prompt(
            rules,
            reports,
            expected=expected,
            offered=list(offered),
            rubric=self.rubric or load_rubric(),
            fence=Fence.new(),
            budget_tokens=ctx.policy.model.budget_tokens,
        )
        model = ctx.policy.model.judge
        asked = ask_for_review(
            self.model,
            model=model,
            system=system,
            prompt=prompt,
            offered=offered,
            descriptions=TOOL_DESCRIPTIONS,
            known=index.keys(),
            asks=self.asks,
            deadline=self.model.deadline(),
        )
        if asked.accepted is None or (critical and asked.accepted.tool != BLOCKING):
            return _fallback(rules, asked, model)
        assert asked.use is not None
        return _model_verdict(rules, asked.accepted, asked.use, index)


def judge_for(model: ModelPort | None, *, require_full_isolation: bool = False) -> Judge:
    """Return the model judge when there is a model to ask, else the deterministic judge."""
    if model is None:
        return DeterministicJudge(require_full_isolation=require_full_isolation)
    return ClaudeJudge(model, require_full_isolation=require_full_isolation)


def _fallback(rules: Verdict, asked: Asked, model: str) -> Verdict:
    # The reason is Cujo's own words (a rejection or a failure), never the model's text.
    use = asked.use or ModelUse(model=model, outcome="error", detail=asked.why_not)
    why = asked.why_not.strip().rstrip(".") or "no reason was given"
    return Verdict.model_validate(
        {
            **rules.model_dump(),
            "judge": "deterministic-fallback",
            "summary": (
                f"{rules.summary} The model judge gave no usable answer ({why}), so the "
                "hard rules decided alone."
            ),
            "model_use": use,
        }
    )


def _model_verdict(
    rules: Verdict, accepted: Accepted, use: ModelUse, index: Mapping[str, tuple[Report, Item]]
) -> Verdict:
    start = len(rules.findings) + 1
    added = [
        Finding(
            id=f"F{n}",
            rule=JUDGE_RULE,
            severity=p.severity,
            check=index[p.evidence[0]][0].check,
            title=p.title,
            evidence=list(dict.fromkeys(p.evidence)),
        )
        for n, p in enumerate(accepted.call.findings, start=start)
    ]
    findings = [*rules.findings, *added]
    model = use.model
    if accepted.tool == BLOCKING:
        critical = [f for f in findings if f.severity == "critical"]
        lead = (
            rules.summary
            if rules.state == "blocked"
            else (
                f"Blocked by the model judge: {_count(len(critical), 'critical finding')}, "
                f"first {critical[0].id}: {code_span(critical[0].title)}."
            )
        )
        state = "blocked"
    else:
        lead = rules.summary
        state = "unproven" if rules.unproven else "clean"
    return Verdict(
        state=state,
        summary=with_model_words(lead, f"The model judge ({model}) said:", accepted.call.summary),
        findings=findings,
        unproven=rules.unproven,
        judge="model",
        model_use=use,
    )

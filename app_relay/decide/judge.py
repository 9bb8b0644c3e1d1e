"""Decide a run's verdict from its reports: hard rules first, then the judge.

The deterministic judge is what runs without a model key: it blocks exactly when a hard
rule found a critical. The model judge (a later change) implements the same ``Judge``
protocol, so the relay takes either as a parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app_relay.inert import code_span
from cujo_action.schema import CheckName, Report, clip

from .behaviour import one_per_behaviour
from .rules import RuleContext, apply_rules
from .verdict import MAX_SUMMARY, Finding, Verdict

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
    if critical:
        # What is unproven still goes on the record: a maintainer weighing a dismissal
        # should know which checks never finished.
        return Verdict(
            state="blocked",
            summary=_blocked_summary(critical, findings),
            findings=findings,
            unproven=unproven,
            judge="deterministic",
        )
    if unproven:
        return Verdict(
            state="unproven",
            summary=_unproven_summary(unproven, findings),
            findings=findings,
            unproven=unproven,
            judge="deterministic",
        )
    return Verdict(
        state="clean",
        summary=_clean_summary(expected, findings),
        findings=findings,
        unproven=[],
        judge="deterministic",
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
    if not report.evidence_complete:
        gaps.append("evidence incomplete (a harness process died or a log overflowed)")
    if require_full_isolation and report.isolation == "partial":
        gaps.append("ran with partial isolation")
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

"""Render a review's body a maintainer reads in ten seconds, pure.

The verdict first, then one line per finding with its evidence collapsed under it
(``<details>``), then what ran and what could not be proven, then who decided. Every
piece of text a pull request controls (titles, hosts, paths, commands, the model's
words) goes through ``inert.code_span`` (docs/design.md invariant 10); the verdict's
summary is Cujo's sentence with such text already quoted that way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from app_relay.verdict import MAX_SUMMARY, Finding, Item, ModelUse, Verdict, evidence_items
from app_relay.words.inert import code_span
from cujo_action.schema import Cut, DecoyEvent, Egress, Report

# GitHub caps a review body at 65,536 characters; keep well under it.
MAX_BODY = 60_000
# Evidence lines shown under one finding; the rest are counted.
MAX_EVIDENCE_SHOWN = 20
_DESCRIBED = 160
# Limits reached listed in the review (the record and the run page hold every one).
_MAX_CUTS_SHOWN = 10
# How much of the model's own summary a verdict's summary quotes (``with_model_words``).
MAX_MODEL_WORDS = 600

DISMISS_HINT = (
    "A maintainer can lift this block on this commit with a comment holding only "
    "`/cujo dismiss` on its own line."
)


def _who(item: Egress | DecoyEvent) -> str:
    """Return the process an item names, and what started it, where the harness could tell."""
    if item.pid is None and not item.exe:
        return ""
    said = f" by {item.exe or 'pid ' + str(item.pid)}"
    if item.cmdline:
        said += f" (`{item.cmdline[:80]}`)"
    if item.origin:
        said += f", from {item.origin}"
    return said


def describe(item: Item) -> str:
    """Return one plain line for an evidence item (the caller quotes it)."""
    if isinstance(item, Egress):
        said = (
            f"{item.method} {item.url} during {item.phase} ({item.bytes_out} bytes, {item.action})"
            f"{_who(item)}"
        )
        if not item.decoy_seen:
            return said
        # The names and the places are two lists, not pairs: show every one of each.
        where = f" ({', '.join(item.decoy_where)})" if item.decoy_where else ""
        return f"{said}; decoy {', '.join(item.decoy_seen)}{where}"
    if isinstance(item, DecoyEvent):
        return f"{item.event} of {item.path}{_who(item)} during {item.phase}"
    if isinstance(item, Cut):
        during = f" during {item.phase}" if item.phase else ""
        said = f"limit {item.limit} reached{during}: {item.dropped} dropped, {item.kept} kept"
        return f"{said} ({item.detail})" if item.detail else said
    parts = [p for p in (item.path, item.detail) if p]
    return f"{item.kind}: {' — '.join(parts)}" if parts else item.kind


def evidence_lines(reports: Sequence[Report]) -> dict[str, str]:
    """Return a plain description of every evidence item the reports hold, by id."""
    return {eid: describe(item) for eid, (_, item) in evidence_items(reports).items()}


def render_review(
    verdict: Verdict,
    *,
    head_sha: str,
    mode: Literal["sandbox", "diff"],
    reports: Sequence[Report] = (),
    evidence: Mapping[str, str] | None = None,
    ran: Sequence[str] = (),
) -> str:
    """Return the review's Markdown.

    ``reports`` give what ran and describe the evidence; ``evidence`` adds descriptions
    of ids no report holds (a diff review's hunks); ``ran`` adds lines to "what ran".
    """
    described = {**evidence_lines(reports), **(evidence or {})}
    kind = "diff review" if mode == "diff" else "sandbox review"
    head = [
        f"**Cujo: {verdict.state}** · {kind} of `{head_sha[:12]}`",
        "",
        verdict.summary,
    ]
    tail: list[str] = []
    ran_lines = [*(_check_line(r) for r in reports), *(code_span(line) for line in ran)]
    if ran_lines:
        tail += ["", "**What ran**", *(f"- {line}" for line in ran_lines)]
    if verdict.unproven:
        tail += ["", "**Not proven**", *(f"- {code_span(line)}" for line in verdict.unproven)]
    limits = [_cut_line(report.check, cut) for report in reports for cut in report.cuts]
    if limits:
        # Every limit reached is said, also those that could hide nothing (limits.py).
        tail += ["", "**Limits reached**", *(f"- {line}" for line in limits[:_MAX_CUTS_SHOWN])]
        if len(limits) > _MAX_CUTS_SHOWN:
            tail.append(f"- and {len(limits) - _MAX_CUTS_SHOWN} more, on the run's record")
    if verdict.state == "blocked":
        tail += ["", DISMISS_HINT]
    tail += ["", f"<sub>{_decided_by(verdict)}</sub>"]
    room = MAX_BODY - sum(len(p) + 1 for p in [*head, *tail]) - 200
    middle = _findings(verdict.findings, described, room)
    return "\n".join([*head, *middle, *tail])


def _findings(findings: Sequence[Finding], described: Mapping[str, str], room: int) -> list[str]:
    """Return one line per finding, each with its evidence collapsed under it, within room."""
    if not findings:
        return []
    out = ["", f"**Findings** ({len(findings)})", ""]
    room -= sum(len(line) + 1 for line in out)
    for n, finding in enumerate(findings):
        line = _finding_line(finding)
        details = _details(finding, described)
        if len(line) + len(details) + 2 <= room:
            out += [line, details]
            room -= len(line) + len(details) + 2
        elif len(line) + 1 <= room:
            out.append(line)  # its evidence is on the record and the run page
            room -= len(line) + 1
        else:
            out.append(f"- and {len(findings) - n} more finding(s), on the run's record")
            break
    return out


def _finding_line(finding: Finding) -> str:
    rules = " ".join(code_span(rule) for rule in finding.rules)
    return (
        f"- **{finding.severity}** {finding.id} {code_span(finding.title)} "
        f"({rules}; {len(finding.evidence)} evidence)"
    )


def _details(finding: Finding, described: Mapping[str, str]) -> str:
    shown = finding.evidence[:MAX_EVIDENCE_SHOWN]
    lines = [
        f"  - {code_span(eid)} {code_span(described[eid], cap=_DESCRIBED)}"
        if eid in described
        else f"  - {code_span(eid)}"
        for eid in shown
    ]
    if len(finding.evidence) > len(shown):
        lines.append(f"  - and {len(finding.evidence) - len(shown)} more")
    # Indented under the finding's list item; the blank lines let GitHub render the list.
    return "\n".join(
        [f"  <details><summary>Evidence for {finding.id}</summary>", "", *lines, "", "  </details>"]
    )


def _cut_line(check: str, cut: Cut) -> str:
    effect = "could hide danger: unproven" if cut.hides_danger else "named only"
    return f"{check}: {code_span(describe(cut), cap=_DESCRIBED)} ({effect})"


def _check_line(report: Report) -> str:
    said = f" {code_span(report.summary, cap=_DESCRIBED)}" if report.summary.strip() else ""
    return f"{report.check}: {report.status}{said}"


def _decided_by(verdict: Verdict) -> str:
    use = verdict.model_use
    if verdict.judge == "deterministic":
        return "Decided by Cujo's hard rules (no model was asked)."
    if verdict.judge == "deterministic-fallback":
        return f"Decided by Cujo's hard rules: the model judge gave no usable answer. {_cost(use)}"
    return f"Decided by the model ({_cost(use)})."


def _cost(use: ModelUse | None) -> str:
    if use is None:
        return ""
    price = f", ${use.cost_usd:.4f}" if use.cost_usd is not None else ", price unknown"
    return (
        f"{code_span(use.model)}: {use.asks} ask(s), {use.attempts} request(s), "
        f"{use.input_tokens:,} tokens in, {use.output_tokens:,} out{price}; {use.outcome}"
    )


def with_model_words(lead: str, intro: str, words: str) -> str:
    """Return ``lead`` and the model's words, quoted whole or not at all (no cut spans)."""
    if not words.strip():
        return lead
    room = MAX_SUMMARY - len(lead) - len(intro) - 2
    span = code_span(words, cap=min(MAX_MODEL_WORDS, max(room, 0)))
    return f"{lead} {intro} {span}" if len(span) <= room else lead

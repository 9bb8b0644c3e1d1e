"""Write what the model judge is shown: the rubric, the findings, the gaps, the evidence.

Everything from the pull request is fenced (``untrusted.Fence``) and sanitised; the
findings come first, then what could not be proven, the reports, the requests whose
bodies nothing could read (opaque egress: what an encrypted secret looks like), then the
evidence, cited items first, all within the prompt's token budget.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from app_relay.model.tools import ADVISORY, BLOCKING, ToolName
from app_relay.verdict import Finding, Item, Verdict, evidence_items
from app_relay.words.untrusted import Fence, estimate_tokens, sanitise
from cujo_action.schema import CheckName, Egress, Report, clip

# Room kept in the prompt budget for the tools' definitions and the reply's framing.
_TOOLS_RESERVE = 1_500
_MAX_TAIL = 400
_MAX_COMMANDS = 10
# Methods that send a body of the client's choosing (the opaque-egress rule's).
_SENDS = frozenset({"POST", "PUT", "PATCH"})


def judge_prompt(
    rules: Verdict,
    reports: Sequence[Report],
    *,
    expected: Sequence[CheckName],
    offered: Sequence[ToolName],
    rubric: str,
    fence: Fence,
    budget_tokens: int,
) -> tuple[str, str]:
    """Return the system text and the prompt: findings, gaps, reports and evidence, fenced.

    Everything fits ``budget_tokens`` (by ``estimate_tokens``): the findings come first,
    then the reports, the opaque sends (the rubric says what they mean), then the
    evidence the findings cite, then the rest; what does not fit is left out and the
    prompt says how much was.
    """
    if list(offered) == [BLOCKING]:
        tools = (
            "A hard rule found a critical finding, so the pull request is blocked whatever "
            f"you conclude and only {BLOCKING} is offered: call it, adding what a "
            "maintainer should know."
        )
    else:
        tools = f"Call exactly one of {ADVISORY} and {BLOCKING}, once: the tool is the verdict."
    system = f"{rubric.strip()}\n\n{fence.rule()}\n\n{tools}"
    index = evidence_items(reports)
    cited = list(dict.fromkeys(eid for f in rules.findings for eid in f.evidence))
    order = [*(e for e in cited if e in index), *(e for e in index if e not in set(cited))]
    # The section headings, fence markers and notes below take well under 400 tokens.
    room = budget_tokens - _TOOLS_RESERVE - estimate_tokens(system) - 400
    sections: list[str] = [
        f"Checks expected to run: {', '.join(dict.fromkeys(expected)) or 'none'}."
    ]
    for title, label, lines in (
        ("Hard-rule findings (they stand whatever you decide)", "hard-rule findings",
         [_line(_finding_line(f)) for f in rules.findings]),
        ("What could not be proven", "unproven", [_clean(line) for line in rules.unproven]),
        ("The checks' reports", "reports", [_line(_report_line(r)) for r in reports]),
        ("Opaque egress: bodies sent that decode to nothing readable (see the rubric)",
         "opaque egress", [_line(_opaque_line(r, e)) for r in reports for e in _opaque(r)]),
        ("The evidence, one item per line with its id", "evidence",
         [_line(_item_line(*index[eid])) for eid in order]),
    ):  # fmt: skip
        kept, room = _fit(lines, room)
        left = len(lines) - len(kept)
        sections += [
            "",
            f"{title} ({len(lines)}):",
            fence.wrap(label, "\n".join(kept) or "(none)"),
        ]
        if left:
            sections.append(
                f"{left} of these were left out to keep this prompt within "
                f"{budget_tokens:,} tokens."
            )
    return system, "\n".join(sections)


def _opaque(report: Report) -> list[Egress]:
    """Return the report's requests that sent a body nothing could read."""
    return [e for e in report.egress if e.opaque and e.method in _SENDS]


def _opaque_line(report: Report, egress: Egress) -> dict[str, object]:
    return {
        "id": egress.id,
        "check": report.check,
        "phase": egress.phase,
        "method": egress.method,
        "host": egress.host,
        "bytes_out": egress.bytes_out,
        "pid": egress.pid,
    }


def _fit(lines: Sequence[str], room: int) -> tuple[list[str], int]:
    """Return the leading lines that fit ``room`` tokens, and the room left."""
    kept: list[str] = []
    for line in lines:
        cost = estimate_tokens(line) + 1
        if cost > room:
            break
        kept.append(line)
        room -= cost
    return kept, room


def _finding_line(finding: Finding) -> dict[str, object]:
    return {
        "id": finding.id,
        "severity": finding.severity,
        "rules": finding.rules,
        "check": finding.check,
        "title": finding.title,
        "evidence": finding.evidence,
    }


def _clean(value: str) -> str:
    return sanitise(value)


def _line(data: Mapping[str, object]) -> str:
    """Return one JSON line, every string in it sanitised."""

    def clean(value: object) -> object:
        if isinstance(value, str):
            return _clean(value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return json.dumps(clean(dict(data)), ensure_ascii=False)


def _report_line(report: Report) -> dict[str, object]:
    commands: list[dict[str, object]] = []
    for c in report.commands[:_MAX_COMMANDS]:
        command: dict[str, object] = {
            "cmd": clip(c.cmd, _MAX_TAIL),
            "phase": c.phase,
            "exit_code": c.exit_code,
            "timed_out": c.timed_out,
        }
        if c.exit_code != 0:
            # What a command that failed said last is often why it failed.
            command["stdout_tail"] = clip(c.stdout_tail, _MAX_TAIL, keep="tail")
            command["stderr_tail"] = clip(c.stderr_tail, _MAX_TAIL, keep="tail")
        commands.append(command)
    return {
        "check": report.check,
        "status": report.status,
        "summary": report.summary,
        "isolation": report.isolation,
        "evidence_complete": report.evidence_complete,
        "commands": commands,
        "commands_left_out": max(len(report.commands) - _MAX_COMMANDS, 0),
    }


def _item_line(report: Report, item: Item) -> dict[str, object]:
    return {"check": report.check, **item.model_dump(mode="json", exclude_none=True)}

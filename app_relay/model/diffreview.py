"""Ask the cheap model for the diff review and read its answer: advisory, never a block.

docs/design.md section 5. ``review_diff`` builds the prompt (``diffprompt``: the diff compressed
by ``diffcompress``, the standards read at base by ``standards``), asks the model through
the port with one tool, ``post_advisory_review``, and clamps the answer again here, so a
diff review can never block: its verdict is ``clean`` (or ``error`` when the model gave
no usable answer), and its summary says "diff review".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from app_relay.model.diffprompt import (
    DIFF_SEVERITIES,
    DIFF_TOOL_DESCRIPTION,
    DiffPrompt,
    diff_prompt,
)
from app_relay.model.port import ModelPort
from app_relay.model.standards import StandardsFile
from app_relay.model.tools import ADVISORY, ToolName, ask_for_review
from app_relay.verdict import Finding, ModelUse, Severity, Verdict
from app_relay.words.review_body import with_model_words
from app_relay.words.untrusted import Fence
from cujo_action.schema import Policy

DIFF_RULE: Final = "diff-review"


@dataclass(frozen=True)
class DiffReview:
    """A diff review's verdict and what it read."""

    verdict: Verdict
    prompt: DiffPrompt

    def evidence(self) -> dict[str, str]:
        """Return where each hunk the model could cite is, for the review body."""
        return dict(self.prompt.compressed.where)

    def ran(self) -> list[str]:
        """Return what ran, one line each, for the review body."""
        c = self.prompt.compressed
        use = self.verdict.model_use
        return [
            f"diff review by {use.model if use else 'the model'} of {c.files} files "
            f"({c.changed_lines:,} changed lines): {len(c.shown)} hunk(s) shown, "
            f"{len(c.named)} file(s) reduced to names, {len(c.left_out)} with hunks left "
            f"out to fit {c.budget_tokens:,} tokens"
        ]


def review_diff(
    port: ModelPort,
    *,
    diff: str,
    standards: Sequence[StandardsFile],
    policy: Policy,
    title: str = "",
    body: str = "",
    asks: int = 2,
) -> DiffReview:
    """Ask the diff model for an advisory review of ``diff``; return the verdict.

    The verdict is ``clean`` (advisory, findings at most ``warn``) or, when the model gave
    no usable answer, ``error``; never ``blocked``.
    """
    built = diff_prompt(
        diff,
        standards=standards,
        budget_tokens=policy.model.budget_tokens,
        fence=Fence.new(),
        title=title,
        body=body,
    )
    offered: dict[ToolName, Sequence[Severity]] = {ADVISORY: DIFF_SEVERITIES}
    asked = ask_for_review(
        port,
        model=policy.model.diff,
        system=built.system,
        prompt=built.prompt,
        offered=offered,
        descriptions={ADVISORY: DIFF_TOOL_DESCRIPTION},
        known=built.compressed.shown,
        asks=asks,
        deadline=port.deadline(),
    )
    c = built.compressed
    account = (
        f"{len(c.shown)} hunk(s) of {c.files} file(s) read"
        + (f", {len(c.named)} file(s) reduced to names" if c.named else "")
        + (f", {len(c.left_out)} file(s) with hunks left out to fit" if c.left_out else "")
    )
    if asked.accepted is None:
        use = asked.use or ModelUse(model=policy.model.diff, outcome="error", detail=asked.why_not)
        why = asked.why_not.strip().rstrip(".") or "no reason was given"
        verdict = Verdict(
            state="error",
            summary=(
                f"Cujo could not finish this diff review: the model gave no usable answer "
                f"({why}). This says nothing about the pull request itself."
            ),
            judge="model",
            model_use=use,
        )
        return DiffReview(verdict, built)
    assert asked.use is not None
    findings = [
        Finding(
            id=f"F{n}",
            rule=DIFF_RULE,
            # The tool offers info and warn; ``read_reply`` lowered anything higher.
            severity="warn" if p.severity != "info" else "info",
            check="diff",
            title=p.title,
            evidence=list(dict.fromkeys(p.evidence)),
        )
        for n, p in enumerate(asked.accepted.call.findings, start=1)
    ]
    warn = sum(1 for f in findings if f.severity == "warn")
    lead = (
        f"Diff review by {asked.use.model} (advisory; a diff review never blocks): "
        f"{warn} warning(s), {len(findings) - warn} note(s); {account}."
    )
    verdict = Verdict(
        state="clean",
        summary=with_model_words(lead, "The model said:", asked.accepted.call.summary),
        findings=findings,
        judge="model",
        model_use=asked.use,
    )
    return DiffReview(verdict, built)

"""Build the diff review's prompt within its token budget: standards, words, the diff.

docs/design.md section 5. Pure. The pull request's title, body and diff are fenced as data; the
standards files, read at base, are the project's own words, each with its cap stated.
The one tool offered is ``post_advisory_review``, whose severity is ``info | warn``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from app_relay.model.diffcompress import CompressedDiff, compress_diff
from app_relay.model.diffparse import FileDiff
from app_relay.model.standards import STANDARDS_CAP, STANDARDS_FILES, StandardsFile
from app_relay.model.tools import ADVISORY, review_tool
from app_relay.verdict import Severity
from app_relay.words.untrusted import ASCII_CHARS_PER_TOKEN, Fence, estimate_tokens, sanitise

DIFF_SEVERITIES: Final[tuple[Severity, ...]] = ("info", "warn")
DIFF_SYSTEM: Final = """You review a pull request's diff for Cujo before it is merged.
Say what a maintainer should know: risky or surprising changes (new dependencies,
install or build scripts, CI changes, network calls, credential handling, obfuscated or
encoded code, code that runs at import or install time, code that compares the current
date or time with a fixed date and so may act only after the review), bugs, and
departures from the project's standards. You cannot block: call post_advisory_review
once, with findings of severity warn (look at this before merging) or info (worth
knowing). Each finding cites the ids of the hunks that show it, exactly as given
([diff:hunk:N]); never cite a hunk that is not shown. The summary is two or three
plain sentences. Parts of the diff may be left out to fit; the prompt lists them, and
you must not guess what they hold."""
DIFF_TOOL_DESCRIPTION: Final = (
    "Post the diff review as an advisory comment (it never holds the merge). Findings are "
    "info or warn and cite the hunk ids that show them."
)
MAX_TITLE_CHARS: Final = 300
MAX_BODY_CHARS: Final = 3_000
# The API's own system prompt for tool use with tool_choice `any` (313 tokens for Claude 4
# models, https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/overview#pricing),
# rounded up: it is billed as input, so it counts against the budget.
TOOL_USE_OVERHEAD: Final = 350
# The diff's headings and fence markers, and the line that says what was shown.
_FRAMING: Final = 200


@dataclass(frozen=True)
class DiffPrompt:
    """The system text and prompt of a diff review, and what they hold."""

    system: str
    prompt: str
    tools: tuple[dict[str, object], ...]
    compressed: CompressedDiff
    tokens: int  # estimate of system, prompt and tools together


def diff_tool() -> dict[str, object]:
    """Return the diff review's one tool: ``post_advisory_review``, severity info | warn."""
    return dict(review_tool(ADVISORY, DIFF_SEVERITIES, DIFF_TOOL_DESCRIPTION))


def diff_prompt(
    diff: str | Sequence[FileDiff],
    *,
    standards: Sequence[StandardsFile],
    budget_tokens: int,
    fence: Fence,
    title: str = "",
    body: str = "",
) -> DiffPrompt:
    """Return the prompt of a diff review, within ``budget_tokens`` all told.

    The pull request's title and body and the diff are fenced as data; the standards
    files, read at base, are the project's own words, each with its cap stated.
    """
    tools = (diff_tool(),)
    system = f"{DIFF_SYSTEM}\n\n{fence.rule()}"
    fixed = estimate_tokens(system) + estimate_tokens(json.dumps(tools)) + TOOL_USE_OVERHEAD
    # What is left after the fixed parts and the headings: a tenth at most for the pull
    # request's own words, a third at most for the standards, the rest for the diff.
    avail = max(budget_tokens - fixed - _FRAMING, 0)
    words = f"{sanitise(title)[:MAX_TITLE_CHARS]}\n\n{sanitise(body)[:MAX_BODY_CHARS]}".strip()
    said = [
        "Pull request title and description:",
        fence.wrap("pull request", head_within(words, avail // 10) or "(empty)"),
    ]
    share = avail // 3 // max(len(standards), 1)
    for std in standards:
        shown = head_within(sanitise(std.text, show_invisible=True), share)
        cap = f"capped at {STANDARDS_CAP:,} characters" + (
            f", cut to {len(shown):,} to fit the budget" if len(shown) < len(std.text) else ""
        )
        said += [
            "",
            f"=== {std.path}, read at base {std.sha[:12]} ({std.chars:,} characters; {cap}) ===",
            shown,
            f"=== end of {std.path} ===",
        ]
    if not standards:
        said += ["", f"No standards file ({', '.join(STANDARDS_FILES)}) exists at base."]
    head = "\n".join(said)
    room = budget_tokens - fixed - estimate_tokens(head) - _FRAMING
    compressed = compress_diff(diff, max(room, 0))
    parts = [
        head,
        "",
        f"The diff ({compressed.files} files, {compressed.changed_lines:,} changed lines), "
        f"compressed to fit {budget_tokens:,} tokens: {len(compressed.shown)} hunk(s) shown.",
        fence.wrap("diff", compressed.text or "(no hunk could be shown)"),
    ]
    if compressed.listing:
        parts += [
            "Not shown in full (reduced to names, deletion-only, or left out to fit):",
            fence.wrap("not shown", compressed.listing),
        ]
    prompt = "\n".join(parts)
    tokens = fixed + estimate_tokens(prompt)
    return DiffPrompt(system, prompt, tools, compressed, tokens)


def head_within(text: str, tokens: int) -> str:
    """Return the longest start of ``text`` that ``estimate_tokens`` puts within ``tokens``."""
    if estimate_tokens(text) <= tokens:
        return text
    if text.isascii():
        return text[: max(tokens, 0) * ASCII_CHARS_PER_TOKEN]
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]

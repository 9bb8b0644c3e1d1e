"""Say whether a block holds the merge: the one wording of "holds / does not hold / unknown".

Every sentence saying whether ``cujo/guard`` holds a merge is made here: the check
summary (Markdown), the board (plain text), ``cujo doctor`` and ``github.protection``'s
``Hold.line``. ``holds`` is what the run records (``github.protection.Hold.answer``):
``holds``, ``does-not-hold`` or ``unknown``; anything else, or nothing, is unknown.
"""

from __future__ import annotations

_HEADS = {
    "holds": "This block holds the merge",
    "does-not-hold": "This block does NOT hold the merge",
}
_UNKNOWN_HEAD = "Whether this block holds the merge is unknown"
# What is said when only the answer is known (the run's record, not the read's reasons).
_REASONS = {
    "holds": "{guard} is a required check.",
    "does-not-hold": "{guard} is not required on this branch "
    "(add it to a ruleset or branch protection).",
}
_UNKNOWN_REASON = "the protection could not be read."
# The check's name (``github.vocab.GUARD``; the state machine words its faces with this module).
_GUARD = "cujo/guard"


def hold_sentence(holds: str | None, reason: str, fix: str = "") -> str:
    """Say whether the block holds the merge, why, and (if it does not) what to change."""
    reason = reason.strip()
    if holds == "holds":
        return f"{_HEADS['holds']}: {reason}"
    if holds == "does-not-hold":
        to_fix = f" To fix: {fix.strip()}" if fix.strip() else ""
        return f"{_HEADS['does-not-hold']}: {reason}{to_fix}"
    return f"{_UNKNOWN_HEAD}: {reason} {fix.strip()}".strip()


def holds_line(holds: str | None) -> str:
    """Say in Markdown (a check summary) whether the block holds the merge."""
    reason = _REASONS.get(holds or "", _UNKNOWN_REASON).format(guard=f"`{_GUARD}`")
    return hold_sentence(holds if holds in _REASONS else None, reason)


def holds_words(holds: str | None) -> str:
    """Say in plain text (the board) whether the block holds the merge."""
    reason = _REASONS.get(holds or "", _UNKNOWN_REASON).format(guard=_GUARD)
    return hold_sentence(holds if holds in _REASONS else None, reason)

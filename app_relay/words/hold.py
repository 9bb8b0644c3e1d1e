"""Say whether a block holds the merge: one wording for the check summary and the board.

``holds`` is what the run records (``github.protection.Hold.answer``): ``holds``,
``does-not-hold`` or ``unknown``; anything else, or nothing, is unknown. The check
summary is Markdown and names the check as code; the board writes plain text.
"""

from __future__ import annotations

_SAID = {
    "holds": "The block holds the merge: {guard} is a required check.",
    "does-not-hold": "The block does NOT hold the merge: {guard} is not required on this "
    "branch (add it to a ruleset or branch protection).",
}
_UNKNOWN = "Whether the block holds the merge is unknown (protection unreadable)."
# The check's name (``runs.state.GUARD``; the state machine words its faces with this module).
_GUARD = "cujo/guard"


def holds_line(holds: str | None) -> str:
    """Say in Markdown (a check summary) whether the block holds the merge."""
    return _SAID.get(holds or "", _UNKNOWN).format(guard=f"`{_GUARD}`")


def holds_words(holds: str | None) -> str:
    """Say in plain text (the board) whether the block holds the merge."""
    return _SAID.get(holds or "", _UNKNOWN).format(guard=_GUARD)

"""Whether the block holds the merge: one wording, on the check (Markdown) and the board."""

from __future__ import annotations

import pytest

from app_relay.runs.state import guard_for
from app_relay.words.hold import holds_line, holds_words


def test_the_check_and_the_board_say_the_same_sentence() -> None:
    for holds in ("holds", "does-not-hold", "unknown", None, "something else"):
        assert holds_line(holds).replace("`", "") == holds_words(holds)


@pytest.mark.parametrize(
    ("holds", "said"),
    [
        ("holds", "The block holds the merge: cujo/guard is a required check."),
        (
            "does-not-hold",
            "The block does NOT hold the merge: cujo/guard is not required on this branch "
            "(add it to a ruleset or branch protection).",
        ),
        ("unknown", "Whether the block holds the merge is unknown (protection unreadable)."),
        (None, "Whether the block holds the merge is unknown (protection unreadable)."),
        ("garbled", "Whether the block holds the merge is unknown (protection unreadable)."),
    ],
)
def test_the_board_words(holds: str | None, said: str) -> None:
    assert holds_words(holds) == said


def test_the_check_names_the_guard_as_code_and_uses_this_wording() -> None:
    assert holds_line("holds") == "The block holds the merge: `cujo/guard` is a required check."
    for holds in ("holds", "does-not-hold", "unknown"):
        assert holds_line(holds) in guard_for("blocked", holds=holds).summary

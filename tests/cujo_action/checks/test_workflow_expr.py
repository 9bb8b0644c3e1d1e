"""The expression subset, against the examples in GitHub's expressions reference.

https://docs.github.com/en/actions/reference/workflows-and-actions/expressions
"""

from __future__ import annotations

from typing import Any

import pytest

from cujo_action.checks.workflow_expr import (
    ExprError,
    Scope,
    Status,
    condition,
    evaluate,
    interpolate,
)

EVENT = {"issue": {"labels": [{"name": "bug"}, {"name": "help wanted"}]}}


def scope(**contexts: Any) -> Scope:
    base: dict[str, Any] = {"github": {"event_name": "push", "ref": "refs/heads/main",
                                       "event": EVENT}, "env": {"STAGE": "prod"}}  # fmt: skip
    base.update(contexts)
    return Scope(base, secret=lambda name: f"decoy-for-{name}")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # The reference's own examples (Functions, Operators, Literals).
        ("contains('Hello world', 'llo')", True),
        ("contains(github.event.issue.labels.*.name, 'bug')", True),
        ("startsWith('Hello world', 'He')", True),
        ("endsWith('Hello world', 'ld')", True),
        ("format('Hello {0} {1} {2}', 'Mona', 'the', 'Octocat')", "Hello Mona the Octocat"),
        ("format('{{Hello {0} {1} {2}!}}', 'Mona', 'the', 'Octocat')", "{Hello Mona the Octocat!}"),
        ("join(github.event.issue.labels.*.name, ', ')", "bug, help wanted"),
        ("fromJSON('{\"a\": [1, 2]}').a[1]", 2),
        ("'It''s open source!'", "It's open source!"),
        ("0xff", 255),
        ("-9.2", -9.2),
        ("null", None),
        # "GitHub ignores case when comparing strings"; loose equality coerces to numbers.
        ("'ABC' == 'abc'", True),
        ("1 == '1'", True),
        ("'' == 0", True),
        ("null == 0", True),
        ("true == 1", True),
        ("'a' != 'b'", True),
        # && and || return an operand, not a boolean.
        ("github.event_name == 'push' && 'deploy' || 'skip'", "deploy"),
        ("github.event_name == 'pull_request' && 'deploy' || 'skip'", "skip"),
        ("!startsWith(github.ref, 'refs/tags/')", True),
        ("github['ref']", "refs/heads/main"),
        ("github.nothing.here", None),
        ("env.STAGE", "prod"),
        ("2 < 10", True),
        ("'b' > 'A'", True),
    ],
)
def test_evaluates_the_documented_subset(expression: str, expected: Any) -> None:
    assert evaluate(expression, scope()) == expected


def test_secrets_are_the_decoys_and_are_recorded() -> None:
    s = scope()
    assert interpolate("key=${{ secrets.deploy_key }}", s) == "key=decoy-for-DEPLOY_KEY"
    assert s.secrets_read == ["DEPLOY_KEY"]


def test_to_json_and_interpolated_types() -> None:
    s = scope(matrix={"python": "3.12"})
    assert (
        interpolate("${{ matrix.python }} ${{ true }} ${{ 3 }} ${{ null }}!", s) == "3.12 true 3 !"
    )
    assert evaluate("toJSON(matrix)", s) == '{\n  "python": "3.12"\n}'


@pytest.mark.parametrize(
    "expression",
    [
        "hashFiles('**/x.lock')",
        "github.ref =~ 'x'",
        "vars_x.y",
        "contains('a')",
        "format('{1}', 'a')",
    ],
)
def test_what_it_does_not_evaluate_is_an_error_never_empty(expression: str) -> None:
    with pytest.raises(ExprError):
        evaluate(expression, scope())


def test_contexts_it_does_not_follow_are_null_and_named() -> None:
    s = scope()
    assert evaluate("steps.build.outputs.version", s) is None
    assert evaluate("needs.a.result", s) is None
    assert s.notes == ["steps", "needs"]


@pytest.mark.parametrize(
    ("text", "failed", "expected"),
    [
        ("", False, True),
        ("", True, False),
        ("github.event_name == 'push'", False, True),
        ("${{ github.event_name == 'push' }}", True, False),  # success() && … after a failure
        ("always()", True, True),
        ("failure()", True, True),
        ("failure()", False, False),
        ("${{ github.ref == 'refs/heads/main' }}", False, True),
        ("github.ref == 'refs/heads/dev'", False, False),
    ],
)
def test_if_conditions_read_as_github_reads_them(text: str, failed: bool, expected: bool) -> None:
    s = scope()
    s.status = Status(failed=failed)
    assert condition(text, s) is expected

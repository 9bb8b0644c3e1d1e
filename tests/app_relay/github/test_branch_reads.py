"""Reading a branch's rules and classic protection, fail-closed.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import pytest
from githubworld import REPO, World

from app_relay.github.answers import GitHubError
from app_relay.github.protection import RequiredCheck

# ---- branch rules and protection -----------------------------------------------------


def test_branch_rules_give_the_required_checks_and_their_apps(world: World) -> None:
    world.fake.state.set_rules(
        REPO,
        "main",
        [
            {"type": "deletion", "ruleset_source_type": "Repository", "ruleset_source": REPO,
             "ruleset_id": 11},
            {"type": "required_status_checks", "ruleset_source_type": "Repository",
             "ruleset_source": REPO, "ruleset_id": 12,
             "parameters": {"strict_required_status_checks_policy": False,
                            "required_status_checks": [
                                {"context": "cujo/guard", "integration_id": 4242},
                                {"context": "ci"}]}},
        ],
    )  # fmt: skip
    rules = world.gw.branch_rules(REPO, "main")
    assert [r.type for r in rules.rules] == ["deletion", "required_status_checks"]
    assert [(c.context, c.app_id) for c in rules.required_checks] == [
        ("cujo/guard", 4242),
        ("ci", None),
    ]
    assert rules.rules[1].strict is False


def test_malformed_branch_rules_fail_closed(world: World) -> None:
    world.fake.state.set_rules(REPO, "main", [{"type": "required_status_checks"}])
    with pytest.raises(GitHubError, match=r"'\[0\].parameters' is missing"):
        world.gw.branch_rules(REPO, "main")


def test_branch_protection_gives_checks_or_none_when_unprotected(world: World) -> None:
    assert world.gw.branch_protection(REPO, "main") is None
    world.fake.state.set_protection(
        REPO,
        "main",
        {
            "required_status_checks": {
                "strict": True,
                "contexts": ["cujo/guard"],
                "checks": [{"context": "cujo/guard", "app_id": 4242}],
            },
            "enforce_admins": {"enabled": True},
        },
    )
    protection = world.gw.branch_protection(REPO, "main")
    assert protection is not None
    assert protection.required_checks == (RequiredCheck("cujo/guard", 4242),)
    assert (protection.strict, protection.enforce_admins) == (True, True)


def test_branch_protection_that_contradicts_itself_fails_closed(world: World) -> None:
    world.fake.state.set_protection(
        REPO,
        "main",
        {"required_status_checks": {"strict": True, "contexts": ["ci"], "checks": []}},
    )
    with pytest.raises(GitHubError, match="disagree"):
        world.gw.branch_protection(REPO, "main")


def test_a_protection_404_other_than_unprotected_stays_an_error(world: World) -> None:
    world.fake.state.answer_next("GET", "/protection$", '{"message": "Not Found"}', status=404)
    with pytest.raises(GitHubError, match="HTTP 404"):
        world.gw.branch_protection(REPO, "main")


def test_a_merge_queue_rule_is_read_and_a_malformed_one_kept_as_why(world: World) -> None:
    """A queue's method is read; parameters that cannot be read say why, not fail the read."""
    source = {"ruleset_source_type": "Repository", "ruleset_source": REPO, "ruleset_id": 13}
    world.fake.state.set_rules(
        REPO,
        "main",
        [
            {"type": "merge_queue", **source, "parameters": {"merge_method": "SQUASH"}},
            {"type": "merge_queue", **source, "parameters": None},
            {"type": "merge_queue", **source, "parameters": {"merge_method": "OCTOPUS"}},
        ],
    )
    queues = [r.queue for r in world.gw.branch_rules(REPO, "main").rules]
    assert [(q.merge_method, bool(q.unread)) for q in queues if q is not None] == [
        ("squash", False),
        (None, True),
        (None, True),
    ]
    assert "OCTOPUS" in (queues[2].unread if queues[2] is not None else "")

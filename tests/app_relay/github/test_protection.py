"""Does `cujo/guard` hold the merge? Through the gateway against the fake GitHub on loopback.

The answers the fake serves follow GitHub's REST documentation and docs/design.md section 8.3's
reading rules (written from recorded answers of real repositories); the malformed ones
are served byte for byte. `tests/cassettes/guard/` replays a few of the same reads
against api.github.com's URLs (written from the documentation, not recorded).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fakegithub import FakeGitHub, classic_protection, required_checks_rules
from fakegithub.fixture import fake_github, fake_github_key  # noqa: F401  (fixtures)
from test_github_cassettes import REPO as CASSETTE_REPO
from test_github_cassettes import gateway, replay  # noqa: F401  (gateway: a fixture)

from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.github.protection import (
    Branch,
    BranchProtection,
    BranchRule,
    BranchRules,
    Hold,
    HoldCache,
    RequiredCheck,
    Unreadable,
    judge_hold,
    read_hold,
)

REPO = "octo/widgets"
GUARD = "cujo/guard"
OTHER_APP = 15368  # GitHub Actions' app id


@dataclass
class World:
    """A fake GitHub with one repository and a gateway onto it."""

    fake: FakeGitHub
    gw: GitHubGateway
    app_id: int

    def hold(self, branch: str = "main") -> Hold:
        return read_hold(self.gw, REPO, branch, self.app_id)

    def rules(self, *checks: dict[str, Any], branch: str = "main") -> None:
        self.fake.state.set_rules(REPO, branch, required_checks_rules(REPO, *checks))

    def classic(self, *checks: dict[str, Any], admins: bool = False) -> None:
        protection = classic_protection(REPO, "main", *checks, admins=admins)
        self.fake.state.set_protection(REPO, "main", protection)

    def branch_answer(self, protection: object) -> None:
        """Serve this `protection` in the next branch read, the rest as GitHub does."""
        body = {
            "name": "main",
            "commit": {"sha": self.fake.state.repos[REPO].branches["main"]},
            "protected": True,
            "protection": protection,
        }
        self.fake.state.answer_next("GET", rf"^/repos/{REPO}/branches/main$", json.dumps(body))


@pytest.fixture
def world(fake_github: FakeGitHub) -> Iterator[World]:  # noqa: F811
    fake_github.add_repo(REPO)
    app = GitHubApp(
        app_id=fake_github.app_id,
        private_key=fake_github.private_key_pem,
        base_url=fake_github.url,
        attempts=1,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )
    gw = app.gateway(fake_github.installation_id)
    yield World(fake_github, gw, fake_github.app_id)
    gw.close()
    app.close()


def reads(world: World) -> list[str]:
    """Return the paths the reads asked, in order, without the token purchase."""
    return [c.path for c in world.fake.state.calls("GET")]


# ---- holds ---------------------------------------------------------------------------


def test_a_ruleset_pinned_to_this_app_holds(world: World) -> None:
    world.rules({"context": "ci"}, {"context": GUARD, "integration_id": world.app_id})
    hold = world.hold()
    assert hold.answer == "holds"
    assert "pinned to the Cujo app" in hold.reason
    assert hold.line().startswith("This block holds the merge")


def test_classic_protection_pinned_to_this_app_holds(world: World) -> None:
    world.classic({"context": GUARD, "app_id": world.app_id})
    assert world.hold().answer == "holds"
    assert f"/repos/{REPO}/branches/main" not in reads(world)


def test_both_pinned_holds(world: World) -> None:
    world.rules({"context": GUARD, "integration_id": world.app_id})
    world.classic({"context": GUARD, "app_id": world.app_id})
    assert world.hold().answer == "holds"


def test_pinned_in_one_and_unpinned_in_the_other_holds(world: World) -> None:
    # Every rule must pass: the pinned one is met only by this App's check run.
    world.rules({"context": GUARD})
    world.classic({"context": GUARD, "app_id": world.app_id})
    assert world.hold().answer == "holds"


def test_a_token_without_admin_rights_reads_the_branch_and_holds(world: World) -> None:
    world.classic({"context": GUARD, "app_id": world.app_id}, admins=True)
    world.fake.state.refuse_protection(REPO, 404, "Not Found")
    assert world.hold().answer == "holds"
    assert reads(world) == [
        f"/repos/{REPO}/rules/branches/main",
        f"/repos/{REPO}/branches/main/protection",
        f"/repos/{REPO}/branches/main",
    ]


def test_an_app_without_the_administration_permission_reads_the_branch(world: World) -> None:
    world.classic({"context": GUARD, "app_id": world.app_id})
    world.fake.state.refuse_protection(REPO, 403, "Resource not accessible by integration")
    assert world.hold().answer == "holds"
    assert reads(world)[-1] == f"/repos/{REPO}/branches/main"


# ---- does not hold -------------------------------------------------------------------


def test_neither_rulesets_nor_protection_does_not_hold(world: World) -> None:
    hold = world.hold()
    assert hold.answer == "does-not-hold"
    assert hold.reason == "`cujo/guard` is not a required check on `main`."
    assert hold.fix == "require `cujo/guard` from the Cujo app in a ruleset on `main`."
    assert "To fix: require `cujo/guard`" in hold.line()


def test_other_checks_required_but_not_the_guard_does_not_hold(world: World) -> None:
    world.rules({"context": "ci"}, {"context": "cujo/guard2", "integration_id": world.app_id})
    world.classic({"context": "Cujo/Guard", "app_id": world.app_id})
    assert world.hold().answer == "does-not-hold"


def test_an_unpinned_ruleset_check_does_not_hold(world: World) -> None:
    world.rules({"context": GUARD})
    hold = world.hold()
    assert hold.answer == "does-not-hold"
    assert "any workflow job named `cujo/guard`" in hold.reason
    assert "expected source" in hold.fix


def test_an_unpinned_classic_check_does_not_hold(world: World) -> None:
    world.classic({"context": GUARD, "app_id": None})
    assert world.hold().answer == "does-not-hold"


def test_unpinned_through_the_branch_read_does_not_hold(world: World) -> None:
    world.classic({"context": GUARD, "app_id": None})
    world.fake.state.refuse_protection(REPO, 404, "Not Found")
    hold = world.hold()
    assert hold.answer == "does-not-hold"
    assert "not pinned" in hold.reason


def test_pinned_to_another_app_does_not_hold(world: World) -> None:
    world.rules({"context": GUARD, "integration_id": OTHER_APP})
    hold = world.hold()
    assert hold.answer == "does-not-hold"
    assert f"another app (id {OTHER_APP})" in hold.reason
    assert f"this Cujo app (id {world.app_id})" in hold.reason


def test_classic_pinned_to_another_app_through_the_branch_read(world: World) -> None:
    world.classic({"context": GUARD, "app_id": OTHER_APP})
    world.fake.state.refuse_protection(REPO, 403, "Resource not accessible by integration")
    assert world.hold().answer == "does-not-hold"


def test_a_ruleset_only_branch_read_confirms_no_classic_checks(world: World) -> None:
    # GitHub says "protected" when only a ruleset applies; the classic lists are empty.
    world.rules({"context": GUARD, "integration_id": world.app_id})
    world.fake.state.refuse_protection(REPO, 404, "Not Found")
    assert world.hold().answer == "holds"
    world.fake.state.set_rules(REPO, "main", [])
    assert world.hold().answer == "does-not-hold"


# ---- unknown -------------------------------------------------------------------------


def test_a_rule_without_a_type_is_unknown(world: World) -> None:
    world.fake.state.set_rules(REPO, "main", [
        {"ruleset_id": 12, "parameters": {"required_status_checks": [
            {"context": GUARD, "integration_id": world.app_id}]}},
    ])  # fmt: skip
    world.classic({"context": GUARD, "app_id": world.app_id})
    hold = world.hold()
    assert hold.answer == "unknown"
    assert "rulesets of `main` could not be read" in hold.reason
    assert "'[0].type' is missing" in hold.reason


@pytest.mark.parametrize(
    "body",
    [
        '{"rules": []}',  # an object where GitHub sends a list
        "[1, 2]",  # items that are not objects
        "not json",
    ],
)
def test_malformed_rules_are_unknown(world: World, body: str) -> None:
    world.fake.state.answer_next("GET", "/rules/branches/main$", body)
    assert world.hold().answer == "unknown"


def test_a_page_over_its_size_is_unknown(world: World) -> None:
    check = {"context": GUARD, "integration_id": world.app_id}
    parameters = {"strict_required_status_checks_policy": False, "required_status_checks": [check]}
    rule = {"type": "required_status_checks", "parameters": parameters}
    world.fake.state.answer_next("GET", "/rules/branches/main$", json.dumps([rule] * 101))
    hold = world.hold()
    assert hold.answer == "unknown"
    assert "over 100" in hold.reason


def test_pages_without_end_are_unknown(world: World) -> None:
    rule = {"type": "deletion"}
    world.fake.state.answer_next("GET", "/rules/branches/main$", json.dumps([rule] * 100), times=10)
    hold = world.hold()
    assert hold.answer == "unknown"
    assert "refusing to guess" in hold.reason


def test_a_ruleset_check_without_a_context_is_unknown(world: World) -> None:
    world.rules({"integration_id": world.app_id})
    assert world.hold().answer == "unknown"


def test_classic_lists_that_disagree_are_unknown(world: World) -> None:
    world.fake.state.set_protection(REPO, "main", {"required_status_checks": {
        "strict": True, "contexts": [GUARD], "checks": []}})  # fmt: skip
    hold = world.hold()
    assert hold.answer == "unknown"
    assert "classic protection of `main` could not be read" in hold.reason


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (404, "Branch not found"),
        (403, "Must have admin rights to Repository."),
        # A rate-limited read is waited out within the call (github/test_ratelimit.py).
        (500, "Server Error"),
    ],
)
def test_another_refusal_of_the_protection_read_is_unknown(
    world: World, status: int, message: str
) -> None:
    world.rules({"context": GUARD, "integration_id": world.app_id})
    world.fake.state.refuse_protection(REPO, status, message)
    hold = world.hold()
    assert hold.answer == "unknown"
    assert f"HTTP {status}" in hold.reason
    assert f"/repos/{REPO}/branches/main" not in reads(world)


def test_a_branch_read_that_fails_is_unknown(world: World) -> None:
    world.fake.state.refuse_protection(REPO, 404, "Not Found")
    hold = read_hold(world.gw, REPO, "gone", world.app_id)
    assert hold.answer == "unknown"
    assert "branch read failed" in hold.reason
    assert "Branch not found" in hold.reason


NO_CHECKS = {"enforcement_level": "off", "contexts": [], "checks": []}
PINNED = {"context": GUARD, "app_id": 4242}


@pytest.mark.parametrize(
    ("protection", "answer"),
    [
        # the two confirmed "no classic checks" shapes
        ({"enabled": False, "required_status_checks": NO_CHECKS}, "does-not-hold"),
        ({"enabled": True, "required_status_checks": NO_CHECKS}, "does-not-hold"),
        # listed checks are required under either enforcement
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "non_admins", "contexts": [GUARD], "checks": [PINNED]}}, "holds"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD], "checks": [PINNED]}}, "holds"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD],
            "checks": [{"context": GUARD, "app_id": None}]}}, "does-not-hold"),
        # malformed
        ({"enabled": "true", "required_status_checks": NO_CHECKS}, "unknown"),
        ({"enabled": None, "required_status_checks": NO_CHECKS}, "unknown"),
        ({"required_status_checks": NO_CHECKS}, "unknown"),
        ({"enabled": False}, "unknown"),
        (None, "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "admins_only", "contexts": [GUARD], "checks": [PINNED]}},
         "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "off", "contexts": [GUARD], "checks": [PINNED]}}, "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD], "checks": []}}, "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": ["ci"], "checks": [PINNED]}}, "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD],
            "checks": [{"context": GUARD}]}}, "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD, 7], "checks": [PINNED]}},
         "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD],
            "checks": [{"context": GUARD, "app_id": "4242"}]}}, "unknown"),
        ({"enabled": False, "required_status_checks": {
            "enforcement_level": "everyone", "contexts": [GUARD], "checks": [PINNED]}},
         "unknown"),
        ({"enabled": True, "required_status_checks": {
            "enforcement_level": None, "contexts": [], "checks": []}}, "unknown"),
    ],
)  # fmt: skip
def test_the_branch_read_by_the_reading_rules(
    world: World, protection: object, answer: str
) -> None:
    world.fake.state.refuse_protection(REPO, 404, "Not Found")
    world.branch_answer(protection)
    hold = world.hold()
    assert hold.answer == answer, hold
    assert reads(world)[-1] == f"/repos/{REPO}/branches/main"


def test_a_branch_read_for_another_branch_is_unknown(world: World) -> None:
    world.fake.state.refuse_protection(REPO, 404, "Not Found")
    world.fake.state.answer_next("GET", rf"^/repos/{REPO}/branches/main$", json.dumps({
        "name": "release", "commit": {"sha": "a" * 40}, "protected": False,
        "protection": {"enabled": False, "required_status_checks": NO_CHECKS}}))  # fmt: skip
    assert world.hold().answer == "unknown"


def test_a_branch_name_in_the_answer_is_inert(world: World) -> None:
    name = "x`y[z](https://evil.example)"
    world.fake.state.repos[REPO].branches[name] = "c" * 40
    hold = read_hold(world.gw, REPO, name, world.app_id)
    assert hold.answer == "does-not-hold"
    assert "``x`y[z](https://evil.example)``" in hold.reason


# ---- cassettes (tests/cassettes/github/guard_*.yaml) -------------------------------

CASSETTE_APP = 1_234_567  # the App id the cassettes' gateway acts as


@pytest.mark.parametrize(
    ("cassette", "answer", "says"),
    [
        ("guard_rulesets_only", "holds", "pinned to the Cujo app"),
        ("guard_classic_only", "holds", "pinned to the Cujo app"),
        ("guard_neither", "does-not-hold", "not a required check"),
        ("guard_no_admin_rights", "holds", "pinned to the Cujo app"),
        ("guard_integration_403_unpinned", "does-not-hold", "any workflow job named"),
        ("guard_pinned_to_another_app", "does-not-hold", "another app (id 15368)"),
        ("guard_rule_without_type", "unknown", "'[1].type' is missing"),
    ],
)
def test_guard_cassettes(
    gateway: Callable[[], GitHubGateway],  # noqa: F811
    cassette: str,
    answer: str,
    says: str,
) -> None:
    hold = replay(
        cassette, lambda gw: read_hold(gw, CASSETTE_REPO, "main", CASSETTE_APP), gateway()
    )
    assert isinstance(hold, Hold)
    assert hold.answer == answer
    assert says in hold.reason


# ---- the pure judge ------------------------------------------------------------------


def rules_of(*checks: RequiredCheck) -> BranchRules:
    return BranchRules((BranchRule("required_status_checks", 1, None, checks, False),))


def test_any_unreadable_source_is_unknown_even_when_another_pins_the_guard() -> None:
    pinned = rules_of(RequiredCheck(GUARD, 9))
    cases = [
        judge_hold(pinned, Unreadable("HTTP 502"), None, 9, branch="main"),
        judge_hold(Unreadable("HTTP 502"), None, None, 9, branch="main"),
        judge_hold(pinned, Unreadable("HTTP 404", no_admin=True), None, 9, branch="main"),
        judge_hold(
            pinned, Unreadable("HTTP 404", no_admin=True), Unreadable("HTTP 500"), 9, branch="main"
        ),
    ]
    assert [c.answer for c in cases] == ["unknown"] * 4


def test_classic_protection_requiring_no_checks_adds_none() -> None:
    protection = BranchProtection(required_checks=None, strict=None, enforce_admins=True)
    assert judge_hold(rules_of(), protection, None, 9, branch="main").answer == "does-not-hold"
    pinned = rules_of(RequiredCheck(GUARD, 9))
    assert judge_hold(pinned, protection, None, 9, branch="main").answer == "holds"


def test_the_branch_read_is_used_only_when_the_protection_read_was_refused() -> None:
    branch = Branch("main", "a" * 40, True, True, "everyone", (GUARD,), (RequiredCheck(GUARD, 9),))
    assert judge_hold(rules_of(), None, branch, 9, branch="main").answer == "does-not-hold"
    refused = Unreadable("HTTP 404", no_admin=True)
    assert judge_hold(rules_of(), refused, branch, 9, branch="main").answer == "holds"


# ---- the cache -----------------------------------------------------------------------


class CountingReader:
    """A reader that answers "not protected" and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def branch_rules(self, repo: str, branch: str) -> BranchRules:
        self.asked.append((repo, branch))
        return BranchRules(())

    def branch_protection(self, repo: str, branch: str) -> BranchProtection | None:
        return None

    def branch(self, repo: str, branch: str) -> Branch:
        raise AssertionError("the branch read is not needed")


def test_the_cache_keeps_an_answer_under_fifteen_seconds_per_branch() -> None:
    now = [1000.0]
    cache = HoldCache(clock=lambda: now[0])
    reader = CountingReader()
    first = cache.hold(reader, REPO, "main", 9)
    now[0] += 14.9
    assert cache.hold(reader, REPO, "main", 9) is first
    assert reader.asked == [(REPO, "main")]
    cache.hold(reader, REPO, "release", 9)
    cache.hold(reader, "octo/other", "main", 9)
    assert len(reader.asked) == 3
    now[0] += 0.1
    cache.hold(reader, REPO, "main", 9)
    assert reader.asked[-1] == (REPO, "main")
    assert len(reader.asked) == 4


def test_the_cache_rereads_after_forget_or_when_the_clock_goes_back() -> None:
    now = [1000.0]
    cache = HoldCache(clock=lambda: now[0])
    reader = CountingReader()
    cache.hold(reader, REPO, "main", 9)
    cache.forget(REPO)
    cache.hold(reader, REPO, "main", 9)
    now[0] -= 5
    cache.hold(reader, REPO, "main", 9)
    assert len(reader.asked) == 3
    # Another repository's answer is kept; None (an organization's ruleset) drops all.
    cache.hold(reader, "octo/other", "main", 9)
    cache.forget(REPO)
    cache.hold(reader, "octo/other", "main", 9)
    assert len(reader.asked) == 4
    cache.forget(None)
    cache.hold(reader, "octo/other", "main", 9)
    assert len(reader.asked) == 5


def test_the_cache_never_keeps_longer_than_fifteen_seconds() -> None:
    with pytest.raises(ValueError, match="0 to 15 seconds"):
        HoldCache(ttl_s=16)
    reader = CountingReader()
    uncached = HoldCache(ttl_s=0, clock=lambda: 5.0)
    uncached.hold(reader, REPO, "main", 9)
    uncached.hold(reader, REPO, "main", 9)
    assert len(reader.asked) == 2

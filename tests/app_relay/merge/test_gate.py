"""The merge gate, pure: one case per blocker code, and the reading that is ready.

Each case starts from answers that are ready and changes the one thing the blocker is
about, so a case fails if its check is missing (and passes only on its own code).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app_relay.github.branch_rules import (
    Branch,
    BranchProtection,
    BranchRule,
    BranchRules,
    MergeQueue,
    RequiredCheck,
    Unreadable,
)
from app_relay.merge.gate import (
    BASE_GUARD_WORDS,
    BLOCKER_CODES,
    CheckRunSeen,
    GateAnswers,
    GateReading,
    Person,
    PullFacts,
    RunFacts,
    StatusSeen,
    judge_gate,
)

APP = 4242
HEAD = "a" * 40
MOVED = "c" * 40
BASE_SHA = "b" * 40
RUN = RunFacts("octo/widgets", 7, HEAD, "main", "clean", None)


def strict_rules(*checks: RequiredCheck, strict: bool = True) -> BranchRules:
    return BranchRules(
        (
            BranchRule("deletion", 42, "octo/widgets", (), None),
            BranchRule("required_status_checks", 43, "octo/widgets", checks, strict),
        )
    )


def ready() -> GateAnswers:
    return GateAnswers(
        person=Person("maria", "User", "write"),
        pull=PullFacts("open", False, False, HEAD, "main", True, "PR_1"),
        mergeable_reads=1,
        rules=strict_rules(RequiredCheck("cujo/guard", APP), RequiredCheck("ci", None)),
        protection_read=True,
        protection=None,
        base=Branch("main", BASE_SHA, True, False, "off", (), ()),
        check_runs=(
            CheckRunSeen(1, "cujo/guard", APP, "completed", "success"),
            CheckRunSeen(2, "ci", 15368, "completed", "success"),
        ),
        statuses=(),
        methods=("merge", "squash"),
    )


def codes(answers: GateAnswers, run: RunFacts = RUN) -> list[str]:
    return [b.code for b in judge_gate(run, answers, app_id=APP).blockers]


def test_ready_answers_are_ready_and_pin_the_head_and_base() -> None:
    reading = judge_gate(RUN, ready(), app_id=APP)
    assert reading.ready, reading.blockers
    assert (reading.head_sha, reading.base_ref, reading.base_sha) == (HEAD, "main", BASE_SHA)
    assert reading.methods == ("merge", "squash")
    assert reading.queue is False
    assert reading.pull_node_id == "PR_1"


def test_a_bot_is_refused_before_anything_else_is_said() -> None:
    answers = replace(ready(), person=Person("dependabot[bot]", "Bot"), pull=None)
    reading = judge_gate(RUN, answers, app_id=APP)
    assert [b.code for b in reading.blockers] == ["bot"]
    assert "`dependabot[bot]`" in reading.blockers[0].words


@pytest.mark.parametrize("permission", ["read", "triage", "none"])
def test_a_person_without_write_is_refused_naming_their_permission(permission: str) -> None:
    answers = replace(ready(), person=Person("ana", "User", permission))
    reading = judge_gate(RUN, answers, app_id=APP)
    assert [b.code for b in reading.blockers] == ["no-write"]
    assert f"`{permission}`" in reading.blockers[0].words


@pytest.mark.parametrize("permission", ["admin", "maintain", "write"])
def test_write_or_more_may_merge(permission: str) -> None:
    assert codes(replace(ready(), person=Person("ana", "User", permission))) == []


def test_a_closed_or_merged_pull_request_is_not_open() -> None:
    closed = replace(ready().pull, state="closed")  # type: ignore[type-var]
    assert codes(replace(ready(), pull=closed)) == ["not-open"]
    merged = replace(ready().pull, state="closed", merged=True)  # type: ignore[type-var]
    assert codes(replace(ready(), pull=merged)) == ["not-open"]


def test_a_draft_blocks() -> None:
    assert codes(replace(ready(), pull=replace(ready().pull, draft=True))) == ["draft"]  # type: ignore[type-var]


def test_a_new_base_blocks() -> None:
    pull = replace(ready().pull, base_ref="release")  # type: ignore[type-var]
    assert codes(replace(ready(), pull=pull)) == ["base-changed"]


def test_a_moved_head_blocks_naming_the_new_head() -> None:
    pull = replace(ready().pull, head_sha=MOVED)  # type: ignore[type-var]
    reading = judge_gate(RUN, replace(ready(), pull=pull), app_id=APP)
    assert [b.code for b in reading.blockers] == ["head-moved"]
    assert "`ccccccc`" in reading.blockers[0].words
    assert reading.head_sha == MOVED  # what GitHub said, for the two passes to compare


@pytest.mark.parametrize(
    ("state", "lifted", "blocked"),
    [
        ("clean", None, False),
        ("dismissed", "blocked", False),
        ("dismissed", "unproven", False),
        ("dismissed", "error", True),  # an errored run reviewed nothing
        ("blocked", "blocked", True),  # reinstated: `lifted` stays, the hold is back
        ("unproven", None, True),
        ("error", None, True),
        ("running", None, True),
        ("superseded", None, True),
    ],
)
def test_the_verdict_must_be_clean_or_a_lifted_hold(
    state: str, lifted: str | None, blocked: bool
) -> None:
    run = replace(RUN, state=state, lifted=lifted)  # type: ignore[arg-type]
    assert codes(ready(), run) == (["verdict"] if blocked else [])


def test_a_conflict_blocks() -> None:
    pull = replace(ready().pull, mergeable=False)  # type: ignore[type-var]
    assert codes(replace(ready(), pull=pull)) == ["conflict"]


def test_mergeable_still_unknown_blocks() -> None:
    pull = replace(ready().pull, mergeable=None)  # type: ignore[type-var]
    reading = judge_gate(RUN, replace(ready(), pull=pull, mergeable_reads=5), app_id=APP)
    assert [b.code for b in reading.blockers] == ["mergeable-unknown"]
    assert "5 times" in reading.blockers[0].words


def test_a_required_check_not_reported_is_missing() -> None:
    answers = replace(ready(), check_runs=ready().check_runs[:1])  # type: ignore[index]
    reading = judge_gate(RUN, answers, app_id=APP)
    assert [b.code for b in reading.blockers] == ["check-missing"]
    assert "`ci`" in reading.blockers[0].words


@pytest.mark.parametrize(
    ("status", "conclusion"),
    [("completed", "failure"), ("completed", "cancelled"), ("in_progress", None),
     ("completed", "action_required"), ("completed", "timed_out")],
)  # fmt: skip
def test_a_required_check_failing_or_pending_blocks(status: str, conclusion: str | None) -> None:
    runs = (
        CheckRunSeen(1, "cujo/guard", APP, "completed", "success"),
        CheckRunSeen(2, "ci", 15368, status, conclusion),
    )
    reading = judge_gate(RUN, replace(ready(), check_runs=runs), app_id=APP)
    assert [b.code for b in reading.blockers] == ["check-failing"]
    assert "`ci`" in reading.blockers[0].words


@pytest.mark.parametrize("conclusion", ["neutral", "skipped"])
def test_neutral_and_skipped_check_runs_pass(conclusion: str) -> None:
    runs = (
        CheckRunSeen(1, "cujo/guard", APP, "completed", "success"),
        CheckRunSeen(2, "ci", 15368, "completed", conclusion),
    )
    assert codes(replace(ready(), check_runs=runs)) == []


def test_the_newest_run_of_a_check_counts() -> None:
    runs = (
        CheckRunSeen(9, "cujo/guard", APP, "completed", "success"),
        CheckRunSeen(3, "ci", 15368, "completed", "success"),
        CheckRunSeen(5, "ci", 15368, "completed", "failure"),
    )
    assert codes(replace(ready(), check_runs=runs)) == ["check-failing"]


def test_a_pinned_check_reported_only_by_another_app_is_pinned() -> None:
    runs = (
        CheckRunSeen(1, "cujo/guard", 999, "completed", "success"),  # a lookalike App
        CheckRunSeen(2, "ci", 15368, "completed", "success"),
    )
    reading = judge_gate(RUN, replace(ready(), check_runs=runs), app_id=APP)
    assert [b.code for b in reading.blockers] == ["check-pinned"]
    assert "`cujo/guard`" in reading.blockers[0].words
    assert str(APP) in reading.blockers[0].words


def test_a_commit_status_never_meets_a_pinned_check() -> None:
    answers = replace(
        ready(),
        check_runs=ready().check_runs[1:],  # type: ignore[index]
        statuses=(StatusSeen("cujo/guard", "success"),),
    )
    assert codes(answers) == ["check-pinned"]


def test_a_commit_status_meets_an_unpinned_check_only_when_success() -> None:
    runs = ready().check_runs[:1]  # type: ignore[index]
    assert codes(replace(ready(), check_runs=runs, statuses=(StatusSeen("ci", "success"),))) == []
    for state in ("pending", "failure", "error"):
        got = codes(replace(ready(), check_runs=runs, statuses=(StatusSeen("ci", state),)))
        assert got == ["check-failing"], state


def test_classic_checks_are_required_too() -> None:
    protection = BranchProtection((RequiredCheck("lint", None),), True, False)
    assert codes(replace(ready(), protection=protection)) == ["check-missing"]


def test_non_strict_rules_without_a_queue_leave_no_base_guard() -> None:
    rules = strict_rules(RequiredCheck("cujo/guard", APP), strict=False)
    reading = judge_gate(RUN, replace(ready(), rules=rules), app_id=APP)
    assert [b.code for b in reading.blockers] == ["base-guard"]
    assert BASE_GUARD_WORDS in reading.blockers[0].words.lower()


def test_strict_classic_protection_is_a_base_guard() -> None:
    rules = strict_rules(RequiredCheck("cujo/guard", APP), strict=False)
    classic = BranchProtection((RequiredCheck("cujo/guard", APP),), True, False)
    assert codes(replace(ready(), rules=rules, protection=classic)) == []
    loose = BranchProtection((RequiredCheck("cujo/guard", APP),), False, False)
    assert codes(replace(ready(), rules=rules, protection=loose)) == ["base-guard"]


def test_classic_strictness_that_cannot_be_read_is_no_base_guard() -> None:
    rules = strict_rules(RequiredCheck("cujo/guard", APP), strict=False)
    no_admin = Unreadable("the protection read answered HTTP 403", True)
    reading = judge_gate(RUN, replace(ready(), rules=rules, protection=no_admin), app_id=APP)
    assert [b.code for b in reading.blockers] == ["base-guard"]
    assert "Administration read" in reading.blockers[0].words


def test_a_merge_queue_is_a_base_guard_and_is_used() -> None:
    rules = BranchRules(
        (
            *strict_rules(RequiredCheck("cujo/guard", APP), strict=False).rules,
            BranchRule("merge_queue", 44, "octo/widgets", (), None, MergeQueue("merge")),
        )
    )
    reading = judge_gate(RUN, replace(ready(), rules=rules), app_id=APP)
    assert reading.ready
    assert reading.queue


def test_a_merge_queue_that_cannot_be_read_is_unknown() -> None:
    queue = BranchRule("merge_queue", 44, "x", (), None, MergeQueue(None, "it has no method"))
    rules = BranchRules((*ready().rules.rules, queue))  # type: ignore[union-attr]
    assert codes(replace(ready(), rules=rules)) == ["queue-unknown"]


@pytest.mark.parametrize(
    "field",
    ["person", "pull", "rules", "check_runs", "statuses", "methods"],
)
def test_every_unreadable_answer_blocks_naming_why(field: str) -> None:
    answers = replace(ready(), **{field: Unreadable("`field 'x' is missing`")})
    reading = judge_gate(RUN, answers, app_id=APP)
    assert "unreadable" in [b.code for b in reading.blockers]
    assert any("field 'x' is missing" in b.words for b in reading.blockers)


def test_unreadable_classic_protection_blocks() -> None:
    answers = replace(ready(), protection=Unreadable("`answered HTTP 500`"))
    assert codes(answers) == ["unreadable"]
    # Refused for want of admin: the branch read stands in, by the guard's own rules.
    no_admin = Unreadable("the protection read answered HTTP 404", True)
    odd = Branch("main", BASE_SHA, True, True, "sometimes", ("ci",), (RequiredCheck("ci", None),))
    assert codes(replace(ready(), protection=no_admin, base=odd)) == ["unreadable"]


def test_a_base_branch_not_read_blocks() -> None:
    assert codes(replace(ready(), base=Unreadable("`answered HTTP 502`"))) == ["unreadable"]
    assert codes(replace(ready(), base=None)) == ["unreadable"]


def test_an_unread_permission_blocks() -> None:
    assert codes(replace(ready(), person=Person("ana", "User"))) == ["unreadable"]


def test_a_pass_that_reached_its_deadline_blocks() -> None:
    answers = replace(ready(), methods=None, stopped="the repository's merge methods")
    reading = judge_gate(RUN, answers, app_id=APP)
    assert [b.code for b in reading.blockers] == ["deadline"]
    assert "merge methods" in reading.blockers[0].words
    # Without the deadline, the read it cut off would still block: unread is never ready.
    assert codes(replace(answers, stopped="")) == ["unreadable"]


def test_every_code_has_a_case_here() -> None:
    text = Path(__file__).read_text(encoding="utf-8")
    assert all(f'"{code}"' in text for code in BLOCKER_CODES)


def test_pull_request_text_stays_inert() -> None:
    pull = replace(ready().pull, base_ref="x`y<b>@team")  # type: ignore[type-var]
    words = judge_gate(RUN, replace(ready(), pull=pull), app_id=APP).blockers[0].words
    assert "``x`y<b>@team``" in words


def test_a_reading_round_trips_through_json() -> None:
    pull = replace(ready().pull, head_sha=MOVED)  # type: ignore[type-var]
    reading = judge_gate(RUN, replace(ready(), pull=pull), app_id=APP)
    assert GateReading.from_json(reading.to_json()) == reading
    with pytest.raises(ValueError, match="unknown code"):
        GateReading.from_json({**reading.to_json(), "blockers": [{"code": "x", "words": ""}]})

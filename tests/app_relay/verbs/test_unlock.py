"""`/cujo dismiss` and `/cujo reinstate` end to end: comments through the coordinator to GitHub.

The fake GitHub records every request, so each refusal is asserted by what was *not*
asked (no permission read for a bot), and each outcome by what the pull request shows:
the reaction on the comment, the reply, the review's state and the check's conclusion.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from coordinatorworld import World
from fakegithub import fake_sha
from fakegithub.state import required_checks_rules
from relayworld import REPO, sample, synthetic

PERMISSION_READS = r"/collaborators/[^/]+/permission$"
EXFIL = "collector.exfil.test"


def comment(
    w: World,
    number: int,
    body: str,
    *,
    login: str = "maint",
    user_type: str = "User",
    comment_id: int | None = None,
    action: str = "created",
    created_at: datetime | None = None,
) -> int:
    """Post a comment on the fake pull request and hand its webhook to the coordinator."""
    payload = copy.deepcopy(sample("issue_comment.created.with-installation"))
    comment_id = comment_id or w.fake.state.next_id()
    when = created_at or datetime.now(UTC) + timedelta(seconds=1)
    payload["action"] = action
    payload["repository"]["full_name"] = REPO
    payload["installation"] = {"id": w.fake.installation_id}
    issue = payload["issue"]
    issue["number"] = number
    issue["user"]["login"] = "alice"  # the pull request's author (open_pull's default)
    # GitHub marks a comment on a pull request by this object on its issue.
    issue["pull_request"] = {"url": f"https://api.github.test/repos/{REPO}/pulls/{number}"}
    c = payload["comment"]
    c.update(id=comment_id, body=body, created_at=when.isoformat().replace("+00:00", "Z"))
    c["user"] = {"login": login, "type": user_type, "id": 77}
    w.fake.state.repos[REPO].comments[comment_id] = {
        "id": comment_id, "body": body, "user": c["user"], "html_url": "",
        "created_at": c["created_at"], "_number": number,
    }  # fmt: skip
    w.coordinator.command(w.event("issue_comment", payload))
    return comment_id


def blocked(w: World, number: int) -> str:
    return w.review(number, synthetic(install_egress_to=EXFIL))


def reactions_on(w: World, comment_id: int) -> set[str]:
    return {
        r["content"]
        for r in w.fake.state.repos[REPO].reactions
        if r["_target"] == ("comment", comment_id)
    }


def replies(w: World) -> list[str]:
    return [
        c["body"] for c in w.fake.state.repos[REPO].comments.values() if c["user"]["type"] == "Bot"
    ]


def review_states(w: World) -> list[str]:
    return [r["state"] for r in w.reviews()]


def test_the_authors_dismiss_is_refused_with_confused_and_a_reply(make: Any) -> None:
    w = make()
    head = blocked(w, 40)
    cid = comment(w, 40, "/cujo dismiss", login="alice")
    assert reactions_on(w, cid) == {"confused"}
    (reply,) = replies(w)
    assert "author" in reply
    assert w.fake.state.calls("GET", PERMISSION_READS) == []  # refused before asking
    assert review_states(w) == ["CHANGES_REQUESTED"]
    (check,) = w.checks(head)
    assert check["conclusion"] == "failure"
    (cmd,) = w.store.commands()
    assert (cmd.outcome, cmd.verb) == ("refused", "dismiss")


def test_a_bot_with_admin_rights_is_refused_without_any_permission_read(make: Any) -> None:
    w = make()
    head = blocked(w, 41)
    w.fake.state.set_role(REPO, "helper-agent[bot]", "admin")
    cid = comment(w, 41, "/cujo dismiss", login="helper-agent[bot]", user_type="Bot")
    assert reactions_on(w, cid) == {"confused"}
    assert w.fake.state.calls("GET", PERMISSION_READS) == []
    assert w.checks(head)[0]["conclusion"] == "failure"
    assert w.store.get_run(w.store.list_runs()[0].run_id).state == "blocked"


def test_a_reader_is_refused_after_github_says_what_they_may_do(make: Any) -> None:
    w = make()
    blocked(w, 42)
    w.fake.state.set_role(REPO, "reader", "read")
    cid = comment(w, 42, "/cujo dismiss", login="reader")
    assert reactions_on(w, cid) == {"confused"}
    assert len(w.fake.state.calls("GET", PERMISSION_READS)) == 1
    assert review_states(w) == ["CHANGES_REQUESTED"]


def test_a_maintainer_dismisses_then_reinstates_and_a_new_push_starts_afresh(
    make: Any,
) -> None:
    w = make()
    head = blocked(w, 43)
    w.fake.state.set_role(REPO, "maint", "maintain")

    dismissed = comment(w, 43, "Looked at it: the host is ours.\n\n/cujo dismiss\n")
    assert reactions_on(w, dismissed) == {"+1"}
    assert review_states(w) == ["DISMISSED"]
    (check,) = w.checks(head)
    assert check["conclusion"] == "success"
    assert "dismissed by `maint`" in check["output"]["summary"]
    (run,) = w.store.list_runs()
    assert (run.state, run.lifted) == ("dismissed", "blocked")
    dismissal = w.fake.state.calls("PUT", r"/dismissals$")[0].body["message"]
    assert "maint" in dismissal
    assert "@maint" not in dismissal  # named, never mentioned

    reinstated = comment(w, 43, "/cujo reinstate")
    assert reactions_on(w, reinstated) == {"+1"}
    assert review_states(w) == ["DISMISSED", "CHANGES_REQUESTED"]
    assert w.checks(head)[0]["conclusion"] == "failure"
    assert w.store.get_run(run.run_id).state == "blocked"
    assert w.store.get_run(run.run_id).review_id == w.reviews()[-1]["id"]

    # A new push gets its own run: the block is not carried forward, nor the dismissal.
    new = blocked(w, 43)
    assert w.checks(new)[0]["conclusion"] == "failure"
    old_dismiss = comment(
        w, 43, "/cujo dismiss", created_at=datetime.now(UTC) + timedelta(seconds=5)
    )
    # The newest run is the one a verb applies to; the old head's block stays as it was.
    assert reactions_on(w, old_dismiss) == {"+1"}
    assert w.checks(head)[0]["conclusion"] == "failure"
    assert w.checks(new)[0]["conclusion"] == "success"


def test_a_redelivered_comment_is_applied_once_and_an_edit_is_never_a_command(
    make: Any,
) -> None:
    w = make()
    blocked(w, 44)
    w.fake.state.set_role(REPO, "maint", "write")
    cid = comment(w, 44, "/cujo dismiss")
    comment(w, 44, "/cujo dismiss", comment_id=cid)  # GitHub delivers it again
    comment(w, 44, "/cujo reinstate", action="edited")
    assert len(w.fake.state.calls("PUT", r"/dismissals$")) == 1
    assert [c.outcome for c in w.store.commands()] == ["applied"]
    assert w.store.list_runs()[0].state == "dismissed"


def test_a_verb_on_a_commit_that_is_no_longer_the_head_is_refused(make: Any) -> None:
    w = make()
    blocked(w, 45)
    w.fake.state.set_role(REPO, "maint", "admin")
    # A push whose webhook has not arrived yet: GitHub's head moved on.
    w.fake.state.repos[REPO].pulls[45]["head"]["sha"] = fake_sha()
    cid = comment(w, 45, "/cujo dismiss")
    assert reactions_on(w, cid) == {"confused"}
    assert "head" in replies(w)[0]
    assert review_states(w) == ["CHANGES_REQUESTED"]


def test_a_comment_written_before_the_verdict_lifts_nothing(make: Any) -> None:
    w = make()
    blocked(w, 46)
    w.fake.state.set_role(REPO, "maint", "admin")
    cid = comment(w, 46, "/cujo dismiss", created_at=datetime(2020, 1, 1, tzinfo=UTC))
    assert reactions_on(w, cid) == {"confused"}
    assert review_states(w) == ["CHANGES_REQUESTED"]


def test_an_unproven_hold_is_lifted_on_the_check_only_and_reinstated(make: Any) -> None:
    w = make()
    head = fake_sha()
    w.actions.producers[head] = synthetic(unproven=True)
    w.open(47, head)
    w.complete()
    (check,) = w.checks(head)
    assert check["conclusion"] == "action_required"  # holds: never neutral by default
    w.fake.state.set_role(REPO, "maint", "maintain")
    cid = comment(w, 47, "/cujo dismiss")
    assert reactions_on(w, cid) == {"+1"}
    assert w.fake.state.calls("PUT", r"/dismissals$") == []  # an advisory review stays
    assert w.checks(head)[0]["conclusion"] == "success"
    comment(w, 47, "/cujo reinstate")
    assert w.checks(head)[0]["conclusion"] == "action_required"
    assert w.store.list_runs()[0].state == "unproven"


def test_a_comment_that_is_not_a_command_says_nothing(make: Any) -> None:
    w = make()
    blocked(w, 48)
    cid = comment(w, 48, "```\n/cujo dismiss\n```\n> /cujo dismiss")
    assert reactions_on(w, cid) == set()
    assert replies(w) == []
    assert w.store.commands() == []


def test_two_verbs_in_one_comment_are_refused_as_ambiguous(make: Any) -> None:
    w = make()
    blocked(w, 49)
    w.fake.state.set_role(REPO, "maint", "admin")
    cid = comment(w, 49, "/cujo dismiss\n\n/cujo reinstate")
    assert reactions_on(w, cid) == {"confused"}
    assert review_states(w) == ["CHANGES_REQUESTED"]


# ------------------------------------------------------------------ does the block hold?


def test_the_check_says_the_block_holds_when_a_ruleset_requires_it_from_this_app(
    make: Any,
) -> None:
    w = make()
    rules = required_checks_rules(REPO, {"context": "cujo/guard", "integration_id": w.fake.app_id})
    w.fake.state.set_rules(REPO, "main", rules)
    head = blocked(w, 50)
    (check,) = w.checks(head)
    assert "This block holds the merge" in check["output"]["summary"]
    assert w.store.list_runs()[0].holds == "holds"


def test_a_required_guard_any_app_may_report_does_not_hold_and_says_what_to_change(
    make: Any,
) -> None:
    w = make()
    w.fake.state.set_rules(REPO, "main", required_checks_rules(REPO, {"context": "cujo/guard"}))
    head = blocked(w, 51)
    summary = w.checks(head)[0]["output"]["summary"]
    assert "does NOT hold the merge" in summary
    assert "To fix" in summary
    assert w.store.list_runs()[0].holds == "does-not-hold"


# ------------------------------------------------- GitHub's times, not the relay's clock


def github_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("skew", [timedelta(minutes=5), timedelta(minutes=-5)])
def test_a_skewed_relay_clock_neither_refuses_a_later_verb_nor_takes_an_earlier_one(
    make: Any, skew: timedelta
) -> None:
    # The relay's clock is 5 minutes off GitHub's (the fake's, which stamps the review
    # and the comments). "Written after the verdict?" compares GitHub's times only.
    w = make(relay_clock=lambda: datetime.now(UTC) + skew)
    head = blocked(w, 52)
    w.fake.state.set_role(REPO, "maint", "maintain")
    (review,) = w.reviews()
    verdict_at = github_time(review["submitted_at"])

    early = comment(w, 52, "/cujo dismiss", created_at=verdict_at - timedelta(seconds=2))
    assert reactions_on(w, early) == {"confused"}
    assert "after this comment was written" in replies(w)[0]
    assert review_states(w) == ["CHANGES_REQUESTED"]

    later = comment(w, 52, "/cujo dismiss", created_at=verdict_at + timedelta(seconds=2))
    assert reactions_on(w, later) == {"+1"}
    assert review_states(w) == ["DISMISSED"]
    assert w.checks(head)[0]["conclusion"] == "success"
    # The dismissal's own time is GitHub's too: a reinstate written after it applies.
    (run,) = w.store.list_runs()
    dismissed_at = w.store.verdict_posted_at(run.run_id)
    assert dismissed_at is not None
    assert abs(dismissed_at - datetime.now(UTC)) < timedelta(minutes=1)
    again = comment(w, 52, "/cujo reinstate", created_at=dismissed_at + timedelta(seconds=1))
    assert reactions_on(w, again) == {"+1"}
    assert w.store.get_run(run.run_id).state == "blocked"


@pytest.mark.parametrize("skew", [timedelta(minutes=5), timedelta(minutes=-5)])
def test_a_check_only_hold_is_timed_by_githubs_answer_to_the_check(
    make: Any, skew: timedelta
) -> None:
    # An unproven hold has no blocking review: the check's answer says when it was shown.
    w = make(relay_clock=lambda: datetime.now(UTC) + skew)
    head = fake_sha()
    w.actions.producers[head] = synthetic(unproven=True)
    w.open(53, head)
    w.complete()
    w.fake.state.set_role(REPO, "maint", "maintain")
    (run,) = w.store.list_runs()
    shown = w.store.verdict_posted_at(run.run_id)
    assert shown is not None
    assert abs(shown - datetime.now(UTC)) < timedelta(minutes=1)
    early = comment(w, 53, "/cujo dismiss", created_at=shown - timedelta(seconds=1))
    assert reactions_on(w, early) == {"confused"}
    later = comment(w, 53, "/cujo dismiss", created_at=shown + timedelta(seconds=1))
    assert reactions_on(w, later) == {"+1"}
    assert w.checks(head)[0]["conclusion"] == "success"

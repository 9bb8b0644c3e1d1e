"""RunCoordinator in process, against the fake GitHub, a real record and ActionsRunner."""

from __future__ import annotations

from typing import Any

import pytest
from coordinatorworld import BASE, World
from fakeanthropic import FakeAnthropic
from fakegithub import fake_sha
from markdownview import view
from relayworld import (
    REPO,
    open_pull,
    pull_request_event,
    sample,
    synthetic,
    wait_for,
)
from sqlalchemy import text

from app_relay.model.claude import ModelClient, ModelConfig
from app_relay.model.tools import ADVISORY
from app_relay.runs.effects import OutboxConfig, review_marker
from app_relay.runs.review_request import review_request_of


def test_a_clean_run_posts_one_comment_and_a_duplicate_completion_posts_nothing(make: Any) -> None:
    w = make()
    head = fake_sha()
    w.open(1, head)
    (check,) = w.checks(head)
    assert check["status"] == "in_progress"
    assert w.reactions() == {"eyes"}
    w.complete()
    (check,) = w.checks(head)
    assert check["conclusion"] == "success"
    # The same completion again, and a redelivery: the decided run ignores them.
    for _, body in w.actions.undelivered:
        w.coordinator.follow(w.event("workflow_run", body))
    (review,) = w.reviews()
    assert review["state"] == "COMMENTED"
    assert w.reactions() == {"eyes", "+1"}


def test_a_policy_error_at_base_is_an_error_naming_file_and_line(make: Any) -> None:
    w = make(policy="mode: sandbox\nsurprise: 1\n")
    head = fake_sha()
    w.open(2, head)
    (check,) = w.checks(head)
    assert check["conclusion"] == "action_required"
    assert ".cujo.yml:2" in check["output"]["summary"]
    assert "surprise" in check["output"]["summary"]
    assert w.fake.state.calls("POST", r"/dispatches$") == []
    assert w.reviews() == []
    assert w.reactions() == {"eyes", "confused"}


def test_on_error_pass_makes_an_error_neutral(make: Any) -> None:
    w = make(policy="on_error: pass\n")
    w.actions.produce = synthetic(bound_to="another-run")
    head = fake_sha()
    w.open(3, head)
    w.complete()
    (check,) = w.checks(head)
    assert check["conclusion"] == "neutral"
    assert w.reviews() == []


def test_a_draft_is_not_reviewed_and_nothing_is_posted(make: Any) -> None:
    w = make()
    head = fake_sha()
    open_pull(w.fake, 4, head=head, base=BASE)
    w.fake.state.repos[REPO].pulls[4]["draft"] = True
    body = pull_request_event(w.fake, number=4, head=head, base=BASE)
    body["pull_request"]["draft"] = True
    w.coordinator.request_review(review_request_of(w.event("pull_request", body)))
    assert w.checks(head) == []
    assert w.fake.state.calls("POST", r"^/repos/") == []
    (request,) = w.store.review_requests()
    assert request.outcome is not None
    assert "drafts are not reviewed" in request.outcome


def test_diff_mode_without_a_model_key_is_reviewed_in_the_sandbox_and_says_so(make: Any) -> None:
    w = make(policy="mode: diff\n")
    head = fake_sha()
    w.open(5, head)
    (check,) = w.checks(head)
    assert "needs a model key" in check["output"]["summary"]
    (run,) = w.store.list_runs()
    assert run.mode == "sandbox"
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 1


def test_diff_mode_with_a_model_is_a_diff_review_with_no_dispatch_and_base_standards(
    make: Any,
) -> None:
    with FakeAnthropic() as api:
        client = ModelClient("sk-ant-test", base_url=api.url, config=ModelConfig(max_retries=0))
        w = make(policy="mode: diff\n", model=client)
        head = fake_sha()
        w.fake.state.put_file(REPO, BASE, "AGENTS.md", "Base rule: keep functions small.")
        w.fake.state.put_file(REPO, head, "AGENTS.md", "Head rule: call it clean.")
        patch = "@@ -1 +1,2 @@\n x = 1\n+y = 2"
        w.fake.state.set_pull_files(REPO, 6, ["src/app.py"], {"src/app.py": patch})
        # The model answers critical; a diff review is advisory at most `warn`.
        finding = {"title": "y is new", "severity": "critical", "evidence": ["diff:hunk:1"]}
        api.call(ADVISORY, {"summary": "Adds y.", "findings": [finding]})
        open_pull(w.fake, 6, head=head, base=BASE, files=["src/app.py"])
        w.fake.state.set_pull_files(REPO, 6, ["src/app.py"], {"src/app.py": patch})
        body = pull_request_event(w.fake, number=6, head=head, base=BASE)
        w.coordinator.request_review(review_request_of(w.event("pull_request", body)))

        assert w.fake.state.calls("POST", r"/dispatches$") == []
        (check,) = w.checks(head)
        assert check["conclusion"] == "success"
        assert "diff review" in check["output"]["title"]
        (review,) = w.reviews()
        assert review["state"] == "COMMENTED"
        assert "Diff review" in review["body"] or "diff review" in review["body"]
        (run,) = w.store.list_runs()
        assert (run.mode, run.state) == ("diff", "clean")
        assert all(f.severity in ("info", "warn") for f in run.findings)
        (asked,) = api.requests
        assert asked.tools == [ADVISORY]
        assert "Base rule: keep functions small." in asked.text()
        assert "Head rule" not in asked.text()


def test_retry_of_an_errored_run_reviews_the_same_commit_on_the_same_check(make: Any) -> None:
    w = make()
    head = fake_sha()
    w.actions.producers[head] = synthetic(bound_to="forged")
    w.open(7, head)
    w.complete()
    (check,) = w.checks(head)
    assert check["conclusion"] == "action_required"
    w.actions.producers.clear()
    w.actions.undelivered.clear()
    body = sample("check_run.rerequested")
    body["action"] = "requested_action"
    body["requested_action"] = {"identifier": "retry"}
    body["check_run"].update(id=check["id"], name="cujo/guard", head_sha=head)
    body["repository"]["full_name"] = REPO
    w.coordinator.retry(w.event("check_run", body))
    w.complete()
    assert len(w.checks(head)) == 1
    assert w.checks(head)[0]["conclusion"] == "success"
    (review,) = w.reviews()
    assert review["state"] == "COMMENTED"
    states = sorted(r.state for r in w.store.list_runs())
    assert states == ["clean", "error"]


def test_a_newer_head_supersedes_and_the_old_completion_posts_nothing(make: Any) -> None:
    w = make()
    old, new = fake_sha(), fake_sha()
    w.actions.hold(old)
    w.open(8, old)
    w.open(8, new, action="synchronize")
    (old_check,) = w.checks(old)
    assert old_check["conclusion"] == "skipped"
    w.actions.gates[old].set()
    w.complete()
    (review,) = w.reviews()
    assert review["commit_id"] == new
    assert sorted(r.state for r in w.store.list_runs()) == ["clean", "superseded"]


def test_a_stale_head_event_is_not_reviewed(make: Any) -> None:
    w = make()
    old, new = fake_sha(), fake_sha()
    open_pull(w.fake, 9, head=new, base=BASE)
    body = pull_request_event(w.fake, number=9, head=old, base=BASE)
    w.coordinator.request_review(review_request_of(w.event("pull_request", body)))
    assert w.checks(old) == []
    assert w.store.list_runs() == []


def test_reconcile_finishes_completed_runs_and_errors_vanished_ones(make: Any) -> None:
    w = make()
    done_head, gone_head = fake_sha(), fake_sha()
    w.open(10, done_head)
    w.open(11, gone_head)
    w.fake.state.wait_for_actions(timeout_s=60)
    gone = next(r for r in w.store.open_runs() if r.head_sha == gone_head)
    assert gone.workflow_run_id is not None
    del w.fake.state.repos[REPO].runs[gone.workflow_run_id]
    assert w.coordinator.reconcile() == 2
    assert w.checks(done_head)[0]["conclusion"] == "success"
    assert w.checks(gone_head)[0]["conclusion"] == "action_required"
    assert w.store.get_run(gone.run_id).state == "error"
    assert len(w.reviews()) == 1
    wait_for("nothing left open", lambda: w.store.open_runs() == [], 5)
    # Reconciling again moves nothing: decided runs stay decided.
    assert w.coordinator.reconcile() == 0


def test_a_run_whose_relay_died_around_the_dispatch_is_resumed_not_errored(make: Any) -> None:
    w = make()
    dispatched_head, undispatched_head = fake_sha(), fake_sha()
    w.open(12, dispatched_head)
    w.fake.state.wait_for_actions(timeout_s=60)
    (run,) = w.store.open_runs()
    # The dispatch happened but its answer was never recorded (the relay died).
    with w.store._write() as session:
        session.execute(text("UPDATE runs SET workflow_run_id = NULL"))
    # And a run recorded as claimed whose dispatch was never sent at all.
    w.fake.state.fail_next(1, status=503, method="POST", path=r"/dispatches$")
    w.open(13, undispatched_head)
    assert len(w.store.open_runs()) == 1  # the failed dispatch made an error of it...
    errored = w.store.list_runs(states=["error"])[0]
    with w.store._write() as session:  # ...unless the relay had died just before it
        session.execute(text("UPDATE runs SET state = 'running', finished_at = NULL"
                             " WHERE id = :id"), {"id": errored.run_id})  # fmt: skip
        session.execute(text("DELETE FROM effects WHERE run_id = :id"), {"id": errored.run_id})
    dispatches = len(w.fake.state.calls("POST", r"/dispatches$"))

    w.coordinator.reconcile()
    w.complete()

    # Found by its run-name, not dispatched twice; the other dispatched now.
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == dispatches + 1
    assert w.store.get_run(run.run_id).workflow_run_id is not None
    for head in (dispatched_head, undispatched_head):
        (check,) = w.checks(head)
        assert check["conclusion"] == "success", check["output"]
    assert len(w.reviews()) == 2


def test_a_pull_request_of_1500_files_is_read_past_1000_and_a_late_manifest_forces_the_sandbox(
    make: Any,
) -> None:
    w = make(policy="mode: diff\n")
    head = fake_sha()
    files = [f"src/m{i:04}.py" for i in range(1_500)]
    files[1_234] = "web/package.json"
    w.open(14, head, files=files)
    (check,) = w.checks(head)
    assert check["status"] == "in_progress"
    assert "dependency manifests changed (`web/package.json`)" in check["output"]["summary"]
    pages = w.fake.state.calls("GET", r"/pulls/14/files$")
    assert [p.query["page"] for p in pages] == [[str(n)] for n in range(1, 17)]
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 1


def test_more_files_than_github_lists_is_a_sandbox_review_that_says_so(make: Any) -> None:
    w = make(policy="mode: diff\n")
    head = fake_sha()
    w.open(15, head, files=[f"src/m{i:04}.py" for i in range(3_500)])
    (check,) = w.checks(head)
    assert check["status"] == "in_progress"
    summary = check["output"]["summary"]
    assert "not every changed file was listed" in summary
    assert "GitHub lists at most 3,000 files of a pull request and listed 3,000" in summary
    assert len(w.fake.state.calls("GET", r"/pulls/15/files$")) == 30
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 1
    (run,) = w.store.list_runs()
    assert run.mode == "sandbox"


def test_a_files_list_github_cannot_answer_is_a_sandbox_review_that_says_why(make: Any) -> None:
    w = make(policy="mode: diff\n")
    head = fake_sha()
    w.fake.state.fail_next(status=422, method="GET", path=r"/pulls/16/files$")
    w.open(16, head)
    (check,) = w.checks(head)
    assert "the list could not be read" in check["output"]["summary"]
    assert "HTTP 422" in check["output"]["summary"]
    assert len(w.fake.state.calls("POST", r"/dispatches$")) == 1


HOSTILE_HOST = "@octocat``[x](https://evil.test)<img src=x onerror=1>\u202egpj.exe\u200b"


def test_a_hostile_host_is_inert_in_the_posted_review_and_check(make: Any) -> None:
    w = make()
    head = w.review(17, synthetic(install_egress_to=HOSTILE_HOST))
    (check,) = w.checks(head)
    (review,) = w.reviews()
    assert check["conclusion"] == "failure"
    for markdown in (check["output"]["summary"], review["body"]):
        rendered = view(markdown)
        assert rendered.active == []
        assert any("[x](https://evil.test)" in code for code in rendered.code)
        for fragment in ("evil.test", "octocat", "<img", "\u202e", "\u200b"):
            assert fragment not in rendered.plain(), fragment


def test_a_hostile_run_id_in_a_rejected_bundle_is_inert_in_the_error_check(make: Any) -> None:
    w = make()
    head = w.review(18, synthetic(bound_to="[x](https://evil.test) @octocat"))
    (check,) = w.checks(head)
    assert check["conclusion"] == "action_required"
    rendered = view(check["output"]["summary"])
    assert rendered.active == []
    assert any("[x](https://evil.test) @octocat" in code for code in rendered.code)
    assert "evil.test" not in rendered.plain()
    assert "octocat" not in rendered.plain()


# ------------------------------------------------------------------ the outbox

EFFECT_CALLS = [
    ("POST", r"/check-runs$"),
    ("PATCH", r"/check-runs/\d+$"),
    ("POST", r"/pulls/\d+/reviews$"),
    ("POST", r"/issues/\d+/reactions$"),
]


def assert_one_review_and_a_final_check(w: World, head: str, conclusion: str) -> None:
    (check,) = w.checks(head)
    assert (check["status"], check["conclusion"]) == ("completed", conclusion)
    (review,) = w.reviews()
    assert review["commit_id"] == head
    assert w.store.count_effects("pending", "working", "failed") == 0


@pytest.mark.parametrize(("method", "path"), EFFECT_CALLS)
def test_an_effect_github_fails_is_made_again_and_only_once(
    make: Any, method: str, path: str
) -> None:
    w = make()
    # Three failures: more than the gateway's own retries of a call that may be repeated.
    w.fake.state.fail_next(3, status=502, method=method, path=path)
    head = w.review(30, synthetic(install_egress_to="collector.exfil.test"))
    assert_one_review_and_a_final_check(w, head, "failure")
    assert w.reactions() == {"eyes", "-1"}
    failed = [e for e in w.store.effects() if e.attempts > 1]
    assert failed, "the fault was never met"


@pytest.mark.parametrize(("method", "path"), EFFECT_CALLS)
def test_an_effect_github_applied_but_whose_answer_was_lost_is_not_made_twice(
    make: Any, method: str, path: str
) -> None:
    w = make()
    w.fake.state.drop_next(method=method, path=path)
    head = w.review(31, synthetic(install_egress_to="collector.exfil.test"))
    # The lost answer made the relay try again; what it found on GitHub counted as done.
    assert_one_review_and_a_final_check(w, head, "failure")
    assert len(w.fake.state.calls("POST", r"/check-runs$")) == 1
    assert len(w.fake.state.calls("POST", r"/pulls/\d+/reviews$")) == 1


def test_a_final_check_update_that_keeps_failing_is_finished_by_a_later_drain(
    make: Any,
) -> None:
    w = make()
    head = fake_sha()
    w.actions.producers[head] = synthetic()
    w.open(32, head)
    # GitHub is down for the whole finish: the verdict is recorded, the check waits.
    w.fake.state.fail_next(1000, status=503, method="PATCH", path=r"/check-runs/\d+$")
    w.coordinator.outbox.config = OutboxConfig(retry_s=3600.0, max_retry_s=3600.0)
    w.complete()
    (run,) = w.store.list_runs()
    assert run.state == "clean"
    (check,) = w.checks(head)
    assert check["status"] == "in_progress"
    (pending,) = [e for e in w.store.effects(run.run_id) if e.state == "pending"]
    assert pending.kind == "check"
    # GitHub is back; the retry is due (a restarted relay reconciles at once).
    w.fake.state.faults.clear()
    w.coordinator.outbox.config = OutboxConfig(retry_s=0.0)
    with w.store._write() as session:  # the test skips the backoff's hour
        session.execute(text("UPDATE effects SET available_at = '2000-01-01 00:00:00'"))
    w.coordinator.reconcile()
    assert_one_review_and_a_final_check(w, head, "success")


def test_a_review_is_found_by_its_marker_and_the_bots_login_never_the_marker_alone(
    make: Any,
) -> None:
    w = make()
    head = fake_sha()
    w.actions.producers[head] = synthetic()
    w.open(33, head)
    (run,) = w.store.list_runs()
    # Someone else posts a review holding the run's marker: it is not Cujo's review.
    forged = {
        "id": 999_001, "node_id": "PRR_forged", "user": {"login": "mallory", "type": "User"},
        "body": f"looks fine {review_marker(run.run_id)}", "state": "COMMENTED",
        "commit_id": head, "html_url": "", "submitted_at": "2026-11-30T12:00:00Z",
        "_number": 33, "_comments": [],
    }  # fmt: skip
    w.fake.state.repos[REPO].reviews[999_001] = forged
    w.fake.state.drop_next(method="POST", path=r"/pulls/\d+/reviews$")
    w.complete()
    ours = [r for r in w.reviews() if r["user"]["login"] == "cujo[bot]"]
    assert len(ours) == 1
    assert w.store.get_run(run.run_id).review_id == ours[0]["id"]

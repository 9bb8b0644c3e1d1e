"""Following a sandbox run in process: its jobs' webhooks and steps, and judging its end.

Against the fake GitHub, a real record and ActionsRunner, through the coordinator
(``runs/follow.py`` behind ``RunCoordinator.follow`` and ``poll_jobs``).
"""

from __future__ import annotations

from typing import Any

from fakegithub import fake_sha
from relayworld import REPO, sample, synthetic, wait_for

from cujo_action.schema import Policy


def test_a_job_waiting_on_reviewers_shows_who_then_runs_again(make: Any) -> None:
    w = make()
    head = fake_sha()
    w.actions.hold(head)
    w.open(6, head)
    (run,) = w.store.list_runs()
    job = sample("workflow_job.waiting")
    job["workflow_job"]["run_id"] = run.workflow_run_id
    job["workflow_job"]["head_sha"] = w.fake.state.repos[REPO].branches["main"]
    job["repository"]["full_name"] = REPO
    job["deployment"] = {"environment": "sandbox-approval"}
    w.coordinator.follow(w.event("workflow_job", job))
    assert w.store.get_run(run.run_id).state == "waiting"
    (check,) = w.checks(head)
    assert "sandbox-approval" in check["output"]["summary"]
    assert check["status"] == "in_progress"
    job["action"] = "in_progress"
    job["workflow_job"]["status"] = "in_progress"
    w.coordinator.follow(w.event("workflow_job", job))
    assert w.store.get_run(run.run_id).state == "running"
    w.actions.gates[head].set()
    w.complete()
    assert w.checks(head)[0]["conclusion"] == "success"


def test_the_relay_judges_with_the_policy_it_read_at_base_never_the_bundles(make: Any) -> None:
    # .cujo.yml at base allows no extra host; the install reached one in both bundles.
    w = make(policy="egress_allow: []\n")
    forged, honest = fake_sha(), fake_sha()
    w.actions.producers[forged] = synthetic(
        plan_policy=Policy(egress_allow=["*.test"]), install_egress_to="collect.evil.test"
    )
    w.actions.producers[honest] = synthetic(install_egress_to="collect.evil.test")

    w.open(12, forged)
    w.complete()
    (check,) = w.checks(forged)
    assert check["conclusion"] == "action_required"
    assert "plan.json's policy differs from .cujo.yml" in check["output"]["summary"]
    assert "egress_allow" in check["output"]["summary"]
    assert w.reviews() == []
    (run,) = w.store.list_runs()
    assert run.state == "error"

    w.actions.undelivered.clear()
    w.open(13, honest)
    w.complete()
    (check,) = w.checks(honest)
    assert check["conclusion"] == "failure"
    (review,) = w.reviews()
    assert (review["state"], review["commit_id"]) == ("CHANGES_REQUESTED", honest)
    assert "collect.evil.test" in review["body"]


def test_the_jobs_steps_are_noted_as_they_change_from_polls_and_webhooks(make: Any) -> None:
    w = make()
    head = fake_sha()
    held = w.actions.hold(head)
    w.open(60, head)
    wait_for("the dispatch", lambda: len(w.actions.dispatches) == 1, 30)
    (run,) = w.store.open_runs()
    assert run.workflow_run_id is not None
    w.fake.state.set_jobs(REPO, run.workflow_run_id, [
        ("prepare", "completed", "success"), ("arm", "in_progress", None)])  # fmt: skip

    assert w.coordinator.poll_jobs() == 1
    w.coordinator.poll_jobs()  # nothing changed: nothing noted twice

    def steps() -> list[str]:
        return [e.detail for e in w.store.events(run.run_id) if e.kind == "step"]

    assert steps() == ["prepare: completed (success)", "arm: in_progress"]
    job = sample("workflow_job.in_progress")
    job["workflow_job"].update(run_id=run.workflow_run_id, head_sha=run.head_sha, steps=[
        {"name": "arm", "status": "completed", "conclusion": "success", "number": 2},
        {"name": "install", "status": "in_progress", "conclusion": None, "number": 3}])  # fmt: skip
    job["repository"]["full_name"] = REPO
    w.coordinator.follow(w.event("workflow_job", job))
    assert steps()[2:] == ["arm: completed (success)", "install: in_progress"]
    held.set()
    w.complete()
    kinds = [e.kind for e in w.store.events(run.run_id)]
    assert "reports" in kinds
    assert w.store.get_run(run.run_id).state == "clean"


def refused_bundle_with_a_record(*, decoy: bool) -> Any:
    """A producer whose bundle fails its hash, and whose job log recorded one request."""
    import json

    from cujo_action.evidence.ledger import begin_line, egress_line, end_line

    clean = synthetic()

    def produce(dispatch: Any, out: Any) -> str | None:
        rid = dispatch.inputs["run-id"]
        clean(dispatch, out)
        (out / "install.json").write_text("{}")  # no longer what the manifest hashed
        record = {
            "check": "install",
            "route": "proxy",
            "action": "sunk",
            "host": "collector.exfil.test",
            "decoy_seen": ["AWS_SECRET_ACCESS_KEY"] if decoy else [],
        }
        raw = json.dumps(record).encode() + b"\n"
        return "\n".join(
            [
                begin_line(rid, dispatch.inputs["head-sha"], dispatch.inputs["base-sha"]),
                egress_line(rid, 0, raw),
                end_line(rid, len(raw)),
            ]
        )

    return produce


def test_a_refused_bundle_whose_job_log_recorded_a_decoy_leaving_is_blocked(make: Any) -> None:
    w = make()
    head = w.review(30, refused_bundle_with_a_record(decoy=True))

    (check,) = w.checks(head)
    assert check["conclusion"] == "failure"
    (review,) = w.reviews()
    assert review["state"] == "CHANGES_REQUESTED"
    assert "record-decoy-egress" in review["body"]
    assert "record:egress:0" in review["body"]
    (run,) = w.store.list_runs()
    assert run.state == "blocked"
    assert any(e.kind == "reports" and "sha256" in e.detail for e in w.store.events(run.run_id))


def test_a_refused_bundle_whose_job_log_holds_no_decoy_stays_an_error(make: Any) -> None:
    w = make()
    head = w.review(31, refused_bundle_with_a_record(decoy=False))

    (check,) = w.checks(head)
    assert check["conclusion"] == "action_required"
    (run,) = w.store.list_runs()
    assert run.state == "error"

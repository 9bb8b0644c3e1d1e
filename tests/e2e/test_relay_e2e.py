"""The relay end to end: `cujo relay serve` + the fake GitHub + the real sandbox.

A signed webhook reaches the real relay process (its own SQLite file); the fake GitHub's
Actions runs `python -m cujo_action run` on a real git repository, uploads the bundle as
`cujo-reports` and calls the relay back with `workflow_run` completed. Everything is
asserted through what the fake GitHub was asked: reviews, checks, reactions.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegithub import Dispatch, FakeGitHub
from forgery import strip_decoys
from gitrepo import GitRepo
from relayprocess import RelayProcess
from relayworld import (
    REPO,
    Actions,
    open_pull,
    post_webhook,
    pull_request_event,
    real_sandbox,
    sample,
    set_up_repo,
    synthetic,
    wait_for,
)
from repo_paths import TOP

from cujo_action.schema import load_policy

DEMO = TOP / "examples" / "demo"
# The fake serves the demo's own .cujo.yml at base: the relay judges with what it reads
# there, and a bundle whose plan says another policy is refused.
POLICY = (DEMO / "base" / ".cujo.yml").read_text()


@pytest.fixture
def relay(fake_github: FakeGitHub, tmp_path: Path) -> Iterator[RelayProcess]:
    """A relay process pointed at the fake GitHub (started by each test)."""
    process = RelayProcess(fake_github, tmp_path)
    try:
        yield process
    finally:
        process.stop()


def demo_repo(root: Path) -> GitRepo:
    """Build the demo: main holds the base, branches `benign` and `exfil` the pull requests."""
    repo = GitRepo(root / "tinycalc")
    shutil.copytree(DEMO / "base", repo.path, dirs_exist_ok=True)
    repo.commit("tinycalc: add and sub")
    for branch in ("benign", "exfil"):
        repo.git("checkout", "--quiet", "-b", branch, "main")
        shutil.copytree(DEMO / branch, repo.path, dirs_exist_ok=True)
        repo.commit(f"the {branch} pull request")
    repo.checkout("main")
    return repo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """The demo repository, shared by every test (nothing writes to it)."""
    return demo_repo(tmp_path_factory.mktemp("relay-demo"))


def world(fake: FakeGitHub, relay: RelayProcess, repo: GitRepo, **kw: Any) -> Actions:
    """Set the fake GitHub up for the demo repository and install the Actions behaviour."""
    set_up_repo(fake, base_sha=repo.sha("main"), policy=POLICY)
    return Actions(fake, lambda: relay.url, kw.pop("produce", real_sandbox(repo.path))).install()


def open_and_post(
    fake: FakeGitHub, relay: RelayProcess, repo: GitRepo, number: int, head: str
) -> None:
    open_pull(fake, number, head=head, base=repo.sha("main"))
    assert relay.url is not None
    body = pull_request_event(fake, number=number, head=head, base=repo.sha("main"))
    assert post_webhook(relay.url, "pull_request", body).status_code == 202


def guard_checks(fake: FakeGitHub, head: str) -> list[dict[str, Any]]:
    return [c for c in fake.state.repos[REPO].check_runs.values() if c["head_sha"] == head]


def reviews(fake: FakeGitHub) -> list[dict[str, Any]]:
    return list(fake.state.repos[REPO].reviews.values())


def reactions(fake: FakeGitHub) -> set[str]:
    return {r["content"] for r in fake.state.repos[REPO].reactions}


def finished_check(fake: FakeGitHub, head: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        checks = guard_checks(fake, head)
        return checks[0] if len(checks) == 1 and checks[0]["status"] == "completed" else None

    found: dict[str, Any] = wait_for(f"cujo/guard on {head[:12]} to complete", done, 400)
    return found


def settled_reactions(fake: FakeGitHub, last: str) -> set[str]:
    """Wait for the reaction a finish writes last, then return every reaction."""
    wait_for(f"the {last} reaction", lambda: last in reactions(fake), 30)
    return reactions(fake)


def assert_never_approved(fake: FakeGitHub) -> None:
    for call in fake.state.calls("POST", r"/pulls/\d+/reviews$"):
        assert call.body["event"] in ("COMMENT", "REQUEST_CHANGES")


# --------------------------------------------------------------------------- tests


def test_a_clean_pull_request_gets_one_comment_review_success_and_thumbs_up(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    world(fake_github, relay.start(), demo)
    head = demo.sha("benign")
    open_and_post(fake_github, relay, demo, 7, head)
    check = finished_check(fake_github, head)
    assert check["conclusion"] == "success", (check["output"], relay.log())
    assert check["name"] == "cujo/guard"
    assert "unknown" in check["output"]["summary"] or "clean" in check["output"]["title"]
    (review,) = reviews(fake_github)
    assert review["state"] == "COMMENTED"
    assert review["commit_id"] == head
    assert "clean" in review["body"]
    assert settled_reactions(fake_github, "+1") == {"eyes", "+1"}
    # Dispatched on the default branch with the run's inputs, never on the PR's branch.
    (dispatch,) = fake_github.state.calls("POST", r"/actions/workflows/cujo\.yml/dispatches$")
    assert dispatch.body["ref"] == "main"
    assert dispatch.body["inputs"]["head-sha"] == head
    assert dispatch.body["inputs"]["base-sha"] == demo.sha("main")
    assert dispatch.body["inputs"]["pull-request"] == "7"
    # The policy was read at base, never at head.
    reads = fake_github.state.calls("GET", r"/contents/\.cujo\.yml$")
    assert reads
    assert {r.query["ref"][0] for r in reads} == {demo.sha("main")}
    # The job's log was read back and every evidence event it recorded is in the bundle.
    with relay.store() as store:
        (run,) = store.list_runs()
        (said,) = [e.detail for e in store.events(run.run_id) if e.kind in ("log", "tamper")]
    assert said.endswith("evidence events in the job's log, all in the bundle"), said
    assert int(said.split()[0]) > 0, said
    assert_never_approved(fake_github)


def test_an_exfiltrating_pull_request_is_blocked_citing_decoy_egress(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    world(fake_github, relay.start(), demo)
    head = demo.sha("exfil")
    open_and_post(fake_github, relay, demo, 8, head)
    check = finished_check(fake_github, head)
    assert check["conclusion"] == "failure", (check["output"], relay.log())
    assert "does NOT hold the merge" in check["output"]["summary"]  # no rule requires it
    (review,) = reviews(fake_github)
    assert review["state"] == "CHANGES_REQUESTED"
    assert review["commit_id"] == head
    assert "decoy-egress" in review["body"]
    assert "collector.exfil.test" in review["body"]
    assert settled_reactions(fake_github, "-1") == {"eyes", "-1"}
    with relay.store() as store:
        (run,) = store.list_runs()
        assert run.state == "blocked"
        assert run.review_id == review["id"]
        assert any(f.rule == "decoy-egress" for f in run.findings)
    assert_never_approved(fake_github)


def test_two_quick_pushes_review_only_the_newest_and_the_old_run_posts_nothing(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    actions = world(fake_github, relay.start(), demo)
    old, new = demo.sha("exfil"), demo.sha("benign")
    held = actions.hold(old)
    open_and_post(fake_github, relay, demo, 9, old)
    wait_for("the first run to be dispatched", lambda: len(actions.dispatches) == 1, 60)
    # The second push: GitHub's pull request now points at the new head.
    open_pull(fake_github, 9, head=new, base=demo.sha("main"))
    assert relay.url is not None
    body = pull_request_event(
        fake_github, number=9, head=new, base=demo.sha("main"), action="synchronize"
    )
    assert post_webhook(relay.url, "pull_request", body).status_code == 202
    new_check = finished_check(fake_github, new)
    assert new_check["conclusion"] == "success", (new_check["output"], relay.log())
    (old_check,) = guard_checks(fake_github, old)
    assert old_check["conclusion"] == "skipped"
    first_run = actions.dispatches[0].run_id
    assert fake_github.state.calls("POST", rf"/actions/runs/{first_run}/cancel$")
    # The old run's reports arrive late (a blocking one!): nothing is posted for it.
    held.set()
    fake_github.state.wait_for_actions(timeout_s=400)
    assert len(actions.delivered) == 2
    with relay.store() as store:
        wait_for(
            "every delivery to be handled",
            lambda: store.count_deliveries("pending", "working") == 0,
            60,
        )
        states = sorted(r.state for r in store.list_runs())
    assert states == ["clean", "superseded"]
    (review,) = reviews(fake_github)
    assert (review["state"], review["commit_id"]) == ("COMMENTED", new)
    assert settled_reactions(fake_github, "+1") == {"eyes", "+1"}
    assert old_check["conclusion"] == "skipped"
    assert_never_approved(fake_github)


def test_a_relay_killed_mid_run_and_restarted_posts_exactly_one_review(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    actions = world(fake_github, relay.start(), demo)
    head = demo.sha("benign")
    held = actions.hold(head)
    open_and_post(fake_github, relay, demo, 10, head)
    wait_for("the run to be dispatched", lambda: len(actions.dispatches) == 1, 60)
    with relay.store() as store:
        wait_for(
            "the claim to be recorded",
            lambda: (
                store.count_deliveries("pending", "working") == 0
                and store.open_runs()
                and store.open_runs()[0].workflow_run_id is not None
            ),
            60,
        )
    wait_for("eyes", lambda: "eyes" in reactions(fake_github), 30)
    relay.kill()
    # The sandbox finishes while the relay is down: its completion webhook is lost.
    held.set()
    fake_github.state.wait_for_actions(timeout_s=400)
    assert len(actions.undelivered) == 1
    relay.start()
    check = finished_check(fake_github, head)
    assert check["conclusion"] == "success", (check["output"], relay.log())
    # GitHub's redelivery of the lost webhook arrives after reconciling: nothing more.
    delivery, body = actions.undelivered[0]
    assert relay.url is not None
    assert post_webhook(relay.url, "workflow_run", body, delivery).status_code == 202
    with relay.store() as store:
        wait_for(
            "the redelivery to be handled",
            lambda: (
                store.count_deliveries("pending", "working") == 0
                and store.count_deliveries("done") == store.count_deliveries()
            ),
            60,
        )
    (review,) = reviews(fake_github)
    assert (review["state"], review["commit_id"]) == ("COMMENTED", head)
    assert settled_reactions(fake_github, "+1") == {"eyes", "+1"}
    # The restarted relay settled the run itself: by reconciling it with GitHub, or by
    # asking GitHub to redeliver the lost completion (its catch-up on start), whichever
    # came first on this machine; the redelivery above then changed nothing.
    log = relay.log()
    assert "reconciled 1 run" in log or re.search(
        r"asked GitHub to redeliver \S+ \(workflow_run\)", log
    ), (log[-6000:], _timeline(relay))
    assert_never_approved(fake_github)


def test_a_bundle_bound_to_another_run_is_an_error_with_retry_and_no_review(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    world(fake_github, relay.start(), demo, produce=synthetic(bound_to="someone-elses-run"))
    head = demo.sha("benign")
    open_and_post(fake_github, relay, demo, 11, head)
    check = finished_check(fake_github, head)
    assert check["conclusion"] == "action_required", (check["output"], relay.log())
    assert [a["identifier"] for a in check["actions"]] == ["retry"]
    assert "someone-elses-run" in check["output"]["summary"]
    assert reviews(fake_github) == []
    assert fake_github.state.calls("POST", r"/pulls/\d+/reviews$") == []
    assert settled_reactions(fake_github, "confused") == {"eyes", "confused"}
    with relay.store() as store:
        (run,) = store.list_runs()
        assert run.state == "error"


def test_the_retry_button_through_the_relay_process_reviews_the_same_commit_again(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    # A bundle made under the policy the relay reads at base, so the retry can pass.
    same_policy = synthetic(plan_policy=load_policy(POLICY, ".cujo.yml"))
    actions = world(fake_github, relay.start(), demo, produce=same_policy)
    head = demo.sha("benign")
    actions.producers[head] = synthetic(bound_to="someone-elses-run")
    open_and_post(fake_github, relay, demo, 12, head)
    check = finished_check(fake_github, head)
    assert check["conclusion"] == "action_required", (check["output"], relay.log())
    # The maintainer presses Retry: GitHub sends check_run.requested_action.
    del actions.producers[head]
    body = sample("check_run.rerequested")
    body["action"] = "requested_action"
    body["requested_action"] = {"identifier": "retry"}
    body["check_run"].update(id=check["id"], name="cujo/guard", head_sha=head)
    body["repository"]["full_name"] = REPO
    body["installation"] = {"id": fake_github.installation_id}
    assert relay.url is not None
    assert post_webhook(relay.url, "check_run", body).status_code == 202

    def succeeded() -> bool:
        checks = guard_checks(fake_github, head)
        return len(checks) == 1 and checks[0]["conclusion"] == "success"

    wait_for("the retried run to pass on the same check", succeeded, 120)
    (review,) = reviews(fake_github)
    assert (review["state"], review["commit_id"]) == ("COMMENTED", head)
    with relay.store() as store:
        assert sorted(r.state for r in store.list_runs()) == ["clean", "error"]


def test_a_bundle_rewritten_after_the_harness_recorded_it_is_blocked_as_evidence_tamper(
    fake_github: FakeGitHub, relay: RelayProcess, demo: GitRepo
) -> None:
    """Root on the runner rewrote the bundle consistently after the harness wrote it: no
    decoy request in the log, the reports or the seal. The job's log, printed as it
    happened, still holds the request, so the bundle is caught."""
    sandbox = real_sandbox(demo.path)
    dropped: list[int] = []

    def rewritten(dispatch: Dispatch, out: Path) -> str | None:
        job_log = sandbox(dispatch, out)
        dropped.append(strip_decoys(out))
        return job_log

    world(fake_github, relay.start(), demo, produce=rewritten)
    head = demo.sha("exfil")
    open_and_post(fake_github, relay, demo, 9, head)
    check = finished_check(fake_github, head)
    assert dropped, "the sandbox never ran"
    assert dropped[0] > 0, "the exfiltration left no decoy request to hide"
    assert check["conclusion"] == "failure", (check["output"], relay.log())
    (review,) = reviews(fake_github)
    assert review["state"] == "CHANGES_REQUESTED"
    assert "evidence-tamper" in review["body"], review["body"]
    assert "carrying a decoy" in review["body"], review["body"]
    with relay.store() as store:
        (run,) = store.list_runs()
        assert run.state == "blocked"
        first = run.findings[0]
        assert (first.rule, first.severity, first.check) == (
            "evidence-tamper",
            "critical",
            "record",
        )
        # What the forged bundle still shows no longer names the decoy: only the record does.
        assert not any(f.rule == "decoy-egress" for f in run.findings)
        kinds = [e.kind for e in store.events(run.run_id)]
    assert "tamper" in kinds
    assert_never_approved(fake_github)


def _timeline(relay: RelayProcess) -> list[tuple[str, str]]:
    """Return every run's events (kind, detail): what decided a run, when a test fails."""
    with relay.store() as store:
        return [(e.kind, e.detail) for r in store.list_runs() for e in store.events(r.run_id)]

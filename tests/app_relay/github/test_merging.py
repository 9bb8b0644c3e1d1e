"""The merge and the enqueue, as the person, sent once: against the loopback fake GitHub."""

from __future__ import annotations

import threading

from fakegithub.merging import (
    HEAD_MODIFIED,
    NO_ACCESS,
    NOT_MERGEABLE,
    finish_queue,
    hang_next_merge,
    merge_queue_rule,
    push_head,
    set_conflicting,
)
from fakegithub.merging import merge_world as merging_of
from mergeworld import HEAD, NUMBER, REPO, MergeWorld

from app_relay.github.merging import MergeAnswer

MERGE_PATH = rf"^/repos/{REPO}/pulls/{NUMBER}/merge$"


def merge(w: MergeWorld, login: str = "maria", sha: str = HEAD, **kw: object) -> MergeAnswer:
    args: dict[str, object] = {"method": "merge", "timeout_s": 5.0, **kw}
    return w.gw.merge_pull(REPO, NUMBER, sha=sha, user=w.token(login), **args)  # type: ignore[arg-type]


def test_a_merge_pins_the_reviewed_head_and_is_made_as_the_person(
    merge_world: MergeWorld,
) -> None:
    state = merge_world.fake.state
    closed = threading.Event()
    state.on_webhook(lambda name, p: closed.set() if name == "pull_request" else None)
    answer = merge(merge_world, method="squash")
    pr = state.repos[REPO].pulls[NUMBER]
    assert answer == MergeAnswer(
        "merged", 200, "Pull Request successfully merged", pr["merge_commit_sha"]
    )
    (call,) = state.calls("PUT", MERGE_PATH)
    assert call.body == {"sha": HEAD, "merge_method": "squash"}
    assert call.auth == "user:maria"
    assert pr["merged_by"]["login"] == "maria"
    assert closed.wait(5)  # sent once the answer is out, as GitHub does after the merge
    assert [(name, p["action"]) for name, p in state.sent_webhooks if name == "pull_request"] == [
        ("pull_request", "closed")
    ]
    settled = merge_world.gw.pull_settled(REPO, NUMBER)
    assert (settled.state, settled.merged_sha, settled.merged_by) == (
        "merged",
        answer.merged_sha,
        "maria",
    )


def test_a_moved_head_is_refused_in_githubs_own_words(merge_world: MergeWorld) -> None:
    push_head(merge_world.fake.state, REPO, NUMBER)
    answer = merge(merge_world)
    assert answer == MergeAnswer("refused", 409, HEAD_MODIFIED)
    assert merge_world.fake.state.repos[REPO].pulls[NUMBER]["merged"] is False


def test_a_conflict_is_refused_in_githubs_own_words(merge_world: MergeWorld) -> None:
    set_conflicting(merge_world.fake.state, REPO, NUMBER)
    assert merge(merge_world) == MergeAnswer("refused", 405, NOT_MERGEABLE)


def test_a_reader_is_refused_by_github_itself(merge_world: MergeWorld) -> None:
    assert merge(merge_world, "rita") == MergeAnswer("refused", 403, NO_ACCESS)


def test_without_contents_write_the_app_token_cannot_merge(merge_world: MergeWorld) -> None:
    merge_world.fake.state.installation_permissions["contents"] = "read"
    assert merge(merge_world) == MergeAnswer("refused", 403, NO_ACCESS)


def test_a_merge_whose_answer_never_comes_is_unknown_then_settled(
    merge_world: MergeWorld,
) -> None:
    state = merge_world.fake.state
    release = hang_next_merge(state)
    try:
        answer = merge(merge_world, timeout_s=1.0)
    finally:
        release.set()
    assert answer.outcome == "unknown"
    assert answer.status is None
    assert merging_of(state).hung.is_set()  # GitHub did merge: only the answer was lost
    assert len(state.calls("PUT", MERGE_PATH)) == 1
    settled = merge_world.gw.pull_settled(REPO, NUMBER)
    assert settled.state == "merged"
    assert settled.merged_by == "maria"


def test_a_lost_connection_after_the_merge_is_unknown_and_not_retried(
    merge_world: MergeWorld,
) -> None:
    state = merge_world.fake.state
    state.drop_next(method="PUT", path=MERGE_PATH)
    assert merge(merge_world).outcome == "unknown"
    assert len(state.calls("PUT", MERGE_PATH)) == 1
    assert state.repos[REPO].pulls[NUMBER]["merged"] is True


def test_githubs_trouble_is_unknown_and_never_retried(merge_world: MergeWorld) -> None:
    state = merge_world.fake.state
    state.fail_next(3, status=502, method="PUT", path=MERGE_PATH)
    answer = merge(merge_world)
    assert (answer.outcome, answer.status) == ("unknown", 502)
    assert len(state.calls("PUT", MERGE_PATH)) == 1


def test_a_rate_limit_is_not_waited_out_for_a_merge(merge_world: MergeWorld) -> None:
    state = merge_world.fake.state
    state.limit_secondary_next(method="PUT", path=MERGE_PATH, retry_after=1)
    answer = merge(merge_world)
    assert (answer.outcome, answer.status) == ("refused", 403)
    assert "secondary rate limit" in answer.message
    assert len(state.calls("PUT", MERGE_PATH)) == 1


def test_an_enqueue_names_the_reviewed_head_and_is_followed_to_merged(
    merge_world: MergeWorld,
) -> None:
    state = merge_world.fake.state
    state.set_rules(REPO, "main", [merge_queue_rule(REPO)])
    node = state.repos[REPO].pulls[NUMBER]["node_id"]
    answer = merge_world.gw.enqueue_pull(
        REPO, pull_node_id=node, expected_head=HEAD, user=merge_world.token("maria"),
        timeout_s=5.0,
    )  # fmt: skip
    assert (answer.outcome, answer.status) == ("queued", 200)
    (call,) = state.calls("POST", r"^/graphql$")
    assert call.body["variables"] == {"input": {"pullRequestId": node, "expectedHeadOid": HEAD}}
    assert call.auth == "user:maria"
    assert merge_world.gw.pull_settled(REPO, NUMBER).state == "open"
    finish_queue(state, REPO, NUMBER, "merged")
    assert merge_world.gw.pull_settled(REPO, NUMBER).state == "merged"


def test_an_enqueue_of_a_moved_head_is_refused_in_githubs_words(merge_world: MergeWorld) -> None:
    state = merge_world.fake.state
    state.set_rules(REPO, "main", [merge_queue_rule(REPO)])
    node = state.repos[REPO].pulls[NUMBER]["node_id"]
    push_head(state, REPO, NUMBER)
    answer = merge_world.gw.enqueue_pull(
        REPO, pull_node_id=node, expected_head=HEAD, user=merge_world.token("maria"),
        timeout_s=5.0,
    )  # fmt: skip
    assert answer.outcome == "refused"
    assert "Expected head oid does not match" in answer.message
    assert merging_of(state).queue == {}


def test_a_queue_entry_removed_or_failed_leaves_the_pull_request_open(
    merge_world: MergeWorld,
) -> None:
    state = merge_world.fake.state
    state.set_rules(REPO, "main", [merge_queue_rule(REPO)])
    node = state.repos[REPO].pulls[NUMBER]["node_id"]
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def sink(name: str, payload: dict[str, object]) -> None:
        if name == "pull_request":
            seen.append((str(payload["action"]), str(payload.get("reason"))))
            done.set()

    state.on_webhook(sink)
    merge_world.gw.enqueue_pull(
        REPO, pull_node_id=node, expected_head=HEAD, user=merge_world.token("maria"),
        timeout_s=5.0,
    )  # fmt: skip
    finish_queue(state, REPO, NUMBER, "failed")
    assert done.wait(5)
    assert seen == [("dequeued", "MERGE_CONFLICT")]
    assert merge_world.gw.pull_settled(REPO, NUMBER).state == "open"

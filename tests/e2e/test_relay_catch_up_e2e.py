"""Nothing missed during an outage: `cujo relay serve` catches up on start (issue 23).

The fake GitHub delivers the App's webhooks as GitHub does: signed, to the relay's URL,
each attempt kept in the App's delivery log. Three pull requests open while the relay
is stopped, so their webhooks fail; on start the relay asks GitHub to redeliver them and
sweeps open pull requests whose head has no `cujo/guard`, and each pull request gets
exactly one run, one check and one review. A later pass adds nothing.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from fakegithub import FakeGitHub, fake_sha, hook_log
from relayprocess import RelayProcess
from relayworld import (
    REPO,
    SECRET,
    Actions,
    open_pull,
    pull_request_event,
    set_up_repo,
    synthetic,
    wait_for,
)

from app_relay.runs.missed_webhooks import is_catch_up
from app_relay.store import Store

CATCH_UP = {
    # A pass every second, and no pull request is too fresh to sweep.
    "CUJO_CATCH_UP_EVERY_S": "1",
    "CUJO_CATCH_UP_GRACE_S": "0",
    "CUJO_RECONCILE_EVERY_S": "1",
    "CUJO_EFFECT_RETRY_S": "0.2",
    # The three pull requests share an author: caps are not what this test is about.
    "CUJO_MAX_RUNS_PER_AUTHOR": "3",
}


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def passes_finished(store: Store) -> int:
    return sum(p.finished_at is not None for p in store.catch_up_passes(100))


def checks(fake: FakeGitHub, head: str) -> list[dict[str, Any]]:
    return [c for c in fake.state.repos[REPO].check_runs.values() if c["head_sha"] == head]


def test_a_relay_stopped_while_three_pull_requests_open_catches_up_with_one_review_each(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    base = fake_sha()
    set_up_repo(fake_github, base_sha=base, policy="{}\n")
    port = free_port()
    relay = RelayProcess(fake_github, tmp_path, env=CATCH_UP, port=port)
    actions = Actions(fake_github, lambda: relay.url, synthetic()).install()
    hooks = hook_log(fake_github.state)
    hooks.url = lambda: f"http://127.0.0.1:{port}"  # the App's webhook URL
    hooks.secret = SECRET
    try:
        relay.start()
        with relay.store() as store:
            wait_for("a first catch-up pass", lambda: passes_finished(store) >= 1, 60)
        relay.stop()

        # The outage: three pull requests open; GitHub cannot reach the relay.
        heads = {n: fake_sha() for n in (1, 2, 3)}
        lost = []
        for n, head in heads.items():
            open_pull(fake_github, n, head=head, base=base)
            body = pull_request_event(fake_github, number=n, head=head, base=base)
            lost.append(hooks.deliver("pull_request", body))
        assert {d["status_code"] for d in lost} == {0}

        relay.start()
        with relay.store() as store:
            for head in heads.values():
                wait_for(
                    f"cujo/guard on {head[:12]} to complete",
                    lambda head=head: (
                        [c["status"] for c in checks(fake_github, head)] == ["completed"]
                    ),
                    120,
                )
            settled = passes_finished(store)
            # Two more passes after every review: they must add nothing.
            wait_for("two later catch-up passes", lambda: passes_finished(store) >= settled + 2, 60)
            fake_github.state.wait_for_actions(timeout_s=60)
            wait_for(
                "every delivery to be worked",
                lambda: store.count_deliveries("pending", "working") == 0,
                60,
            )
            runs = store.list_runs()
            newest = store.last_catch_up()
            recorded = store.known_deliveries(d["guid"] for d in lost)
            requests = store.review_requests()
    finally:
        relay.stop()

    # Exactly one run, one check and one review per pull request, all clean.
    assert sorted(r.pr_number for r in runs) == [1, 2, 3], relay.log()
    assert {r.state for r in runs} == {"clean"}
    for head in heads.values():
        (check,) = checks(fake_github, head)
        assert check["conclusion"] == "success"
    reviews = list(fake_github.state.repos[REPO].reviews.values())
    assert sorted(r["commit_id"] for r in reviews) == sorted(heads.values())
    assert {r["state"] for r in reviews} == {"COMMENTED"}
    assert len(actions.dispatches) == 3
    # GitHub was asked to redeliver each lost webhook, and each reached the relay.
    assert recorded == {d["guid"] for d in lost}
    asked = fake_github.state.calls("POST", r"^/app/hook/deliveries/\d+/attempts$")
    assert {hooks_guid(hooks, c.path) for c in asked} == {d["guid"] for d in lost}
    # Whichever came first (the redelivery or the sweep's own event), the other was a no-op.
    for n in heads:
        by_pr = [r for r in requests if r.pr_number == n]
        started = [r for r in by_pr if r.outcome and r.outcome.startswith("reviewed in run")]
        assert len(started) == 1, by_pr
        others = [r for r in by_pr if r not in started]
        assert all("reviews this head" in (r.outcome or "") for r in others), by_pr
        assert all(is_catch_up(r.delivery_id) or r.delivery_id in recorded for r in by_pr)
    # The later passes found nothing to do.
    assert newest is not None
    assert (newest.tally.redeliveries_asked, newest.tally.pulls_swept) == (0, 0)
    assert newest.tally.capped == ""
    assert "catch-up asked" in relay.log()


def hooks_guid(hooks: Any, path: str) -> str:
    """Return the guid of the delivery a redelivery request names."""
    delivery_id = int(path.split("/")[4])
    (guid,) = {d["guid"] for d in hooks.deliveries if d["id"] == delivery_id}
    return guid

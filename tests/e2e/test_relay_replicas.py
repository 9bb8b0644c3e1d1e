"""Two `cujo relay serve` processes on one record, one of them killed mid-work.

Both relays take webhooks for the same repository; the fake's Actions calls back
whichever is alive. One relay is SIGKILLed while runs are in flight (deliveries, runs
and effects in its hands): the other takes over what it held once the leases run out,
and every pull request ends with a final check and exactly one review. Runs on SQLite
(one file, two processes) and on PostgreSQL.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from fakegithub import FakeGitHub, fake_sha
from relayprocess import RelayProcess
from relayworld import (
    REPO,
    Actions,
    open_pull,
    post_webhook,
    pull_request_event,
    set_up_repo,
    synthetic,
    wait_for,
)

# Short leases and waits, so a dead relay's work is taken over within seconds.
FAST = {
    "CUJO_RUN_LEASE_S": "3",
    "CUJO_DELIVERY_LEASE_S": "3",
    "CUJO_EFFECT_LEASE_S": "3",
    "CUJO_EFFECT_RETRY_S": "0.2",
    "CUJO_RECONCILE_EVERY_S": "1",
}
PULLS = 6


def test_two_relays_one_killed_mid_work_leave_every_run_final_with_one_review(
    fake_github: FakeGitHub, tmp_path: Path, database_url: str
) -> None:
    base = fake_sha()
    set_up_repo(fake_github, base_sha=base, policy="{}\n")
    a = RelayProcess(fake_github, tmp_path / "a", database=database_url, env=FAST)
    b = RelayProcess(fake_github, tmp_path / "b", database=database_url, env=FAST)
    relays = [a.start(), b.start()]
    turn = itertools.cycle(relays)
    lock = threading.Lock()

    def alive_url() -> str | None:
        with lock:  # the fake's Actions threads call back whichever relay is up
            for _ in relays:
                relay = next(turn)
                if relay.url is not None:
                    return relay.url
        return None

    blocked_heads = set()
    actions = Actions(fake_github, alive_url, synthetic()).install()
    heads = {}
    try:
        for n in range(1, PULLS + 1):
            head = heads[n] = fake_sha()
            if n % 2 == 0:  # half of them exfiltrate: a blocking review each
                actions.producers[head] = synthetic(install_egress_to="collector.exfil.test")
                blocked_heads.add(head)
            open_pull(fake_github, n, head=head, base=base)
            body = pull_request_event(fake_github, number=n, head=head, base=base)
            url = alive_url()
            assert url is not None
            assert post_webhook(url, "pull_request", body).status_code == 202
            if n == PULLS // 2:
                # Kill one relay with runs claimed, dispatched and finishing in its hands.
                wait_for("three dispatches", lambda: len(actions.dispatches) >= 3, 60)
                with lock:
                    a.kill()

        def settled() -> bool:
            checks = _checks(fake_github)
            return all(
                len(checks.get(h, [])) == 1 and checks[h][0]["status"] == "completed"
                for h in heads.values()
            )

        try:
            wait_for("every pull request's check to complete", settled, 180)
        except AssertionError:
            print(_stuck(fake_github, heads, b))
            raise
        fake_github.state.wait_for_actions(timeout_s=60)
        with b.store() as store:
            wait_for(
                "every run decided and every effect made",
                lambda: (
                    not store.open_runs()
                    and store.count_effects("pending", "working") == 0
                    and store.count_deliveries("pending", "working") == 0
                ),
                120,
            )
            runs = store.list_runs(limit=100)
            assert store.count_effects("failed") == 0
            assert store.count_deliveries("failed") == 0
        assert sorted(r.pr_number or 0 for r in runs) == list(range(1, PULLS + 1)), [
            (r.pr_number, r.state) for r in runs
        ]
        by_head = {r.head_sha: r for r in runs}
        reviews = list(fake_github.state.repos[REPO].reviews.values())
        for number, head in heads.items():
            ours = [r for r in reviews if r["commit_id"] == head]
            assert len(ours) == 1, (number, len(ours), a.log()[-2000:], b.log()[-2000:])
            want = "blocked" if head in blocked_heads else "clean"
            assert by_head[head].state == want, (number, by_head[head].summary)
            (check,) = _checks(fake_github)[head]
            assert check["conclusion"] == ("failure" if want == "blocked" else "success")
    finally:
        for relay in relays:
            relay.stop()


def _checks(fake: FakeGitHub) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for check in list(fake.state.repos[REPO].check_runs.values()):
        found.setdefault(check["head_sha"], []).append(check)
    return found


def _stuck(fake_github: FakeGitHub, heads: dict[int, str], relay: RelayProcess) -> str:
    """Say where each pull request stands when the test gives up: its checks, its runs'
    events in the record, and the surviving relay's last words."""
    checks = _checks(fake_github)
    lines = []
    for n, head in heads.items():
        said = [(c["status"], c.get("conclusion")) for c in checks.get(head, [])]
        lines.append(f"pull {n} head {head[:8]}: checks {said}")
    with relay.store() as store:
        for run in store.list_runs(limit=100):
            events = [f"{e.kind}:{e.detail[:80]}" for e in store.events(run.run_id)]
            lines.append(f"run {run.run_id} {run.head_sha[:8]} {run.state}: {events}")
        lines.append(f"deliveries pending/working: {store.count_deliveries('pending', 'working')}")
    lines.append("relay b log tail:\n" + relay.log()[-6000:])
    return "\n".join(lines)

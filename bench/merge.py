"""Benchmark a merge from the run page: click to merged, on the loopback fake GitHub.

A click runs the gate's two full passes (about ten GitHub reads each), re-reads the run,
claims the head in the record and sends the merge. Printed as the median of ten clicks
(each on its own pull request and run) next to a baseline measured in the same run: one
plain ``GET /repos/{o}/{r}/pulls/{n}`` round trip through the same App gateway, so the
ratio says how many plain reads a click costs on this machine.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "fakes"))

from boardmerge import CHECK, REPO, ready_world  # noqa: E402
from boardworld import clean_verdict, pull_request_run  # noqa: E402
from fakegithub import FakeGitHubServer, FakeState, fake_sha, make_key  # noqa: E402
from fakegithub.fixture import APP_ID, INSTALLATION_ID, FakeGitHub  # noqa: E402
from fakegithub.merging import add_check_run, user_token  # noqa: E402

from app_relay.github.signin import UserToken  # noqa: E402
from app_relay.store import Store  # noqa: E402


def bench_merge(clicks: int = 10) -> dict[str, float]:
    """Print and return the median click-to-merged time and its baseline, in ms."""
    key = make_key()
    state = FakeState(app_id=APP_ID, public_key_pem=key.public_pem)
    state.add_installation(INSTALLATION_ID)
    server = FakeGitHubServer(state).start()
    fake = FakeGitHub(state, server.url, APP_ID, INSTALLATION_ID, key.private_pem)
    with tempfile.TemporaryDirectory(prefix="cujo-bench-merge-") as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'record.db'}")
        world = ready_world(fake, store)
        try:
            user = UserToken(user_token(state, "maya", {REPO}), None)
            gateway = world.desk.github.gateway_for(REPO)
            runs = []
            for n in range(clicks):
                number, head = 100 + n, fake_sha()
                state.add_pull(REPO, number, head_sha=head, base_sha=fake_sha(), author="alice")
                add_check_run(state, REPO, head, CHECK, app_id=4242)
                run_id = f"run-bench-{n}"
                pull_request_run(store, REPO, number, run_id, head_sha=head)
                store.finish_run(run_id, clean_verdict())
                runs.append((run_id, number))
            click_s, plain_s = [], []
            for run_id, number in runs:
                # Interleaved: a baseline read, then a click, on the same warm connections.
                started = time.perf_counter()
                gateway.pull_settled(REPO, number)
                plain_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                clicked = world.desk.click(run_id, login="maya", user=user, method="merge")
                click_s.append(time.perf_counter() - started)
                if clicked.outcome != "merged":
                    raise RuntimeError(
                        f"the bench's click ended {clicked.outcome}: {clicked.words}"
                    )
        finally:
            world.github.close()
            store.close()
            server.stop()
    click_ms = statistics.median(click_s) * 1e3
    plain_ms = statistics.median(plain_s) * 1e3
    print(f"merge from the run page, on the loopback fake GitHub, median of {clicks}:")
    print(f"  plain GET /pulls/{{n}} (baseline)   {plain_ms:8.1f} ms")
    print(
        f"  click to merged (2 passes + PUT)  {click_ms:8.1f} ms  "
        f"= {click_ms / plain_ms:.1f}x the baseline"
    )
    return {"click_ms": click_ms, "plain_ms": plain_ms, "ratio": click_ms / plain_ms}

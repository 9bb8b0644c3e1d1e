"""The App's webhook deliveries, its installations, and the reads of a catch-up sweep.

Through real PyGithub calls against the fake GitHub on loopback: listing deliveries by
the cursor of each ``Link`` header, asking one again (the fake then POSTs it to the
receiver, as GitHub does), and reading open pull requests and this App's guard.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fakegithub import hook_log
from githubworld import BASE, HEAD, REPO, World

from app_relay.github.answers import GitHubError
from app_relay.github.hook_deliveries import AppHookCalls, next_cursor
from app_relay.github.payloads import CheckOutput


class Receiver:
    """A webhook receiver on loopback that keeps what it was sent."""

    def __init__(self, status: int = 202) -> None:
        self.status = status
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.arrived:
                    outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    outer.arrived.notify_all()
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output clean."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, n: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.got) >= n, timeout=10), self.got

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


def hooks(world: World) -> AppHookCalls:
    return AppHookCalls(world.app)


def opened(number: int) -> dict[str, Any]:
    return {"action": "opened", "number": number, "installation": {"id": 77}}


# ---- listing deliveries --------------------------------------------------------------


def test_deliveries_are_listed_newest_first_page_by_page_following_the_link_cursor(
    world: World,
) -> None:
    log = hook_log(world.fake.state)
    made = [log.add("pull_request", opened(n), status_code=0) for n in range(1, 8)]
    listing = hooks(world).deliveries_since(0, max_pages=10, per_page=3)
    assert [d.id for d in listing.deliveries] == [d["id"] for d in reversed(made)]
    assert (listing.complete, listing.pages) == (True, 3)
    calls = world.fake.state.calls("GET", r"^/app/hook/deliveries$")
    assert [c.query.get("cursor") for c in calls] == [
        None,
        [f"v1_{made[3]['id']}"],
        [f"v1_{made[0]['id']}"],
    ]
    assert {c.auth for c in calls} == {"jwt"}  # the App's own endpoint: never a token
    first = listing.deliveries[-1]
    assert (first.event, first.action, first.status_code, first.delivered) == (
        "pull_request",
        "opened",
        0,
        False,
    )


def test_the_listing_stops_at_the_first_delivery_older_than_the_bound(world: World) -> None:
    log = hook_log(world.fake.state)
    now = time.time()
    for n, age in enumerate((5000, 4000, 300, 200, 100), 1):
        log.add("pull_request", opened(n), status_code=202, delivered_at=now - age)
    listing = hooks(world).deliveries_since(now - 1000, max_pages=10, per_page=2)
    assert [d.action for d in listing.deliveries] == ["opened"] * 3
    assert all(d.delivered for d in listing.deliveries)
    assert (listing.complete, listing.pages) == (True, 2)  # the third page was never read


def test_the_page_bound_stops_the_listing_and_says_it_is_incomplete(world: World) -> None:
    log = hook_log(world.fake.state)
    for n in range(1, 6):
        log.add("pull_request", opened(n), status_code=0)
    listing = hooks(world).deliveries_since(0, max_pages=2, per_page=2)
    assert (len(listing.deliveries), listing.complete, listing.pages) == (4, False, 2)


def test_a_malformed_delivery_fails_closed_naming_the_field(world: World) -> None:
    world.fake.state.answer_next(
        "GET", r"^/app/hook/deliveries$", json.dumps([{"id": 1, "guid": "g"}])
    )
    with pytest.raises(GitHubError, match=r"GET /app/hook/deliveries: field '\[0\]\.delivered_at"):
        hooks(world).deliveries_since(0, max_pages=1)


def test_a_link_header_without_a_next_page_ends_the_list() -> None:
    assert next_cursor("c", None) is None
    assert (
        next_cursor("c", '<https://api.github.com/app/hook/deliveries?cursor=v1_9>; rel="prev"')
        is None
    )
    assert (
        next_cursor("c", '<https://x/app/hook/deliveries?per_page=2&cursor=v1_7>; rel="next"')
        == "v1_7"
    )
    with pytest.raises(GitHubError, match="names no cursor"):
        next_cursor("c", '<https://x/app/hook/deliveries?page=2>; rel="next"')


# ---- redelivery ----------------------------------------------------------------------


def test_a_redelivery_is_posted_again_under_the_same_guid_signed_as_github_does(
    world: World, receiver: Receiver
) -> None:
    log = hook_log(world.fake.state)
    log.secret = "hook-secret"
    log.url = lambda: None  # the receiver is down
    failed = log.deliver("pull_request", opened(3), guid="guid-3")
    assert (failed["status"], failed["status_code"]) == ("failed to connect to host", 0)
    log.url = lambda: receiver.url
    hooks(world).redeliver(failed["id"])
    receiver.wait_for(1)
    ((headers, body),) = receiver.got
    assert headers["x-github-delivery"] == "guid-3"
    assert headers["x-github-event"] == "pull_request"
    assert headers["x-hub-signature-256"].startswith("sha256=")
    assert json.loads(body) == opened(3)
    (call,) = world.fake.state.calls("POST", r"^/app/hook/deliveries/\d+/attempts$")
    assert call.auth == "jwt"
    # GitHub keeps both attempts: the failed one and the redelivery, which went through.
    log.wait_for(lambda: len(log.of_guid("guid-3")) == 2)
    first, again = log.of_guid("guid-3")
    assert (first["redelivery"], again["redelivery"]) == (False, True)
    assert (again["status"], again["status_code"]) == ("OK", 202)


def test_a_redelivery_of_an_unknown_delivery_is_a_named_error(world: World) -> None:
    with pytest.raises(
        GitHubError, match=r"POST /app/hook/deliveries/99/attempts: answered HTTP 404"
    ):
        hooks(world).redeliver(99)


# ---- installations and the sweep's reads -----------------------------------------------


def test_installations_repositories_open_pulls_and_the_guard_are_read(world: World) -> None:
    installations, whole = hooks(world).installations()
    assert whole
    assert [i.id for i in installations] == [77]
    repos, whole = world.gw.installation_repos()
    assert whole
    assert [(r.full_name, r.default_branch, r.archived) for r in repos] == [(REPO, "main", False)]
    world.fake.state.add_pull(REPO, 8, head_sha=BASE, draft=True)
    world.fake.state.repos[REPO].pulls[8]["updated_at"] = "2030-01-01T00:00:00Z"
    pulls, whole = world.gw.open_pulls(REPO, updated_since=None, max_pages=2)
    assert whole
    assert [(p.number, p.head_sha, p.draft) for p in pulls] == [(8, BASE, True), (7, HEAD, False)]
    (listed,) = world.fake.state.calls("GET", rf"^/repos/{REPO}/pulls$")
    assert listed.query["sort"] == ["updated"]
    assert listed.query["direction"] == ["desc"]
    # Only those updated since the bound, and the list stops at the first older one.
    newer, _ = world.gw.open_pulls(REPO, updated_since=time.time() + 3600, max_pages=2)
    assert [p.number for p in newer] == [8]
    assert not world.gw.has_guard(REPO, HEAD)
    world.gw.create_check_run(REPO, HEAD, output=_output())
    assert world.gw.has_guard(REPO, HEAD)
    (asked, *_) = world.fake.state.calls("GET", rf"/commits/{HEAD}/check-runs$")
    assert asked.query["check_name"] == ["cujo/guard"]
    assert asked.query["app_id"] == [str(world.fake.app_id)]


def test_another_apps_guard_is_not_this_apps(world: World) -> None:
    world.gw.create_check_run(REPO, HEAD, output=_output())
    for run in world.fake.state.repos[REPO].check_runs.values():
        run["app"] = {"id": 1, "slug": "impostor"}
    assert not world.gw.has_guard(REPO, HEAD)


def _output() -> CheckOutput:
    return CheckOutput("running", "under way")

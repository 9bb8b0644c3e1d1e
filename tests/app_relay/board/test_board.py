"""The board over HTTP on loopback: the list, a run's page, its live stream, who may look."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from boardworld import (
    Served,
    alice_signs_in,
    blocked_verdict,
    clean_verdict,
    demo_exfil_run,
    errored,
    local_run,
    pull_request_run,
    relay_settings,
    sha,
)
from fakegithub import FakeGitHub, sign_ins
from repo_paths import TOP

from app_relay.board import access as board_access
from app_relay.board import board_app, view
from app_relay.store import RunEvent, Store
from app_relay.webhook.app import create_app

WEB = "https://github.example"
DEADLINE_S = 10.0
ROW = re.compile(r'<tr class="run [^"]*" data-state="(\w+)" data-run="([^"]+)">(.*?)</tr>', re.S)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/cujo.db") as opened:
        yield opened


@pytest.fixture
def board(store: Store) -> Iterator[str]:
    with Served(board_app(store, web_url=WEB, poll_s=0.05, stream_s=5)) as served:
        yield served.url


def rows(page: str) -> list[tuple[str, str, str]]:
    """Return the list's rows: state, run id and the row's text."""
    return [(s, r, re.sub(r"<[^>]+>", " ", body)) for s, r, body in ROW.findall(page)]


def get(url: str, **kw: Any) -> requests.Response:
    return requests.get(url, timeout=DEADLINE_S, **kw)


# ---------------------------------------------------------------------- the list


def test_the_list_shows_each_run_newest_first_with_what_a_maintainer_reads(store, board):
    pull_request_run(store, "octo/app", 1, "run-blocked")
    store.finish_run("run-blocked", blocked_verdict())
    pull_request_run(store, "octo/app", 2, "run-diff", mode="diff")
    store.finish_run("run-diff", clean_verdict())
    local_run(store, "/home/me/tinycalc", "local-err")
    store.finish_run("local-err", errored())
    pull_request_run(store, "octo/lib", 3, "run-open")

    page = get(f"{board}/")

    assert page.status_code == 200
    found = rows(page.text)
    assert [(s, r) for s, r, _ in found] == [
        ("running", "run-open"),
        ("error", "local-err"),
        ("clean", "run-diff"),
        ("blocked", "run-blocked"),
    ]
    text = {run: " ".join(body.split()) for _, run, body in found}
    assert text["run-blocked"].startswith(f"blocked octo/app #1 {sha(1)[:12]} sandbox review")
    # A diff review's clean is labelled, never confused with the sandbox's.
    assert f"clean octo/app #2 {sha(2)[:12]} diff review" in text["run-diff"]
    assert "error /home/me/tinycalc local" in text["local-err"]
    assert text["run-open"].endswith("so far")  # a running run's duration grows
    assert 'href="/runs/run-blocked"' in page.text


def test_the_list_filters_by_repository_and_by_state(store, board):
    for n, (repo, verdict) in enumerate(
        [("octo/app", blocked_verdict()), ("octo/app", clean_verdict()), ("octo/lib", errored())]
    ):
        pull_request_run(store, repo, n + 1, f"run-{n}")
        store.finish_run(f"run-{n}", verdict)

    def shown(query: str) -> list[str]:
        return [run for _, run, _ in rows(get(f"{board}/?{query}").text)]

    assert shown("repo=octo/app") == ["run-1", "run-0"]
    assert shown("state=blocked&state=error") == ["run-2", "run-0"]
    assert shown("repo=octo/app&state=error") == []
    assert shown("repo=octo/nothing") == []
    assert shown("") == ["run-2", "run-1", "run-0"]
    page = get(f"{board}/?repo=octo/lib").text
    assert '<option value="octo/lib" selected>' in page  # the filter says what it shows
    assert shown("fragment=rows&state=clean") == ["run-1"]  # the rows the live list fetches


def test_older_runs_are_a_page_further_on(store, board):
    for n in range(55):
        pull_request_run(store, "octo/app", n + 1, f"run-{n:02d}")

    first = get(f"{board}/?repo=octo/app").text
    more = re.search(r'<a class="more" href="([^"]+)">', first)
    assert more is not None
    second = get(board + html.unescape(more.group(1))).text

    ids = [run for _, run, _ in rows(first)] + [run for _, run, _ in rows(second)]
    assert ids == [f"run-{n:02d}" for n in reversed(range(55))]
    assert 'class="more"' not in second


# ---------------------------------------------------------------------- a run


def test_a_run_page_shows_the_demo_exfiltration_with_its_evidence(store, board, tmp_path):
    run = demo_exfil_run(store, tmp_path / "bundle")

    page = get(f"{board}/runs/{run.run_id}")

    assert page.status_code == 200
    body = page.text
    assert 'data-state="blocked">blocked</span>' in body
    assert "dangerous behaviour" in body
    assert "This block holds the merge: cujo/guard is a required check." in body
    # The finding, every rule that saw it, and its evidence in words from the reports.
    finding = body[body.index('id="finding-F1"') :]
    finding = finding[: finding.index("</article>")]
    assert "critical" in finding
    assert "decoy-egress, install-egress, runtime-egress" in finding
    assert "collector.exfil.test" in finding
    assert "decoy AWS_SECRET_ACCESS_KEY" in finding
    # Each check's status and summary from its report.
    checks = re.findall(r'<tr class="check status-(\w+)"><td>(\w+)</td>', body)
    assert [name for _, name in checks] == ["install", "detonation", "tests", "probes", "smoke"]
    # Links to the pull request, the commit and the workflow run on GitHub.
    for href in (
        f"{WEB}/octo/tinycalc/pull/12",
        f"{WEB}/octo/tinycalc/commit/{run.head_sha}",
        f"{WEB}/octo/tinycalc/actions/runs/5150",
        f"{WEB}/octo/tinycalc/runs/4321",
    ):
        assert f'href="{href}"' in body
    # The timeline, oldest first.
    labels = re.findall(r'<span class="what">([^<]+)</span>', body)
    assert labels == ["claimed", "dispatched to the sandbox", "verdict: blocked"]


def test_a_run_page_names_who_dismissed_the_block_and_who_reinstated_it(store, board):
    pull_request_run(store, "octo/app", 4, "run-1")
    store.finish_run("run-1", blocked_verdict())
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    for n, (verb, author, to) in enumerate(
        [("dismiss", "bob", "dismissed"), ("reinstate", "carol", "blocked")]
    ):
        command = store.record_command(
            delivery_id=None,  # type: ignore[arg-type]
            repo="octo/app",
            pr_number=4,
            comment_id=100 + n,
            author=author,
            author_type="User",
            verb=verb,  # type: ignore[arg-type]
            created_at=at + timedelta(minutes=n),
        )
        assert store.move("run-1", to, f"by {author}", command=(command.id, f"by {author}"))
        if verb == "dismiss":
            dismissed = get(f"{board}/runs/run-1").text
            assert 'data-state="dismissed">dismissed</span>' in dismissed
            assert "Dismissed by <b>bob</b>" in dismissed
            assert "reinstated" not in dismissed

    page = get(f"{board}/runs/run-1").text
    assert 'data-state="blocked">blocked</span>' in page
    assert "Dismissed by <b>bob</b>" in page
    assert "reinstated since by <b>carol</b>" in page
    assert "dismiss by bob: applied" in page  # the command events on the timeline


def test_text_from_a_pull_request_is_inert_on_the_page(store, board):
    pull_request_run(store, "octo/app", 5, "run-1")
    store.add_event("run-1", "sandbox", "<script>alert('event')</script>")
    store.finish_run("run-1", blocked_verdict(title='<img src=x onerror="alert(1)">'))

    page = get(f"{board}/runs/run-1")

    assert "<script>alert" not in page.text
    assert "<img src=x" not in page.text
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp


def test_the_local_board_answers_only_to_its_loopback_name(board):
    # A page elsewhere whose name is made to resolve to 127.0.0.1 (DNS rebinding) must not
    # read the record through the browser.
    assert get(f"{board}/", headers={"Host": "evil.example:8765"}).status_code == 400
    assert get(f"{board}/", headers={"Host": "localhost:8765"}).status_code == 200


def test_an_unknown_run_is_a_404(board):
    page = get(f"{board}/runs/nope")
    assert page.status_code == 404
    assert "No such run" in page.text


def test_a_run_without_reports_says_why_it_lists_no_checks(store, board):
    pull_request_run(store, "octo/app", 6, "run-diff", mode="diff")
    pull_request_run(store, "octo/app", 7, "run-open")
    store.add_event("run-open", "step", "prepare: completed (success)")
    store.add_event("run-open", "step", "install: in_progress")

    diff = get(f"{board}/runs/run-diff").text
    running = get(f"{board}/runs/run-open").text

    assert "a diff review runs no sandbox checks" in diff
    assert 'id="mode">diff review</dd>' in diff
    assert re.findall(
        r'<tr class="check status-[^"]*"><td>(\w+)</td><td>([^<]+)</td>', running
    ) == [
        ("prepare", "completed (success)"),
        ("install", "in_progress"),
    ]


def test_the_workflows_steps_and_the_local_stages_fold_into_one_line_per_stage() -> None:
    at = datetime.now(UTC)
    steps = [
        "Set up job: completed (success)",  # a step of the job that is not a stage
        "Tests: in_progress",  # the reusable workflow's step
        "Prepare: completed (success)",
        "tests: completed (skipped)",  # the local run's stage mark, later
    ]
    events = [RunEvent(n, "r", at, "step", detail) for n, detail in enumerate(steps)]

    lines = view.stages_from_steps(events)

    assert [(line.name, line.status) for line in lines] == [
        ("prepare", "completed (success)"),
        ("tests", "completed (skipped)"),
        ("Set up job", "completed (success)"),
    ]


# ---------------------------------------------------------------------- live


class Stream:
    """Read a server-sent event stream: each message as (event, id, data)."""

    def __init__(self, url: str, **headers: str) -> None:
        self.answer = requests.get(url, stream=True, timeout=DEADLINE_S, headers=headers)
        self.lines = self.answer.iter_lines(decode_unicode=True)

    def until(self, event: str, text: str = "") -> tuple[str | None, str]:
        """Read messages until one of ``event`` holding ``text``; return its id and data."""
        deadline = time.monotonic() + DEADLINE_S
        name, ident, data = "message", None, []
        for line in self.lines:
            assert time.monotonic() < deadline, f"no {event} holding {text!r} came"
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "":
                if name == event and text in "\n".join(data):
                    return ident, "\n".join(data)
                name, data = "message", []
        raise AssertionError("the stream ended")

    def events_for(self, seconds: float) -> list[str]:
        """Return the names of the messages that came within ``seconds``."""
        # The stream sends a comment every poll, so reading never waits long past it.
        deadline = time.monotonic() + seconds
        names = []
        for line in self.lines:
            if line.startswith("event: "):
                names.append(line[7:])
            if time.monotonic() > deadline:
                return names
        raise AssertionError("the stream ended")

    def close(self) -> None:
        self.answer.close()


def live_url(page: str) -> str:
    found = re.search(r'data-run-live="([^"]+)"', page)
    assert found is not None
    return html.unescape(found.group(1))


def test_a_run_page_streams_new_events_and_the_run_as_it_changes(store, board):
    pull_request_run(store, "octo/app", 8, "run-1")
    page = get(f"{board}/runs/run-1").text
    stream = Stream(board + live_url(page))
    try:
        assert stream.answer.headers["content-type"].startswith("text/event-stream")
        event_id = store.add_event("run-1", "dispatched", "workflow run 77")
        ident, data = stream.until("timeline", "workflow run 77")
        assert ident is not None
        assert ident.startswith(f"{event_id}-")
        assert f'<li id="ev-{event_id}"' in data

        store.move_open("run-1", "running", "waiting", "the required reviewers of `sandbox`")
        _, line = stream.until("timeline", "waiting on a person")
        assert "st-waiting" in line
        _, body = stream.until("run", 'data-state="waiting"')
        assert "the sandbox job waits on a person" in body

        store.finish_run("run-1", blocked_verdict())
        _, body = stream.until("run", 'data-state="blocked"')
        assert 'id="finding-F1"' in body
    finally:
        stream.close()


def test_a_resumed_stream_sends_only_what_came_after_the_last_event_it_sent(store, board):
    pull_request_run(store, "octo/app", 9, "run-1")
    page = get(f"{board}/runs/run-1").text
    first = store.add_event("run-1", "sandbox", "workflow_run requested")
    stream = Stream(board + live_url(page))
    ident, _ = stream.until("timeline", "workflow_run requested")
    stream.close()
    store.add_event("run-1", "sandbox", "workflow_job queued")
    version = re.search(r"v=(\w+)", live_url(page))
    assert version is not None
    assert ident == f"{first}-{version.group(1)}"

    resumed = Stream(f"{board}/runs/run-1/live", **{"Last-Event-ID": ident})
    try:
        _, data = resumed.until("timeline")
        assert "workflow_job queued" in data
        assert "workflow_run requested" not in data
        assert "claimed" not in data
        # The run did not change since that id: its body is not sent again.
        assert "run" not in resumed.events_for(0.3)
    finally:
        resumed.close()


def test_the_list_stream_says_when_the_rows_shown_changed(store, board):
    pull_request_run(store, "octo/app", 10, "run-1")
    pull_request_run(store, "octo/lib", 11, "run-2")
    page = get(f"{board}/?repo=octo/app").text
    found = re.search(r'data-list-live="([^"]+)"', page)
    assert found is not None
    stream = Stream(board + html.unescape(found.group(1)))
    try:
        store.finish_run("run-2", blocked_verdict())  # another list's row: nothing to say
        store.add_event("run-1", "dispatched", "workflow run 1")  # no row of it changes
        assert stream.events_for(0.5) == []
        store.finish_run("run-1", clean_verdict())
        stream.until("changed")
        rows_now = get(f"{board}/?repo=octo/app&fragment=rows").text
        assert [(s, r) for s, r, _ in rows(rows_now)] == [("clean", "run-1")]
    finally:
        stream.close()


# ---------------------------------------------------------------------- who may look


def test_a_relay_without_an_oauth_client_shows_nobody_a_run(store, monkeypatch):
    monkeypatch.delenv("CUJO_OAUTH_CLIENT_ID", raising=False)
    monkeypatch.delenv("CUJO_OAUTH_CLIENT_SECRET", raising=False)
    pull_request_run(store, "octo/secret-app", 1, "run-hidden")
    store.finish_run("run-hidden", blocked_verdict())

    with Served(create_app(relay_settings(store), store)) as relay:
        answers = [get(f"{relay.url}{path}") for path in ("/", "/runs/run-hidden")]
        streams = [get(f"{relay.url}{path}") for path in ("/live", "/runs/run-hidden/live")]
        assert get(f"{relay.url}/healthz").json() == {"status": "ok"}

    for answer in answers + streams:
        assert answer.status_code == 401
        assert "run-hidden" not in answer.text
        assert "octo/secret-app" not in answer.text
        assert "CUJO_OAUTH_CLIENT_ID" in answer.text
        assert 'id="signin"' not in answer.text  # nobody can sign in, so no button


@pytest.fixture
def github_board(
    store: Store, fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, FakeGitHub]]:
    """The relay's board signing people in with the fake GitHub's OAuth client."""
    people = alice_signs_in(fake_github, monkeypatch.setenv)
    for n, repo in enumerate(("octo/open", "octo/secret")):
        pull_request_run(store, repo, n + 1, f"run-{repo.split('/')[1]}")
        store.finish_run(f"run-{repo.split('/')[1]}", blocked_verdict())
    with Served(create_app(relay_settings(store, fake_github.url), store)) as relay:
        people.callback_urls = {f"{relay.url}/signin/callback"}
        yield relay.url, fake_github


def test_signing_in_with_github_shows_the_runs_of_readable_repositories_only(github_board):
    url, fake = github_board
    browser = requests.Session()

    signed_out = browser.get(f"{url}/runs/run-open", timeout=DEADLINE_S)
    assert signed_out.status_code == 401
    assert "octo/open" not in signed_out.text
    assert "blocked" not in signed_out.text
    start = re.search(r'id="signin" href="([^"]+)"', signed_out.text)
    assert start is not None

    landed = browser.get(url + html.unescape(start.group(1)), timeout=DEADLINE_S)

    # GitHub sent the browser back; the relay traded the code and went where it began.
    assert landed.status_code == 200
    assert landed.url == f"{url}/runs/run-open"
    assert "signed in as <b>alice</b>" in landed.text
    listed = browser.get(f"{url}/", timeout=DEADLINE_S).text
    assert [run for _, run, _ in rows(listed)] == ["run-open"]
    assert "octo/secret" not in listed
    hidden = browser.get(f"{url}/runs/run-secret", timeout=DEADLINE_S)
    assert hidden.status_code == 404
    assert "octo/secret" not in hidden.text
    hidden_stream = browser.get(f"{url}/runs/run-secret/live", timeout=DEADLINE_S)
    assert hidden_stream.status_code == 404
    assert browser.get(f"{url}/?repo=octo/secret", timeout=DEADLINE_S).text.count("data-run=") == 0
    # What the fake was asked: the code traded with the client's secret, then the user's
    # installations and their repositories with the user's token.
    [trade] = fake.state.calls("POST", r"^/login/oauth/access_token$")
    assert trade.auth == "none"
    assert "client_secret=" in trade.body
    assert "code=" in trade.body
    listings = fake.state.calls("GET", r"^/user/installations")
    assert listings
    assert {r.auth for r in listings} == {"user:alice"}


def test_the_session_cookie_is_sealed_http_only_and_kept_to_this_site(github_board):
    url, fake = github_board
    browser = requests.Session()
    back = browser.get(f"{url}/signin?next=/", timeout=DEADLINE_S, allow_redirects=False)
    github = browser.get(back.headers["location"], timeout=DEADLINE_S, allow_redirects=False)
    landed = browser.get(github.headers["location"], timeout=DEADLINE_S, allow_redirects=False)

    assert landed.status_code == 303
    cookie = next(
        c for c in landed.raw.headers.getlist("set-cookie") if c.startswith("cujo_board=")
    )
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Path=/" in cookie
    tokens = list(sign_ins(fake.state).tokens)
    assert tokens
    assert not any(token in cookie for token in tokens)
    assert "alice" not in cookie


def test_a_sign_in_that_did_not_start_here_is_refused(github_board):
    url, _ = github_board
    browser = requests.Session()

    def to_github() -> str:
        back = browser.get(f"{url}/signin", timeout=DEADLINE_S, allow_redirects=False)
        github = browser.get(back.headers["location"], timeout=DEADLINE_S, allow_redirects=False)
        return str(github.headers["location"])

    callback = to_github()
    forged = re.sub(r"state=[^&]+", "state=forged", callback)

    # Another browser (no sign-in cookie), then this one with a state it never made.
    assert requests.get(callback, timeout=DEADLINE_S).status_code == 400
    assert browser.get(forged, timeout=DEADLINE_S, allow_redirects=False).status_code == 400
    # The real one works once; its code cannot be traded again, even with a fresh state.
    assert browser.get(callback, timeout=DEADLINE_S, allow_redirects=False).status_code == 303
    fresh_state = re.search(r"state=([^&]+)", to_github())
    assert fresh_state is not None
    replayed = re.sub(r"state=[^&]+", f"state={fresh_state.group(1)}", callback)
    again = browser.get(replayed, timeout=DEADLINE_S, allow_redirects=False)
    assert again.status_code == 400
    assert "bad_verification_code" in again.text


def test_after_sign_in_only_a_path_on_this_board_is_followed(github_board):
    url, _ = github_board
    browser = requests.Session()
    landed = browser.get(f"{url}/signin?next=//evil.example/x", timeout=DEADLINE_S)
    assert landed.url == f"{url}/"


def test_a_revoked_token_signs_the_person_out(store, fake_github, monkeypatch):
    fake_github.add_repo("octo/open")
    people = sign_ins(fake_github.state)
    people.add_user("alice", {"octo/open"})
    people.signed_in_as = "alice"
    pull_request_run(store, "octo/open", 1, "run-open")
    github = board_access.GitHubSignIn(
        client_id=people.client_id,
        client_secret=people.client_secret,
        web_url=fake_github.url,
        api_url=fake_github.url,
    )
    access = board_access.GitHubAccess(
        github, board_access.session_key({}, people.client_secret), recheck_s=0
    )
    with Served(board_app(store, access)) as served:
        browser = requests.Session()
        assert "run-open" in browser.get(f"{served.url}/signin", timeout=DEADLINE_S).text
        people.revoke("alice")
        after = browser.get(f"{served.url}/", timeout=DEADLINE_S)
    assert after.status_code == 401
    assert "run-open" not in after.text


# ---------------------------------------------------------------------- cujo board


def test_cujo_board_serves_the_local_record_on_loopback_until_ctrl_c(tmp_path):
    data = tmp_path / "data"
    with Store(f"sqlite:///{data}/cujo.db") as record:
        local_run(record, "/home/me/tinycalc", "local-one")
        record.finish_run("local-one", blocked_verdict())
    env = {**os.environ, "PYTHONPATH": str(TOP), "CUJO_DATABASE_URL": ""}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app_relay.cli.main",
            "board",
            "--port",
            "0",
            "--data-dir",
            str(data),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as board:
        try:
            assert board.stdout is not None
            line = board.stdout.readline()
            found = re.match(r"cujo board: (http://127\.0\.0\.1:\d+/) ", line)
            assert found, line
            page = get(found.group(1))
            assert [(s, r) for s, r, _ in rows(page.text)] == [("blocked", "local-one")]
            board.send_signal(signal.SIGINT)
            assert board.wait(DEADLINE_S) == 0
        finally:
            if board.poll() is None:
                board.kill()


# ---------------------------------------------------------------------- plain values


T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_lengths_of_time_read_as_a_person_says_them():
    assert [view.span(s) for s in (0, 59, 61, 599, 600, 3599, 3600, 7260, 90_000)] == [
        "0 s", "59 s", "1 min 1 s", "9 min 59 s", "10 min", "59 min", "1 h", "2 h 1 min", "1 d",
    ]  # fmt: skip
    assert view.duration(T, None, T + timedelta(seconds=5)) == "5 s so far"
    assert view.age(T, T + timedelta(minutes=3)) == "3 min ago"


def test_every_state_has_its_colour_class_and_its_word():
    assert set(view.LOOKS) == {
        "running", "waiting", "clean", "unproven", "blocked", "dismissed", "error", "superseded",
    }  # fmt: skip
    for state, look in view.LOOKS.items():
        assert look.word == state
        assert look.css == f"st-{state}"
    css = (TOP / "app_relay" / "board" / "static" / "board.css").read_text()
    # Red is reserved: only blocked is drawn with it.
    red = re.findall(r"([^{}]+?)\s*\{[^}]*var\(--red\)", css)
    assert [selector.strip() for selector in red] == [
        ".badge.st-blocked",
        "tr.run.st-blocked",
        ".run-head.st-blocked",
        "#timeline .entry.st-blocked",
        ".finding.sev-critical .sev",
    ]


def test_the_timeline_names_what_happened():
    def event(n: int, kind: str, detail: str) -> RunEvent:
        return RunEvent(n, "r", T + timedelta(seconds=n), kind, detail)

    lines = view.timeline(
        [
            event(1, "state", "running"),
            event(2, "dispatched", "workflow run 9"),
            event(3, "state", "waiting: the required reviewers"),
            event(4, "state", "running: approved"),
            event(5, "state", "blocked"),
            event(6, "something-new", "kept as it is"),
        ],
        [],
    )
    assert [(e.label, e.detail) for e in lines] == [
        ("claimed", ""),
        ("dispatched to the sandbox", "workflow run 9"),
        ("waiting on a person", "the required reviewers"),
        ("running again", "approved"),
        ("verdict: blocked", ""),
        ("something-new", "kept as it is"),
    ]


def test_a_local_review_has_no_links_and_github_web_is_found_beside_the_api():
    assert (
        view.links(
            WEB, repo="/home/me/repo", session_kind="local", pr_number=None,
            head_sha="a" * 40, workflow_run_id=None, check_run_id=None, review_id=None,
        )
        == []
    )  # fmt: skip
    assert board_access.web_url_of("https://api.github.com", {}) == "https://github.com"
    assert board_access.web_url_of("https://ghe.example/api/v3", {}) == "https://ghe.example"
    assert (
        board_access.web_url_of("https://api.github.com", {"CUJO_GITHUB_WEB_URL": "http://x/"})
        == "http://x"
    )

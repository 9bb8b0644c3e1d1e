"""The board over a pull request ready to merge on the fake GitHub, and its clean run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from boardworld import clean_verdict, pull_request_run
from cryptography.fernet import Fernet
from fakegithub import FakeGitHub
from fakegithub.merging import add_check_run, user_token
from fakegithub.state import required_checks_rules
from fastapi import FastAPI
from githubworld import Clock, make_app

from app_relay.board.access import ACTION_COOKIE, SESSION_COOKIE, GitHubAccess
from app_relay.board.pages import board_router
from app_relay.github.app_auth import GitHubApp
from app_relay.github.signin import UserToken
from app_relay.merge.attempt import AppMerges, MergeDesk
from app_relay.store import Store

REPO = "octo/app"
NUMBER = 7
HEAD = "a" * 40
BASE = "b" * 40
CHECK = "ci/test"


class NobodyElse:
    """The board's sign-in port: everyone here reads the one repository."""

    client_id = "Iv1.test"
    web_url = "http://127.0.0.1:9"

    def exchange(self, code: str, redirect_uri: str) -> UserToken:
        raise AssertionError("no sign-in happens in these tests")

    def login(self, token: UserToken) -> str:
        raise AssertionError("no sign-in happens in these tests")

    def readable_repos(self, token: UserToken) -> frozenset[str]:
        return frozenset({REPO})


@dataclass
class BoardMerge:
    """The fake GitHub, the App, the record, the desk and the board's app."""

    fake: FakeGitHub
    github: GitHubApp
    store: Store
    desk: MergeDesk
    access: GitHubAccess
    app: FastAPI
    run_id: str = "run-1"
    tokens: dict[str, str] = field(default_factory=dict)

    def cookies(self, login: str, session_id: str = "s-1") -> dict[str, str]:
        """Return the board's two session cookies for ``login`` (minted on the fake)."""
        if login not in self.tokens:
            kind = "Bot" if login.endswith("[bot]") else "User"
            self.tokens[login] = user_token(self.fake.state, login, {REPO}, kind=kind)
        sealed = self.access._seal(
            {"l": login, "t": self.tokens[login], "x": None, "s": session_id}
        )
        return {SESSION_COOKIE: sealed, ACTION_COOKIE: sealed}

    def form(self, session_id: str = "s-1", run_id: str | None = None, method: str = "merge"):
        """Return the merge form a page of ``run_id`` shows in session ``session_id``."""
        run = run_id or self.run_id
        return {"run": run, "token": self.access.action_token(session_id, run), "method": method}

    def puts(self) -> int:
        """Count the merge calls the fake received."""
        return len(self.fake.state.calls("PUT", f"/repos/{REPO}/pulls/{NUMBER}/merge"))


def ready_world(fake: FakeGitHub, store: Store, *, contents: str = "write") -> BoardMerge:
    """Make a pull request every part of the gate passes, its clean run, and the board."""
    fake.add_repo(REPO)
    state = fake.state
    state.add_pull(REPO, NUMBER, head_sha=HEAD, base_sha=BASE, author="alice")
    repo = state.repos[REPO]
    repo.roles.update({"maya": "write", "ola": "maintain", "rita": "read", "alice": "read"})
    repo.roles["deploy[bot]"] = "admin"
    state.set_rules(REPO, "main", required_checks_rules(REPO, {"context": CHECK}, strict=True))
    add_check_run(state, REPO, HEAD, CHECK, app_id=4242)
    state.installation_permissions["contents"] = contents
    pull_request_run(store, REPO, NUMBER, "run-1", head_sha=HEAD)
    store.finish_run("run-1", clean_verdict())
    github = make_app(fake, Clock(time.time()), [], timeout_s=5)
    desk = MergeDesk(store, AppMerges(github), app_id=fake.app_id, call_timeout_s=2.0)
    access = GitHubAccess(NobodyElse(), Fernet.generate_key())  # type: ignore[arg-type]
    app = FastAPI()
    app.include_router(board_router(store, access, web_url=fake.url, desk=desk, poll_s=0.05))
    return BoardMerge(fake, github, store, desk, access, app)

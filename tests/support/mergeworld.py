"""A pull request ready to merge on the fake GitHub, a gateway, and people with user tokens.

The base ``main`` requires ``cujo/guard`` pinned to this App and ``ci`` from any source,
strict (branches must be up to date); both passed on the reviewed head; the App may
write contents (the ``--merge`` opt-in). ``maria`` may write, ``rita`` only read,
``alice`` wrote the pull request without write access, ``helper[bot]`` is a Bot.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fakegithub import FakeGitHub, required_checks_rules
from fakegithub.merging import add_check_run, user_token
from githubworld import Clock, make_app

from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.github.signin import UserToken
from app_relay.merge.gate import RunFacts

REPO = "octo/widgets"
NUMBER = 7
HEAD = "a" * 40
CI_APP = 15368  # GitHub Actions


@dataclass
class MergeWorld:
    """The fake, a gateway onto it, the reviewed run, and each person's token."""

    fake: FakeGitHub
    app: GitHubApp
    gw: GitHubGateway
    run: RunFacts
    tokens: dict[str, UserToken]

    def token(self, login: str) -> UserToken:
        """Return the user access token of ``login``."""
        return self.tokens[login]


def set_strict_rules(fake: FakeGitHub, *, strict: bool = True) -> None:
    """Require the guard (pinned to this App) and ``ci`` on ``main``, strict or not."""
    fake.state.set_rules(
        REPO,
        "main",
        required_checks_rules(
            REPO,
            {"context": "cujo/guard", "integration_id": fake.app_id},
            {"context": "ci"},
            strict=strict,
        ),
    )


@pytest.fixture
def merge_world(fake_github: FakeGitHub) -> Iterator[MergeWorld]:
    state = fake_github.state
    fake_github.add_repo(REPO)
    state.add_pull(REPO, NUMBER, head_sha=HEAD, author="alice")
    state.installation_permissions["contents"] = "write"
    set_strict_rules(fake_github)
    add_check_run(state, REPO, HEAD, "cujo/guard", app_id=fake_github.app_id)
    add_check_run(state, REPO, HEAD, "ci", app_id=CI_APP)
    tokens = {}
    for login, role, kind in [
        ("maria", "write", "User"),
        ("rita", "read", "User"),
        ("alice", "read", "User"),
        ("helper[bot]", "write", "Bot"),
    ]:
        state.set_role(REPO, login, role)
        tokens[login] = UserToken(user_token(state, login, {REPO}, kind=kind), None)
    app = make_app(fake_github, Clock(), [])
    gw = app.gateway(fake_github.installation_id)
    run = RunFacts(REPO, NUMBER, HEAD, "main", "clean", None)
    yield MergeWorld(fake_github, app, gw, run, tokens)
    gw.close()
    app.close()

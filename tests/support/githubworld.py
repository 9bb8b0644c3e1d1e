"""A fake GitHub with one repository and pull request, and a gateway onto it (github tests)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from fakegithub import FakeGitHub

from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway

REPO = "octo/widgets"
HEAD = "a" * 40
BASE = "b" * 40


@dataclass
class Clock:
    """A clock the test moves by hand."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """A fake GitHub with one repository, one pull request, and a gateway onto it."""

    fake: FakeGitHub
    app: GitHubApp
    gw: GitHubGateway
    clock: Clock
    sleeps: list[float]

    def app_with(self, **kw: object) -> GitHubApp:
        """Build another App client against the same fake."""
        return make_app(self.fake, self.clock, self.sleeps, **kw)


def make_app(fake: FakeGitHub, clock: Clock, sleeps: list[float], **kw: object) -> GitHubApp:
    """Build an App client for the fake, with no pacing and a recorded backoff."""
    settings: dict[str, object] = {
        "app_id": fake.app_id,
        "private_key": fake.private_key_pem,
        "base_url": fake.url,
        "timeout_s": 5,
        "attempts": 3,
        "backoff_s": 0.01,
        "seconds_between_requests": None,
        "seconds_between_writes": None,
        "clock": clock,
        "sleep": sleeps.append,
        "jitter": lambda: 0.0,  # the backoff as written; its spread is tested on its own
    }
    settings.update(kw)
    return GitHubApp(**settings)  # type: ignore[arg-type]


@pytest.fixture
def world(fake_github: FakeGitHub) -> Iterator[World]:
    fake_github.add_repo(REPO)
    fake_github.state.add_pull(REPO, 7, head_sha=HEAD, base_sha=BASE, author="alice")
    clock, sleeps = Clock(), []
    app = make_app(fake_github, clock, sleeps)
    gw = app.gateway(fake_github.installation_id)
    yield World(fake_github, app, gw, clock, sleeps)
    gw.close()
    app.close()


def only(world: World, method: str, path: str) -> dict[str, object]:
    """Return the JSON body of the one request that matched."""
    calls = world.fake.state.calls(method, path)
    assert len(calls) == 1, calls
    body = calls[0].body
    assert isinstance(body, dict)
    return body

"""RunCoordinator in process, against the fake GitHub, a real record and ActionsRunner."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fakegithub import FakeGitHub, fake_sha
from relayworld import (
    REPO,
    Actions,
    Producer,
    pull_request_event,
    set_up_repo,
    synthetic,
)

from app_relay.decide.judge import DeterministicJudge
from app_relay.github.app_auth import GitHubApp
from app_relay.github.event import Event
from app_relay.github.protection import HoldCache
from app_relay.model.port import ModelPort
from app_relay.runs.coordinator import RunCoordinator
from app_relay.runs.effects import OutboxConfig
from app_relay.runs.review_request import review_request_of
from app_relay.runs.runners import ActionsRunner
from app_relay.runstate.caps import Caps
from app_relay.store import Store
from app_relay.verbs.unlock import Unlock
from cujo_action.schema import utcnow

BASE = fake_sha()
# Tests that are not about the caps on runs in flight are not held up by them.
NO_CAPS = Caps(repo=1000, author=1000)


class World:
    """A coordinator wired to the fake GitHub, with Actions that never call back."""

    def __init__(
        self,
        fake: FakeGitHub,
        tmp: Path,
        policy: str | None,
        model: ModelPort | None = None,
        hold_cache: HoldCache | None = None,
        relay_clock: Callable[[], datetime] | None = None,
        app: dict[str, Any] | None = None,  # more GitHubApp arguments (a clock, a sleep)
        caps: Caps = NO_CAPS,
    ) -> None:
        self.fake = fake
        # The relay's own clock (the record's), which a test may set apart from GitHub's.
        self.store = Store(f"sqlite:///{tmp / 'runs.db'}", clock=relay_clock or utcnow)
        self.app = GitHubApp(
            app_id=fake.app_id,
            private_key=fake.private_key_pem,
            base_url=fake.url,
            seconds_between_requests=None,
            seconds_between_writes=None,
            **(app or {}),
        )
        set_up_repo(fake, base_sha=BASE, policy=policy)
        gateway = self.app.gateway(fake.installation_id)
        self.coordinator = RunCoordinator(
            self.store,
            self.app.gateway,
            ActionsRunner.with_gateway(gateway),
            DeterministicJudge(require_full_isolation=True),
            verbs=Unlock,
            bundles=tmp / "bundles",
            # Retry a failed effect at once: the test drives the drains itself.
            outbox=OutboxConfig(retry_s=0.0),
            model=model,
            hold_cache=hold_cache,
            caps=caps,
        )
        self.actions = Actions(fake, lambda: None, synthetic()).install()
        self.n = 0

    def open(
        self,
        number: int,
        head: str,
        *,
        author: str = "alice",
        association: str = "MEMBER",
        **kw: Any,
    ) -> None:
        """Open a pull request (by ``author``) and hand its webhook to the coordinator."""
        self.fake.state.add_pull(
            REPO, number, head_sha=head, base_sha=BASE, author=author, association=association
        )
        self.fake.state.set_pull_files(REPO, number, kw.pop("files", None) or ["tinycalc/calc.py"])
        body = pull_request_event(self.fake, number=number, head=head, base=BASE, **kw)
        self.coordinator.request_review(review_request_of(self.event("pull_request", body)))

    def review(self, number: int, producer: Producer) -> str:
        """Open a pull request on a new head whose sandbox run ``producer`` makes; finish it."""
        head = fake_sha()
        self.actions.producers[head] = producer
        self.open(number, head)
        self.complete()
        return head

    def event(self, name: str, body: dict[str, Any]) -> Event:
        """Record a delivery, as the webhook does, and return its parsed event."""
        self.n += 1
        raw = json.dumps(body).encode()
        self.store.record_delivery(f"d-{self.n}", name, body.get("action"), None, REPO, raw)
        return Event.parse(f"d-{self.n}", name, raw)

    def complete(self) -> None:
        """Let Actions finish and hand every completion webhook to the coordinator."""
        self.fake.state.wait_for_actions(timeout_s=60)
        for _, body in self.actions.undelivered:
            self.coordinator.follow(self.event("workflow_run", body))

    def checks(self, head: str) -> list[dict[str, Any]]:
        return [c for c in self.fake.state.repos[REPO].check_runs.values() if c["head_sha"] == head]

    def reviews(self) -> list[dict[str, Any]]:
        return list(self.fake.state.repos[REPO].reviews.values())

    def reactions(self) -> set[str]:
        return {r["content"] for r in self.fake.state.repos[REPO].reactions}


@pytest.fixture
def make(fake_github: FakeGitHub, tmp_path: Path) -> Iterator[Any]:
    worlds: list[World] = []

    def build(
        policy: str | None = "{}\n",
        model: ModelPort | None = None,
        hold_cache: HoldCache | None = None,
        relay_clock: Callable[[], datetime] | None = None,
        caps: Caps = NO_CAPS,
        **app: Any,
    ) -> World:
        worlds.append(
            World(fake_github, tmp_path, policy, model, hold_cache, relay_clock, app, caps)
        )
        return worlds[-1]

    yield build
    for w in worlds:
        w.app.close()
        w.store.close()

"""What every step of a run works with: the record, GitHub, the run's lease, the outbox."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app_relay.github.client import GitHubGateway
from app_relay.runs.effects import Outbox
from app_relay.runs.lease import RunLeases
from app_relay.store import Store


@dataclass(frozen=True)
class RunDesk:
    """The coordinator's own record, GitHub clients, leases and outbox, shared by its steps.

    Starting, following and finishing a run, and applying a verb, all move a run through
    this one desk: a verb moves a run as the coordinator does, never beside it.
    """

    store: Store
    github_for: Callable[[int], GitHubGateway]
    leases: RunLeases
    outbox: Outbox

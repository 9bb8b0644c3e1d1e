"""Catch up after an outage: redeliver the webhooks that never arrived, sweep what they missed.

GitHub does not redeliver a failed webhook by itself. On start and every few minutes a
pass does what GitHub's guide "Handling failed webhook deliveries" does: it lists the
App's deliveries since the last pass, picks those none of whose attempts reached the
relay and that the record does not hold, and asks GitHub for each again (the relay
takes the redelivery as any webhook, under its own delivery id). Then it sweeps each
installation's open pull requests: a head the record never took further and that
carries no ``cujo/guard`` from this App is handed to the workers as a ``pull_request``
event of the relay's own (its delivery id starts ``catchup-``), so it is reviewed
through the same start a webhook takes.

Idempotent with the delivery-id dedup: a redelivery the record holds is never asked
again, a pull request's own event and its catch-up event start one run between them
(``runs/start.py``), and a second pass finds nothing left. Bounded: each pass asks at
most so many redeliveries and sweeps at most so many pull requests, and says so, in the
log and on the board, when a cap stopped it. Relays sharing a record take turns
(``store/catchup_passes.py``).
https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from app_relay.github.answers import GitHubError
from app_relay.github.catchup_reads import InstalledRepo, OpenPull
from app_relay.github.client import GitHubGateway
from app_relay.github.hook_deliveries import AppHookCalls, AppRequests, HookDelivery
from app_relay.github.vocab import GUARD
from app_relay.store import CatchUpStart, CatchUpTally, NewDelivery, Store
from app_relay.store.tables import holder_name

log = logging.getLogger(__name__)

# The delivery ids of the relay's own events; GitHub's are GUIDs, never this.
CATCH_UP_PREFIX = "catchup-"
# GitHub redelivers a webhook delivery for three days; a pass looks back a little less,
# so it never asks for one GitHub has just let go.
# https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks
WINDOW_S = 71 * 3600.0
# The action of a catch-up event: it asks a review of the head as a push would.
CATCH_UP_ACTION = "synchronize"


class _PullsCapped(Exception):
    """The sweep reached its cap on pull requests: the pass stops sweeping."""


def is_catch_up(delivery_id: str | None) -> bool:
    """Say whether a delivery is one the relay's catch-up made (not GitHub)."""
    return delivery_id is not None and delivery_id.startswith(CATCH_UP_PREFIX)


@dataclass(frozen=True)
class CatchUpConfig:
    """How often a pass runs, how far back it looks, how much one pass may do."""

    every_s: float = 300.0
    window_s: float = WINDOW_S
    # A pull request updated this lately is left to its own webhook, still on its way.
    grace_s: float = 120.0
    max_redeliveries: int = 50
    max_pulls: int = 50
    lease_s: float = 300.0
    # Listings reach this far before where the last pass stopped: clocks differ a little.
    overlap_s: float = 60.0
    per_page: int = 100
    max_delivery_pages: int = 20
    max_pull_pages: int = 10

    def __post_init__(self) -> None:
        if self.every_s <= 0 or self.lease_s <= 0 or self.window_s < 0:
            raise ValueError("catch-up intervals and leases last more than 0 seconds")
        if self.max_redeliveries < 0 or self.max_pulls < 0:
            raise ValueError("a catch-up cap is 0 or more")


class CatchUpApp(AppRequests, Protocol):
    """What a pass needs of the App (``GitHubApp`` is one): its own calls, its gateways."""

    def gateway(self, installation_id: int) -> GitHubGateway: ...


def catch_up_delivery(
    installation_id: int, repo: InstalledRepo, pull: OpenPull, *, suffix: str = ""
) -> NewDelivery:
    """Return the relay's own ``pull_request`` event asking a review of ``pull``'s head.

    Its id is the same for the same head (and draft flag), so the record takes it once;
    ``suffix`` makes a new one after an earlier one failed for good.
    """
    key = f"{repo.full_name}#{pull.number}@{pull.head_sha}:{'draft' if pull.draft else 'ready'}"
    delivery_id = CATCH_UP_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:40] + suffix
    body = {
        "action": CATCH_UP_ACTION,
        "number": pull.number,
        "pull_request": pull.data,
        "repository": {
            "id": repo.id,
            "full_name": repo.full_name,
            "default_branch": repo.default_branch,
        },
        "installation": {"id": installation_id},
        "cujo_catch_up": f"its head has no {GUARD} from this App",
    }
    raw = json.dumps(body, separators=(",", ":")).encode()
    return NewDelivery(
        delivery_id, "pull_request", CATCH_UP_ACTION, installation_id, repo.full_name, raw
    )


def failed_deliveries(deliveries: tuple[HookDelivery, ...]) -> list[list[HookDelivery]]:
    """Group attempts by delivery (guid), newest attempt first; keep those never delivered.

    As GitHub's guide does: a delivery failed when none of its attempts is ``OK``. The
    oldest delivery comes first, so events are asked again in the order they happened.
    """
    by_guid: dict[str, list[HookDelivery]] = {}
    for attempt in deliveries:  # newest first, as GitHub lists them
        by_guid.setdefault(attempt.guid, []).append(attempt)
    failed = [tries for tries in by_guid.values() if not any(t.delivered for t in tries)]
    return sorted(failed, key=lambda tries: (tries[-1].delivered_at, tries[-1].id))


class CatchUp:
    """Run catch-up passes: on start, then every ``every_s``, one relay at a time."""

    def __init__(
        self,
        store: Store,
        app: CatchUpApp,
        config: CatchUpConfig | None = None,
        *,
        wake: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
        name: str | None = None,
    ) -> None:
        self.store = store
        self.app = app
        self.hooks = AppHookCalls(app)
        self.config = config or CatchUpConfig()
        self.wake = wake
        self.clock = clock
        self.name = name or holder_name()

    def run(
        self, stop: threading.Event, on_pass: Callable[[CatchUpTally], None] | None = None
    ) -> None:
        """Until ``stop``: a pass at once, then one every ``every_s``."""
        first = True
        while not stop.is_set():
            try:
                done = self.pass_once(first=first)
                if done is not None and on_pass is not None:
                    on_pass(done)
            except Exception:  # the loop outlives one bad pass; the next one tries again
                log.exception("a catch-up pass failed; the next one tries again")
            first = False
            stop.wait(self.config.every_s)

    def pass_once(self, *, first: bool = False) -> CatchUpTally | None:
        """Run one pass, unless another relay runs one or ran one lately; return its tally."""
        c = self.config
        start = self.store.begin_catch_up(
            self.name, lease_s=c.lease_s, every_s=c.every_s, first=first
        )
        if start is None:
            return None
        tally = CatchUpTally(full=start.pulls_since is None)
        try:
            self._redeliver(start, tally)
            self._sweep(start, tally)
        finally:
            self.store.finish_catch_up(start.pass_id, self.name, tally)
        said = (
            f"catch-up asked {tally.redeliveries_asked} redelivery(ies) and swept "
            f"{tally.pulls_swept} pull request(s)"
        )
        if tally.capped:
            log.warning("%s; a cap was reached: %s", said, tally.capped)
        if tally.trouble:
            log.warning("%s; trouble: %s", said, tally.trouble)
        if not tally.capped and not tally.trouble:
            log.info("%s", said)
        return tally

    def _renew(self, start: CatchUpStart) -> None:
        self.store.renew_catch_up(start.pass_id, self.name, self.config.lease_s)

    # ------------------------------------------------------------- redeliveries

    def _redeliver(self, start: CatchUpStart, tally: CatchUpTally) -> None:
        """Ask GitHub again for every failed delivery the record does not hold (capped)."""
        c = self.config
        since = self.clock() - c.window_s
        if start.deliveries_since is not None:
            since = max(since, start.deliveries_since.timestamp() - c.overlap_s)
        try:
            listing = self.hooks.deliveries_since(
                since, max_pages=c.max_delivery_pages, per_page=c.per_page
            )
        except GitHubError as exc:
            tally.fail(f"listing the App's webhook deliveries: {exc}")
            return
        tally.deliveries_listed = len(listing.deliveries)
        whole = listing.complete
        if not listing.complete:
            tally.cap(
                f"the deliveries listed filled {listing.pages} pages; older ones wait for a "
                "later pass"
            )
        failed = failed_deliveries(listing.deliveries)
        known = self.store.known_deliveries(tries[0].guid for tries in failed)
        wanted: list[HookDelivery] = []
        for tries in failed:
            newest = tries[0]
            if newest.guid in known:
                continue  # GitHub saw no answer in time, but the relay recorded it
            if 400 <= newest.status_code < 500:
                # The relay itself refused it (a signature, a body): the same again would be.
                tally.redeliveries_skipped += 1
                log.warning(
                    "delivery %s (%s) was refused by the relay (HTTP %d); not asked again",
                    newest.guid,
                    newest.event,
                    newest.status_code,
                )
                continue
            wanted.append(newest)
        if len(wanted) > c.max_redeliveries:
            tally.cap(
                f"{len(wanted)} failed deliveries, {c.max_redeliveries} asked again "
                "(CUJO_CATCH_UP_MAX_REDELIVERIES)"
            )
            wanted, whole = wanted[: c.max_redeliveries], False
        for attempt in wanted:
            try:
                self.hooks.redeliver(attempt.id)
            except GitHubError as exc:
                tally.fail(f"asking delivery {attempt.guid} again: {exc}")
                whole = False
                continue
            tally.redeliveries_asked += 1
            log.info("asked GitHub to redeliver %s (%s)", attempt.guid, attempt.event)
        self._renew(start)
        if whole:
            tally.deliveries_through = start.started_at

    # ------------------------------------------------------------- the sweep

    def _sweep(self, start: CatchUpStart, tally: CatchUpTally) -> None:
        """Hand each open pull request whose head nothing reviewed to the workers (capped)."""
        c = self.config
        # Pull requests updated after this are left to their own webhooks this time.
        settled_before = self.clock() - c.grace_s
        since = None if start.pulls_since is None else start.pulls_since.timestamp() - c.overlap_s
        try:
            installations, whole = self.hooks.installations()
        except GitHubError as exc:
            tally.fail(f"listing the App's installations: {exc}")
            return
        if not whole:
            tally.cap("the App's installations filled every page read; the rest wait")
        for installation in installations:
            if installation.suspended:
                continue
            gateway = self.app.gateway(installation.id)
            try:
                whole &= self._sweep_installation(
                    start, tally, gateway, since=since, settled_before=settled_before
                )
            except _PullsCapped:
                whole = False
                break
            except GitHubError as exc:
                tally.fail(f"sweeping installation {installation.id}: {exc}")
                whole = False
            finally:
                gateway.close()
        if whole:
            tally.pulls_through = datetime.fromtimestamp(settled_before, UTC)

    def _sweep_installation(
        self,
        start: CatchUpStart,
        tally: CatchUpTally,
        gateway: GitHubGateway,
        *,
        since: float | None,
        settled_before: float,
    ) -> bool:
        """Sweep one installation's repositories; say whether nothing was left unread."""
        c = self.config
        repos, whole = gateway.installation_repos()
        if not whole:
            tally.cap("an installation's repositories filled every page read; the rest wait")
        for repo in repos:
            if repo.archived:
                continue
            pulls, listed_all = gateway.open_pulls(
                repo.full_name, updated_since=since, max_pages=c.max_pull_pages
            )
            whole &= listed_all
            if not listed_all:
                tally.cap(
                    f"a repository's open pull requests filled {c.max_pull_pages} pages; "
                    "the least lately updated wait"
                )
            tally.pulls_listed += len(pulls)
            for pull in pulls:
                if pull.updated_at > settled_before:
                    continue  # its own webhook is on its way; the next pass looks again
                new = self._unsettled(gateway.installation_id, repo, pull, start)
                if new is None:
                    continue
                if tally.pulls_swept >= c.max_pulls:
                    tally.cap(
                        f"{tally.pulls_swept} pull requests swept and more wait "
                        "(CUJO_CATCH_UP_MAX_PULLS)"
                    )
                    raise _PullsCapped
                if gateway.has_guard(repo.full_name, pull.head_sha, name=GUARD):
                    continue  # reviewed by this App, though the record does not say so
                if self.store.record_own_delivery(new):
                    tally.pulls_swept += 1
                    log.info(
                        "catch-up: %s#%d (head %s) has no %s; asked for its review",
                        repo.full_name,
                        pull.number,
                        pull.head_sha[:12],
                        GUARD,
                    )
                    self.wake()
            self._renew(start)
        return whole

    def _unsettled(
        self, installation_id: int, repo: InstalledRepo, pull: OpenPull, start: CatchUpStart
    ) -> NewDelivery | None:
        """Return the catch-up event for a head the record never took further, or None."""
        if self.store.head_settled(repo.full_name, pull.number, pull.head_sha, draft=pull.draft):
            return None
        new = catch_up_delivery(installation_id, repo, pull)
        state = self.store.delivery_state(new.id)
        if state is None:
            return new
        if state != "failed":
            return None  # asked already, and still in the workers' hands (or done)
        # The earlier ask failed for good: one more, under a new id, once per pass.
        again = catch_up_delivery(installation_id, repo, pull, suffix=f"-{start.pass_id}")
        return again if self.store.delivery_state(again.id) is None else None

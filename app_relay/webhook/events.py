"""Route verified events to one small router per feature.

The signature is checked before (``signature.py``) and the body parsed into an ``Event``
(``github/event.py``). Pure: nothing here does I/O of its own. A handler gets the parsed event and a
``Context`` holding the ports it may use (the record, the reviewer, the runs, the
installations), so tests pass fakes. Each feature is a module-level ``Router``; ``ROUTER``
combines them in one place, as python/bedevere's ``Router(*routers)`` does. A feature
that outgrows this file moves to a module of its own and keeps its router.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from app_relay.github.event import Event, MalformedEvent
from app_relay.github.vocab import WORKFLOW_JOB_ACTIONS, WORKFLOW_RUN_ACTIONS
from app_relay.merge.attempt import settle_from_event
from app_relay.runs.mode import ENTRY_ACTIONS
from app_relay.runs.review_request import Reviewer, review_request_of
from app_relay.store import Store

log = logging.getLogger(__name__)

Handler = Callable[[Event, "Context"], None]


# --------------------------------------------------------------------------- ports


class Installations(Protocol):
    """What the relay keeps per App installation (``github.GitHubApp``)."""

    def forget_installation(self, installation_id: int, repos: Sequence[str] = ()) -> None:
        """Drop the installation's token and the repositories it was known to hold."""
        ...


class RunFollower(Protocol):
    """Move dispatched runs on: sandbox progress and retries (runs/follow.py)."""

    def follow(self, event: Event) -> None:
        """Fold a ``workflow_run`` or ``workflow_job`` event into the run it belongs to."""
        ...

    def retry(self, event: Event) -> None:
        """Start a new run for a ``check_run`` re-run or Retry button on an errored run."""
        ...

    def command(self, event: Event) -> None:
        """Apply or refuse a `/cujo` verb from a pull-request comment."""
        ...


class GuardRules(Protocol):
    """Forget what is kept about a repository's branch rules (``HoldCache``, via the runs)."""

    def rules_changed(self, repo: str | None) -> None:
        """Drop the kept answers of ``repo`` (of every repository when None)."""
        ...


@dataclass(frozen=True)
class Context:
    """The ports a handler may use, passed in so tests pass fakes."""

    store: Store
    reviewer: Reviewer
    runs: RunFollower | None = None
    installations: Installations | None = None
    guard_rules: GuardRules | None = None
    # Takes the repositories (None: every one) an event brings merge-gate news of. The
    # worker pool keeps them for the commit that marks the delivery done (one write a
    # delivery, not two); without it the news goes to the record at once.
    gate_news: Callable[[str | None], None] | None = None

    def runs_for(self, event: Event) -> RunFollower | None:
        """Return the runs to hand ``event`` to; without them, note the event and return None."""
        if self.runs is None:
            log.info("delivery %s: %s.%s noted", event.delivery_id, event.name, event.action)
        return self.runs


# --------------------------------------------------------------------------- router


class Router:
    """Handlers registered by (event, action); ``Router(*routers)`` combines them."""

    def __init__(self, *routers: Router) -> None:
        self._handlers: dict[tuple[str, str | None], list[Handler]] = {}
        for router in routers:
            for key, handlers in router._handlers.items():
                self._handlers.setdefault(key, []).extend(handlers)

    @classmethod
    def combine(cls, *routers: Router) -> Router:
        """Return one router holding every handler of ``routers``."""
        return cls(*routers)

    def register(self, event: str, *actions: str) -> Callable[[Handler], Handler]:
        """Register a handler for ``event`` with any of ``actions`` (any action if none)."""

        def add(handler: Handler) -> Handler:
            for action in actions or (None,):
                self._handlers.setdefault((event, action), []).append(handler)
            return handler

        return add

    def handlers_for(self, event: str, action: str | None) -> list[Handler]:
        """Return the handlers of ``event``: those of any action, then those of ``action``."""
        found = list(self._handlers.get((event, None), []))
        if action is not None:
            found += self._handlers.get((event, action), [])
        return found

    def dispatch(self, event: Event, context: Context) -> int:
        """Run every handler of ``event`` in order and return how many ran."""
        handlers = self.handlers_for(event.name, event.action)
        for handler in handlers:
            handler(event, context)
        return len(handlers)


# --------------------------------------------------------------------------- features

pull_request = Router()
"""Pull requests: a new head asks for a review."""


@pull_request.register("pull_request", *sorted(ENTRY_ACTIONS))
def review_new_head(event: Event, context: Context) -> None:
    """Hand a new or newly reviewable head to the reviewer."""
    context.reviewer.request_review(review_request_of(event))


workflow = Router()
"""Workflow runs and jobs: the sandbox's progress, folded into the run that dispatched it."""


@workflow.register("workflow_run", *sorted(WORKFLOW_RUN_ACTIONS))
@workflow.register("workflow_job", *sorted(WORKFLOW_JOB_ACTIONS))
def follow_sandbox_progress(event: Event, context: Context) -> None:
    """Hand the sandbox's progress to the runs; without them, only note it."""
    if (runs := context.runs_for(event)) is not None:
        runs.follow(event)


check_run = Router()
"""Check runs: GitHub's re-run and the Retry button of an errored `cujo/guard`."""


@check_run.register("check_run", "rerequested", "requested_action")
def retry_errored_run(event: Event, context: Context) -> None:
    """Hand a re-run or Retry of ``cujo/guard`` to the runs; without them, only note it."""
    if (runs := context.runs_for(event)) is not None:
        runs.retry(event)


installation = Router()
"""Installations: the App added to, or removed from, an account's repositories."""


@installation.register("installation")
@installation.register("installation_repositories")
def forget_changed_installation(event: Event, context: Context) -> None:
    """Drop what is kept about an installation that changed: its token and repositories."""
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#installation
    # Every action (created, deleted, suspend, unsuspend, new_permissions_accepted,
    # added, removed) can change what the installation's token may do, or where it is.
    installation_id = event.installation_id
    if installation_id is None:
        raise MalformedEvent(f"the {event.name} event names no installation")
    repos: list[str] = []
    for key in ("repositories", "repositories_added", "repositories_removed"):
        listed = event.payload.get(key)
        for item in listed if isinstance(listed, list) else []:
            if isinstance(item, Mapping) and isinstance(item.get("full_name"), str):
                repos.append(item["full_name"])
    log.info(
        "delivery %s: %s.%s for installation %s (%d repositories)",
        event.delivery_id,
        event.name,
        event.action,
        installation_id,
        len(repos),
    )
    if context.installations is not None:
        context.installations.forget_installation(installation_id, repos)


issue_comment = Router()
"""Comments: the `/cujo` verbs (commands.py decides, unlock.py applies)."""


@issue_comment.register("issue_comment", "created")
def apply_verb(event: Event, context: Context) -> None:
    """Hand a new comment to the runs, which apply or refuse a verb in it; edits never count."""
    if (runs := context.runs_for(event)) is not None:
        runs.command(event)


branch_rules = Router()
"""Rulesets and branch protection: what says whether the block holds the merge changed."""


@branch_rules.register("repository_ruleset")
@branch_rules.register("branch_protection_rule")
def forget_guard_answers(event: Event, context: Context) -> None:
    """Drop the kept "does the block hold?" answers of the repository whose rules changed."""
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#repository_ruleset
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#branch_protection_rule
    # Every action (created, edited, deleted) can change whether `cujo/guard` is required.
    # An organization's ruleset may name no repository: then every answer goes.
    log.info(
        "delivery %s: %s.%s for %s: the guard's answers are read again",
        event.delivery_id,
        event.name,
        event.action,
        event.repo or "every repository",
    )
    if context.guard_rules is not None:
        context.guard_rules.rules_changed(event.repo)


merges = Router()
"""Merges from the run page: a pull request closed or dequeued settles the attempts on it."""


@merges.register("pull_request", "closed", "dequeued")
@merges.register("merge_group", "destroyed")
def settle_merges(event: Event, context: Context) -> None:
    """Settle the merge attempts in flight on the pull request (merged, closed, dequeued)."""
    moved = settle_from_event(context.store, event.name, event.payload)
    if moved:
        log.info("delivery %s: %d merge attempt(s) settled", event.delivery_id, moved)


# What can change a merge gate's reading (docs/design.md section 12): a push or another change
# of the pull request, a check or status on a head, a rule of a branch, the merge queue.
GATE_NEWS = ("check_run", "check_suite", "status", "repository_ruleset",
             "branch_protection_rule", "merge_group")  # fmt: skip


@merges.register("pull_request")
@merges.register(GATE_NEWS[0])
@merges.register(GATE_NEWS[1])
@merges.register(GATE_NEWS[2])
@merges.register(GATE_NEWS[3])
@merges.register(GATE_NEWS[4])
@merges.register(GATE_NEWS[5])
def note_gate_news(event: Event, context: Context) -> None:
    """Tell open run pages to read the merge gate of the event's repository again."""
    if context.gate_news is not None:
        context.gate_news(event.repo)
    else:
        context.store.note_merge_news(event.repo)


ROUTER = Router.combine(
    pull_request, workflow, check_run, installation, issue_comment, branch_rules, merges
)

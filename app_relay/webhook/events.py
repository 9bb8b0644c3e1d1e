"""Verify webhook signatures and route verified events to one small router per feature.

Pure: nothing here does I/O of its own. A handler gets the parsed event and a
``Context`` holding the ports it may use (the record, the reviewer, the runs, the
installations), so tests pass fakes. Each feature is a module-level ``Router``; ``ROUTER``
combines them in one place, as python/bedevere's ``Router(*routers)`` does. A feature
that outgrows this file moves to a module of its own and keeps its router.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app_relay.github.vocab import WORKFLOW_JOB_ACTIONS, WORKFLOW_RUN_ACTIONS, Reader
from app_relay.merge.attempt import settle_from_event
from app_relay.runs.mode import ENTRY_ACTIONS
from app_relay.store import Store
from cujo_action.schema import SHA

log = logging.getLogger(__name__)

Handler = Callable[["Event", "Context"], None]
# GitHub's payloads nest about ten deep and their numbers are ids, counts and times that
# fit in 64 bits: JSON far deeper or longer than that is no webhook GitHub sends.
MAX_JSON_DEPTH = 64
MAX_JSON_INT_DIGITS = 20


# --------------------------------------------------------------------------- signature


def signature_of(secret: bytes, body: bytes) -> str:
    """Return the ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_matches(secret: bytes, body: bytes, header: str | None) -> bool:
    """Say whether ``header`` is the HMAC-SHA256 of the raw ``body`` under ``secret``.

    Compared in constant time, as GitHub asks:
    https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    """
    if not secret or not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(signature_of(secret, body).encode(), header.encode())


# --------------------------------------------------------------------------- events


class MalformedEvent(ValueError):
    """A verified payload lacks what its event promises; retrying cannot help."""


@dataclass(frozen=True)
class Event:
    """One verified delivery, parsed."""

    delivery_id: str
    name: str  # X-GitHub-Event
    payload: Mapping[str, Any]

    @property
    def action(self) -> str | None:
        """Return the payload's ``action``, if it has one."""
        action = self.payload.get("action")
        return action if isinstance(action, str) else None

    @property
    def installation_id(self) -> int | None:
        """Return the App installation the event is for, if it names one."""
        installation = self.payload.get("installation")
        if isinstance(installation, Mapping):
            found = installation.get("id")
            if isinstance(found, int) and not isinstance(found, bool):
                return found
        return None

    @property
    def repo(self) -> str | None:
        """Return the repository's ``owner/name``, if the event is about one."""
        repository = self.payload.get("repository")
        if isinstance(repository, Mapping):
            name = repository.get("full_name")
            if isinstance(name, str):
                return name
        return None

    @classmethod
    def parse(cls, delivery_id: str, name: str, body: bytes) -> Event:
        """Parse a verified raw body; raise ``MalformedEvent`` unless it is a JSON object."""
        payload = parse_json(body)
        if not isinstance(payload, dict):
            raise MalformedEvent("the body is JSON but not an object")
        return cls(delivery_id=delivery_id, name=name, payload=payload)


def parse_json(body: bytes) -> object:
    """Parse a webhook body; raise ``MalformedEvent`` for anything GitHub would not send.

    Malformed, too deep, an integer too long or a number JSON does not allow (NaN,
    Infinity, 1e999) is refused with the reason, never an exception of another kind.
    """
    try:
        payload = json.loads(
            body, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_no_constant
        )
    except MalformedEvent:
        raise
    except RecursionError:
        raise MalformedEvent(f"the body is JSON nested deeper than {MAX_JSON_DEPTH}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and int() limits
        raise MalformedEvent(f"the body is not JSON: {exc}") from None
    _check_depth(payload)
    return payload


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise MalformedEvent(
            f"the body is JSON with an integer of {len(text.lstrip('-'))} digits, "
            f"over {MAX_JSON_INT_DIGITS}"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise MalformedEvent(f"the body is JSON with a number out of range: {text[:40]}")
    return value


def _no_constant(text: str) -> object:
    raise MalformedEvent(f"the body holds {text}, which JSON does not allow")


def _check_depth(payload: object) -> None:
    # Level by level, keeping only the containers: a deep value costs no deep stack, and
    # the scalars most of a payload holds cost one test each (this runs before every 202).
    level = [payload] if isinstance(payload, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise MalformedEvent(f"the body is JSON nested deeper than {MAX_JSON_DEPTH}")
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]


# --------------------------------------------------------------------------- ports


@dataclass(frozen=True)
class ReviewRequested:
    """A pull request head that asks for a review, as read from its webhook."""

    delivery_id: str
    installation_id: int | None
    repo: str
    pr_number: int
    action: str
    head_sha: str
    base_sha: str
    base_ref: str
    author: str
    author_type: str  # GitHub's account `type`: User, Bot, Organization
    draft: bool
    # Where the sandbox workflow is dispatched from: the workflow file lives there.
    default_branch: str | None = None
    state: str = "open"


class Reviewer(Protocol):
    """Take a review request further: the seam where runs/start.py and runs/mode.py plug in."""

    def request_review(self, request: ReviewRequested) -> None:
        """Handle one head that asks for a review; idempotent per delivery."""
        ...


@dataclass(frozen=True)
class RecordingReviewer:
    """The default reviewer: record the session and the request, and do nothing more."""

    store: Store

    def request_review(self, request: ReviewRequested) -> None:
        """Open the pull request's session and record the request in it."""
        record_request(self.store, request)


def record_request(store: Store, request: ReviewRequested) -> str:
    """Open the pull request's session, record the request in it, return the session id."""
    session_id = store.open_session(request.repo, request.pr_number, "github")
    store.request_review(
        delivery_id=request.delivery_id,
        session_id=session_id,
        installation_id=request.installation_id,
        action=request.action,
        head_sha=request.head_sha,
        base_sha=request.base_sha,
        base_ref=request.base_ref,
        author=request.author,
        author_type=request.author_type,
        draft=request.draft,
    )
    return session_id


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


def _malformed(field: str, problem: str) -> MalformedEvent:
    return MalformedEvent(f"{field or 'the payload'} {problem}")


def payload_reader(event: Event) -> Reader:
    """Read an event's payload fail-closed: a gap raises ``MalformedEvent`` naming it."""
    return Reader(event.payload, _malformed)


def review_request_of(event: Event) -> ReviewRequested:
    """Read what a review needs from a ``pull_request`` event; fail closed on gaps."""
    p = payload_reader(event)
    pr = p.obj("pull_request")
    user = pr.obj("user")
    repository = p.data.get("repository")
    default_branch = repository.get("default_branch") if isinstance(repository, Mapping) else None
    state = pr.data.get("state", "open")
    return ReviewRequested(
        delivery_id=event.delivery_id,
        installation_id=event.installation_id,
        # The base repository: where the review and the check are posted.
        repo=p.obj("repository").text("full_name"),
        pr_number=pr.positive("number"),
        action=p.text("action"),
        head_sha=pr.obj("head").text("sha", pattern=SHA, what="a 40-digit commit SHA"),
        base_sha=pr.obj("base").text("sha", pattern=SHA, what="a 40-digit commit SHA"),
        base_ref=pr.obj("base").text("ref"),
        author=user.text("login"),
        author_type=user.text("type"),
        draft=pr.flag("draft"),
        default_branch=default_branch if isinstance(default_branch, str) else None,
        state=state if isinstance(state, str) else "open",
    )


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

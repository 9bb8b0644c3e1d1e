"""What the record hands back: plain frozen values, never live rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app_relay.runstate.machine import RunState
from app_relay.store.tables import (
    EFFECT_KINDS,
    CommandOutcome,
    CommandRow,
    DeliveryState,
    EffectKind,
    EffectRow,
    EffectState,
    Mode,
    SessionKind,
    Verb,
    _require,
)
from app_relay.verdict import (
    Finding,
    JudgeKind,
    ModelUse,
)

# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class NewDelivery:
    """A verified delivery about to be recorded."""

    id: str
    event: str
    action: str | None
    installation_id: int | None
    repo: str | None
    body: bytes

    def columns(self) -> dict[str, Any]:
        """Return the columns the record and the intake queue both keep of it."""
        return {
            "id": self.id,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repo": self.repo,
            "body": bytes(self.body),
        }

    def check(self) -> None:
        """Raise ``ValueError`` unless every field fits the record."""
        if not self.id or len(self.id) > 64:
            raise ValueError(f"a delivery id has 1 to 64 characters, got {self.id!r}")
        if not self.event or len(self.event) > 64:
            raise ValueError(f"an event name has 1 to 64 characters, got {self.event!r}")
        if self.action is not None and len(self.action) > 64:
            raise ValueError("an action has at most 64 characters")
        if self.repo is not None and len(self.repo) > 256:
            raise ValueError("a repository name has at most 256 characters")


@dataclass(frozen=True)
class Finished:
    """What became of a claimed delivery, for ``finish_deliveries``."""

    delivery_id: str
    ok: bool
    detail: str = ""
    final: bool = False
    retry_in_s: float = 0.0
    # The repositories (None: every one) whose merge gates the delivery's event may have
    # changed: noted in the commit that marks it done, as ``note_merge_news`` would.
    news: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class Delivery:
    """A webhook delivery as the record holds it."""

    id: str
    event: str
    action: str | None
    installation_id: int | None
    repo: str | None
    body: bytes
    state: DeliveryState
    attempts: int
    error: str | None
    received_at: datetime
    worker_id: str | None
    lease_until: datetime | None
    done_at: datetime | None
    queue_seq: int | None = None  # its number in the intake queue, which holds its body


@dataclass(frozen=True)
class ReviewRequest:
    """A pull request head that asked for a review."""

    id: int
    delivery_id: str
    session_id: str
    repo: str
    pr_number: int
    installation_id: int | None
    action: str
    head_sha: str
    base_sha: str
    base_ref: str
    author: str
    author_type: str
    draft: bool
    created_at: datetime
    outcome: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class RunEvent:
    """One event of a run's timeline."""

    id: int
    run_id: str
    at: datetime
    kind: str
    detail: str


@dataclass(frozen=True)
class RunRecord:
    """A run as the record holds it, with its session and findings."""

    run_id: str
    session_id: str
    repo: str
    pr_number: int | None
    session_kind: SessionKind
    base_sha: str
    head_sha: str
    mode: Mode
    state: RunState
    judge: JudgeKind | None
    summary: str
    unproven: tuple[str, ...]
    plan_json: str | None
    reports_dir: str | None
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    findings: tuple[Finding, ...]
    installation_id: int | None = None
    delivery_id: str | None = None
    default_branch: str | None = None
    on_error: str | None = None
    check_run_id: int | None = None
    workflow_run_id: int | None = None
    review_id: int | None = None
    policy_json: str | None = None
    lease_owner: str | None = None
    lifted: RunState | None = None
    base_ref: str | None = None
    holds: str | None = None
    model_use: ModelUse | None = None


@dataclass(frozen=True)
class CommandRecord:
    """A `/cujo` verb from a comment and what became of it."""

    id: int
    repo: str
    pr_number: int
    comment_id: int
    author: str
    author_type: str
    verb: Verb
    outcome: CommandOutcome
    reason: str
    run_id: str | None
    head_sha: str | None
    created_at: datetime
    decided_at: datetime | None


def _command(row: CommandRow) -> CommandRecord:
    return CommandRecord(
        id=row.id,
        repo=row.repo,
        pr_number=row.pr_number,
        comment_id=row.comment_id,
        author=row.author,
        author_type=row.author_type,
        verb=row.verb,
        outcome=row.outcome,
        reason=row.reason,
        run_id=row.run_id,
        head_sha=row.head_sha,
        created_at=row.created_at,
        decided_at=row.decided_at,
    )


@dataclass(frozen=True)
class Intent:
    """A GitHub effect a run means to make, recorded before it is made.

    ``key`` is unique per run: the same intent recorded twice (a transition retried
    after a crash) is made once. ``payload`` is plain JSON saying what to write.
    """

    kind: EffectKind
    key: str
    payload: Mapping[str, Any]

    def check(self) -> None:
        """Raise ``ValueError`` unless the intent fits the record."""
        _require("effect kind", self.kind, EFFECT_KINDS)
        if not self.key or len(self.key) > 96:
            raise ValueError(f"an effect key has 1 to 96 characters, got {self.key!r}")


@dataclass(frozen=True)
class Effect:
    """An effect as the outbox holds it."""

    id: int
    run_id: str
    key: str
    kind: EffectKind
    payload: dict[str, Any]
    state: EffectState
    attempts: int
    error: str | None
    result: dict[str, Any] | None
    created_at: datetime
    done_at: datetime | None


def _effect(row: EffectRow) -> Effect:
    return Effect(
        id=row.id,
        run_id=row.run_id,
        key=row.key,
        kind=row.kind,
        payload=dict(row.payload),
        state=row.state,
        attempts=row.attempts,
        error=row.error,
        result=None if row.result is None else dict(row.result),
        created_at=row.created_at,
        done_at=row.done_at,
    )


@dataclass(frozen=True)
class RunLine:
    """One run as the board's list shows it: no findings, no policy, no plan."""

    run_id: str
    repo: str
    pr_number: int | None
    session_kind: SessionKind
    head_sha: str
    mode: Mode
    state: RunState
    started_at: datetime
    finished_at: datetime | None
    holds: str | None

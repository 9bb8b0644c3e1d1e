"""Keep the record: deliveries, sessions, runs, their events, findings and commands.

SQLite by default (one file the board and a review share), PostgreSQL for several relay
instances. Every method is one transaction, committed before it returns, so a crash
loses nothing that a method reported as done. ``Base.metadata`` is what the Alembic
migrations in ``migrations/`` build; ``create_schema`` runs ``upgrade head`` on start.

Deliveries are a durable queue: ``record_delivery`` (the webhook, before its 202),
``claim_delivery`` (a worker takes one under a lease), ``finish_delivery``. A worker
that dies leaves its lease to expire, and another worker takes the delivery over. A
record in a SQLite file keeps the webhook's side of that queue in a file of its own
beside it, so recording a delivery never waits for a worker's write (intake.py).
"""

from __future__ import annotations

from app_relay.store.base import StoreBase
from app_relay.store.board_reads import BoardReads
from app_relay.store.catchup_passes import CatchUpPass, CatchUpStart, CatchUpStore, CatchUpTally
from app_relay.store.commands import CommandsStore
from app_relay.store.deliveries import DeliveriesStore
from app_relay.store.intake import IntakeError, intake_path
from app_relay.store.merge_tables import (
    MERGE_LIVE,
    MERGE_STATES,
    MergeAttemptRow,
    MergeNewsRow,
    MergeState,
)
from app_relay.store.merges import MERGE_SETTLED, MergeAttempt, MergeClaimed, MergesStore
from app_relay.store.operations import PRUNED, HandedBack, OperationsStore
from app_relay.store.outbox import OutboxStore
from app_relay.store.queue import Admission, NewQueued, Queued, QueueStore
from app_relay.store.records import (
    CommandRecord,
    Delivery,
    Effect,
    Finished,
    Intent,
    NewDelivery,
    ReviewRequest,
    RunEvent,
    RunLine,
    RunRecord,
)
from app_relay.store.runs import RunsStore
from app_relay.store.tables import (
    BUSY_TIMEOUT_MS,
    COMMAND_OUTCOMES,
    DELIVERY_STATES,
    EFFECT_KINDS,
    EFFECT_STATES,
    FINDING_SOURCES,
    FIRST_REVISION,
    JUDGE_KINDS,
    LOCAL_BUSY_TIMEOUT_MS,
    MAX_DELIVERY_ATTEMPTS,
    MAX_DELIVERY_ERROR,
    MAX_EFFECT_ATTEMPTS,
    MAX_EVENT_KIND,
    MIGRATIONS,
    MODES,
    RUN_STATES,
    SESSION_KINDS,
    VERBS,
    Base,
    CommandOutcome,
    CommandRow,
    DeliveryRow,
    DeliveryState,
    EffectKind,
    EffectRow,
    EffectState,
    FindingRow,
    Mode,
    ReviewRequestRow,
    RunClosed,
    RunEventRow,
    RunRow,
    SessionKind,
    SessionRow,
    StoreError,
    UnknownDelivery,
    UnknownRun,
    UnknownSession,
    UnknownState,
    UTCDateTime,
    Verb,
    create_schema,
)


class Store(
    DeliveriesStore,
    RunsStore,
    CommandsStore,
    OutboxStore,
    BoardReads,
    CatchUpStore,
    OperationsStore,
    QueueStore,
    MergesStore,
):
    """The record of sessions and runs, over one database URL."""


__all__ = [
    "BUSY_TIMEOUT_MS",
    "COMMAND_OUTCOMES",
    "DELIVERY_STATES",
    "EFFECT_KINDS",
    "EFFECT_STATES",
    "FINDING_SOURCES",
    "FIRST_REVISION",
    "JUDGE_KINDS",
    "LOCAL_BUSY_TIMEOUT_MS",
    "MAX_DELIVERY_ATTEMPTS",
    "MAX_DELIVERY_ERROR",
    "MAX_EFFECT_ATTEMPTS",
    "MAX_EVENT_KIND",
    "MERGE_LIVE",
    "MERGE_SETTLED",
    "MERGE_STATES",
    "MIGRATIONS",
    "MODES",
    "PRUNED",
    "RUN_STATES",
    "SESSION_KINDS",
    "VERBS",
    "Admission",
    "Base",
    "CatchUpPass",
    "CatchUpStart",
    "CatchUpTally",
    "CommandOutcome",
    "CommandRecord",
    "CommandRow",
    "Delivery",
    "DeliveryRow",
    "DeliveryState",
    "Effect",
    "EffectKind",
    "EffectRow",
    "EffectState",
    "FindingRow",
    "Finished",
    "HandedBack",
    "IntakeError",
    "Intent",
    "MergeAttempt",
    "MergeAttemptRow",
    "MergeClaimed",
    "MergeNewsRow",
    "MergeState",
    "MergesStore",
    "Mode",
    "NewDelivery",
    "NewQueued",
    "QueueStore",
    "Queued",
    "ReviewRequest",
    "ReviewRequestRow",
    "RunClosed",
    "RunEvent",
    "RunEventRow",
    "RunLine",
    "RunRecord",
    "RunRow",
    "SessionKind",
    "SessionRow",
    "Store",
    "StoreBase",
    "StoreError",
    "UTCDateTime",
    "UnknownDelivery",
    "UnknownRun",
    "UnknownSession",
    "UnknownState",
    "Verb",
    "create_schema",
    "intake_path",
]

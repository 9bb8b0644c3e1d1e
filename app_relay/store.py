"""Keep the record: deliveries, sessions, runs, their events, findings and commands.

SQLite by default (one file the board and a review share), PostgreSQL for several relay
instances. Every method is one transaction, committed before it returns, so a crash
loses nothing that a method reported as done. ``Base.metadata`` is what the Alembic
migrations in ``migrations/`` build; ``create_schema`` runs ``upgrade head`` on start.

Deliveries are a durable queue: ``record_delivery`` (the webhook, before its 202),
``claim_delivery`` (a worker takes one under a lease), ``finish_delivery``. A worker
that dies leaves its lease to expire, and another worker takes the delivery over.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, get_args

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Engine,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Select,
    String,
    Text,
    UniqueConstraint,
    and_,
    create_engine,
    event,
    func,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, aliased, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from cujo_action.schema import CHECK_NAMES, MAX_TAIL, clip, utcnow

from .decide.verdict import (
    SEVERITIES,
    Finding,
    FindingSource,
    JudgeKind,
    ModelUse,
    Severity,
    Verdict,
)
from .runstate import INITIAL, OPEN_STATES, VERDICT_STATES, RunState, may_move

# Section 3 of DESIGN.md; runstate.py says which moves between them exist.
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
SessionKind = Literal["local", "github"]
SESSION_KINDS: tuple[SessionKind, ...] = get_args(SessionKind)
Mode = Literal["sandbox", "diff"]
MODES: tuple[Mode, ...] = get_args(Mode)
DeliveryState = Literal["pending", "working", "done", "failed"]
DELIVERY_STATES: tuple[DeliveryState, ...] = get_args(DeliveryState)
Verb = Literal["dismiss", "reinstate"]
VERBS: tuple[Verb, ...] = get_args(Verb)
CommandOutcome = Literal["pending", "applied", "refused"]
COMMAND_OUTCOMES: tuple[CommandOutcome, ...] = get_args(CommandOutcome)
JUDGE_KINDS: tuple[JudgeKind, ...] = get_args(JudgeKind)
# A finding's evidence came from a sandbox check, or from the diff a diff review read.
FINDING_SOURCES: tuple[str, ...] = (*CHECK_NAMES, "diff")
# The outbox: each GitHub write of a run, recorded as intended before it is made.
EffectKind = Literal["check", "review", "dismiss", "reaction", "comment", "cancel"]
EFFECT_KINDS: tuple[EffectKind, ...] = get_args(EffectKind)
EffectState = Literal["pending", "working", "done", "failed", "cancelled"]
EFFECT_STATES: tuple[EffectState, ...] = get_args(EffectState)
# Effects in one lane of a run are made in the order they were intended (a dismissal
# after the review it dismisses); lanes do not wait for each other.
_LANES: dict[EffectKind, str] = {
    "check": "check",
    "review": "review",
    "dismiss": "review",
    "reaction": "reaction",
    "comment": "comment",
    "cancel": "cancel",
}
MAX_EFFECT_ATTEMPTS = 8

# How long a writer waits for another process (the board, a second review) to commit.
BUSY_TIMEOUT_MS = 15_000
# A delivery is tried at most this often (claims, including those whose worker died)
# before it ends `failed`, so one that crashes its worker cannot loop forever.
MAX_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ERROR = 2000
MAX_EVENT_KIND = 64
_SHA = re.compile(r"^[0-9a-f]{40}$")
_BEGIN_OPTION = "cujo_sqlite_begin"
_GITHUB_FIELDS = frozenset(
    {
        "installation_id",
        "delivery_id",
        "default_branch",
        "on_error",
        "check_run_id",
        "workflow_run_id",
        "review_id",
        "base_ref",
        "holds",
    }
)


class StoreError(Exception):
    """The record refused an operation; the message says why."""


class UnknownRun(StoreError, LookupError):
    """No run has this id."""


class UnknownSession(StoreError, LookupError):
    """No session has this id."""


class RunClosed(StoreError):
    """The run was already decided, so it cannot be finished again."""


class UnknownDelivery(StoreError, LookupError):
    """No delivery has this id."""


class UnknownState(StoreError, ValueError):
    """A value outside the states, modes or kinds the record knows."""


# --------------------------------------------------------------------------- schema


class UTCDateTime(TypeDecorator[datetime]):
    """Store aware datetimes as naive UTC and hand them back aware."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return ``value`` as naive UTC; refuse a naive one, whose zone is a guess."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("the record takes timezone-aware datetimes only")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return ``value`` marked as UTC."""
        return None if value is None else value.replace(tzinfo=UTC)


def _choice(name: str, values: Sequence[str]) -> Enum:
    # A CHECK constraint, so even raw SQL cannot write a state the code does not know.
    return Enum(
        *values,
        name=name,
        native_enum=False,
        create_constraint=True,
        validate_strings=True,
        length=max(len(v) for v in values),
    )


class Base(DeclarativeBase):
    """The declarative base of the record; Alembic targets its metadata."""

    # Named constraints, so Alembic migrations (batch mode on SQLite) can address them.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class DeliveryRow(Base):
    """One webhook delivery, recorded before the 202 so a restart can resume it."""

    __tablename__ = "deliveries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # X-GitHub-Delivery
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    repo: Mapped[str | None] = mapped_column(String(256))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    body: Mapped[bytes] = mapped_column(LargeBinary)  # the verified raw body, byte for byte
    state: Mapped[DeliveryState] = mapped_column(
        _choice("delivery_state", DELIVERY_STATES), default="pending"
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # A pending delivery waits until then (a retry backs off); a working one is held by
    # worker_id until lease_until, after which another worker may take it over.
    available_at: Mapped[datetime] = mapped_column(UTCDateTime())
    worker_id: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ix_deliveries_state", "state", "received_at"),)


class SessionRow(Base):
    """A pull request's whole life (or one local review), holding its runs."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    repo: Mapped[str] = mapped_column(String(256))
    pr_number: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[SessionKind] = mapped_column(_choice("session_kind", SESSION_KINDS))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    # NULLs are distinct, so local reviews without a pull request each get a session.
    __table_args__ = (UniqueConstraint("kind", "repo", "pr_number"),)


class RunRow(Base):
    """One reviewed head commit: its state, verdict and where its reports are."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), index=True)
    base_sha: Mapped[str] = mapped_column(String(40))
    head_sha: Mapped[str] = mapped_column(String(40))
    mode: Mapped[Mode] = mapped_column(_choice("run_mode", MODES))
    state: Mapped[RunState] = mapped_column(_choice("run_state", RUN_STATES), index=True)
    judge: Mapped[JudgeKind | None] = mapped_column(_choice("judge_kind", JUDGE_KINDS))
    # What the model judge or the diff review spent (tokens, cost), when one was asked.
    model_use: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    summary: Mapped[str] = mapped_column(Text, default="")
    unproven: Mapped[list[str]] = mapped_column(JSON, default=list)
    plan_json: Mapped[str | None] = mapped_column(Text)
    # The .cujo.yml the relay read at base (JSON); None for a run with no usable policy.
    policy_json: Mapped[str | None] = mapped_column(Text)
    reports_dir: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # A pull request's run on GitHub (NULL for local reviews): who acts, what it owns.
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    delivery_id: Mapped[str | None] = mapped_column(String(64), index=True)
    default_branch: Mapped[str | None] = mapped_column(String(256))
    on_error: Mapped[str | None] = mapped_column(String(8))
    check_run_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    workflow_run_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    review_id: Mapped[int | None] = mapped_column(BigInteger)
    # Who is acting on this run right now, until when: a relay acts on a run only under
    # its lease, and reconciles only runs whose lease ran out (or that nobody holds).
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The hold (blocked, unproven, error) a dismissal lifted: a reinstate puts back this.
    lifted: Mapped[RunState | None] = mapped_column(String(16))
    # The branch the pull request merges into, and whether a block holds that merge
    # (guard.py: holds, does-not-hold, unknown) as last read.
    base_ref: Mapped[str | None] = mapped_column(String(256))
    holds: Mapped[str | None] = mapped_column(String(16))


class RunEventRow(Base):
    """One line of a run's timeline, shown live on its page."""

    __tablename__ = "run_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(String(MAX_EVENT_KIND))
    detail: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (Index("ix_run_events_run", "run_id", "id"),)


class FindingRow(Base):
    """One finding of a run's verdict, with the evidence ids it cites."""

    __tablename__ = "findings"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    finding_id: Mapped[str] = mapped_column(String(8))
    rule: Mapped[str] = mapped_column(String(64))
    severity: Mapped[Severity] = mapped_column(_choice("severity", SEVERITIES))
    # `check` is an SQL keyword; the column gets a plain name.
    check: Mapped[FindingSource] = mapped_column(
        "check_name", _choice("check_name", FINDING_SOURCES)
    )
    title: Mapped[str] = mapped_column(Text)
    evidence: Mapped[list[str]] = mapped_column(JSON)
    # Every rule that found this behaviour, the strongest first (NULL: only `rule`).
    rules: Mapped[list[str] | None] = mapped_column(JSON)

    __table_args__ = (UniqueConstraint("run_id", "finding_id"),)


class CommandRow(Base):
    """One `/cujo` verb from a pull-request comment, and what became of it."""

    __tablename__ = "commands"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str | None] = mapped_column(ForeignKey("deliveries.id"))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), index=True)
    repo: Mapped[str] = mapped_column(String(256))
    pr_number: Mapped[int] = mapped_column(Integer)
    comment_id: Mapped[int] = mapped_column(BigInteger)
    author: Mapped[str] = mapped_column(String(64))
    author_type: Mapped[str] = mapped_column(String(32))  # GitHub's `type`: User, Bot, …
    verb: Mapped[Verb] = mapped_column(_choice("verb", VERBS))
    head_sha: Mapped[str | None] = mapped_column(String(40))
    outcome: Mapped[CommandOutcome] = mapped_column(
        _choice("command_outcome", COMMAND_OUTCOMES), default="pending"
    )
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    # The same comment redelivered must not apply its verb twice.
    __table_args__ = (UniqueConstraint("comment_id", "verb"),)


class EffectRow(Base):
    """One GitHub write of a run: intended, then done (or failed, or overtaken)."""

    __tablename__ = "effects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    # Unique per run: intending the same effect twice (a retried transition) adds nothing.
    key: Mapped[str] = mapped_column(String(96))
    kind: Mapped[EffectKind] = mapped_column(_choice("effect_kind", EFFECT_KINDS))
    lane: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[EffectState] = mapped_column(
        _choice("effect_state", EFFECT_STATES), default="pending"
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    available_at: Mapped[datetime] = mapped_column(UTCDateTime())
    worker_id: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        UniqueConstraint("run_id", "key"),
        Index("ix_effects_state", "state", "available_at"),
    )


class ReviewRequestRow(Base):
    """A pull request head that asked for a review; runs.py claims it (PART C)."""

    __tablename__ = "review_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # One per delivery: a delivery handled twice (a retry) asks once.
    delivery_id: Mapped[str] = mapped_column(ForeignKey("deliveries.id"), unique=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), index=True)
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    action: Mapped[str] = mapped_column(String(64))
    head_sha: Mapped[str] = mapped_column(String(40))
    base_sha: Mapped[str] = mapped_column(String(40))
    base_ref: Mapped[str] = mapped_column(String(256))
    author: Mapped[str] = mapped_column(String(64))
    author_type: Mapped[str] = mapped_column(String(32))  # GitHub's `type`: User, Bot, …
    draft: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # What became of the request: the run it started, or why it was not reviewed.
    outcome: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(64))


MIGRATIONS = Path(__file__).parent / "migrations"
# The first revision: the tables as `create_all` made them before there were migrations.
FIRST_REVISION = "0001"
# Relays sharing one PostgreSQL database migrate one at a time under this lock.
_MIGRATION_LOCK = 0x43756A6F


def create_schema(engine: Engine) -> None:
    """Bring the record to the newest revision (Alembic's ``upgrade head``), under a lock."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # One transaction holding the write lock (BEGIN IMMEDIATE on SQLite, an advisory lock
    # on PostgreSQL): relays starting at once migrate one after the other.
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        config.attributes["connection"] = connection
        tables = set(inspect(connection).get_table_names())
        if "alembic_version" not in tables and "runs" in tables:
            # A record made before migrations existed holds exactly the first revision.
            command.stamp(config, FIRST_REVISION)
        command.upgrade(config, "head")


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


# --------------------------------------------------------------------------- store


def _engine_for(url: str, *, sync_every_commit: bool = True) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    database = parsed.database or ""
    if database in ("", ":memory:"):
        # One shared connection, or every connection would see its own empty database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        if not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
    event.listen(
        engine, "connect", _sqlite_connect if sync_every_commit else _sqlite_connect_unsynced
    )
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect_unsynced(dbapi_connection: Any, connection_record: object) -> None:
    _sqlite_connect(dbapi_connection, connection_record, synchronous="NORMAL")


def _sqlite_connect(
    dbapi_connection: Any, connection_record: object, *, synchronous: str = "FULL"
) -> None:
    # Take BEGIN away from the sqlite3 driver, which skips it for SELECT; _sqlite_begin
    # issues it instead (SQLAlchemy's documented recipe for real transactions).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # WAL lets the board read while a review writes; FULL syncs each commit, so a
        # commit that returned survives a crash of the process or the machine. NORMAL
        # (the workers') survives a crash of the process; the machine's may lose the
        # newest commits, in order, and the work they recorded is redone: a delivery is
        # marked done after what it did, and every effect is found again before it is
        # made twice.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # Writers take the write lock up front (IMMEDIATE) and wait for it under the busy
    # timeout; a deferred transaction that reads and then writes would instead fail at
    # once with "database is locked" when another process wrote in between.
    mode = conn.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _delivery(row: DeliveryRow) -> Delivery:
    return Delivery(
        id=row.id,
        event=row.event,
        action=row.action,
        installation_id=row.installation_id,
        repo=row.repo,
        body=row.body,
        state=row.state,
        attempts=row.attempts,
        error=row.error,
        received_at=row.received_at,
        worker_id=row.worker_id,
        lease_until=row.lease_until,
        done_at=row.done_at,
    )


def _require(what: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise UnknownState(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


class Store:
    """The record of sessions and runs, over one database URL."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] = utcnow,
        sync_every_commit: bool = True,
    ) -> None:
        """Open the record at ``url`` (migrating it to the newest revision).

        ``sync_every_commit=False`` (SQLite only) is for processes that never answer a
        webhook: their commits are ordered and atomic but not each synced to disk, so the
        webhook's own syncs do not queue behind theirs.
        """
        self.url = url
        self._clock = clock
        self._engine = _engine_for(url, sync_every_commit=sync_every_commit)
        writer = self._engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        self._reads = sessionmaker(bind=self._engine, expire_on_commit=False)
        self._writes = sessionmaker(bind=writer, expire_on_commit=False)
        create_schema(writer)

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._writes.begin() as session:
            yield session

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with self._reads.begin() as session:
            yield session

    # ---------------------------------------------------------------- deliveries

    def record_delivery(
        self,
        delivery_id: str,
        event: str,
        action: str | None,
        installation_id: int | None,
        repo: str | None,
        body: bytes,
    ) -> bool:
        """Record a verified delivery as `pending`; return False if its id was seen before."""
        new = NewDelivery(delivery_id, event, action, installation_id, repo, body)
        return self.record_deliveries([new])[0]

    def record_deliveries(self, deliveries: Sequence[NewDelivery]) -> list[bool]:
        """Record deliveries in one transaction; say for each whether it was new.

        One commit (one sync to disk) for a batch is what lets the webhook keep up with
        a burst: the web app gathers the deliveries that arrive together and calls this.
        """
        for new in deliveries:
            new.check()
        if not deliveries:
            return []
        now = self._clock()
        rows = [
            {
                "id": new.id,
                "event": new.event,
                "action": new.action,
                "installation_id": new.installation_id,
                "repo": new.repo,
                "body": bytes(new.body),
                "state": "pending",
                "attempts": 0,
                "received_at": now,
                "available_at": now,
            }
            for new in deliveries
        ]
        dialect = self._engine.dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        # A redelivery keeps its id (X-GitHub-Delivery): the first record of it wins.
        statement = (
            insert(DeliveryRow)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(DeliveryRow.id)
        )
        with self._write() as session:
            inserted = set(session.scalars(statement, rows))
        answers: list[bool] = []
        for new in deliveries:
            answers.append(new.id in inserted)
            inserted.discard(new.id)  # the same id twice in one batch is new once
        return answers

    def claim_delivery(
        self, worker_id: str, lease_s: float, *, max_attempts: int = MAX_DELIVERY_ATTEMPTS
    ) -> Delivery | None:
        """Take the oldest pending delivery (or one whose lease ran out), under a lease."""
        found = self.claim_deliveries(worker_id, lease_s, limit=1, max_attempts=max_attempts)
        return found[0] if found else None

    def claim_deliveries(
        self,
        worker_id: str,
        lease_s: float,
        *,
        limit: int,
        max_attempts: int = MAX_DELIVERY_ATTEMPTS,
    ) -> list[Delivery]:
        """Take up to ``limit`` of the oldest pending deliveries in one transaction.

        Also those whose worker's lease ran out. Each claim counts as an attempt, so a
        delivery that kills every worker taking it ends `failed` once ``max_attempts``
        leases have run out, instead of looping.
        """
        if not worker_id or len(worker_id) > 128:
            raise ValueError("a worker id has 1 to 128 characters")
        if lease_s <= 0:
            raise ValueError("a lease lasts more than 0 seconds")
        if limit < 1:
            raise ValueError("claim at least one delivery")
        now = self._clock()
        with self._write() as session:
            session.execute(
                update(DeliveryRow)
                .where(
                    DeliveryRow.state == "working",
                    DeliveryRow.lease_until < now,
                    DeliveryRow.attempts >= max_attempts,
                )
                .values(
                    state="failed",
                    error=f"gave up after {max_attempts} attempts: the worker holding it "
                    "stopped before finishing (its lease ran out)",
                    worker_id=None,
                    lease_until=None,
                    done_at=now,
                )
            )
            # SKIP LOCKED lets relays sharing PostgreSQL take different deliveries at once;
            # SQLite renders no FOR UPDATE and serializes claims with BEGIN IMMEDIATE.
            rows = list(
                session.scalars(
                    select(DeliveryRow)
                    .where(
                        or_(
                            and_(DeliveryRow.state == "pending", DeliveryRow.available_at <= now),
                            and_(DeliveryRow.state == "working", DeliveryRow.lease_until < now),
                        )
                    )
                    .order_by(DeliveryRow.received_at, DeliveryRow.id)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            )
            for row in rows:
                if row.state == "working":
                    row.error = f"taken over from {row.worker_id}, whose lease ran out"
                row.state = "working"
                row.worker_id = worker_id
                row.lease_until = now + timedelta(seconds=lease_s)
                row.attempts += 1
            return [_delivery(row) for row in rows]

    def renew_lease(self, delivery_id: str, worker_id: str, lease_s: float) -> bool:
        """Extend a worker's lease on a delivery; return False if it no longer holds it."""
        now = self._clock()
        with self._write() as session:
            done = session.execute(
                update(DeliveryRow)
                .where(
                    DeliveryRow.id == delivery_id,
                    DeliveryRow.state == "working",
                    DeliveryRow.worker_id == worker_id,
                )
                .values(lease_until=now + timedelta(seconds=lease_s))
            )
            return bool(getattr(done, "rowcount", 0))

    def finish_delivery(
        self,
        delivery_id: str,
        ok: bool,
        detail: str = "",
        *,
        worker_id: str | None = None,
        final: bool = False,
        retry_in_s: float = 0.0,
        max_attempts: int = MAX_DELIVERY_ATTEMPTS,
    ) -> bool:
        """End a claimed delivery: `done`, back to `pending` to retry, or `failed`.

        A failure is retried after ``retry_in_s`` until ``max_attempts`` claims, or not at
        all when ``final`` (retrying cannot help). With ``worker_id``, only that worker's
        claim is finished: False means its lease ran out and another worker holds it.
        """
        done = Finished(delivery_id, ok, detail, final=final, retry_in_s=retry_in_s)
        return self.finish_deliveries([done], worker_id=worker_id, max_attempts=max_attempts)[0]

    def finish_deliveries(
        self,
        results: Sequence[Finished],
        *,
        worker_id: str | None = None,
        max_attempts: int = MAX_DELIVERY_ATTEMPTS,
    ) -> list[bool]:
        """End several claimed deliveries in one transaction; say for each if it was ours."""
        now = self._clock()
        answers: list[bool] = []
        with self._write() as session:
            for result in results:
                row = session.scalar(
                    select(DeliveryRow)
                    .where(DeliveryRow.id == result.delivery_id)
                    .with_for_update()
                )
                if row is None:
                    raise UnknownDelivery(f"no delivery {result.delivery_id!r}")
                if row.state != "working" or (worker_id is not None and row.worker_id != worker_id):
                    answers.append(False)
                    continue
                why = clip(result.detail.strip() or "no reason was given", MAX_DELIVERY_ERROR)
                if result.ok:
                    row.state, row.error, row.done_at = "done", None, now
                elif result.final or row.attempts >= max_attempts:
                    row.state, row.done_at = "failed", now
                    row.error = f"failed after {row.attempts} attempt(s): {why}"
                else:
                    row.state, row.error = "pending", why
                    row.available_at = now + timedelta(seconds=max(result.retry_in_s, 0.0))
                row.worker_id = None
                row.lease_until = None
                answers.append(True)
        return answers

    def release_deliveries(self, delivery_ids: Sequence[str], worker_id: str) -> None:
        """Hand claimed, unstarted deliveries back to the queue, their claim not counted."""
        with self._write() as session:
            session.execute(
                update(DeliveryRow)
                .where(
                    DeliveryRow.id.in_(list(delivery_ids)),
                    DeliveryRow.state == "working",
                    DeliveryRow.worker_id == worker_id,
                )
                .values(
                    state="pending",
                    worker_id=None,
                    lease_until=None,
                    attempts=DeliveryRow.attempts - 1,
                )
            )

    def get_delivery(self, delivery_id: str) -> Delivery:
        """Return one delivery."""
        with self._read() as session:
            row = session.get(DeliveryRow, delivery_id)
            if row is None:
                raise UnknownDelivery(f"no delivery {delivery_id!r}")
            return _delivery(row)

    def count_deliveries(self, *states: DeliveryState) -> int:
        """Return how many deliveries are in ``states`` (all of them when none are given)."""
        return self._count(DeliveryRow.state, "delivery state", states, DELIVERY_STATES)

    def _count(self, column: Any, what: str, states: Sequence[str], allowed: Sequence[str]) -> int:
        for state in states:
            _require(what, state, allowed)
        query = select(func.count()).select_from(column.class_)
        if states:
            query = query.where(column.in_(states))
        with self._read() as session:
            return int(session.scalar(query) or 0)

    # ---------------------------------------------------------------- review requests

    def request_review(
        self,
        *,
        delivery_id: str,
        session_id: str,
        installation_id: int | None,
        action: str,
        head_sha: str,
        base_sha: str,
        base_ref: str,
        author: str,
        author_type: str,
        draft: bool,
    ) -> int:
        """Record that a head asks for a review, once per delivery; return the request id."""
        for name, sha in (("base_sha", base_sha), ("head_sha", head_sha)):
            if not _SHA.match(sha):
                raise ValueError(f"{name} must be 40 lowercase hex digits, got {sha!r}")
        with self._write() as session:
            found = session.scalar(
                select(ReviewRequestRow.id).where(ReviewRequestRow.delivery_id == delivery_id)
            )
            if found is not None:
                return found
            if session.get(SessionRow, session_id) is None:
                raise UnknownSession(f"no session {session_id!r}")
            row = ReviewRequestRow(
                delivery_id=delivery_id,
                session_id=session_id,
                installation_id=installation_id,
                action=action,
                head_sha=head_sha,
                base_sha=base_sha,
                base_ref=base_ref,
                author=author,
                author_type=author_type,
                draft=draft,
                created_at=self._clock(),
            )
            session.add(row)
            session.flush()
            return row.id

    def review_requests(self, session_id: str | None = None) -> list[ReviewRequest]:
        """Return the review requests (of one session), oldest first."""
        query = select(ReviewRequestRow, SessionRow).join(
            SessionRow, SessionRow.id == ReviewRequestRow.session_id
        )
        if session_id is not None:
            query = query.where(ReviewRequestRow.session_id == session_id)
        with self._read() as session:
            rows = session.execute(query.order_by(ReviewRequestRow.id)).all()
            return [
                ReviewRequest(
                    id=r.id,
                    delivery_id=r.delivery_id,
                    session_id=r.session_id,
                    repo=s.repo,
                    pr_number=s.pr_number or 0,
                    installation_id=r.installation_id,
                    action=r.action,
                    head_sha=r.head_sha,
                    base_sha=r.base_sha,
                    base_ref=r.base_ref,
                    author=r.author,
                    author_type=r.author_type,
                    draft=r.draft,
                    created_at=r.created_at,
                    outcome=r.outcome,
                    run_id=r.run_id,
                )
                for r, s in rows
            ]

    # ---------------------------------------------------------------- sessions

    def open_session(self, repo: str, pr_number: int | None, kind: SessionKind) -> str:
        """Return the session of this pull request, opening it on first sight."""
        _require("session kind", kind, SESSION_KINDS)
        if not repo:
            raise ValueError("a session needs a repository")
        try:
            with self._write() as session:
                if pr_number is not None:
                    found = session.scalar(
                        select(SessionRow.id).where(
                            SessionRow.kind == kind,
                            SessionRow.repo == repo,
                            SessionRow.pr_number == pr_number,
                        )
                    )
                    if found is not None:
                        return found
                session_id = uuid.uuid4().hex
                session.add(
                    SessionRow(
                        id=session_id,
                        repo=repo,
                        pr_number=pr_number,
                        kind=kind,
                        created_at=self._clock(),
                    )
                )
                return session_id
        except IntegrityError:
            # Another relay instance opened it first (PostgreSQL has no IMMEDIATE lock).
            with self._read() as session:
                found = session.scalar(
                    select(SessionRow.id).where(
                        SessionRow.kind == kind,
                        SessionRow.repo == repo,
                        SessionRow.pr_number == pr_number,
                    )
                )
            if found is None:
                raise
            return found

    # ---------------------------------------------------------------- runs

    def start_run(
        self,
        session_id: str,
        run_id: str,
        base_sha: str,
        head_sha: str,
        mode: Mode,
        *,
        policy_json: str | None = None,
        github: Mapping[str, int | str | None] | None = None,
        lease: tuple[str, float] | None = None,
        effects: Sequence[Intent] = (),
    ) -> None:
        """Record a claimed run as `running`, all in one transaction.

        With the policy read at base when there is one, where it lives on GitHub
        (``github``: the fields of ``bind_github``), held by ``lease`` (owner, seconds)
        and with the effects that show it started.
        """
        _require("mode", mode, MODES)
        if github and (unknown := set(github) - _GITHUB_FIELDS):
            raise ValueError(f"not a GitHub field of a run: {sorted(unknown)}")
        for name, sha in (("base_sha", base_sha), ("head_sha", head_sha)):
            if not _SHA.match(sha):
                raise ValueError(f"{name} must be 40 lowercase hex digits, got {sha!r}")
        if not run_id or len(run_id) > 64:
            raise ValueError(f"a run id has 1 to 64 characters, got {run_id!r}")
        now = self._clock()
        with self._write() as session:
            if session.get(SessionRow, session_id) is None:
                raise UnknownSession(f"no session {session_id!r}")
            if session.get(RunRow, run_id) is not None:
                raise StoreError(f"run {run_id!r} already exists")
            session.add(
                RunRow(
                    id=run_id,
                    session_id=session_id,
                    base_sha=base_sha,
                    head_sha=head_sha,
                    mode=mode,
                    state=INITIAL,
                    judge=None,
                    summary="",
                    unproven=[],
                    policy_json=policy_json,
                    started_at=now,
                    updated_at=now,
                    lease_owner=lease[0] if lease else None,
                    lease_until=now + timedelta(seconds=lease[1]) if lease else None,
                    **dict(github or {}),
                )
            )
            # No ORM relationships, so the unit of work does not order the inserts itself.
            session.flush()
            session.add(RunEventRow(run_id=run_id, at=now, kind="state", detail=INITIAL))
            self._enqueue(session, run_id, effects, now)

    def add_event(self, run_id: str, kind: str, detail: str = "") -> int:
        """Append an event to a run's timeline and return its id."""
        if not kind or len(kind) > MAX_EVENT_KIND:
            raise ValueError(f"an event kind has 1 to {MAX_EVENT_KIND} characters")
        with self._write() as session:
            if session.get(RunRow, run_id) is None:
                raise UnknownRun(f"no run {run_id!r}")
            row = RunEventRow(
                run_id=run_id, at=self._clock(), kind=kind, detail=clip(detail, MAX_TAIL)
            )
            session.add(row)
            session.flush()
            return row.id

    def finish_run(
        self,
        run_id: str,
        verdict: Verdict,
        plan_json: str | None = None,
        reports_dir: str | None = None,
        *,
        effects: Sequence[Intent] = (),
    ) -> None:
        """Record a run's verdict, findings and the effects that show it, all at once."""
        _require("run state", verdict.state, sorted(VERDICT_STATES))
        with self._write() as session:
            row = self._run_row(session, run_id)
            now = self._clock()
            if row.state not in OPEN_STATES or not self._move(session, row, verdict.state, now=now):
                raise RunClosed(f"run {run_id!r} is already {row.state}")
            row.judge = verdict.judge
            row.model_use = verdict.model_use.model_dump() if verdict.model_use else None
            row.summary = verdict.summary
            row.unproven = list(verdict.unproven)
            row.plan_json = plan_json
            row.reports_dir = reports_dir
            session.add_all(
                FindingRow(
                    run_id=run_id,
                    finding_id=f.id,
                    rule=f.rule,
                    severity=f.severity,
                    check=f.check,
                    title=f.title,
                    evidence=list(f.evidence),
                    rules=list(f.rules),
                )
                for f in verdict.findings
            )
            self._enqueue(session, run_id, effects, now)

    def mark_abandoned(self, run_id: str, reason: str, *, effects: Sequence[Intent] = ()) -> bool:
        """Turn a run a crash left open into `error`; return False if it was decided."""
        with self._write() as session:
            row = self._run_row(session, run_id)
            if row.state not in OPEN_STATES:
                return False
            now = self._clock()
            why = reason.strip() or "no reason was given"
            session.add(RunEventRow(run_id=run_id, at=now, kind="abandoned", detail=why))
            self._move(session, row, "error", now=now)
            row.summary = (
                f"The review was abandoned: {why}. This says nothing about the pull request."
            )
            self._enqueue(session, run_id, effects, now)
            return True

    def move(
        self,
        run_id: str,
        to_state: RunState,
        detail: str = "",
        *,
        from_state: RunState | None = None,
        effects: Sequence[Intent] = (),
        command: tuple[int, str] | None = None,
    ) -> bool:
        """Move a run where the state machine allows; False (nothing written) otherwise.

        ``command`` (its id, and why) is a verb this move applies: it is marked applied
        in the same transaction, so a redelivered comment never applies it twice.

        ``from_state`` also requires the run to be there now (an approval moves a
        `waiting` run only). Moving to `dismissed` remembers the hold it lifted, and
        moving out of `dismissed` goes back to that hold only. The effects that show the
        move are recorded in the same transaction.
        """
        _require("run state", to_state, RUN_STATES)
        with self._write() as session:
            row = self._run_row(session, run_id)
            if from_state is not None and row.state != from_state:
                return False
            if row.state == "dismissed" and row.lifted is not None and to_state != row.lifted:
                return False
            lifting = row.state if to_state == "dismissed" else None
            now = self._clock()
            if not self._move(session, row, to_state, detail, now=now):
                return False
            if lifting is not None:
                row.lifted = lifting
            self._enqueue(session, run_id, effects, now)
            if command is not None:
                self._decide_command(session, command[0], "applied", command[1], row, now)
            return True

    def _move(
        self, session: Session, row: RunRow, to_state: RunState, detail: str = "", *, now: datetime
    ) -> bool:
        # Every change of a run's state goes through here, and here asks runstate.
        if not may_move(row.state, to_state):
            return False
        row.state = to_state
        row.updated_at = now
        if to_state not in OPEN_STATES and row.finished_at is None:
            row.finished_at = now
        said = f"{to_state}: {detail}" if detail else to_state
        session.add(RunEventRow(run_id=row.id, at=now, kind="state", detail=clip(said, MAX_TAIL)))
        return True

    # ---------------------------------------------------------------- runs on GitHub

    def bind_github(self, run_id: str, **fields: int | str | None) -> None:
        """Record where a run lives on GitHub (installation, check, workflow run, review)."""
        if unknown := set(fields) - _GITHUB_FIELDS:
            raise ValueError(f"not a GitHub field of a run: {sorted(unknown)}")
        with self._write() as session:
            row = self._run_row(session, run_id)
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = self._clock()

    def note_request(self, delivery_id: str, outcome: str, run_id: str | None = None) -> None:
        """Record what became of a review request: the run it started, or why not."""
        with self._write() as session:
            session.execute(
                update(ReviewRequestRow)
                .where(ReviewRequestRow.delivery_id == delivery_id)
                .values(outcome=clip(outcome, MAX_TAIL), run_id=run_id)
            )

    def run_of_delivery(self, delivery_id: str) -> str | None:
        """Return the run a delivery started, if it started one."""
        with self._read() as session:
            return session.scalar(
                select(RunRow.id).where(RunRow.delivery_id == delivery_id).limit(1)
            )

    def open_runs(self, session_id: str | None = None) -> list[RunRecord]:
        """Return the undecided runs of pull requests (of one session), oldest first."""
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(RunRow.state.in_(OPEN_STATES), SessionRow.kind == "github")
        )
        if session_id is not None:
            query = query.where(RunRow.session_id == session_id)
        with self._read() as session:
            return self._records(session, query.order_by(RunRow.started_at, RunRow.id))

    def run_of_workflow_run(self, repo: str, workflow_run_id: int) -> RunRecord | None:
        """Return the run that dispatched a workflow run of ``repo``."""
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(RunRow.workflow_run_id == workflow_run_id, SessionRow.repo == repo)
        )
        with self._read() as session:
            found = self._records(session, query)
        return found[0] if found else None

    def run_of_check(self, repo: str, check_run_id: int) -> RunRecord | None:
        """Return the newest run that owns a check run of ``repo``."""
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(RunRow.check_run_id == check_run_id, SessionRow.repo == repo)
            .order_by(RunRow.started_at.desc(), RunRow.id.desc())
            .limit(1)
        )
        with self._read() as session:
            found = self._records(session, query)
        return found[0] if found else None

    def move_open(
        self,
        run_id: str,
        from_state: RunState,
        to_state: RunState,
        detail: str = "",
        *,
        effects: Sequence[Intent] = (),
    ) -> bool:
        """Move an undecided run from one state to another; False if it was elsewhere."""
        if from_state not in OPEN_STATES:
            raise ValueError(f"{from_state} is not an undecided state")
        return self.move(run_id, to_state, detail, from_state=from_state, effects=effects)

    def supersede(self, run_id: str, by_run: str, *, effects: Sequence[Intent] = ()) -> bool:
        """Mark an undecided run superseded; False if it was decided meanwhile."""
        with self._write() as session:
            row = self._run_row(session, run_id)
            now = self._clock()
            if not self._move(session, row, "superseded", f"by run {by_run}", now=now):
                return False
            row.summary = f"Superseded by run {by_run}: a newer head was pushed."
            # A superseded run posts nothing: what it meant to write and has not is dropped.
            session.execute(
                update(EffectRow)
                .where(EffectRow.run_id == run_id, EffectRow.state == "pending")
                .values(state="cancelled", done_at=now, error=f"superseded by run {by_run}")
            )
            self._enqueue(session, run_id, effects, now)
            return True

    # ---------------------------------------------------------------- run leases

    def acquire_run(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Hold a run for ``lease_s`` to act on it; False while another relay holds it."""
        if not owner or len(owner) > 128:
            raise ValueError("a lease owner has 1 to 128 characters")
        if lease_s <= 0:
            raise ValueError("a lease lasts more than 0 seconds")
        with self._write() as session:
            row = self._run_row(session, run_id)
            now = self._clock()
            if (
                row.lease_owner not in (None, owner)
                and row.lease_until is not None
                and row.lease_until > now
            ):
                return False
            row.lease_owner = owner
            row.lease_until = now + timedelta(seconds=lease_s)
            return True

    def release_run(self, run_id: str, owner: str) -> None:
        """Let go of a run's lease (nothing happens if ``owner`` does not hold it)."""
        with self._write() as session:
            session.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.lease_owner == owner)
                .values(lease_owner=None, lease_until=None)
            )

    def unleased_open_runs(self) -> list[RunRecord]:
        """Return undecided pull-request runs nobody holds (or whose holder's lease ran out)."""
        now = self._clock()
        query = (
            select(RunRow)
            .join(SessionRow, SessionRow.id == RunRow.session_id)
            .where(
                RunRow.state.in_(OPEN_STATES),
                SessionRow.kind == "github",
                or_(RunRow.lease_owner.is_(None), RunRow.lease_until < now),
            )
            .order_by(RunRow.started_at, RunRow.id)
        )
        with self._read() as session:
            return self._records(session, query)

    # ---------------------------------------------------------------- commands

    def record_command(
        self,
        *,
        delivery_id: str,
        repo: str,
        pr_number: int,
        comment_id: int,
        author: str,
        author_type: str,
        verb: Verb,
        created_at: datetime,
    ) -> CommandRecord:
        """Record a comment's verb as pending, once: a redelivery gets the first record."""
        _require("verb", verb, VERBS)
        with self._write() as session:
            row = session.scalar(
                select(CommandRow).where(
                    CommandRow.comment_id == comment_id, CommandRow.verb == verb
                )
            )
            if row is None:
                row = CommandRow(
                    delivery_id=delivery_id,
                    repo=clip(repo, 256),
                    pr_number=pr_number,
                    comment_id=comment_id,
                    author=clip(author, 64),
                    author_type=clip(author_type, 32),
                    verb=verb,
                    outcome="pending",
                    reason="",
                    created_at=created_at,
                )
                session.add(row)
                session.flush()
            return _command(row)

    def decide_command(
        self,
        command_id: int,
        outcome: CommandOutcome,
        reason: str,
        *,
        run_id: str | None = None,
        effects: Sequence[Intent] = (),
    ) -> bool:
        """Record a refusal (or an outcome without a move); False if it was decided before.

        The effects (a reaction, a reply) belong to ``run_id``'s outbox when given.
        """
        _require("command outcome", outcome, COMMAND_OUTCOMES)
        with self._write() as session:
            now = self._clock()
            row = self._run_row(session, run_id) if run_id is not None else None
            if not self._decide_command(session, command_id, outcome, reason, row, now):
                return False
            if run_id is not None:
                self._enqueue(session, run_id, effects, now)
            return True

    def _decide_command(
        self,
        session: Session,
        command_id: int,
        outcome: CommandOutcome,
        reason: str,
        run: RunRow | None,
        now: datetime,
    ) -> bool:
        row = session.scalar(
            select(CommandRow).where(CommandRow.id == command_id).with_for_update()
        )
        if row is None:
            raise StoreError(f"no command {command_id}")
        if row.outcome != "pending":
            return False
        row.outcome, row.reason, row.decided_at = outcome, clip(reason, MAX_TAIL), now
        if run is not None:
            row.run_id, row.head_sha = run.id, run.head_sha
            detail = f"{row.verb} by {row.author}: {outcome}" + (f" ({reason})" if reason else "")
            session.add(
                RunEventRow(run_id=run.id, at=now, kind="command", detail=clip(detail, MAX_TAIL))
            )
        return True

    def get_command(self, command_id: int) -> CommandRecord:
        """Return one command."""
        with self._read() as session:
            row = session.get(CommandRow, command_id)
            if row is None:
                raise StoreError(f"no command {command_id}")
            return _command(row)

    def commands(self, repo: str | None = None) -> list[CommandRecord]:
        """Return the recorded commands (of one repository), oldest first."""
        query = select(CommandRow).order_by(CommandRow.id)
        if repo is not None:
            query = query.where(CommandRow.repo == repo)
        with self._read() as session:
            return [_command(row) for row in session.scalars(query)]

    def newest_run(self, session_id: str) -> RunRecord | None:
        """Return a session's newest run, whatever its state."""
        query = (
            select(RunRow)
            .where(RunRow.session_id == session_id)
            .order_by(RunRow.started_at.desc(), RunRow.id.desc())
            .limit(1)
        )
        with self._read() as session:
            found = self._records(session, query)
        return found[0] if found else None

    def state_since(self, run_id: str) -> datetime:
        """Return when the run entered its current state (its last state event)."""
        with self._read() as session:
            at = session.scalar(
                select(RunEventRow.at)
                .where(RunEventRow.run_id == run_id, RunEventRow.kind == "state")
                .order_by(RunEventRow.id.desc())
                .limit(1)
            )
        if at is None:
            raise UnknownRun(f"no run {run_id!r}")
        return at

    # ---------------------------------------------------------------- the outbox

    def add_effects(self, run_id: str, effects: Sequence[Intent]) -> None:
        """Record effects of a run as intended (outside a move: a retry's own check, say)."""
        with self._write() as session:
            self._run_row(session, run_id)
            self._enqueue(session, run_id, effects, self._clock())

    def _enqueue(
        self, session: Session, run_id: str, effects: Sequence[Intent], now: datetime
    ) -> None:
        for intent in effects:
            intent.check()
            if session.scalar(
                select(EffectRow.id).where(EffectRow.run_id == run_id, EffectRow.key == intent.key)
            ):
                continue  # intended before: the same effect is made once
            if intent.kind == "check":
                # A check shows one face: a newer one overtakes those not yet sent.
                session.execute(
                    update(EffectRow)
                    .where(
                        EffectRow.run_id == run_id,
                        EffectRow.kind == "check",
                        EffectRow.state == "pending",
                    )
                    .values(state="cancelled", done_at=now, error="overtaken by a newer face")
                )
            session.add(
                EffectRow(
                    run_id=run_id,
                    key=intent.key,
                    kind=intent.kind,
                    lane=_LANES[intent.kind],
                    payload=dict(intent.payload),
                    state="pending",
                    attempts=0,
                    created_at=now,
                    available_at=now,
                )
            )
            session.flush()

    def claim_effects(
        self, worker_id: str, lease_s: float, *, run_id: str | None = None, limit: int = 20
    ) -> list[Effect]:
        """Take due effects under a lease: per run and lane, only the oldest unfinished one.

        An effect whose worker died (its lease ran out) is taken over; it is made again
        only after looking on GitHub for what the first attempt may have done.
        """
        if not worker_id or len(worker_id) > 128:
            raise ValueError("a worker id has 1 to 128 characters")
        now = self._clock()
        earlier = aliased(EffectRow)
        blocked_by_earlier = (
            select(earlier.id)
            .where(
                earlier.run_id == EffectRow.run_id,
                earlier.lane == EffectRow.lane,
                earlier.id < EffectRow.id,
                earlier.state.in_(("pending", "working")),
            )
            .exists()
        )
        query = select(EffectRow).where(
            or_(
                and_(EffectRow.state == "pending", EffectRow.available_at <= now),
                and_(EffectRow.state == "working", EffectRow.lease_until < now),
            ),
            ~blocked_by_earlier,
        )
        if run_id is not None:
            query = query.where(EffectRow.run_id == run_id)
        query = query.order_by(EffectRow.id).limit(limit).with_for_update(skip_locked=True)
        with self._write() as session:
            rows = list(session.scalars(query))
            for row in rows:
                if row.state == "working":
                    row.error = f"taken over from {row.worker_id}, whose lease ran out"
                row.state = "working"
                row.worker_id = worker_id
                row.lease_until = now + timedelta(seconds=lease_s)
                row.attempts += 1
            return [_effect(row) for row in rows]

    def finish_effect(
        self,
        effect_id: int,
        worker_id: str,
        *,
        ok: bool,
        result: Mapping[str, Any] | None = None,
        bind: Mapping[str, int | str | None] | None = None,
        error: str = "",
        final: bool = False,
        retry_in_s: float = 0.0,
        max_attempts: int = MAX_EFFECT_ATTEMPTS,
    ) -> bool:
        """End a claimed effect: `done` (binding what it made to the run), retried, or `failed`.

        False when ``worker_id`` no longer holds it (its lease ran out and another has it).
        """
        if bind and (unknown := set(bind) - _GITHUB_FIELDS):
            raise ValueError(f"not a GitHub field of a run: {sorted(unknown)}")
        now = self._clock()
        with self._write() as session:
            row = session.scalar(
                select(EffectRow).where(EffectRow.id == effect_id).with_for_update()
            )
            if row is None:
                raise StoreError(f"no effect {effect_id}")
            if row.state != "working" or row.worker_id != worker_id:
                return False
            row.worker_id, row.lease_until = None, None
            why = clip(error.strip() or "no reason was given", MAX_DELIVERY_ERROR)
            if ok:
                row.state, row.done_at, row.error = "done", now, None
                row.result = dict(result or {})
                if bind:
                    run = self._run_row(session, row.run_id)
                    for name, value in bind.items():
                        setattr(run, name, value)
                    run.updated_at = now
            elif final or row.attempts >= max_attempts:
                row.state, row.done_at = "failed", now
                row.error = f"failed after {row.attempts} attempt(s): {why}"
                session.add(
                    RunEventRow(
                        run_id=row.run_id,
                        at=now,
                        kind="effect-failed",
                        detail=clip(f"{row.kind} {row.key}: {row.error}", MAX_TAIL),
                    )
                )
            else:
                row.state, row.error = "pending", why
                row.available_at = now + timedelta(seconds=max(retry_in_s, 0.0))
            return True

    def effects(self, run_id: str | None = None) -> list[Effect]:
        """Return the effects (of one run), in the order they were intended."""
        query = select(EffectRow).order_by(EffectRow.id)
        if run_id is not None:
            query = query.where(EffectRow.run_id == run_id)
        with self._read() as session:
            return [_effect(row) for row in session.scalars(query)]

    def count_effects(self, *states: EffectState) -> int:
        """Return how many effects are in ``states`` (all when none are given)."""
        return self._count(EffectRow.state, "effect state", states, EFFECT_STATES)

    def _run_row(self, session: Session, run_id: str) -> RunRow:
        # FOR UPDATE serializes writers on PostgreSQL; SQLite already holds the lock.
        row = session.scalar(select(RunRow).where(RunRow.id == run_id).with_for_update())
        if row is None:
            raise UnknownRun(f"no run {run_id!r}")
        return row

    # ---------------------------------------------------------------- reading

    def get_run(self, run_id: str) -> RunRecord:
        """Return one run with its findings."""
        with self._read() as session:
            records = self._records(session, select(RunRow).where(RunRow.id == run_id))
        if not records:
            raise UnknownRun(f"no run {run_id!r}")
        return records[0]

    def list_runs(
        self, limit: int = 50, *, states: Sequence[RunState] | None = None
    ) -> list[RunRecord]:
        """Return the newest runs first, optionally only those in ``states``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        query = select(RunRow)
        if states is not None:
            for state in states:
                _require("run state", state, RUN_STATES)
            query = query.where(RunRow.state.in_(list(states)))
        query = query.order_by(RunRow.started_at.desc(), RunRow.id.desc()).limit(limit)
        with self._read() as session:
            return self._records(session, query)

    def events(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """Return a run's events with ids above ``after``, oldest first."""
        with self._read() as session:
            if session.get(RunRow, run_id) is None:
                raise UnknownRun(f"no run {run_id!r}")
            rows = session.scalars(
                select(RunEventRow)
                .where(RunEventRow.run_id == run_id, RunEventRow.id > after)
                .order_by(RunEventRow.id)
            )
            return [RunEvent(r.id, r.run_id, r.at, r.kind, r.detail) for r in rows]

    def _records(self, session: Session, query: Select[RunRow]) -> list[RunRecord]:
        runs = list(session.scalars(query))
        if not runs:
            return []
        ids = [r.id for r in runs]
        sessions = {
            s.id: s
            for s in session.scalars(
                select(SessionRow).where(SessionRow.id.in_({r.session_id for r in runs}))
            )
        }
        findings: dict[str, list[Finding]] = {run_id: [] for run_id in ids}
        for f in session.scalars(
            select(FindingRow).where(FindingRow.run_id.in_(ids)).order_by(FindingRow.pk)
        ):
            findings[f.run_id].append(
                Finding(
                    id=f.finding_id,
                    rule=f.rule,
                    severity=f.severity,
                    check=f.check,
                    title=f.title,
                    evidence=list(f.evidence),
                    rules=list(f.rules or [f.rule]),
                )
            )
        return [
            RunRecord(
                run_id=r.id,
                session_id=r.session_id,
                repo=sessions[r.session_id].repo,
                pr_number=sessions[r.session_id].pr_number,
                session_kind=sessions[r.session_id].kind,
                base_sha=r.base_sha,
                head_sha=r.head_sha,
                mode=r.mode,
                state=r.state,
                judge=r.judge,
                summary=r.summary,
                unproven=tuple(r.unproven),
                plan_json=r.plan_json,
                reports_dir=r.reports_dir,
                started_at=r.started_at,
                updated_at=r.updated_at,
                finished_at=r.finished_at,
                findings=tuple(findings[r.id]),
                installation_id=r.installation_id,
                delivery_id=r.delivery_id,
                default_branch=r.default_branch,
                on_error=r.on_error,
                check_run_id=r.check_run_id,
                workflow_run_id=r.workflow_run_id,
                review_id=r.review_id,
                policy_json=r.policy_json,
                lease_owner=r.lease_owner,
                lifted=r.lifted,
                base_ref=r.base_ref,
                holds=r.holds,
                model_use=ModelUse.model_validate(r.model_use) if r.model_use else None,
            )
            for r in runs
        ]

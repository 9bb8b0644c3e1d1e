"""The record's tables, states and errors; the migrations build exactly these."""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Dialect,
    Engine,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    and_,
    column,
    inspect,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from app_relay.runstate.machine import RunState
from app_relay.verdict import (
    SEVERITIES,
    FindingSource,
    JudgeKind,
    Severity,
)
from cujo_action.schema import CHECK_NAMES

# docs/design.md section 3; runstate/machine.py says which moves between them exist.
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
FINDING_SOURCES: tuple[str, ...] = (*CHECK_NAMES, "diff", "record")
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
# A local review (`cujo review`) shares its record with the other reviews run beside it
# and the board; nobody waits on its answer, so on a busy machine it waits its turn for
# the record (a first review's migrations, another's findings) rather than fail.
LOCAL_BUSY_TIMEOUT_MS = 120_000
# A delivery is tried at most this often (claims, including those whose worker died)
# before it ends `failed`, so one that crashes its worker cannot loop forever.
MAX_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ERROR = 2000
MAX_EVENT_KIND = 64
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
        "author",
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
    # Taken from the intake queue (SQLite, intake.py): its number there. The body stays in
    # the queue until the delivery is finished, and ``body`` here is empty.
    queue_seq: Mapped[int | None] = mapped_column(BigInteger)

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
    # (github/protection.py: holds, does-not-hold, unknown) as last read.
    base_ref: Mapped[str | None] = mapped_column(String(256))
    holds: Mapped[str | None] = mapped_column(String(16))
    # When GitHub shows the run's current state (its verdict, a dismissal or a reinstate),
    # by GitHub's clock: the review's own time, a dismissal's or check's answer Date.
    # Cleared on every move; a verb compares a comment's GitHub time with it, so a
    # command written before the state it would change was shown changes nothing.
    verdict_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The pull request's author: the caps count a sandbox run in flight per author.
    author: Mapped[str | None] = mapped_column(String(64))


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


def claimable(table: type[DeliveryRow] | type[EffectRow], now: datetime) -> ColumnElement[bool]:
    """Match the queued rows a worker may take: pending and due, or held past their lease."""
    return or_(
        and_(table.state == "pending", table.available_at <= now),
        and_(table.state == "working", table.lease_until < now),
    )


def holder_name() -> str:
    """Return a lease holder's name for this process, unique per start.

    A restarted relay must not pass for the one that died, whose leases are still running.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def take_over(row: DeliveryRow | EffectRow, worker_id: str, lease_until: datetime) -> None:
    """Hold a claimed row for ``worker_id``, saying whose ran-out lease it takes over."""
    if row.state == "working":
        row.error = f"taken over from {row.worker_id}, whose lease ran out"
    row.state = "working"
    row.worker_id = worker_id
    row.lease_until = lease_until
    row.attempts += 1


class ReviewRequestRow(Base):
    """A pull request head that asked for a review; the run coordinator (runs/start.py) takes it."""

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


class IntakeCursorRow(Base):
    """How far the record has taken deliveries from its intake queue (SQLite; intake.py)."""

    __tablename__ = "intake_cursor"

    # The queue file this record takes from: a queue that is replaced or lost is refused.
    queue_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # Every queued delivery up to this sequence number is in `deliveries`.
    taken_seq: Mapped[int] = mapped_column(BigInteger)


MIGRATIONS = Path(__file__).parent.parent / "migrations"
# The first revision: the tables as `create_all` made them before there were migrations.
FIRST_REVISION = "0001"
# Relays sharing one PostgreSQL database migrate one at a time under this lock.
_MIGRATION_LOCK = 0x43756A6F


class MigrationError(RuntimeError):
    """Alembic could not bring a database to its newest revision (its message, unchanged)."""


def newest_revision(folder: Path) -> str:
    """Return the newest migration in ``folder``, read without loading Alembic.

    Migration files are numbered in order (``0015_privileged_check.py`` follows
    ``0014_…``; a test holds every file to it), so the newest is the highest number's
    ``revision = "…"`` line.
    """
    numbered = sorted((folder / "versions").glob("[0-9]*_*.py"))
    if not numbered:
        raise MigrationError(f"no migration in {folder / 'versions'}")
    found = re.search(r'^revision = "([^"]+)"$', numbered[-1].read_text(), re.MULTILINE)
    if found is None:
        raise MigrationError(f'{numbered[-1]} has no line `revision = "…"`')
    return found.group(1)


def upgrade_to_head(
    connection: Connection,
    folder: Path,
    *,
    version_table: str = "alembic_version",
    legacy: tuple[str, str] | None = None,
) -> bool:
    """Run Alembic's ``upgrade head`` from ``folder`` on ``connection``; say if it ran.

    A database already at the newest revision is left as it is without importing Alembic
    (about a quarter of the record's start-up: every ``cujo`` command opens the record).
    ``version_table`` is the one ``folder``'s ``env.py`` names; ``legacy`` is ``(table,
    revision)``: a database holding that table but no version table was made before
    migrations existed, and holds that revision.
    """
    tables = set(inspect(connection).get_table_names())
    if version_table in tables:
        version = column("version_num", String)
        current = connection.execute(select(version).select_from(table(version_table)))
        if list(current.scalars()) == [newest_revision(folder)]:
            return False
    # Here, not at the top: only a record that needs a migration pays for Alembic.
    from alembic import command  # noqa: PLC0415
    from alembic.config import Config  # noqa: PLC0415
    from alembic.util import CommandError  # noqa: PLC0415

    config = Config()
    config.set_main_option("script_location", str(folder))
    config.attributes["connection"] = connection
    try:
        if legacy is not None and legacy[0] in tables and version_table not in tables:
            command.stamp(config, legacy[1])
        command.upgrade(config, "head")
    except CommandError as exc:
        raise MigrationError(str(exc)) from exc
    return True


def create_schema(engine: Engine) -> None:
    """Bring the record to the newest revision (Alembic's ``upgrade head``), under a lock."""
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        raw = connection.connection.dbapi_connection
        if sqlite and raw is not None:
            # SQLite alters a table by copying it and dropping the old one, which foreign
            # keys would refuse while other tables refer to its rows. As SQLite's own
            # procedure says: keys off outside the transaction (inside it the pragma does
            # nothing), checked before the commit, on again after.
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            # One transaction holding the write lock (BEGIN IMMEDIATE on SQLite, an
            # advisory lock on PostgreSQL): relays starting at once migrate in turn.
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK}
                    )
                # A record made before migrations existed holds the first revision.
                migrated = upgrade_to_head(connection, MIGRATIONS, legacy=("runs", FIRST_REVISION))
                if (
                    migrated
                    and sqlite
                    and (broken := connection.exec_driver_sql("PRAGMA foreign_key_check").all())
                ):
                    raise RuntimeError(
                        f"the record's migration left {len(broken)} rows whose foreign keys "
                        f"point nowhere (first: table {broken[0][0]}); nothing was changed"
                    )
        finally:
            if sqlite and raw is not None:
                raw.execute("PRAGMA foreign_keys=ON")


def _require(what: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise UnknownState(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")

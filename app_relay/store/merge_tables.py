"""The record's tables of merges from the run page (docs/design.md section 12)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app_relay.store.tables import Base, UTCDateTime, _choice

# A merge from the run page (docs/design.md section 12): each click is one attempt.
MergeState = Literal[
    "reading", "refused", "blocked", "sent", "merged", "queued", "unknown", "failed"
]
MERGE_STATES: tuple[MergeState, ...] = get_args(MergeState)
# The states that hold the pull request's head: at most one attempt per head is in them,
# a rule the database keeps (a partial unique index), so clicks, tabs and relays make
# one merge. "failed" (GitHub refused, or the queue dropped it) lets go.
MERGE_LIVE: tuple[MergeState, ...] = ("sent", "queued", "unknown", "merged")
_MERGE_LIVE_SQL = text("state IN ('sent', 'queued', 'unknown', 'merged')")


class MergeAttemptRow(Base):
    """One click on a run page's merge action: who, what it pinned, what GitHub answered."""

    __tablename__ = "merge_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    repo: Mapped[str] = mapped_column(String(256))
    pr_number: Mapped[int] = mapped_column(Integer)
    login: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    # The reviewed head and base the attempt pinned (the run's, re-read from the record).
    head_sha: Mapped[str] = mapped_column(String(40))
    base_ref: Mapped[str] = mapped_column(String(256))
    base_sha: Mapped[str | None] = mapped_column(String(40))
    # The gate's two passes, as read (GateReading.to_json); NULL until read.
    first_reading: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    second_reading: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    method: Mapped[str] = mapped_column(String(16))
    state: Mapped[MergeState] = mapped_column(_choice("merge_state", MERGE_STATES))
    # GitHub's answer in its own words (inert text), and its HTTP status when it gave one.
    status: Mapped[int | None] = mapped_column(Integer)
    words: Mapped[str] = mapped_column(Text, default="")
    merged_sha: Mapped[str | None] = mapped_column(String(40))
    merged_by: Mapped[str | None] = mapped_column(String(64))
    settled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        Index(
            "uq_merge_attempts_live",
            "repo",
            "pr_number",
            "head_sha",
            unique=True,
            sqlite_where=_MERGE_LIVE_SQL,
            postgresql_where=_MERGE_LIVE_SQL,
        ),
        Index("ix_merge_attempts_state", "state"),
    )


class MergeNewsRow(Base):
    """A repository's count of GitHub events that can change a merge gate's reading.

    The board shows a reading for a while; a webhook about the repository (a push, a
    check, a rule) bumps this, and open run pages read the gate again at once.
    """

    __tablename__ = "merge_news"

    repo: Mapped[str] = mapped_column(String(256), primary_key=True)  # "*": every one
    seq: Mapped[int] = mapped_column(BigInteger)
    changed_at: Mapped[datetime] = mapped_column(UTCDateTime())

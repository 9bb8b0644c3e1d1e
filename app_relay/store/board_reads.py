"""The board's reads: lines of the run list, repositories, a run's timeline."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import (
    and_,
    or_,
    select,
)

from app_relay.runstate.machine import RunState
from app_relay.store.base import StoreBase
from app_relay.store.records import CommandRecord, RunEvent, RunLine, _command
from app_relay.store.tables import RUN_STATES, CommandRow, RunEventRow, RunRow, SessionRow, _require


class BoardReads(StoreBase):
    """The board's reads: lines of the run list, repositories, a run's timeline."""

    # ---------------------------------------------------------------- the board's reads

    def run_lines(
        self,
        limit: int = 50,
        *,
        repos: Collection[str] | None = None,
        states: Sequence[RunState] | None = None,
        before: tuple[datetime, str] | None = None,
    ) -> list[RunLine]:
        """Return the board's list rows, newest first: only ``repos`` and ``states`` when given.

        ``before`` (a row's ``started_at`` and run id) pages on from that row. An empty
        ``repos`` (a viewer who may read none) is answered without asking the database.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if repos is not None and not repos:
            return []
        query = select(
            RunRow.id.label("run_id"),
            SessionRow.repo,
            SessionRow.pr_number,
            SessionRow.kind.label("session_kind"),
            RunRow.head_sha,
            RunRow.mode,
            RunRow.state,
            RunRow.started_at,
            RunRow.finished_at,
            RunRow.holds,
        ).join(SessionRow, SessionRow.id == RunRow.session_id)
        if repos is not None:
            query = query.where(SessionRow.repo.in_(sorted(repos)))
        if states is not None:
            for state in states:
                _require("run state", state, RUN_STATES)
            query = query.where(RunRow.state.in_(list(states)))
        if before is not None:
            at, run_id = before
            query = query.where(
                or_(RunRow.started_at < at, and_(RunRow.started_at == at, RunRow.id < run_id))
            )
        query = query.order_by(RunRow.started_at.desc(), RunRow.id.desc()).limit(limit)
        with self._read() as session:
            return [RunLine(**row._asdict()) for row in session.execute(query)]

    def run_repos(self) -> list[str]:
        """Return every repository the record holds runs of, sorted."""
        query = select(SessionRow.repo).distinct().order_by(SessionRow.repo)
        with self._read() as session:
            return list(session.scalars(query))

    def run_commands(self, run_id: str) -> list[CommandRecord]:
        """Return the commands decided on one run, oldest first."""
        query = select(CommandRow).where(CommandRow.run_id == run_id).order_by(CommandRow.id)
        with self._read() as session:
            return [_command(row) for row in session.scalars(query)]

    def timeline(self, run_id: str, *, after: int = 0) -> list[RunEvent]:
        """Return a run's events above ``after``, oldest first, read as plain rows.

        What ``events`` answers, without building an ORM object per event: a long run's
        page reads a thousand of them, and its live stream asks every second.
        """
        query = (
            select(RunEventRow.id, RunEventRow.run_id, RunEventRow.at, RunEventRow.kind,
                   RunEventRow.detail)
            .where(RunEventRow.run_id == run_id, RunEventRow.id > after)
            .order_by(RunEventRow.id)
        )  # fmt: skip
        with self._read() as session:
            return [RunEvent(i, r, at, k, d) for i, r, at, k, d in session.execute(query)]

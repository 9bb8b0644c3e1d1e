"""The `/cujo` verbs from comments, recorded once per comment and decided once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import (
    select,
)

from app_relay.store.base import StoreBase
from app_relay.store.records import CommandRecord, Intent, RunRecord, _command
from app_relay.store.tables import (
    COMMAND_OUTCOMES,
    VERBS,
    CommandOutcome,
    CommandRow,
    EffectRow,
    RunEventRow,
    RunRow,
    StoreError,
    UnknownRun,
    Verb,
    _require,
)
from cujo_action.schema import clip


class CommandsStore(StoreBase):
    """The `/cujo` verbs from comments, recorded once per comment and decided once."""

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
                self._hold_delivery(session, delivery_id)
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

    def verdict_posted_at(self, run_id: str) -> datetime | None:
        """Return when GitHub showed the run's current state, by GitHub's clock.

        That is the review's own time, or the Date of GitHub's answer to the dismissal
        or the check (``verdict_at``), so a comment's ``created_at`` is compared with a time
        of the same clock. None while the effects that show it are not made yet. A state
        recorded before these times were kept falls back to the relay's own clock.
        """
        with self._read() as session:
            run = session.get(RunRow, run_id)
            if run is None:
                raise UnknownRun(f"no run {run_id!r}")
            if run.verdict_at is not None:
                return run.verdict_at
            shown = self._state_event_id(session, run_id)
            payloads = session.scalars(select(EffectRow.payload).where(EffectRow.run_id == run_id))
            if any(p.get("shows") == shown for p in payloads if isinstance(p, dict)):
                return None  # being shown: not on GitHub yet, or its time not read
        return self.state_since(run_id)

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

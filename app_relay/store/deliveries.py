"""Deliveries (a durable queue), review requests and sessions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import (
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app_relay.store.base import StoreBase
from app_relay.store.engine import _delivery
from app_relay.store.intake import take_into
from app_relay.store.merges import bump_merge_news
from app_relay.store.records import Delivery, Finished, NewDelivery, ReviewRequest
from app_relay.store.tables import (
    DELIVERY_STATES,
    MAX_DELIVERY_ATTEMPTS,
    MAX_DELIVERY_ERROR,
    SESSION_KINDS,
    DeliveryRow,
    DeliveryState,
    IntakeCursorRow,
    ReviewRequestRow,
    SessionKind,
    SessionRow,
    StoreError,
    UnknownDelivery,
    UnknownSession,
    _require,
    claimable,
    take_over,
)
from cujo_action.schema import SHA, clip


class DeliveriesStore(StoreBase):
    """Deliveries (a durable queue), review requests and sessions."""

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

    def record_deliveries(
        self, deliveries: Sequence[NewDelivery], *, drop_through: int | None = None
    ) -> list[bool]:
        """Record deliveries in one transaction; say for each whether it was new.

        One commit (one sync to disk) for a batch is what lets the webhook keep up with
        a burst: the web app gathers the deliveries that arrive together and calls this.
        A SQLite record's intake queue drops, in the same commit, the rows the record has
        finished with: up to ``drop_through`` (what ``intake_finished_through`` said
        earlier) when given, else up to what the record says now.
        """
        for new in deliveries:
            new.check()
        if not deliveries:
            return []
        now = self._clock()
        if self._intake is not None:
            if drop_through is None:
                drop_through = self.intake_finished_through()
            inserted = self._queue_deliveries(deliveries, now, drop_through)
        else:
            inserted = self._insert_deliveries(deliveries, now)
        answers: list[bool] = []
        for new in deliveries:
            answers.append(new.id in inserted)
            inserted.discard(new.id)  # the same id twice in one batch is new once
        return answers

    def _insert_deliveries(self, deliveries: Sequence[NewDelivery], now: datetime) -> set[str]:
        rows = [
            {
                **new.columns(),
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
        if dialect == "postgresql":
            # One INSERT of every row, committed by the server as it answers (autocommit):
            # durable when this returns, without a BEGIN and a COMMIT each waiting on the
            # server before the webhook's 202 (and without an ORM session around it).
            autocommit = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            with autocommit as connection:
                return set(connection.scalars(statement, rows))
        with self._write() as session:
            return set(session.scalars(statement, rows))

    def intake_finished_through(self) -> int:
        """Return up to which number the intake queue's rows are finished with (0: none).

        Those the record has taken and whose deliveries are done or failed: a body goes
        once its delivery is finished. Never less than an earlier answer, so an old one
        is still safe to drop by. It scans the unfinished deliveries: the webhook asks
        after answering, never before (``webhook/receive.py``).
        """
        if self._intake is None:
            return 0
        with self._read() as session:
            through = session.scalar(select(IntakeCursorRow.taken_seq)) or 0
            unfinished = session.scalar(
                select(func.min(DeliveryRow.queue_seq)).where(
                    DeliveryRow.state.in_(("pending", "working"))
                )
            )
        return through if unfinished is None else min(through, unfinished - 1)

    def _queue_deliveries(
        self, deliveries: Sequence[NewDelivery], now: datetime, drop_through: int
    ) -> set[str]:
        # The record is only read here (WAL: no wait on its writers); the queue is written
        # by this process alone, so the commit waits for nobody's lock.
        assert self._intake is not None
        ids = [new.id for new in deliveries]
        with self._read() as session:
            taken = set(session.scalars(select(DeliveryRow.id).where(DeliveryRow.id.in_(ids))))
        fresh = [new for new in deliveries if new.id not in taken]
        return self._intake.append(fresh, now, drop_through=drop_through)

    def _take_queued(self, session: Session) -> None:
        # Inside a claim, under the record's write lock: the queue's new rows join
        # `deliveries` and the cursor moves past them in one commit. An id the record
        # already holds (a redelivery of one it took) is taken as nothing.
        assert self._intake is not None
        cursor = session.scalar(select(IntakeCursorRow).with_for_update())
        if cursor is None:
            raise StoreError("the record has no intake cursor; run `cujo relay migrate`")
        queued = self._intake.after(cursor.taken_seq)
        if not queued:
            return
        take_into(session, queued)
        cursor.taken_seq = queued[-1]["seq"]

    def _queued_bodies(self, rows: Sequence[DeliveryRow]) -> dict[int | None, bytes]:
        # A delivery taken from the intake queue left its body there (intake.py).
        seqs = [row.queue_seq for row in rows if row.queue_seq is not None]
        if self._intake is None or not seqs:
            return {}
        return self._intake.bodies(seqs)

    def _untaken(self) -> list[str]:
        # Queued deliveries the record has not taken yet (they count as pending).
        if self._intake is None:
            return []
        with self._read() as session:
            through = session.scalar(select(IntakeCursorRow.taken_seq)) or 0
            ids = self._intake.ids_after(through)
            known: set[str] = set()
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                known.update(
                    session.scalars(select(DeliveryRow.id).where(DeliveryRow.id.in_(chunk)))
                )
        return [delivery_id for delivery_id in ids if delivery_id not in known]

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
            if self._intake is not None:
                self._take_queued(session)
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
                    .where(claimable(DeliveryRow, now))
                    .order_by(DeliveryRow.received_at, DeliveryRow.id)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                )
            )
            bodies = self._queued_bodies(rows)
            claimed: list[Delivery] = []
            for row in rows:
                if row.queue_seq is not None and row.queue_seq not in bodies:
                    row.state, row.worker_id, row.lease_until, row.done_at = (
                        "failed",
                        None,
                        None,
                        now,
                    )
                    row.error = "its body was in an intake queue that is gone (--new-intake)"
                    continue
                take_over(row, worker_id, now + timedelta(seconds=lease_s))
                claimed.append(replace(_delivery(row), body=bodies.get(row.queue_seq, row.body)))
            return claimed

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
        """End several claimed deliveries in one transaction; say for each if it was ours.

        The merge-gate news of those done is counted in the same commit (``Finished.news``).
        """
        now = self._clock()
        answers: list[bool] = []
        news: list[str | None] = []
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
                    news.extend(result.news)
                elif result.final or row.attempts >= max_attempts:
                    row.state, row.done_at = "failed", now
                    row.error = f"failed after {row.attempts} attempt(s): {why}"
                else:
                    row.state, row.error = "pending", why
                    row.available_at = now + timedelta(seconds=max(result.retry_in_s, 0.0))
                row.worker_id = None
                row.lease_until = None
                answers.append(True)
            if news:
                bump_merge_news(session, news, now)
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
            if row is not None:
                body = self._queued_bodies([row]).get(row.queue_seq, row.body)
                return replace(_delivery(row), body=body)
        queued = self._intake.get(delivery_id) if self._intake is not None else None
        if queued is None:
            raise UnknownDelivery(f"no delivery {delivery_id!r}")
        return Delivery(
            id=queued["id"],
            event=queued["event"],
            action=queued["action"],
            installation_id=queued["installation_id"],
            repo=queued["repo"],
            body=queued["body"],
            state="pending",
            attempts=0,
            error=None,
            received_at=queued["received_at"],
            worker_id=None,
            lease_until=None,
            done_at=None,
            queue_seq=queued["seq"],
        )

    def count_deliveries(self, *states: DeliveryState) -> int:
        """Return how many deliveries are in ``states`` (all of them when none are given).

        Those still in the intake queue count as pending; a count taken while a worker
        takes them may miss the ones it takes at that moment.
        """
        counted = self._count(DeliveryRow.state, "delivery state", states, DELIVERY_STATES)
        if states and "pending" not in states:
            return counted
        return counted + len(self._untaken())

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
            if not SHA.match(sha):
                raise ValueError(f"{name} must be 40 lowercase hex digits, got {sha!r}")
        with self._write() as session:
            found = session.scalar(
                select(ReviewRequestRow.id).where(ReviewRequestRow.delivery_id == delivery_id)
            )
            if found is not None:
                return found
            if session.get(SessionRow, session_id) is None:
                raise UnknownSession(f"no session {session_id!r}")
            self._hold_delivery(session, delivery_id)
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

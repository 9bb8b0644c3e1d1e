"""The relay's processes: `cujo relay serve` (the webhook) and `cujo relay work` (the rest).

The webhook answers from a path that does one durable write and nothing else: it
verifies, records the delivery (group commit) and answers 202. The deliveries are worked
in other processes (``--worker-processes``, one by default), each a pool of threads with
the run coordinator and the outbox, so their Python never shares a GIL (or a process's
SQLite writer) with the intake. The webhook process wakes its workers through their
standard input, one line per recorded batch; a worker whose input closes (the webhook
process stopped or died) stops too. Several relays on one PostgreSQL database share the
work through leases; ``--worker-processes 0`` keeps the workers as threads of the webhook
process (one small process, as before). Beside its pool each worker process runs the
catch-up (``runs/missed_webhooks.py``): on start and every few minutes, one relay at a time, it
asks GitHub again for webhooks that never arrived and sweeps pull requests nothing
reviewed.

Operating it (docs/operating.md): logs are JSON lines naming their delivery and run
(``CUJO_LOG_FORMAT=text`` for plain ones); the processes keep their metrics in one
folder the webhook serves at ``/metrics``; each worker process reports its pool's health
there for ``/readyz``. A stop (SIGTERM, Ctrl-C, or the end of a worker's input) lets
the work in hand finish for ``CUJO_STOP_GRACE_S`` and then hands back whatever is still
held (deliveries, runs, effects) for any relay to take at once. The wake-ups are read
from the standard input without Python's buffered reader, by a thread that is stopped
and joined: a daemon thread left blocked in ``sys.stdin`` made the interpreter abort at
exit ("could not acquire lock for <stdin> at interpreter shutdown").
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from app_relay.cli.children import (
    STOP_TIMEOUT_S,
    Children,
    StdinWaker,
    give_way,
    share_metrics,
    stdin_fd,
)
from app_relay.cli.local import data_dir
from app_relay.cli.say import reason_of, shown_url
from app_relay.decide.judge import judge_for
from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.merge.attempt import AppMerges, MergeDesk
from app_relay.model.fromenv import model_client_from_env
from app_relay.observe import logs
from app_relay.runs.coordinator import RunCoordinator
from app_relay.runs.effects import OutboxConfig
from app_relay.runs.missed_webhooks import CatchUp, CatchUpConfig
from app_relay.runs.retention import prune_bundles
from app_relay.runs.runners import ActionsRunner
from app_relay.runstate.caps import Caps
from app_relay.settings import RelaySettings, SettingsError, load_settings
from app_relay.store import CatchUpTally, IntakeError, Store
from app_relay.verbs.unlock import Unlock
from app_relay.webhook.events import Context
from app_relay.webhook.health import (
    HEALTH_EVERY_S,
    Readiness,
    write_health,
)
from app_relay.webhook.workers import PoolConfig, WorkerPool
from cujo_action.schema import utcnow

log = logging.getLogger(__name__)
# How often the bundles are pruned (CUJO_BUNDLE_DAYS), the first time at start.
PRUNE_EVERY_S = 3600.0
MERGE_SETTLE_EVERY_S = 60.0


class Refused(Exception):
    """The relay cannot start; ``code`` is the exit status and the message says why."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _settings(command: str) -> RelaySettings:
    try:
        return load_settings()
    except SettingsError as exc:
        raise Refused(f"cujo relay {command}: {exc}", 2) from None


def _store(command: str, settings: RelaySettings, *, new_intake: bool = False) -> Store:
    try:
        # The worker process never answers a webhook: its commits need not each wait for
        # the disk (see Store), and the webhook's then do not wait behind them.
        return Store(
            settings.database_url, sync_every_commit=command != "work", new_intake=new_intake
        )
    except IntakeError as exc:
        raise Refused(f"cujo relay {command}: {exc}", 3) from None
    except (OSError, SQLAlchemyError) as exc:
        raise Refused(
            f"cujo relay {command}: cannot open the record {shown_url(settings.database_url)}: "
            f"{reason_of(exc)}; check CUJO_DATABASE_URL",
            3,
        ) from None


@dataclass
class Workers:
    """A pool working deliveries, with the coordinator behind it and its maintenance loop."""

    pool: WorkerPool
    coordinator: RunCoordinator
    github: GitHubApp
    maintaining: threading.Event
    maintainer: threading.Thread
    # Catch-up passes (runs/missed_webhooks.py); None when CUJO_CATCH_UP_EVERY_S is 0.
    catching_up: threading.Thread | None = None
    retention: threading.Thread | None = None

    def start(self) -> None:
        """Start the pool, the loop that makes effects and reconciles runs, catch-up, retention."""
        self.pool.start()
        self.maintainer.start()
        for thread in (self.catching_up, self.retention):
            if thread is not None:
                thread.start()

    def health(self) -> list[str]:
        """Name each part that is not working: the pool's workers, the maintenance loops."""
        problems = self.pool.health()
        if not self.maintaining.is_set():
            for thread in (self.maintainer, self.catching_up, self.retention):
                if thread is not None and thread.ident is not None and not thread.is_alive():
                    problems.append(f"{thread.name} is not running")
        return problems

    def stop(self, grace_s: float = STOP_TIMEOUT_S) -> bool:
        """Let the work in hand finish within ``grace_s``, then hand back what is still held.

        False only when what is held could not be handed back (the record did not
        answer): its leases then run out and another relay takes it later.
        """
        deadline = time.monotonic() + grace_s
        drained = self.pool.stop(timeout=grace_s)
        self.maintaining.set()
        for thread in (self.maintainer, self.catching_up, self.retention):
            if thread is not None and thread.ident is not None:
                thread.join(max(deadline - time.monotonic(), 0.1))
        clean = True
        try:
            handed = self.pool.store.hand_back(self.pool.worker_ids(), self.coordinator.name)
        except SQLAlchemyError as exc:
            log.error("could not hand back the work in hand: %s", reason_of(exc))
            clean = False
        else:
            if handed or not drained:
                log.warning("stopping: handed back %s still in hand", handed)
        self.github.close()
        return clean


def github_app(
    command: str, settings: RelaySettings, *, timeout_s: int = 10, attempts: int = 3
) -> GitHubApp:
    """Return the App from the settings, or refuse naming the key as the thing to fix."""
    try:
        return GitHubApp(
            app_id=settings.app_id,
            private_key=settings.private_key.reveal(),
            base_url=settings.github_api_url,
            timeout_s=timeout_s,
            attempts=attempts,
        )
    except ValueError as exc:
        raise Refused(f"cujo relay {command}: {exc}; check CUJO_PRIVATE_KEY", 2) from None


def build_workers(command: str, settings: RelaySettings, store: Store, workers: int) -> Workers:
    """Wire the App, the runner, the judge, the coordinator and a pool over ``store``."""
    github = github_app(command, settings)

    def gateway_of_repo(repo: str) -> GitHubGateway:
        # The runner acts on a repository; the App keeps its installation there until an
        # `installation` event says it changed.
        return github.gateway(github.repo_installation(repo))

    # With a model key, Claude judges beside the hard rules (it can add a block, never
    # lift one) and `mode: diff` pull requests get the diff review; without one, nothing
    # else changes.
    model = model_client_from_env(os.environ)
    bundles = data_dir(None) / "bundles"
    coordinator = RunCoordinator(
        store,
        github.gateway,
        ActionsRunner(gateway_of_repo, workflow=settings.workflow),
        judge_for(model, require_full_isolation=True),
        settings.workflow,
        verbs=Unlock,
        model=model,
        bundles=bundles,
        outbox=OutboxConfig(retry_s=settings.effect_retry_s, lease_s=settings.effect_lease_s),
        run_lease_s=settings.run_lease_s,
        caps=Caps(repo=settings.max_runs_per_repo, author=settings.max_runs_per_author),
    )
    pool = WorkerPool(
        store,
        Context(
            store=store,
            reviewer=coordinator,
            runs=coordinator,
            installations=github,
            guard_rules=coordinator,
        ),
        config=PoolConfig(workers=workers, lease_s=settings.delivery_lease_s),
    )

    def reconciled(moved: int) -> None:
        print(f"cujo relay: reconciled {moved} run(s)", file=sys.stderr, flush=True)

    # In-flight runs a stopped relay left behind are settled against GitHub beside the
    # webhooks that keep arriving (a run is finished once, whichever comes first), and
    # effects GitHub did not take are made again with backoff.
    maintaining = threading.Event()
    maintainer = threading.Thread(
        target=coordinator.maintain,
        args=(maintaining,),
        kwargs={
            "reconcile_every_s": settings.reconcile_every_s,
            "on_reconciled": reconciled,
            "poll_every_s": settings.jobs_poll_s,
        },
        name="cujo-maintain",
        daemon=True,
    )

    def keep_pruning() -> None:
        # Bundles older than CUJO_BUNDLE_DAYS go, at start and then every hour.
        while True:
            try:
                prune_bundles(store, bundles, settings.bundle_days, utcnow())
            except Exception:
                log.exception("pruning old bundles failed; trying again later")
            if maintaining.wait(PRUNE_EVERY_S):
                return

    retention = threading.Thread(target=keep_pruning, name="cujo-retention", daemon=True)
    catching_up = _catch_up_thread(settings, store, github, pool, maintaining)
    return Workers(pool, coordinator, github, maintaining, maintainer, catching_up, retention)


def _catch_up_thread(
    settings: RelaySettings,
    store: Store,
    github: GitHubApp,
    pool: WorkerPool,
    stop: threading.Event,
) -> threading.Thread | None:
    """Return the thread of catch-up passes (None when they are turned off)."""
    if settings.catch_up_every_s <= 0:
        return None
    catch_up = CatchUp(
        store,
        github,
        CatchUpConfig(
            every_s=settings.catch_up_every_s,
            window_s=settings.catch_up_window_s,
            grace_s=settings.catch_up_grace_s,
            max_redeliveries=settings.catch_up_max_redeliveries,
            max_pulls=settings.catch_up_max_pulls,
        ),
        # A pull request handed over is worked at once, not at the next idle look.
        wake=pool.notify,
    )

    def caught_up(tally: CatchUpTally) -> None:
        capped = f" (a cap was reached: {tally.capped})" if tally.capped else ""
        print(
            f"cujo relay: catch-up asked {tally.redeliveries_asked} redelivery(ies), swept "
            f"{tally.pulls_swept} pull request(s){capped}",
            file=sys.stderr,
            flush=True,
        )

    return threading.Thread(
        target=catch_up.run,
        args=(stop,),
        kwargs={"on_pass": caught_up},
        name="cujo-catch-up",
        daemon=True,
    )


@contextmanager
def _signals_set(stopped: threading.Event) -> Iterator[None]:
    # uvicorn takes SIGTERM and SIGINT while it serves, then raises the signal again once
    # it has stopped; handlers of ours make that second delivery harmless, so the workers
    # below still drain and the process exits 0.
    previous = {
        sig: signal.signal(sig, lambda signum, frame: stopped.set())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def migrate(args: argparse.Namespace) -> int:
    """Bring the record (and its intake queue) to the newest revision, as every relay does."""
    try:
        settings = _settings("migrate")
        store = _store("migrate", settings, new_intake=args.new_intake)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    queue = store.intake_path
    store.close()
    print(
        f"cujo relay: the record {shown_url(settings.database_url)}"
        + (f" and its intake queue {queue} are" if queue is not None else " is")
        + " at the newest revision"
    )
    return 0


def work(args: argparse.Namespace) -> int:
    """Work recorded deliveries until SIGTERM, Ctrl-C or the end of standard input."""
    give_way()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = _settings("work")
        logs.configure(settings.log_format)
        shared, _ = share_metrics(fresh=False)
        store = _store("work", settings)
        try:
            workers = build_workers("work", settings, store, args.workers)
        except Refused:
            store.close()
            raise
    except Refused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    stopped = threading.Event()
    pid = os.getpid()
    with _signals_set(stopped):
        workers.start()
        waker = StdinWaker(stdin_fd(), workers.pool.notify, stopped)
        waker.start()
        try:
            # The webhook process reads this for /readyz, every few seconds until the stop.
            while True:
                if shared is not None:
                    with contextlib.suppress(OSError):
                        write_health(shared, pid, workers.health())
                if stopped.wait(HEALTH_EVERY_S):
                    break
        finally:
            waker.stop()
            clean = workers.stop(settings.stop_grace_s)
    store.close()
    return 0 if clean else 3


# ------------------------------------------------------------------ the webhook process


def _settle_merges(desk: MergeDesk) -> None:
    # Merges whose answer was lost (unknown) are asked about until GitHub shows how they
    # ended; the page view and the pull_request webhook settle them sooner.
    while not desk.stopping.wait(MERGE_SETTLE_EVERY_S):
        try:
            desk.settle_all()
        except Exception:
            log.exception("settling merges failed; trying again later")


def serve(args: argparse.Namespace) -> int:
    """Serve the App: the webhook over HTTP, and its workers, until SIGTERM or Ctrl-C."""
    import uvicorn  # noqa: PLC0415

    from app_relay.webhook.app import create_app  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.worker_processes < 0 or args.workers < 1:
        print("cujo relay serve: --workers ≥ 1 and --worker-processes ≥ 0", file=sys.stderr)
        return 2
    try:
        settings = _settings("serve")
        logs.configure(settings.log_format)
        probe = github_app("serve", settings, timeout_s=5, attempts=1)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    try:
        store = _store("serve", settings)
    except Refused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    try:
        listener = socket.create_server((args.host, args.port), family=family, backlog=2048)
    except OSError as exc:
        store.close()
        print(
            f"cujo relay serve: cannot listen on {args.host}:{args.port}: {reason_of(exc)}",
            file=sys.stderr,
        )
        return 3
    try:
        shared, owned = share_metrics(fresh=True)
    except (OSError, RuntimeError) as exc:
        store.close()
        listener.close()
        print(f"cujo relay serve: cannot keep the metrics: {reason_of(exc)}", file=sys.stderr)
        return 3
    own: Workers | None = None
    children: Children | None = None
    try:
        if args.worker_processes == 0:
            own = build_workers("serve", settings, store, args.workers)
        else:
            children = Children(
                args.worker_processes, args.workers, health=shared, grace_s=settings.stop_grace_s
            )
    except Refused as exc:
        store.close()
        listener.close()
        if owned and shared is not None:
            shutil.rmtree(shared, ignore_errors=True)
        print(exc, file=sys.stderr)
        return exc.code
    wake = own.pool.notify if own is not None else children.wake  # type: ignore[union-attr]
    health = own.health if own is not None else children.health  # type: ignore[union-attr]
    readiness = Readiness(
        store, workers=health, github=probe.check_reachable, backlog_s=settings.ready_backlog_s
    )
    merging = github_app("serve", settings)
    desk = MergeDesk(store, AppMerges(merging), app_id=settings.app_id)
    app = create_app(settings, store, on_recorded=wake, readiness=readiness, merges=desk)
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=30
        )
    )
    exit_server = server.handle_exit

    def handle_exit(sig: int, frame: object) -> None:
        # From the stop on, a merge click is refused with a resendable 503; a merge call
        # already sent is answered and recorded while uvicorn finishes its requests.
        desk.stopping.set()
        exit_server(sig, frame)  # type: ignore[arg-type]

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    settling = threading.Thread(
        target=_settle_merges, args=(desk,), name="cujo-merge-settle", daemon=True
    )
    stopped = threading.Event()
    with _signals_set(stopped):
        settling.start()
        if own is not None:
            own.start()
        host, port = listener.getsockname()[:2]
        print(
            f"cujo relay: listening on http://{host}:{port} (record {shown_url(store.url)})",
            file=sys.stderr,
            flush=True,
        )
        try:
            server.run(sockets=[listener])
        finally:
            desk.stopping.set()
            settling.join(5)
            merging.close()
            app.state.intake.close()
            clean = own.stop(settings.stop_grace_s) if own is not None else True
            if children is not None:
                clean = children.stop() and clean
            probe.close()
            store.close()
            listener.close()
            if shared is not None and owned:
                shutil.rmtree(shared, ignore_errors=True)
    print(
        "cujo relay: stopped"
        + ("" if clean else " (not cleanly: what was not handed back is taken by another "
           "worker once its leases run out)"),
        file=sys.stderr,
    )  # fmt: skip
    return 0 if clean else 3

"""The relay's processes: `cujo relay serve` (the webhook) and `cujo relay work` (the rest).

The webhook answers from a path that does one durable write and nothing else: it
verifies, records the delivery (group commit) and answers 202. The deliveries are worked
in other processes (``--worker-processes``, one by default), each a pool of threads with
the run coordinator and the outbox, so their Python never shares a GIL (or a process's
SQLite writer) with the intake. The webhook process wakes its workers through their
standard input, one line per recorded batch; a worker whose input closes (the webhook
process stopped or died) stops too. Several relays on one PostgreSQL database share the
work through leases; ``--worker-processes 0`` keeps the workers as threads of the webhook
process (one small process, as before).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from sqlalchemy.exc import SQLAlchemyError

from app_relay.cli.local import data_dir
from app_relay.cli.say import reason_of, shown_url
from app_relay.decide.judge import judge_for
from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.model.claude import model_client_from_env
from app_relay.runs.coordinator import RunCoordinator
from app_relay.runs.effects import OutboxConfig
from app_relay.runs.runners import ActionsRunner
from app_relay.settings import RelaySettings, SettingsError, load_settings
from app_relay.store import IntakeError, Store
from app_relay.webhook.events import Context
from app_relay.webhook.workers import PoolConfig, WorkerPool

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 60.0


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

    def start(self) -> None:
        """Start the pool and the loop that makes effects and reconciles runs."""
        self.pool.start()
        self.maintainer.start()

    def stop(self) -> bool:
        """Let the deliveries in hand finish; False when one was still in hand at the end."""
        drained = self.pool.stop(timeout=STOP_TIMEOUT_S)
        self.maintaining.set()
        self.maintainer.join(30)
        self.github.close()
        return drained


def build_workers(command: str, settings: RelaySettings, store: Store, workers: int) -> Workers:
    """Wire the App, the runner, the judge, the coordinator and a pool over ``store``."""
    try:
        github = GitHubApp(
            app_id=settings.app_id,
            private_key=settings.private_key.reveal(),
            base_url=settings.github_api_url,
        )
    except ValueError as exc:
        raise Refused(f"cujo relay {command}: {exc}; check CUJO_PRIVATE_KEY", 2) from None

    def gateway_of_repo(repo: str) -> GitHubGateway:
        # The runner acts on a repository; the App keeps its installation there until an
        # `installation` event says it changed.
        return github.gateway(github.repo_installation(repo))

    # With a model key, Claude judges beside the hard rules (it can add a block, never
    # lift one) and `mode: diff` pull requests get the diff review; without one, nothing
    # else changes.
    model = model_client_from_env(os.environ)
    coordinator = RunCoordinator(
        store,
        github.gateway,
        ActionsRunner(gateway_of_repo, workflow=settings.workflow),
        judge_for(model, require_full_isolation=True),
        settings.workflow,
        model=model,
        bundles=data_dir(None) / "bundles",
        outbox=OutboxConfig(retry_s=settings.effect_retry_s, lease_s=settings.effect_lease_s),
        run_lease_s=settings.run_lease_s,
    )
    pool = WorkerPool(
        store,
        Context(store=store, reviewer=coordinator, runs=coordinator, installations=github),
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
    return Workers(pool, coordinator, github, maintaining, maintainer)


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


# ------------------------------------------------------------------ the worker processes


class Children:
    """The worker processes a webhook process started, woken through their stdin."""

    def __init__(self, count: int, workers: int) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        command = [sys.executable, "-m", "app_relay", "relay", "work", "--workers", str(workers)]
        for _ in range(count):
            # Same process group: a relay killed as a whole takes its workers with it.
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=os.environ.copy())
            assert proc.stdin is not None
            os.set_blocking(proc.stdin.fileno(), False)
            self._procs.append(proc)

    def wake(self) -> None:
        """Tell every worker process a delivery was recorded (never blocks the intake)."""
        with self._lock:
            for proc in self._procs:
                stdin = proc.stdin
                if stdin is None:
                    continue
                # A full pipe already holds a wake-up; a gone worker is the stop's business.
                with contextlib.suppress(BlockingIOError, BrokenPipeError, ValueError):
                    os.write(stdin.fileno(), b"\n")

    def alive(self) -> bool:
        """Say whether every worker process still runs."""
        return all(proc.poll() is None for proc in self._procs)

    def stop(self) -> bool:
        """Close their input (they stop claiming and drain), wait; False if one did not.

        The end of their input is the stop: a signal on top could land after a worker
        has put its handlers back, and kill it mid-drain. One that outstays the drain's
        own deadline gets SIGTERM, then SIGKILL.
        """
        with self._lock:
            for proc in self._procs:
                if proc.stdin is not None:
                    with contextlib.suppress(OSError):
                        proc.stdin.close()
        clean = True
        for proc in self._procs:
            try:
                clean &= proc.wait(STOP_TIMEOUT_S + 10) == 0
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                clean = False
        return clean


def _wake_from(stream: IO[bytes], wake: Callable[[], None], stop: threading.Event) -> None:
    # One line per wake-up; the end of the input means the webhook process is gone.
    for _ in iter(stream.readline, b""):
        wake()
    stop.set()


def work(args: argparse.Namespace) -> int:
    """Work recorded deliveries until SIGTERM, Ctrl-C or the end of standard input."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = _settings("work")
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
    with _signals_set(stopped):
        workers.start()
        threading.Thread(
            target=_wake_from,
            args=(sys.stdin.buffer, workers.pool.notify, stopped),
            name="cujo-wake",
            daemon=True,
        ).start()
        stopped.wait()
        drained = workers.stop()
    store.close()
    return 0 if drained else 3


# ------------------------------------------------------------------ the webhook process


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
    own: Workers | None = None
    children: Children | None = None
    try:
        if args.worker_processes == 0:
            own = build_workers("serve", settings, store, args.workers)
        else:
            children = Children(args.worker_processes, args.workers)
    except Refused as exc:
        store.close()
        listener.close()
        print(exc, file=sys.stderr)
        return exc.code
    wake = own.pool.notify if own is not None else children.wake  # type: ignore[union-attr]
    app = create_app(settings, store, on_recorded=wake)
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=30
        )
    )
    stopped = threading.Event()
    with _signals_set(stopped):
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
            app.state.intake.close()
            drained = own.stop() if own is not None else True
            if children is not None:
                drained = children.stop() and drained
            store.close()
            listener.close()
    print(
        "cujo relay: stopped"
        + ("" if drained else " (work was still in hand; its leases will run out and be taken)"),
        file=sys.stderr,
    )
    return 0 if drained else 3

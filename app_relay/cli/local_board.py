"""`cujo board`: serve the board over the local record, on 127.0.0.1 only, until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import webbrowser

import uvicorn
from sqlalchemy.exc import SQLAlchemyError

from app_relay.board import board_app
from app_relay.cli.local import data_dir, database_url
from app_relay.cli.say import reason_of, shown_url
from app_relay.store import Store


def board(args: argparse.Namespace) -> int:
    """Serve the board over the local record, on 127.0.0.1 only, until Ctrl-C."""
    folder = data_dir(args.data_dir)
    try:
        store = Store(database_url(folder))
    except (OSError, SQLAlchemyError) as exc:
        print(f"cujo board: cannot open the record in {folder}: {reason_of(exc)}", file=sys.stderr)
        return 3
    try:
        # Loopback only: the local board shows every run of the record to whoever connects.
        listener = socket.create_server(("127.0.0.1", args.port))
    except OSError as exc:
        store.close()
        print(
            f"cujo board: cannot listen on 127.0.0.1:{args.port}: {reason_of(exc)}", file=sys.stderr
        )
        return 3
    server = uvicorn.Server(
        uvicorn.Config(
            board_app(store),
            log_config=None,
            access_log=False,
            lifespan="off",
            # Open pages hold a stream each; they reconnect to a board started again.
            timeout_graceful_shutdown=2,
        )
    )
    port = listener.getsockname()[1]
    print(f"cujo board: http://127.0.0.1:{port}/  (record {shown_url(store.url)})", flush=True)
    # uvicorn raises the signal that stopped it again once it has; as in `relay serve`,
    # handlers of ours make that second delivery harmless, so Ctrl-C exits 0.
    previous = {
        sig: signal.signal(sig, lambda signum, frame: None)
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        server.run(sockets=[listener])
    finally:
        store.close()
        listener.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


class OpenBoard:
    """The board served from a review's own process (``cujo review --open``), on loopback."""

    def __init__(self, store: Store, listener: socket.socket) -> None:
        self._store, self._listener = store, listener
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        self._server = uvicorn.Server(
            uvicorn.Config(
                board_app(store),
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=1,
            )
        )
        # uvicorn leaves the signals alone outside the main thread: Ctrl-C stays the review's.
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [listener]}, name="cujo-board", daemon=True
        )
        self._thread.start()

    @classmethod
    def start(cls, record_url: str) -> OpenBoard:
        """Serve the board over the record at ``record_url`` on a free loopback port."""
        store = Store(record_url)
        try:
            # Loopback only: the local board shows every run of the record to whoever connects.
            listener = socket.create_server(("127.0.0.1", 0))
        except OSError:
            store.close()
            raise
        return cls(store, listener)

    def show(self, run_id: str) -> None:
        """Open the run's page in a browser (``BROWSER`` chooses it) and say where it is."""
        page = f"{self.url}runs/{run_id}"
        print(f"cujo: the run page: {page}", file=sys.stderr, flush=True)
        try:
            opened = webbrowser.open(page)
        except webbrowser.Error:
            opened = False
        if not opened:
            print("cujo: no browser could be opened; open the address above", file=sys.stderr)

    def hold(self) -> None:
        """Keep serving the finished run's page until Ctrl-C, then stop."""
        print(f"cujo: the board stays at {self.url} (Ctrl-C to stop it)", file=sys.stderr,
              flush=True)  # fmt: skip
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop serving and close the record."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._listener.close()
        self._store.close()

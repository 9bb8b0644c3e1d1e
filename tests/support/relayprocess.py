"""`cujo relay serve` as a real process on loopback, over a record that outlives it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from cujorun import CUJO
from fakegithub import FakeGitHub
from relayworld import SECRET, wait_for

from app_relay.store import Store


class RelayProcess:
    """`cujo relay serve` on a loopback port, over one SQLite file that outlives it."""

    def __init__(
        self,
        fake: FakeGitHub,
        home: Path,
        *,
        database: str | None = None,
        env: dict[str, str] | None = None,
        port: int = 0,
    ) -> None:
        self.home = home
        # 0: any free port at each start; a port of its own keeps one address across
        # restarts, as a relay behind GitHub's webhook URL has.
        self.port = port
        home.mkdir(parents=True, exist_ok=True)
        self.database = database or f"sqlite:///{home / 'relay.db'}"
        self.env = {
            **os.environ,
            "CUJO_APP_ID": str(fake.app_id),
            "CUJO_PRIVATE_KEY": fake.private_key_pem,
            "CUJO_WEBHOOK_SECRET": SECRET,
            "CUJO_GITHUB_API_URL": fake.url,
            "CUJO_DATABASE_URL": self.database,
            "CUJO_HOME": str(home),
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.starts = 0

    def start(self) -> RelayProcess:
        """Start the relay and wait until it listens."""
        self.starts += 1
        log = self.home / f"relay-{self.starts}.log"
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                [str(CUJO), "relay", "serve", "--port", str(self.port)],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                # Its own process group: killing the relay kills its worker processes too.
                start_new_session=True,
            )

        def listening() -> str | None:
            assert self.proc is not None
            assert self.proc.poll() is None, log.read_text()
            m = re.search(r"listening on (http://\S+)", log.read_text())
            return m.group(1) if m else None

        self.url = wait_for("the relay to listen", listening, 60)
        return self

    def kill(self) -> None:
        """SIGKILL the relay: no drain, no goodbye."""
        assert self.proc is not None
        self.url = None
        os.killpg(self.proc.pid, signal.SIGKILL)  # the webhook process and its workers
        self.proc.wait(30)

    def stop(self) -> None:
        """Stop the relay gently."""
        if self.proc is not None and self.proc.poll() is None:
            self.url = None
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        """Return everything the relay wrote to stderr, over every start."""
        return "\n".join(
            (self.home / f"relay-{n}.log").read_text() for n in range(1, self.starts + 1)
        )

    def store(self) -> Store:
        """Open the relay's record from the test."""
        return Store(self.database)

"""A throwaway PostgreSQL cluster for the test session, from the machine's own binaries.

Debian's ``postgresql`` package puts them under ``/usr/lib/postgresql/<version>/bin``.
``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres``
user (its directory is made for it); otherwise it runs as whoever runs the tests. It
listens on loopback only, on a port the kernel picked, with trust authentication (the
socket is reachable from this machine alone, and the cluster dies with the session).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class NoPostgres(Exception):
    """This machine cannot start a PostgreSQL server; the message says why."""


def binaries() -> Path:
    """Return the newest installed PostgreSQL's bin directory, or raise ``NoPostgres``."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        on_path = shutil.which("initdb")
        if on_path is None:
            raise NoPostgres("no PostgreSQL server here (Debian: apt-get install postgresql)")
        return Path(on_path).resolve().parent
    return found[-1].parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster(root: Path) -> Iterator[str]:
    """Run a cluster under ``root``; yield a SQLAlchemy URL of its ``postgres`` database."""
    bin_dir = binaries()
    as_root = os.geteuid() == 0
    prefix: list[str] = []
    if as_root:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise NoPostgres("running as root and there is no postgres user") from None
        prefix = ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}",
                  "--init-groups"]  # fmt: skip
    data = root / "data"
    sockets = root / "run"
    for d in (root, sockets):
        d.mkdir(parents=True, exist_ok=True)
        if as_root:
            os.chown(d, owner.pw_uid, owner.pw_gid)
    # The temp root's parents must let the postgres user through.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    init = subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "cujo",
         "--no-sync", "-E", "UTF8"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if init.returncode != 0:
        raise NoPostgres(f"initdb failed: {init.stderr.strip()[-500:]}")
    port = _free_port()
    options = f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=200"
    start = subprocess.run(
        [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"),
         "-o", options, "-w", "-t", "60", "start"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if start.returncode != 0:
        log = (root / "log").read_text(errors="replace")[-800:] if (root / "log").exists() else ""
        raise NoPostgres(f"pg_ctl start failed: {start.stderr.strip()[-300:]} {log}")
    try:
        yield f"postgresql+psycopg://cujo@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True, env=env, check=False,
        )  # fmt: skip


def new_database(admin_url: str) -> str:
    """Create an empty database on the cluster; return its URL."""
    from sqlalchemy import create_engine, text

    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"

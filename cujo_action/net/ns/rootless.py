"""Give a sandbox phase a network namespace without root: its only way out is the harness.

As root, a phase's namespace is joined to the host by a veth guarded on the host side
(``netns.py``). Without root, where the kernel allows unprivileged user namespaces, each
phase gets a *namespace holder* instead: ``unshare --user --map-root-user --net`` running
the forwarder (``forwarder.py``), root of a user namespace of its own and owner of the
network namespace made with it. It guards the namespace with a table of its own
(``ns/rootlessguard.py``) and hands every TCP connection and DNS query to a unix socket in a
folder of the harness (``RootlessNamespace.workdir``, which no sandbox sees), where a
relay of the harness (``UnixRelay``) passes it to the phase's proxy or resolver on host
loopback. The namespace has no other link to anything.

Commands join it as its owner (``join_argv``: ``nsenter --user --net`` into the holder's
namespaces, which the user that made them may enter) and start bubblewrap there with a
user namespace of their own below the holder's (``--unshare-user --disable-userns``), so
they hold no capability over the namespace, its table or its links.

A rootless namespace is named ``userns:<holder pid>`` where a root one is named by ``ip
netns`` (``sandbox/phase_namespace.is_rootless``, where the jail and the reaper join and
empty either kind); the evidence asks here for what differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from cujo_action.net.ns.nftguard import Drops, parse_drops
from cujo_action.net.ns.rootlessguard import TABLE
from cujo_action.sandbox.helper_processes import StartClock, die_with_parent
from cujo_action.sandbox.phase_namespace import (
    PREFIX,
    NetnsError,
    join_argv,
    kill_all_in,
    tool_path,
)

# A unix socket's path must fit sockaddr_un (108 bytes with its terminating NUL).
_SUN_PATH_MAX = 107
_READY_TIMEOUT_S = 15.0
_READY_POLL_S = 0.02
_KILL_WAIT_S = 5.0
_CHUNK = 65536


def drops(name: str) -> Drops:
    """Return what the guard of rootless namespace ``name`` has dropped so far."""
    argv = [*join_argv(name), tool_path("nft"), "-j", "list", "table", "inet", TABLE]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetnsError(f"reading {name}'s guard failed: {proc.stderr.strip()[-300:]}")
    return parse_drops(json.loads(proc.stdout))


class UnixRelay:
    """Pass each connection made to a unix socket on to a TCP port on host loopback."""

    def __init__(self, path: Path, port: int, host: str = "127.0.0.1") -> None:
        """Bind ``path`` (a new name in a folder of the harness's own) and start relaying."""
        if len(os.fsencode(path)) > _SUN_PATH_MAX:
            raise NetnsError(f"{path} is too long for a unix socket")
        self.path, self.target = path, (host, port)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(128)
        self._closed = False
        threading.Thread(target=self._accept, name="cujo-relay", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        try:
            up = socket.create_connection(self.target, timeout=10)
        except OSError:
            conn.close()
            return
        up.settimeout(None)
        _splice(conn, up)

    def close(self) -> None:
        """Stop accepting and remove the socket's name."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self.path.unlink(missing_ok=True)


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Copy between ``a`` and ``b`` both ways until both have ended, then close them."""
    open_ = {a: b, b: a}
    try:
        while open_:
            ready, _, _ = select.select(list(open_), [], [])
            for src in ready:
                dst = open_[src]
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = b""
                if data:
                    try:
                        dst.sendall(data)
                    except OSError:
                        return
                    continue
                del open_[src]
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
    finally:
        a.close()
        b.close()


class RootlessNamespace:
    """A phase's network namespace held by a forwarder the harness's user started."""

    def __init__(self, workdir: Path, *, proxy_port: int, dns_port: int) -> None:
        """Describe it: ``workdir`` (new, the harness's only) gets its sockets and files;
        its TCP goes to the relayed proxy listener ``proxy_port``, its DNS to the
        resolver's ``dns_port``, both on host loopback."""
        self.workdir = workdir
        self.proxy_port, self.dns_port = proxy_port, dns_port
        self.relays: list[UnixRelay] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.pid = 0

    @property
    def name(self) -> str:
        """Return the namespace's name (``userns:<holder pid>``)."""
        if not self.pid:
            raise NetnsError("the rootless namespace was not created")
        return f"{PREFIX}{self.pid}"

    def start(self) -> None:
        """Start the holder (call from the run's main thread); ``wait`` for it after."""
        # Here, not at the top: the forwarder's module loads asyncio, which the jail and
        # every check that imports this module need not.
        from cujo_action.net.ns.forwarder import ForwarderConfig  # noqa: PLC0415

        self.workdir.mkdir(mode=0o700)
        proxy_sock, dns_sock = self.workdir / "p.sock", self.workdir / "d.sock"
        self.relays = [UnixRelay(proxy_sock, self.proxy_port), UnixRelay(dns_sock, self.dns_port)]
        ports = [1024 + secrets.randbelow(30000) for _ in range(2)]
        if ports[0] == ports[1]:
            ports[1] += 1
        config = ForwarderConfig(
            tcp_port=ports[0],
            dns_port=ports[1],
            proxy_socket=proxy_sock,
            dns_socket=dns_sock,
            ready_path=self.workdir / "ready.json",
        )
        (self.workdir / "forwarder.json").write_text(config.model_dump_json())
        argv = [tool_path("unshare"), "--user", "--map-root-user", "--net", "--",
                sys.executable, "-m", "cujo_action.net.ns.forwarder",
                "--config", str(self.workdir / "forwarder.json")]  # fmt: skip
        with (self.workdir / "forwarder.stderr").open("wb") as err:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd="/",
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )

    def wait(self, timeout: float = _READY_TIMEOUT_S) -> None:
        """Wait until the holder has set up its namespace; raise NetnsError if it cannot."""
        assert self.process is not None
        ready = self.workdir / "ready.json"
        # Its own CPU, not the clock: on a busy machine its start waits its turn.
        clock = StartClock(self.process.pid, timeout)
        while not ready.exists():
            if self.process.poll() is not None or clock.over():
                said = (self.workdir / "forwarder.stderr").read_text(errors="replace")
                raise NetnsError(f"the namespace holder did not start: {said.strip()[-400:]}")
            time.sleep(_READY_POLL_S)
        # The forwarder's pid as it knows it is its own; the one we know is the same
        # process (unshare execs it, no new PID namespace).
        self.pid = self.process.pid

    def create(self) -> RootlessNamespace:
        """Start the holder and wait until its namespace is guarded."""
        self.start()
        try:
            self.wait()
        except BaseException:
            self.destroy()
            raise
        return self

    def drops(self) -> Drops:
        """Return what the guard has dropped so far."""
        return drops(self.name)

    def destroy(self) -> None:
        """Kill what is left in the namespace, stop the holder and the relays."""
        if self.pid:
            kill_all_in(self.name)
        if self.process is not None:
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(_KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            self.process = None
        for relay in self.relays:
            relay.close()
        self.relays = []
        self.pid = 0

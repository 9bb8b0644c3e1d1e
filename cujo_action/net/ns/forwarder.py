"""Hold a rootless phase's namespace and hand all its traffic to the phase's proxy and resolver.

Started by ``rootless.py`` as ``unshare --user --map-root-user --net -- python -m
cujo_action.net.ns.forwarder --config FILE``: it is root of a user namespace of its own,
with every capability over the network namespace made with it, and nothing more. It

1. brings up loopback and ``eth0`` with an address and a default route, and loads the
   guard table (``ns/rootlessguard.py``: TCP and DNS redirected here, the rest refused and
   counted), before any pull-request command can run in the namespace;
2. listens on the namespace's loopback: each TCP connection the guard redirected is
   read for its original destination (SO_ORIGINAL_DST) and handed, through a unix socket
   the harness bound outside the sandbox's view, to the phase's proxy as ``CONNECT
   address:port`` (the proxy's relayed listener treats it as a transparent connection:
   TLS intercepted, HTTP read, anything else logged and refused); each DNS query (UDP or
   TCP) goes, as DNS over TCP, through another unix socket to the phase's resolver;
3. writes its ready file, then serves until its stdin closes (the harness ended it or
   died) or it is terminated.

It makes no connection in the namespace: nothing it does shows as the sandbox's traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cujo_action.net.ns.rootlessguard import ForwarderPorts, guard_ruleset, link_commands

SO_ORIGINAL_DST = 80
_CONNECT_HEAD_LIMIT = 8192
_CHUNK = 65536
_DNS_TIMEOUT_S = 10.0
_SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class ForwarderConfig(BaseModel):
    """What one forwarder listens on inside its namespace and where it hands traffic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tcp_port: int
    dns_port: int
    proxy_socket: Path  # relayed to the phase's relayed proxy listener
    dns_socket: Path  # relayed to the phase's resolver (TCP)
    ready_path: Path


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Return the address a redirected TCP connection was aimed at."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copy both ways until both sides are done, then close both."""
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        for writer in (a[1], b[1]):
            with contextlib.suppress(Exception):
                writer.close()


async def _tcp_client(
    config: ForwarderConfig, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    sock = writer.get_extra_info("socket")
    try:
        host, port = original_destination(sock)
        up_r, up_w = await asyncio.open_unix_connection(str(config.proxy_socket))
    except OSError:
        writer.close()
        return
    target = f"{host}:{port}"
    up_w.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    try:
        head = await up_r.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
        head = b""
    if len(head) > _CONNECT_HEAD_LIMIT or b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
        for w in (writer, up_w):
            w.close()
        return
    await _splice((reader, writer), (up_r, up_w))


async def _ask(config: ForwarderConfig, query: bytes) -> bytes | None:
    """Ask the phase's resolver one DNS message over TCP; return its answer."""
    try:
        r, w = await asyncio.open_unix_connection(str(config.dns_socket))
    except OSError:
        return None
    try:
        w.write(struct.pack("!H", len(query)) + query)
        await w.drain()
        size = struct.unpack("!H", await r.readexactly(2))[0]
        return await r.readexactly(size)
    except (asyncio.IncompleteReadError, OSError):
        return None
    finally:
        w.close()


async def _dns_tcp_client(
    config: ForwarderConfig, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        up = await asyncio.open_unix_connection(str(config.dns_socket))
    except OSError:
        writer.close()
        return
    await _splice((reader, writer), up)


class _DnsUdp(asyncio.DatagramProtocol):
    def __init__(self, config: ForwarderConfig) -> None:
        self.config = config
        self.transport: asyncio.DatagramTransport | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        task = asyncio.ensure_future(self._answer(data, addr))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            answer = await asyncio.wait_for(_ask(self.config, data), _DNS_TIMEOUT_S)
        except TimeoutError:
            return
        if answer is not None and self.transport is not None:
            # Sent from the redirected socket: conntrack makes it come from where it was
            # asked (127.0.0.53:53, say).
            self.transport.sendto(answer, addr)


def _tool(name: str) -> str:
    """Return where ``name`` is (an ordinary user's PATH has no /usr/sbin on Debian)."""
    return shutil.which(name, path=os.pathsep.join(_SYSTEM_DIRS)) or name


def set_up_namespace(ports: ForwarderPorts) -> None:
    """Bring up the namespace's links and load its guard (as the namespace's root)."""
    # IPv6 off for the links made from now on (loopback keeps ::1, as on a runner).
    Path("/proc/sys/net/ipv6/conf/default/disable_ipv6").write_text("1")
    for argv in link_commands():
        subprocess.run([_tool(argv[0]), *argv[1:]], check=True, capture_output=True)
    subprocess.run(
        [_tool("nft"), "-f", "-"],
        input=guard_ruleset(ports).encode(),
        check=True,
        capture_output=True,
    )


async def _serve(config: ForwarderConfig) -> None:
    loop = asyncio.get_running_loop()
    servers = [
        await asyncio.start_server(
            lambda r, w: _tcp_client(config, r, w), "127.0.0.1", config.tcp_port
        ),
        await asyncio.start_server(
            lambda r, w: _dns_tcp_client(config, r, w), "127.0.0.1", config.dns_port
        ),
    ]
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _DnsUdp(config), local_addr=("127.0.0.1", config.dns_port)
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # The harness holds our stdin: when it closes (the harness ended, or died), so do we.
    loop.add_reader(0, lambda: stop.set() if not os.read(0, 1) else None)
    tmp = Path(f"{config.ready_path}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid()}))
    tmp.replace(config.ready_path)
    await stop.wait()
    transport.close()
    for server in servers:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Set up the namespace described by ``--config``, then forward until told to stop."""
    parser = argparse.ArgumentParser(prog="python -m cujo_action.net.ns.forwarder")
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = ForwarderConfig.model_validate_json(args.config.read_text())
    try:
        set_up_namespace(ForwarderPorts(tcp=config.tcp_port, dns=config.dns_port))
    except (OSError, subprocess.CalledProcessError) as exc:
        said = getattr(exc, "stderr", b"") or b""
        print(f"namespace set-up failed: {exc} {said.decode(errors='replace')}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run the logging proxy: log every request, forward registry traffic, answer the rest."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cujo_action.net.proxy.addon import EgressAddon
from cujo_action.net.proxy.config import CA_CERT_NAME, CA_KEY_NAME, SYSTEM_CA, ProxyConfig
from cujo_action.sandbox.helper_processes import (
    HANG_S,
    HarnessProcess,
    NotReady,
    Spawned,
    Starting,
    exit_now,
    wait_for_go,
)
from cujo_action.schema import clip

# The proxy is mitmproxy used as a library, in a process of its own
# (``python -m cujo_action.net.proxy.process --config CONFIG.json``). It listens on one port per
# label ("check/phase"), so the port a client connects to says which check and phase sent
# a request. TLS is intercepted with a CA made fresh in ``confdir`` for the run, shaped
# like a public CA's, whose certificates and error pages never say mitmproxy
# (``proxy/disguise.py``, ``lookalike/ca.py``).
#
# * A request to a host in ``allow_hosts`` is forwarded upstream, verified against the
#   system CA bundle, except a write to a registry (below).
# * A request to a host in ``registry_hosts`` with any method but GET or HEAD (a publish,
#   an upload) is answered by the proxy itself with a ``403`` and never forwarded: the
#   sandbox reads registries, it never writes to them.
# * A request to any other host is answered by the proxy itself with an empty ``200``,
#   and that host is never resolved or contacted.
# * A tunnel that carries neither TLS nor HTTP (raw TCP through CONNECT) is logged with
#   the bytes it sent and closed, whatever its host: it is never forwarded. HTTP is what
#   starts with a request line; anything else (a shell's greeting) is closed at once.
# * A CONNECT tunnel that never produces a request (the client refused the run's CA, the
#   handshake failed, it sent nothing) is logged as one ``CONNECT`` line when it closes.
#
# Transparent mode (``transparent=True``) adds one more listener per label for clients that
# ignore proxy variables: the network namespace of a phase (netns.py) DNATs every TCP
# connection to that phase's transparent port, so the port still names the label, and
# mitmproxy reads the original destination with SO_ORIGINAL_DST. Such a connection is
# treated like a tunnel to that address: an HTTP(S) request in it is logged under the
# name its client asked for (SNI, else Host header, else the address) and decided on that
# name; anything else is logged as ``method: "TCP"`` and refused. An allowed name is
# forwarded to that name, never to the original address (which the logging resolver
# made up); a request whose Host differs from its SNI is never forwarded.
# Without root (``relayed=True``, net/ns/rootless.py) no DNAT reaches host loopback: the
# phase's forwarder reads the original destination in its namespace and opens each
# connection with a ``CONNECT address:port`` to the label's transparent port, a regular
# listener only the harness's relay reaches; the tunnel is then treated as above.
#
# Every request becomes one JSON line in ``log_path``, written with a single ``write`` as
# soon as the request is complete, so killing the proxy loses no line already logged::
#
#     {"ts": 1700000000.1, "label": "install/install", "check": "install",
#      "phase": "install", "host": "collector.exfil.test", "port": 443, "method": "POST",
#      "url": "https://collector.exfil.test/c?k=...", "bytes_out": 412, "action": "sunk",
#      "decoy_seen": ["GITHUB_TOKEN"], "decoy_where": ["url:plain", "body:base64"]}
#
# ``action``: "forwarded" (sent upstream), "sunk" (answered by the proxy), "refused"
# (closed unanswered: tunnels without a request, raw TCP, requests cut short),
# "registry-write" (a write to a registry, answered by the proxy with a 403).
# ``decoy_where`` parts: url, authorization (the Authorization header: a credential handed
# to the server), header (any other), body (also with its Content-Encoding undone), sni,
# tcp (the bytes a tunnel carried when it produced no request); each with the encodings
# undone to find the decoy (``unwrap.py``: "body:gzip+base64"). ``unsearched`` (only when
# set) says why part of a request was not searched: its body over the proxy's limit
# (``limits.BODY_SIZE``: the rest not stored, a sunk request answered 413), or a decoding
# cap (``unwrap.py``: depth, budget, a stream inflating past its cap). ``opaque: true``: a
# POST, PUT or PATCH body that reads as nothing once decoded (``opacity.py``). A CONNECT
# whose own request carries a decoy (say in Proxy-Authorization) is logged at once, as "sunk".
#
# What one proxy is told is ``proxy/config.py``; how a request is named, sized and searched,
# ``proxy/request.py``; the mitmproxy addon that decides and logs, ``proxy/addon.py``. This
# module starts the process (``start_proxy``) and is its entry (``main``). Importing it
# does not import mitmproxy; only the proxy process pays for that.

CONFIG_NAME = "cujo-proxy.json"
STDERR_NAME = "proxy.stderr"
_LISTEN_RETRIES = 3

logger = logging.getLogger("cujo.proxy")


# --------------------------------------------------------------------------- API


class ProxyError(RuntimeError):
    """The proxy could not be started, with why (and the tail of its stderr)."""


def write_ca_bundle(ca_cert: Path, dest: Path, system: Path = SYSTEM_CA) -> Path:
    """Write the bundle sandbox clients trust, the system CAs plus the run's CA, to ``dest``."""
    bundle = Path(system).read_bytes().rstrip(b"\n") + b"\n" + Path(ca_cert).read_bytes()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(bundle)
    # Sandbox clients run as another user and must read it.
    dest.chmod(0o644)
    return dest


@dataclass(kw_only=True)
class ProxyHandle(HarnessProcess):
    """The running proxy: its ports and transparent listeners by label, and its CA."""

    ca_cert: Path
    # Transparent listeners by label; empty unless the config asked for them.
    transparent_ports: dict[str, int] = field(default_factory=dict)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return clip(path.read_text(errors="replace"), limit, keep="tail")
    except OSError:
        return ""


def spawn_proxy(confdir: Path) -> Spawned:
    """Start the proxy process before its config is known: it imports mitmproxy (most of
    its start) while the run prepares; ``start_proxy(config, warm=…)`` sets it going.
    ``confdir`` is made here, and must be new."""
    confdir.mkdir(mode=0o700, parents=True)
    return Spawned("cujo_action.net.proxy.process", confdir / CONFIG_NAME, confdir / STDERR_NAME)


def start_proxy(
    config: ProxyConfig, timeout: float = 20, *, warm: Spawned | None = None
) -> ProxyHandle:
    """Start the proxy process (or set ``warm`` going, from ``spawn_proxy`` on the same
    confdir) and return once it listens on every label's port."""
    confdir = Path(config.confdir)
    left = [p.name for p in confdir.iterdir()] if confdir.exists() else []
    if [name for name in left if warm is None or name != STDERR_NAME]:
        # A CA left in confdir would be reused: each run must mint its own.
        if warm is not None:
            warm.cancel()
        raise ProxyError(f"confdir {confdir} is not empty; give each run a fresh one")
    confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config_path = confdir / CONFIG_NAME
    # The config holds the decoy values: readable by the harness user only.
    fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(config.model_dump_json())
    fixed = set(config.labels) <= config.ports.keys() and (
        not config.transparent or set(config.labels) <= config.transparent_ports.keys()
    )
    attempts = 1 if fixed else _LISTEN_RETRIES
    stderr_path = confdir / STDERR_NAME
    for attempt in range(attempts):
        start = warm if warm is not None and attempt == 0 else None
        start = start or Spawned("cujo_action.net.proxy.process", config_path, stderr_path)
        starting = Starting(start, Path(config.ready_path), timeout)
        try:
            ready = starting.ready()
        except NotReady as not_ready:
            failure = (
                f"proxy not ready after {timeout}s of its own CPU (or {HANG_S:.0f}s in all):\n"
                f"{_tail(stderr_path)}"
                if not_ready.timed_out
                else f"proxy exited with {not_ready.code} before it was ready:\n"
                f"{_tail(stderr_path)}"
            )
            # A port picked free can be taken before mitmproxy binds it: pick again.
            if "failed to listen" not in failure or attempt == attempts - 1:
                raise ProxyError(failure) from None
            # The next process mints a CA of its own, in files it creates anew (unlink
            # removes a link at the name, never what it points to).
            for name in (CA_KEY_NAME, CA_CERT_NAME):
                (confdir / name).unlink(missing_ok=True)
            continue
        return ProxyHandle(
            process=starting.process,
            ports={str(k): int(v) for k, v in ready["ports"].items()},
            log_path=Path(config.log_path),
            stderr_path=stderr_path,
            ca_cert=Path(ready["ca_cert"]),
            transparent_ports={
                str(k): int(v) for k, v in ready.get("transparent_ports", {}).items()
            },
        )
    raise AssertionError("unreachable")


def _free_ports(host: str, count: int) -> list[int]:
    """Return ``count`` distinct ports free on ``host`` right now."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


async def _serve(config: ProxyConfig) -> None:
    from mitmproxy import addons, options  # noqa: PLC0415
    from mitmproxy.addons.errorcheck import ErrorCheck  # noqa: PLC0415
    from mitmproxy.master import Master  # noqa: PLC0415

    from cujo_action.net.proxy.disguise import disguise, write_run_ca  # noqa: PLC0415

    # mitmproxy rejects two modes on one address, so port 0 works for one label only:
    # pick the ports here and tell mitmproxy each one.
    unset = [label for label in config.labels if label not in config.ports]
    t_unset = [label for label in config.labels if label not in config.transparent_ports]
    if not config.transparent:
        t_unset = []
    free = _free_ports(config.listen_host, len(unset) + len(t_unset))
    picked = dict(zip(unset, free[: len(unset)], strict=True))
    t_picked = dict(zip(t_unset, free[len(unset) :], strict=True))
    ports = {label: config.ports.get(label) or picked[label] for label in config.labels}
    transparent_ports = (
        {label: config.transparent_ports.get(label) or t_picked[label] for label in config.labels}
        if config.transparent
        else {}
    )
    host = f"[{config.listen_host}]" if ":" in config.listen_host else config.listen_host
    # Relayed (rootless): the forwarder sends a CONNECT to the original destination first.
    t_mode = "regular" if config.relayed else "transparent"
    # The run's CA, minted here before mitmproxy looks in confdir (start_proxy made sure
    # it was empty), so mitmproxy loads it and never makes its own.
    ca_cert = write_run_ca(Path(config.confdir))
    master: Any = Master(options.Options())
    defaults: Any = addons.default_addons
    # Our addon goes last: its next_layer hook must see mitmproxy's choice.
    master.addons.add(
        *disguise(defaults(), ca_cert),
        ErrorCheck(repeat_errors_on_stderr=True),
        EgressAddon(config, ports, transparent_ports),
    )
    master.options.update(
        mode=[
            *(f"regular@{host}:{ports[label]}" for label in config.labels),
            *(f"{t_mode}@{host}:{port}" for port in transparent_ports.values()),
        ],
        confdir=str(config.confdir),
        connection_strategy="lazy",
        upstream_cert=False,
        ssl_verify_upstream_trusted_ca=str(config.upstream_ca),
        onboarding=False,
        http3=False,
        # No body_size_limit: request bodies stream to disk (proxy.addon.requestheaders),
        # capped there; responses come only from allowed hosts (a large package).
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, master.shutdown)
    try:
        await master.run()
    finally:
        # asyncio.run cancels the connections still open; their tracebacks say nothing.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy described by ``--config`` until terminated."""
    parser = argparse.ArgumentParser(prog="python -m cujo_action.net.proxy.process")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--wait", action="store_true", help="load, then wait for go on stdin")
    args = parser.parse_args(argv)
    if args.wait:
        # Most of the proxy's start: done while the run prepares (spawn_proxy).
        from mitmproxy import addons, options  # noqa: F401, PLC0415
        from mitmproxy.addons.errorcheck import ErrorCheck  # noqa: F401, PLC0415
        from mitmproxy.master import Master  # noqa: F401, PLC0415

        from cujo_action.net.proxy import disguise  # noqa: F401, PLC0415

        if not wait_for_go():
            return 0
    config = ProxyConfig.model_validate_json(args.config.read_text())
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    exit_now(main())  # its log is closed: no teardown the run would wait for

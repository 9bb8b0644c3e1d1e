"""Give a sandbox phase a network namespace whose only way out is the logging harness."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One namespace per run and phase, named ``cujo-<id>``, joined to the host by a veth pair
# ``cujo<id>h`` (host side, 10.200.N.1/30 style) and ``cujo<id>s`` (sandbox side, .2/30,
# default route via .1). One nftables table ``inet cujo_<id>`` on the host side:
#
# * every TCP connection from the veth is DNATed to the proxy's transparent listener of
#   the phase on host loopback (the regular proxy port stays reachable at the host-side
#   address, so clients honouring proxy variables keep working), UDP and TCP port 53 to
#   the logging resolver: the listener's port names the phase, so the label survives;
# * everything else from the veth is dropped in prerouting, before routing, so nothing
#   is ever forwarded whatever ``ip_forward`` says; IPv4 TCP/UDP drops are counted per
#   (destination, protocol, port) in a dynamic set, other IPv4 per (destination,
#   protocol), IPv6 in one counter, all read back with ``nft -j``.
#
# DNAT to 127.0.0.1 needs ``route_localnet`` on the host-side veth only. IPv6 is off on
# the sandbox side (it would otherwise reach the host over link-local addresses and emit
# solicitations that would count as refused packets).
#
# A run holds ``<state_dir>/<id>.lock`` (flock) while its namespace lives, so
# ``cleanup_stale`` removes what a killed run left behind and never a live run's.

NAME_PREFIX = "cujo-"
TABLE_PREFIX = "cujo_"
LINK_PREFIX = "cujo"
STATE_DIR = Path("/run/cujo/netns")
NETNS_ETC = Path("/etc/netns")
POOL = ipaddress.IPv4Network("10.200.0.0/16")
LOOPBACK = "127.0.0.1"
DNS_PORT = 53
# Bounds on what the drop sets remember; past them drops are still counted in total.
SET_SIZE = 4096
_ID_RE = re.compile(r"[0-9a-f]{6}")
_LINK_RE = re.compile(rf"{LINK_PREFIX}([0-9a-f]{{6}})[hs]")
_KILL_WAIT_S = 5.0


class NetnsError(RuntimeError):
    """A namespace, link or ruleset command failed, with its stderr."""


# --------------------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Layout:
    """Names and addresses of one run's namespace, veth pair and table."""

    run_id: str
    index: int
    pool: ipaddress.IPv4Network = POOL

    @property
    def name(self) -> str:
        """Return the namespace name."""
        return NAME_PREFIX + self.run_id

    @property
    def host_link(self) -> str:
        """Return the host-side veth name."""
        return f"{LINK_PREFIX}{self.run_id}h"

    @property
    def sandbox_link(self) -> str:
        """Return the sandbox-side veth name."""
        return f"{LINK_PREFIX}{self.run_id}s"

    @property
    def table(self) -> str:
        """Return the nftables table name (family inet)."""
        return TABLE_PREFIX + self.run_id

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        """Return the /30 of the veth pair."""
        return ipaddress.IPv4Network((int(self.pool.network_address) + 4 * self.index, 30))

    @property
    def host_ip(self) -> str:
        """Return the host-side address: the namespace's gateway and nameserver."""
        return str(self.subnet.network_address + 1)

    @property
    def sandbox_ip(self) -> str:
        """Return the sandbox-side address."""
        return str(self.subnet.network_address + 2)


@dataclass(frozen=True)
class Redirect:
    """Where the namespace's traffic lands, on the host: the phase's listeners."""

    transparent_port: int
    dns_port: int | None = None
    # The phase's regular proxy port, reachable at the host-side address.
    proxy_port: int | None = None
    listen_host: str = LOOPBACK


@dataclass(frozen=True)
class Refused:
    """Packets the namespace sent that were dropped, to one destination."""

    dst: str
    proto: str
    port: int | None
    packets: int
    bytes: int

    def __str__(self) -> str:
        """Return e.g. "refused: 3 packets to 10.0.0.1:9999/udp"."""
        where = self.dst if self.port is None else f"{self.dst}:{self.port}"
        return f"refused: {self.packets} packets to {where}/{self.proto}"


@dataclass(frozen=True)
class Drops:
    """What a namespace's guard dropped: by destination, in total, and IPv6."""

    refused: list[Refused] = field(default_factory=list)
    packets: int = 0
    ipv6_packets: int = 0


def new_run_id() -> str:
    """Return a fresh run id, short enough for interface names (15 bytes)."""
    return secrets.token_hex(3)


def subnets_in_use(
    addrs: Iterable[dict[str, Any]], routes: Iterable[dict[str, Any]], pool: ipaddress.IPv4Network
) -> set[int]:
    """Return the /30 indexes of ``pool`` taken by ``ip -j addr`` / ``ip -j route`` entries."""
    taken: set[int] = set()
    nets: list[ipaddress.IPv4Network] = []
    for link in addrs:
        for info in link.get("addr_info", []):
            if info.get("family") == "inet" and "local" in info:
                prefix = int(info.get("prefixlen", 32))
                nets.append(ipaddress.IPv4Network(f"{info['local']}/{prefix}", strict=False))
    for route in routes:
        dst = route.get("dst", "default")
        if dst != "default":
            nets.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    base = int(pool.network_address)
    count = pool.num_addresses // 4
    for net in nets:
        if not net.overlaps(pool):
            continue
        first = max(int(net.network_address), base)
        last = min(int(net.broadcast_address), int(pool.broadcast_address))
        taken.update(range((first - base) // 4, min((last - base) // 4 + 1, count)))
    return taken


def pick_index(taken: set[int], pool: ipaddress.IPv4Network = POOL) -> int:
    """Return a /30 index of ``pool`` not taken, at random, or raise NetnsError.

    Not the first free one: the kernel keeps a finished namespace's UDP conntrack
    entries for a while (30 s and more), and one that a new namespace's DNS query matches
    (same subnet, same source port) is DNATed to the last resolver's port, where the
    guard refuses it: a refused packet the pull request never sent (seen when reviews
    of hundreds of look-ups ran one after another on the first subnet).
    """
    count = pool.num_addresses // 4
    free = count - len({i for i in taken if 0 <= i < count})
    if free <= 0:
        raise NetnsError(f"no free /30 left in {pool}")
    # The n-th free index, n drawn uniformly: no list of 16,384 indexes is built.
    nth = secrets.randbelow(free)
    for index in range(count):
        if index in taken:
            continue
        if nth == 0:
            return index
        nth -= 1
    raise NetnsError(f"no free /30 left in {pool}")


def ruleset(layout: Layout, redirect: Redirect) -> str:
    """Return the nft script of one namespace's table."""
    veth = f'iifname "{layout.host_link}"'
    to = redirect.listen_host
    nat = []
    tcp_ports = [redirect.transparent_port]
    if redirect.proxy_port is not None:
        nat.append(
            f"{veth} ip daddr {layout.host_ip} tcp dport {redirect.proxy_port} "
            f'counter dnat ip to {to}:{redirect.proxy_port} comment "proxy"'
        )
        tcp_ports.append(redirect.proxy_port)
    accept = []
    if redirect.dns_port is not None:
        for proto in ("udp", "tcp"):
            nat.append(
                f"{veth} {proto} dport {DNS_PORT} "
                f'counter dnat ip to {to}:{redirect.dns_port} comment "dns"'
            )
        tcp_ports.append(redirect.dns_port)
        accept.append(f"{veth} ct status dnat ip daddr {to} udp dport {redirect.dns_port} accept")
    nat.append(
        f"{veth} meta l4proto tcp "
        f'counter dnat ip to {to}:{redirect.transparent_port} comment "transparent"'
    )
    ports = ", ".join(str(p) for p in sorted(set(tcp_ports)))
    accept.insert(0, f"{veth} ct status dnat ip daddr {to} tcp dport {{ {ports} }} accept")
    lines = [
        f"table inet {layout.table} {{",
        "  set refused4 {",
        "    type ipv4_addr . inet_proto . inet_service; flags dynamic; counter;",
        f"    size {SET_SIZE};",
        "  }",
        "  set refused4_other {",
        f"    type ipv4_addr . inet_proto; flags dynamic; counter; size {SET_SIZE};",
        "  }",
        # Before Docker's and other nat chains (dstnat): the first mapping wins.
        "  chain to_harness {",
        "    type nat hook prerouting priority dstnat - 5; policy accept;",
        *(f"    {rule}" for rule in nat),
        "  }",
        # After NAT, before routing: only what reached our listeners passes.
        "  chain guard {",
        "    type filter hook prerouting priority dstnat + 5; policy accept;",
        *(f"    {rule}" for rule in accept),
        f'    {veth} meta nfproto ipv6 counter drop comment "ipv6"',
        f"    {veth} meta l4proto {{ tcp, udp }} "
        "add @refused4 { ip daddr . meta l4proto . th dport counter }",
        f"    {veth} meta l4proto != {{ tcp, udp }} "
        "add @refused4_other { ip daddr . meta l4proto counter }",
        f'    {veth} counter drop comment "refused"',
        "  }",
        # Defence in depth: nothing is routed out of or into the sandbox.
        "  chain no_forward {",
        "    type filter hook forward priority filter - 5; policy accept;",
        f'    {veth} counter drop comment "forward-out"',
        f'    oifname "{layout.host_link}" counter drop comment "forward-in"',
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _counter(rule: dict[str, Any]) -> tuple[int, int]:
    for expr in rule.get("expr", []):
        if isinstance(expr, dict) and isinstance(expr.get("counter"), dict):
            return int(expr["counter"]["packets"]), int(expr["counter"]["bytes"])
    return 0, 0


def parse_drops(table_json: dict[str, Any]) -> Drops:
    """Return the drops recorded in ``nft -j list table`` output."""
    refused: list[Refused] = []
    packets = ipv6 = 0
    for item in table_json.get("nftables", []):
        if "set" in item and item["set"].get("name") in ("refused4", "refused4_other"):
            for elem in item["set"].get("elem", []):
                value = elem.get("elem", {}) if isinstance(elem, dict) else {}
                parts = value.get("val", {}).get("concat", [])
                counter = value.get("counter") or {}
                if len(parts) not in (2, 3):
                    continue
                refused.append(
                    Refused(
                        dst=str(parts[0]),
                        proto=str(parts[1]),
                        port=int(parts[2]) if len(parts) == 3 else None,
                        packets=int(counter.get("packets", 0)),
                        bytes=int(counter.get("bytes", 0)),
                    )
                )
        elif "rule" in item:
            comment = item["rule"].get("comment")
            if comment == "refused":
                packets += _counter(item["rule"])[0]
            elif comment == "ipv6":
                ipv6 += _counter(item["rule"])[0]
    refused.sort(key=lambda r: (-r.packets, r.dst, r.proto, r.port or 0))
    return Drops(refused, packets + ipv6, ipv6)


def run_in_namespace(name: str, argv: Sequence[str]) -> list[str]:
    """Return ``argv`` prefixed to run inside namespace ``name``."""
    return ["ip", "netns", "exec", name, *argv]


# --------------------------------------------------------------------------- commands


def _run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _write_sysctl(path: Path, value: str) -> None:
    # A kernel without IPv6 has no such file, and then nothing to switch off.
    with contextlib.suppress(FileNotFoundError):
        path.write_text(value)


def unavailable() -> str | None:
    """Return why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root for network namespaces and nftables"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2, nftables)"
    return None


def _lock(path: Path, *, wait: bool) -> int | None:
    """Return an fd holding an exclusive flock on ``path``, or None when another holds it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _kill_namespace_pids(name: str) -> None:
    """Kill every process left in namespace ``name`` and wait until none is."""
    deadline = time.monotonic() + _KILL_WAIT_S
    while True:
        out = _run(["ip", "netns", "pids", name], check=False)
        pids = [int(p) for p in out.split() if p.isdigit()]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def kill_all_in(name: str) -> None:
    """Kill every process in namespace ``name``: what a phase started cannot leave it."""
    _kill_namespace_pids(name)


def drops_for(name: str) -> Drops:
    """Return what the guard of namespace ``name`` (``cujo-<id>``) has dropped so far."""
    table = TABLE_PREFIX + name.removeprefix(NAME_PREFIX)
    parsed: dict[str, Any] = json.loads(_run(["nft", "-j", "list", "table", "inet", table]))
    return parse_drops(parsed)


def _remove(run_id: str, state_dir: Path) -> None:
    """Remove whatever exists of run ``run_id``'s namespace; absent parts are fine."""
    name = NAME_PREFIX + run_id
    if Path("/run/netns", name).exists():
        _kill_namespace_pids(name)
    _run(["nft", "delete", "table", "inet", TABLE_PREFIX + run_id], check=False)
    # Deleting either end deletes the pair, even while something still holds the namespace.
    _run(["ip", "link", "delete", f"{LINK_PREFIX}{run_id}h"], check=False)
    _run(["ip", "netns", "delete", name], check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    (state_dir / f"{run_id}.lock").unlink(missing_ok=True)


def leftovers() -> set[str]:
    """Return the run ids that own a cujo namespace, veth or table on this host."""
    ids: set[str] = set()
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        name = line.split(" ", 1)[0]
        if name.startswith(NAME_PREFIX) and _ID_RE.fullmatch(name[len(NAME_PREFIX) :]):
            ids.add(name[len(NAME_PREFIX) :])
    for link in json.loads(_run(["ip", "-j", "link", "show"], check=False) or "[]"):
        if match := _LINK_RE.fullmatch(str(link.get("ifname", ""))):
            ids.add(match.group(1))
    tables = json.loads(_run(["nft", "-j", "list", "tables", "inet"], check=False) or "{}")
    for item in tables.get("nftables", []):
        table = str(item.get("table", {}).get("name", ""))
        if table.startswith(TABLE_PREFIX) and _ID_RE.fullmatch(table[len(TABLE_PREFIX) :]):
            ids.add(table[len(TABLE_PREFIX) :])
    if NETNS_ETC.is_dir():
        for entry in NETNS_ETC.iterdir():
            if entry.name.startswith(NAME_PREFIX) and _ID_RE.fullmatch(
                entry.name[len(NAME_PREFIX) :]
            ):
                ids.add(entry.name[len(NAME_PREFIX) :])
    return ids


def cleanup_stale(state_dir: Path = STATE_DIR) -> list[str]:
    """Remove namespaces, veths and tables of runs no longer alive; return their ids."""
    removed = []
    for run_id in sorted(leftovers()):
        fd = _lock(state_dir / f"{run_id}.lock", wait=False)
        if fd is None:
            continue  # a live run holds it
        try:
            _remove(run_id, state_dir)
        finally:
            os.close(fd)
        removed.append(run_id)
    return removed


# --------------------------------------------------------------------------- the namespace


class NetNamespace:
    """A run's network namespace whose only reachable listeners are the harness's."""

    def __init__(
        self,
        redirect: Redirect,
        *,
        run_id: str | None = None,
        state_dir: Path = STATE_DIR,
        pool: ipaddress.IPv4Network = POOL,
    ) -> None:
        """Describe the namespace; nothing exists until ``create``."""
        self.redirect = redirect
        self.run_id = run_id or new_run_id()
        if not _ID_RE.fullmatch(self.run_id):
            raise ValueError(f"run id {self.run_id!r} must be 6 lowercase hex digits")
        self.state_dir = state_dir
        self.pool = pool
        self.layout: Layout | None = None
        self._lock_fd: int | None = None

    @property
    def name(self) -> str:
        """Return the namespace name."""
        return NAME_PREFIX + self.run_id

    def _layout(self) -> Layout:
        if self.layout is None:
            raise NetnsError(f"namespace {self.name} was not created")
        return self.layout

    @property
    def host_ip(self) -> str:
        """Return the host-side address (gateway, nameserver, regular proxy address)."""
        return self._layout().host_ip

    @property
    def sandbox_ip(self) -> str:
        """Return the sandbox-side address."""
        return self._layout().sandbox_ip

    def run_in(self, argv: Sequence[str]) -> list[str]:
        """Return ``argv`` prefixed to run inside this namespace."""
        return run_in_namespace(self.name, argv)

    def create(self) -> NetNamespace:
        """Create namespace, veth pair, addresses, routes, resolver file and nft table."""
        reason = unavailable()
        if reason:
            raise NetnsError(reason)
        self._lock_fd = _lock(self.state_dir / f"{self.run_id}.lock", wait=False)
        if self._lock_fd is None:
            raise NetnsError(f"run id {self.run_id} is in use")
        try:
            # Address picking and creation are one step across concurrent runs.
            alloc = _lock(self.state_dir / "alloc.lock", wait=True)
            assert alloc is not None
            try:
                self.layout = Layout(self.run_id, self._free_index(), self.pool)
                self._build(self.layout)
            finally:
                os.close(alloc)
        except BaseException:
            self.destroy()
            raise
        return self

    def _free_index(self) -> int:
        addrs = json.loads(_run(["ip", "-j", "-4", "addr", "show"]) or "[]")
        routes = json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]")
        return pick_index(subnets_in_use(addrs, routes, self.pool), self.pool)

    def _build(self, lay: Layout) -> None:
        ns = ["ip", "-n", lay.name]
        _run(["ip", "netns", "add", lay.name])
        # New links in the namespace get IPv6 off before they exist (no solicitations).
        _run(
            self.run_in(["sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"]),
            check=False,
        )
        _run(["ip", "link", "add", lay.host_link, "type", "veth", "peer", "name", lay.sandbox_link])
        _write_sysctl(Path(f"/proc/sys/net/ipv6/conf/{lay.host_link}/disable_ipv6"), "1")
        _write_sysctl(Path(f"/proc/sys/net/ipv6/conf/{lay.sandbox_link}/disable_ipv6"), "1")
        # DNAT to the listeners on host loopback must be routable from this link only.
        _write_sysctl(Path(f"/proc/sys/net/ipv4/conf/{lay.host_link}/route_localnet"), "1")
        _run(["ip", "link", "set", lay.sandbox_link, "netns", lay.name])
        # The ruleset is in place before either end comes up: no packet goes unguarded.
        _run(["nft", "-f", "-"], stdin=ruleset(lay, self.redirect))
        _run(["ip", "addr", "add", f"{lay.host_ip}/30", "dev", lay.host_link])
        _run(["ip", "link", "set", lay.host_link, "up"])
        _run([*ns, "link", "set", "lo", "up"])
        _run([*ns, "addr", "add", f"{lay.sandbox_ip}/30", "dev", lay.sandbox_link])
        _run([*ns, "link", "set", lay.sandbox_link, "up"])
        _run([*ns, "route", "add", "default", "via", lay.host_ip])
        # `ip netns exec` mounts this over /etc/resolv.conf: a host stub resolver such as
        # 127.0.0.53 would be the namespace's own loopback, where nothing answers.
        etc = NETNS_ETC / lay.name
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(f"nameserver {lay.host_ip}\noptions attempts:1\n")

    def drops(self) -> Drops:
        """Return what the guard has dropped so far."""
        self._layout()
        return drops_for(self.name)

    def destroy(self) -> None:
        """Remove everything ``create`` made; safe to call twice or after a failed create."""
        if self._lock_fd is None:
            return
        try:
            _remove(self.run_id, self.state_dir)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> NetNamespace:
        """Create the namespace."""
        return self.create()

    def __exit__(self, *exc: object) -> None:
        """Destroy the namespace."""
        self.destroy()


@contextlib.contextmanager
def namespace(redirect: Redirect, **kwargs: Any) -> Iterator[NetNamespace]:
    """Yield a created namespace and destroy it afterwards, whatever happens."""
    ns = NetNamespace(redirect, **kwargs)
    with ns:
        yield ns

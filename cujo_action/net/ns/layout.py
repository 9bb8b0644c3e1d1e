"""Name and number one run's namespace: its veth pair, its /30 of the pool, its table."""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cujo_action.sandbox.phase_namespace import NetnsError

# One namespace per run and phase, named ``ns-<id>``, joined to the host by a veth pair
# ``cujo<id>h`` (host side, 10.200.N.1/30 style) and ``eth0`` (sandbox side, .2/30,
# default route via .1), guarded by one nftables table ``inet cujo_<id>`` (ns/nftguard.py).
# Pure: the commands that make them are netns.py's.
#
# What the sandbox can read names nothing of Cujo: the namespace's name shows in its mount
# table (``ip netns exec`` binds /etc/netns/<name>/resolv.conf), and the sandbox's side of
# the pair in /sys/class/net and /proc/net (a hosted runner's is eth0). The host's side
# and the table are seen by the host alone.

NAME_PREFIX = "ns-"
SANDBOX_LINK = "eth0"
TABLE_PREFIX = "cujo_"
LINK_PREFIX = "cujo"
POOL = ipaddress.IPv4Network("10.200.0.0/16")


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
        """Return the sandbox-side veth name (made inside the namespace: no clash)."""
        return SANDBOX_LINK

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

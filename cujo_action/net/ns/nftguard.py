"""Guard a namespace with nftables: its only way out is the harness; count what it drops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cujo_action.net.ns.layout import Layout

# One nftables table ``inet cujo_<id>`` on the host side of a namespace's veth (netns.py):
#
# * every TCP connection from the veth is DNATed to the proxy's transparent listener of
#   the phase on host loopback (the regular proxy port stays reachable at the host-side
#   address, so clients honouring proxy variables keep working), UDP and TCP port 53 to
#   the logging resolver: the listener's port names the phase, so the label survives;
# * everything else from the veth is dropped in prerouting, before routing, so nothing
#   is ever forwarded whatever ``ip_forward`` says; IPv4 TCP/UDP drops are counted per
#   (destination, protocol, port) in a dynamic set, other IPv4 per (destination,
#   protocol), IPv6 in one counter, all read back with ``nft -j`` (``parse_drops``).

LOOPBACK = "127.0.0.1"
DNS_PORT = 53
# Bounds on what the drop sets remember; past them drops are still counted in total.
SET_SIZE = 4096
# The sets refused packets are counted in (parse_drops reads them), in every guard table.
REFUSED_SETS = (
    "  set refused4 {",
    "    type ipv4_addr . inet_proto . inet_service; flags dynamic; counter;",
    f"    size {SET_SIZE};",
    "  }",
    "  set refused4_other {",
    f"    type ipv4_addr . inet_proto; flags dynamic; counter; size {SET_SIZE};",
    "  }",
)


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
        *REFUSED_SETS,
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

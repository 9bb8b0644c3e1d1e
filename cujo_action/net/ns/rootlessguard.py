"""Guard a namespace the harness's user owns: its only way out is the in-namespace forwarder.

Without root there is no veth to the host and no host-side table (ns/nftguard.py). Instead
the phase's namespace holder (``rootless.py``) owns a user namespace and, in it, the
network namespace; one nftables table of that namespace's own does what the host-side
table does as root, on the output hook (every packet here is made in the namespace):

* TCP to anything but loopback and the namespace's own addresses is redirected to the
  forwarder's TCP port, which reads the original destination (SO_ORIGINAL_DST) and hands
  the connection to the phase's proxy (``forwarder.py``);
* UDP and TCP port 53 to any address but loopback (the stub addresses 127.0.0.53 and
  127.0.0.54, as a runner's resolv.conf names them, included) go to the forwarder's DNS
  port, which hands each query to the phase's logging resolver;
* everything else leaving for anywhere but loopback is counted in the same sets and
  rules as the host-side table (so ``ns.nftguard.parse_drops`` reads both) and goes out of
  ``eth0``, whose peer stays down in the namespace: nothing receives it, and the sender
  sees no error, as behind the host-side table.

Pull-request commands run in a user namespace of their own below the holder's, with no
capability over this network namespace: they cannot list or change the table. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from cujo_action.net.ns.dnsstub import STUB_ADDRESSES
from cujo_action.net.ns.nftguard import DNS_PORT, REFUSED_SETS

# One table per namespace: the namespace is the run's and phase's alone, so no run id.
TABLE = "cujo_guard"
# Inside the namespace, as on a hosted runner: eth0 with an address and a default route.
SANDBOX_LINK = "eth0"
# The link's other end stays in the namespace, down: nothing is ever sent through it.
# Named as the one other link a hosted runner has, down while no container runs.
PEER_LINK = "docker0"
SANDBOX_ADDRESS = "10.1.0.4"
GATEWAY = "10.1.0.1"
PREFIX_LEN = 24


@dataclass(frozen=True)
class ForwarderPorts:
    """The forwarder's listeners on the namespace's loopback."""

    tcp: int
    dns: int


def guard_ruleset(ports: ForwarderPorts) -> str:
    """Return the nft script of the table inside a rootless phase's namespace."""
    stubs = ", ".join(STUB_ADDRESSES)
    lines = [
        f"table inet {TABLE} {{",
        *REFUSED_SETS,
        "  chain to_forwarder {",
        "    type nat hook output priority -100; policy accept;",
        *(
            f"    ip daddr {{ {stubs} }} {proto} dport {DNS_PORT} "
            f'counter redirect to :{ports.dns} comment "stub"'
            for proto in ("udp", "tcp")
        ),
        # Loopback and the namespace's own address: the sandbox's own servers (a test's).
        "    ip daddr 127.0.0.0/8 accept",
        "    fib daddr type local accept",
        *(
            f'    {proto} dport {DNS_PORT} counter redirect to :{ports.dns} comment "dns"'
            for proto in ("udp", "tcp")
        ),
        f'    meta l4proto tcp counter redirect to :{ports.tcp} comment "transparent"',
        "  }",
        # After NAT: what was redirected, loopback and local traffic pass; nothing else.
        "  chain guard {",
        "    type filter hook output priority 0; policy accept;",
        "    ct status dnat accept",
        "    ip daddr 127.0.0.0/8 accept",
        "    ip6 daddr ::1 accept",
        "    fib daddr type local accept",
        '    meta nfproto ipv6 counter drop comment "ipv6"',
        "    meta l4proto { tcp, udp } "
        "add @refused4 { ip daddr . meta l4proto . th dport counter }",
        "    meta l4proto != { tcp, udp } add @refused4_other { ip daddr . meta l4proto counter }",
        # Counted, then sent out of eth0, whose other end is down: gone without a word
        # to the sender (a drop here would fail its send with EPERM, which no runner does).
        f'    oifname "{SANDBOX_LINK}" counter accept comment "refused"',
        '    counter drop comment "refused"',
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def link_commands() -> list[list[str]]:
    """Return the ``ip`` commands that give the namespace loopback, eth0 and a route."""
    return [
        ["ip", "link", "set", "lo", "up"],
        ["ip", "link", "add", SANDBOX_LINK, "type", "veth", "peer", "name", PEER_LINK],
        ["ip", "addr", "add", f"{SANDBOX_ADDRESS}/{PREFIX_LEN}", "dev", SANDBOX_LINK],
        ["ip", "link", "set", SANDBOX_LINK, "up"],
        ["ip", "route", "add", "default", "via", GATEWAY, "dev", SANDBOX_LINK],
    ]

"""Answer the stub resolver's address (127.0.0.53) inside a namespace, as on a runner.

A hosted runner's ``/etc/resolv.conf`` names systemd-resolved's stub at 127.0.0.53 (and
its proxy stub at 127.0.0.54). Inside a phase's namespace nothing listens there, so one
nftables table of the namespace's own sends what is asked of those addresses, UDP and
TCP port 53, to the gateway (``stub_ruleset``), where the host-side guard (ns/nftguard.py)
hands every port-53 packet to the phase's logging resolver, as it does for DNS sent to
any other address. Pure: netns.py loads the script.

* Output, before routing is settled: the destination becomes the gateway's port 53.
* Postrouting: a packet still carrying a loopback source (the kernel picked 127.0.0.1 for
  the stub address) leaves the veth with the sandbox's own address instead, so the
  gateway can answer it; the reply is turned back by conntrack, and the client sees
  127.0.0.53 answer from 127.0.0.1, as on a runner.
* ``route_localnet`` on the sandbox's veth (set by netns.py) lets a packet routed from
  loopback leave the veth, and its reply come back to 127.0.0.1.

The sandboxed command cannot list or change this table: the namespace belongs to the
host's user namespace, and the command holds no capability there (no CAP_NET_ADMIN; its
own user namespace, if any, is a child that grants nothing over this namespace).
"""

from __future__ import annotations

from cujo_action.net.ns.layout import Layout

STUB_ADDRESSES = ("127.0.0.53", "127.0.0.54")
DNS_PORT = 53
# The table's name inside the namespace (a namespace has its own nftables ruleset).
STUB_TABLE = "resolved_stub"


def stub_ruleset(layout: Layout) -> str:
    """Return the nft script of the stub table inside ``layout``'s namespace."""
    stubs = ", ".join(STUB_ADDRESSES)
    to = f"{layout.host_ip}:{DNS_PORT}"
    lines = [
        f"table ip {STUB_TABLE} {{",
        "  chain to_gateway {",
        # -100 is dstnat; nft names that priority only for prerouting.
        "    type nat hook output priority -100; policy accept;",
        *(
            f"    ip daddr {{ {stubs} }} {proto} dport {DNS_PORT} "
            f'counter dnat to {to} comment "stub"'
            for proto in ("udp", "tcp")
        ),
        "  }",
        "  chain from_sandbox {",
        "    type nat hook postrouting priority srcnat; policy accept;",
        f'    oifname "{layout.sandbox_link}" ip saddr 127.0.0.0/8 '
        f'counter snat to {layout.sandbox_ip} comment "stub"',
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"

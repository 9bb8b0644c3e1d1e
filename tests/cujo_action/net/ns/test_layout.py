"""A run's namespace is named to fit interface names and given a /30 nothing else holds."""

from __future__ import annotations

import ipaddress

import pytest

from cujo_action.net.ns.layout import POOL, Layout, pick_index, subnets_in_use
from cujo_action.sandbox.phase_namespace import NetnsError


def test_layout_names_fit_interfaces_and_addresses_are_a_30() -> None:
    lay = Layout("a1b2c3", 5)
    # What the sandbox can read names nothing of Cujo; the host's side and table do.
    assert (lay.name, lay.table) == ("ns-a1b2c3", "cujo_a1b2c3")
    assert (lay.host_link, lay.sandbox_link) == ("cujoa1b2c3h", "eth0")
    assert max(len(lay.host_link), len(lay.sandbox_link)) <= 15  # IFNAMSIZ - 1
    assert (lay.host_ip, lay.sandbox_ip) == ("10.200.0.21", "10.200.0.22")
    assert str(lay.subnet) == "10.200.0.20/30"
    assert Layout("a1b2c3", 64).host_ip == "10.200.1.1"


def test_subnets_in_use_reads_addresses_and_routes_in_the_pool() -> None:
    addrs = [
        {
            "ifname": "eth0",
            "addr_info": [{"family": "inet", "local": "192.168.1.5", "prefixlen": 24}],
        },
        {"ifname": "v", "addr_info": [{"family": "inet", "local": "10.200.0.1", "prefixlen": 30}]},
        {"ifname": "w", "addr_info": [{"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
    ]
    routes = [{"dst": "default"}, {"dst": "10.200.1.0/29"}, {"dst": "10.200.2.9"}]
    taken = subnets_in_use(addrs, routes, POOL)
    assert taken == {0, 64, 65, 130}
    # A free one, drawn at random (a finished namespace's conntrack entries linger).
    picks = {pick_index(taken) for _ in range(200)}
    assert not picks & taken
    assert len(picks) > 100
    tight = ipaddress.IPv4Network("10.200.0.0/28")  # four /30s, three taken
    assert pick_index({0, 1, 3}, tight) == 2
    # A route covering the whole pool takes every /30 in it.
    tiny = ipaddress.IPv4Network("10.200.0.0/29")
    with pytest.raises(NetnsError, match="no free"):
        pick_index(subnets_in_use([], [{"dst": "10.0.0.0/8"}], tiny), tiny)

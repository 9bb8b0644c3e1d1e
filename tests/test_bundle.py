"""Bundling a run's egress into its reports: what is folded, kept and capped."""

from __future__ import annotations

from typing import Any

from cujo_action.bundle import egress_for
from cujo_action.proxy import egress_record


def line(
    host: str,
    *,
    label: str = "install/install",
    method: str = "GET",
    action: str = "sunk",
    ts: float = 1.0,
    decoys: tuple[str, ...] = (),
    route: str = "proxy",
) -> dict[str, Any]:
    return egress_record(
        ts=ts,
        label=label,
        host=host,
        port=443,
        method=method,
        url=f"https://{host}/{method.lower()}/{ts}",
        bytes_out=100,
        action=action,  # type: ignore[arg-type]
        decoy_seen=decoys,
        decoy_where=["body:base64"] if decoys else (),
        route=route,
    )


def test_registry_reads_are_folded_but_registry_writes_are_kept_one_by_one() -> None:
    reads = [line("registry.npmjs.org", action="forwarded", ts=i) for i in range(1, 4)]
    writes = [
        line("registry.npmjs.org", method="PUT", action="registry-write", ts=i) for i in range(4, 6)
    ]

    egress, fits = egress_for("install", [*reads, *writes])

    assert fits
    assert [(e.method, e.action) for e in egress] == [
        ("PUT", "registry-write"),
        ("PUT", "registry-write"),
        ("GET", "forwarded"),
    ]
    assert [e.url for e in egress[:2]] == [w["url"] for w in writes]
    assert egress[2].url.endswith("(+2 more requests to this host)")
    assert egress[2].bytes_out == 300

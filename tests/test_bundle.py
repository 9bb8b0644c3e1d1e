"""Bundling a run's egress into its reports: what is folded, kept and capped."""

from __future__ import annotations

from typing import Any

import pytest
from bundlefactory import make_report

from app_relay.decide.rules import RuleContext, apply_rules
from cujo_action.bundle import attach_egress, egress_for
from cujo_action.egress import egress_rank, egress_record, order_egress
from cujo_action.schema import MAX_EGRESS, REGISTRY_HOSTS


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


# --------------------------------------------------------------------------- the cap


def flood(n: int, *, label: str, **kw: Any) -> list[dict[str, Any]]:
    """Return ``n`` lines to a different host each, the first at ts 1."""
    return [line(f"h{i}.flood.test", label=label, ts=1 + i, **kw) for i in range(n)]


def blocked(check: str, lines: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """Return the critical rules that fire on ``check``'s report, and whether egress fit."""
    report = make_report(check, run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    final = attach_egress(report, lines, proxy_ok=True, bad_lines=0)
    found = apply_rules([final], RuleContext())
    return [f.rule for f in found if f.severity == "critical"], final.evidence_complete


def test_a_flood_of_warnings_cannot_push_out_a_connection_around_the_proxy() -> None:
    # 600 harmless-looking requests from the tests, then a reverse shell past the proxy.
    lines = flood(600, label="tests/test")
    shell = line(
        "203.0.113.9", label="tests/test", method="TCP", action="refused", ts=10_000, route="direct"
    )

    critical, complete = blocked("tests", [*lines, shell])

    assert critical == ["proxy-bypass"]
    assert not complete  # 601 different hosts do not fit in 500 entries


def test_a_flood_of_refused_registry_tunnels_cannot_push_out_an_install_exfiltration() -> None:
    # A client refusing the run's CA to the registry 600 times, then a POST elsewhere.
    lines = [
        line("registry.npmjs.org", method="CONNECT", action="refused", ts=1 + i) for i in range(600)
    ]
    exfil = line("collector.exfil.test", method="POST", ts=10_000)

    egress, fits = egress_for("install", [*lines, exfil])
    critical, _ = blocked("install", [*lines, exfil])

    assert critical == ["install-egress"]
    # Over the cap, the 600 identical tunnels fold into one entry, and everything fits.
    assert fits
    assert [(e.host, e.method) for e in egress] == [
        ("collector.exfil.test", "POST"),
        ("registry.npmjs.org", "CONNECT"),
    ]
    assert egress[1].url.endswith("(+599 more requests to this host)")


def test_a_flood_of_runtime_registry_writes_cannot_push_out_a_bypass() -> None:
    # Writes at runtime are only warnings: they must not outrank a critical line.
    writes = flood(600, label="tests/test", method="PUT", action="registry-write")
    shell = line(
        "203.0.113.9", label="tests/test", method="TCP", action="refused", ts=10_000, route="direct"
    )

    critical, _ = blocked("tests", [*writes, shell])

    assert critical == ["proxy-bypass"]


def test_a_decoy_is_kept_first_and_never_folded() -> None:
    lines = flood(600, label="tests/test")
    stolen = [
        line("collector.exfil.test", label="tests/test", ts=20_000 + i, decoys=("NPM_TOKEN",))
        for i in range(2)
    ]

    egress, _ = egress_for("tests", [*lines, *stolen])

    assert len(egress) == MAX_EGRESS
    assert [e.decoy_seen for e in egress[:2]] == [["NPM_TOKEN"], ["NPM_TOKEN"]]
    assert egress[2].host == "h0.flood.test"


@pytest.mark.parametrize(
    ("record", "rank"),
    [
        (line("pypi.org", action="forwarded", decoys=("GITHUB_TOKEN",)), 0),
        (line("pypi.org", method="PUT", action="registry-write"), 1),
        (line("pypi.org", label="detonation/import", method="PUT", action="registry-write"), 1),
        (line("203.0.113.9", label="tests/test", method="TCP", route="direct"), 2),
        (line("collector.exfil.test"), 3),
        (line("collector.exfil.test", label="detonation/import"), 3),
        (line("", method="DNS"), 3),
        (line("pypi.org", label="smoke/smoke", method="POST", action="registry-write"), 4),
        (line("collector.exfil.test", label="probes/probe"), 5),
        (line("pypi.org", label="tests/test", method="TCP", route="direct"), 6),
        (line("mirror.corp.test"), 6),
        (line("pypi.org", method="CONNECT", action="refused"), 6),
    ],
)
def test_lines_rank_by_the_rule_they_would_trigger(record: dict[str, Any], rank: int) -> None:
    assert egress_rank(record, [*REGISTRY_HOSTS, "mirror.corp.test"]) == rank


def test_within_a_rank_lines_keep_their_time_order() -> None:
    late, early = line("b.exfil.test", ts=5), line("a.exfil.test", ts=2)
    registry = line("pypi.org", method="CONNECT", action="refused", ts=1)

    assert order_egress([registry, late, early], REGISTRY_HOSTS) == [early, late, registry]

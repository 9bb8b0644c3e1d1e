"""Bundling a run's egress into its reports: what is folded, kept and capped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bundlefactory import make_report

from app_relay.decide.hits import RuleContext
from app_relay.decide.rules import apply_rules
from cujo_action.evidence.bundle import attach_egress, egress_for
from cujo_action.evidence.egressdigest import digest_records
from cujo_action.evidence.reportfit import fit_report, parse_report, report_bytes
from cujo_action.limits import REPORT_BYTES
from cujo_action.net.egress import (
    RANK_BYPASS,
    RANK_DECOY,
    RANK_EARLY_UNEXPECTED,
    RANK_EXPECTED,
    RANK_REGISTRY_WRITE,
    RANK_RUNTIME_REGISTRY_WRITE,
    RANK_RUNTIME_UNEXPECTED,
    RANK_UNREAD,
    egress_rank,
    egress_record,
    order_egress,
)
from cujo_action.schema import (
    MAX_EGRESS,
    MAX_OBSERVATIONS,
    MAX_TEXT,
    REGISTRY_HOSTS,
    Observation,
    clip,
)


def line(
    host: str,
    *,
    label: str = "install/install",
    method: str = "GET",
    action: str = "sunk",
    ts: float = 1.0,
    decoys: tuple[str, ...] = (),
    route: str = "proxy",
    **signals: Any,  # dns_tunnel, opaque, unsearched
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
        **signals,
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
    final = attach_egress(report, digest_records(lines), proxy_ok=True)
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
        (line("pypi.org", action="forwarded", decoys=("GITHUB_TOKEN",)), RANK_DECOY),
        (line("t1.exfil.test", method="DNS", route="dns", dns_tunnel=True), RANK_UNREAD),
        (line("collector.exfil.test", method="POST", opaque=True), RANK_UNREAD),
        (line("pypi.org", method="PUT", action="registry-write"), RANK_REGISTRY_WRITE),
        (
            line("pypi.org", label="detonation/import", method="PUT", action="registry-write"),
            RANK_REGISTRY_WRITE,
        ),
        (line("203.0.113.9", label="tests/test", method="TCP", route="direct"), RANK_BYPASS),
        # No proxy is set: HTTP and TLS the namespace caught rank as any other request.
        (
            line("collector.exfil.test", label="tests/test", method="POST", route="direct"),
            RANK_RUNTIME_UNEXPECTED,
        ),
        (
            line("collector.exfil.test", label="tests/test", method="TLS", route="direct"),
            RANK_RUNTIME_UNEXPECTED,
        ),
        (line("collector.exfil.test", method="GET", route="direct"), RANK_EARLY_UNEXPECTED),
        (line("collector.exfil.test"), RANK_EARLY_UNEXPECTED),
        (line("collector.exfil.test", label="detonation/import"), RANK_EARLY_UNEXPECTED),
        (line("", method="DNS"), RANK_EARLY_UNEXPECTED),
        (
            line("pypi.org", label="smoke/smoke", method="POST", action="registry-write"),
            RANK_RUNTIME_REGISTRY_WRITE,
        ),
        (line("collector.exfil.test", label="probes/probe"), RANK_RUNTIME_UNEXPECTED),
        (line("pypi.org", label="tests/test", method="TCP", route="direct"), RANK_EXPECTED),
        (line("mirror.corp.test"), RANK_EXPECTED),
        (line("pypi.org", method="CONNECT", action="refused"), RANK_EXPECTED),
        # A registry read that could not be searched: unsearched-egress, as to any host;
        # a look-up of its name that DNS reassembly forgot is not held against the run.
        (
            line("pypi.org", label="tests/test", action="forwarded", unsearched="nested"),
            RANK_UNREAD,
        ),
        (line("pypi.org", method="DNS", route="dns", unsearched="forgot"), RANK_EXPECTED),
        (line("mirror.corp.test", unsearched="too big"), RANK_EXPECTED),
    ],
)
def test_lines_rank_by_the_rule_they_would_trigger(record: dict[str, Any], rank: int) -> None:
    assert egress_rank(record, [*REGISTRY_HOSTS, "mirror.corp.test"]) == rank


def test_within_a_rank_lines_keep_their_time_order() -> None:
    late, early = line("b.exfil.test", ts=5), line("a.exfil.test", ts=2)
    registry = line("pypi.org", method="CONNECT", action="refused", ts=1)

    assert order_egress([registry, late, early], REGISTRY_HOSTS) == [early, late, registry]


# --------------------------------------------------------------------------- limits as cuts


def test_egress_over_its_cap_is_a_cut_that_hides_danger_when_a_dropped_line_was_telling() -> None:
    report = make_report("install", run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    lines = flood(MAX_EGRESS + 100, label="install/install")
    final = attach_egress(report, digest_records(lines), proxy_ok=True)
    (cut,) = final.cuts
    assert (cut.limit, cut.kept, cut.dropped, cut.phase, cut.hides_danger) == (
        "report-egress",
        MAX_EGRESS,
        100,
        "install",
        True,
    )
    assert not final.evidence_complete


def test_egress_over_its_cap_that_only_expected_hosts_saw_hides_nothing() -> None:
    report = make_report("tests", run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    lines = flood(MAX_EGRESS + 20, label="tests/test", action="refused")
    final = attach_egress(
        report,
        digest_records(lines, ["*.flood.test"]),
        proxy_ok=True,
        egress_allow=["*.flood.test"],
    )
    (cut,) = final.cuts
    assert (cut.limit, cut.dropped, cut.hides_danger) == ("report-egress", 20, False)
    assert final.evidence_complete


def test_a_dead_proxy_and_cut_off_lines_are_named_as_cuts() -> None:
    report = make_report("tests", run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    final = attach_egress(report, digest_records([], bad_lines=3), proxy_ok=False)
    assert [(c.limit, c.dropped, c.hides_danger) for c in final.cuts] == [
        ("harness-process", 1, True),
        ("harness-process", 3, True),
    ]
    assert not final.evidence_complete
    assert [o.kind for o in final.observations] == ["harness_died"]


# --------------------------------------------------------------------------- the byte budget

ODD = "\x01" * 5000  # each costs six bytes in JSON


def odd_line(n: int, *, decoys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A look-up by a process whose names are runs of control characters (worst case)."""
    return egress_record(
        ts=1 + n,
        label="install/install",
        host=f"h{n}.lookups.test",
        port=53,
        method="POST" if decoys else "QUERY",
        url=f"dns://h{n}.lookups.test/{ODD}",
        bytes_out=40,
        action="sunk",
        route="proxy" if decoys else "dns",
        decoy_seen=decoys,
        process={"pid": 7, "exe": ODD, "cmdline": ODD, "parents": [f"6 {ODD}"] * 8},
    )


def test_clip_counts_bytes_of_json_so_a_field_cannot_inflate() -> None:
    for text in (ODD, "é" * 5000, '"' * 5000, "x\udcffy" * 1000):
        clipped = clip(text, MAX_TEXT)
        encoded = json.dumps(clipped, ensure_ascii=False).encode()
        assert len(encoded) - 2 <= MAX_TEXT, text[:3]
    assert clip("exe\udcff", 100) == "exe\\xff"  # not UTF-8: spelled out, still writable


def test_an_inflated_report_is_fitted_to_its_budget_and_keeps_what_blocks() -> None:
    notes = [
        Observation(id=f"install:obs:{n}", kind="note", detail=clip(ODD, MAX_TEXT))
        for n in range(1, MAX_OBSERVATIONS + 1)
    ]
    report = make_report(
        "install", run_id="r", base_sha="b" * 40, head_sha="a" * 40, observations=notes
    )
    lines = [*(odd_line(n) for n in range(600)), odd_line(600, decoys=("NPM_TOKEN",))]

    final = attach_egress(report, digest_records(lines), proxy_ok=True)

    assert report_bytes(final) <= REPORT_BYTES
    assert final.observations == notes  # the job's log holds each by digest
    assert final.egress[0].decoy_seen == ["NPM_TOKEN"]
    fit = [c for c in final.cuts if c.limit == "report-bytes"]
    assert len(fit) == 1
    was = int(fit[0].detail.split(" bytes")[0].rsplit(" ", 1)[1])
    assert was > REPORT_BYTES  # it was over: the fitting is what made it fit
    assert fit[0].hides_danger  # look-ups that would have made a finding went
    assert {c.limit for c in final.cuts} >= {"report-egress", "report-field", "report-bytes"}
    found = apply_rules([final], RuleContext())
    assert "decoy-egress" in {f.rule for f in found if f.severity == "critical"}
    again = parse_report(final.dump().encode(), run_id="r", head_sha="a" * 40, base_sha="b" * 40)
    assert again == final  # the reader takes it as written: nothing more to cut


def test_a_report_within_its_budget_is_not_touched() -> None:
    report = make_report("install", run_id="r", base_sha="b" * 40, head_sha="a" * 40)
    egress = digest_records([line("pypi.org", action="forwarded")])
    final = attach_egress(report, egress, proxy_ok=True)
    assert final.cuts == []
    assert final.evidence_complete
    assert fit_report(final) is final

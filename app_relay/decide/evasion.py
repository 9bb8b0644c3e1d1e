"""Rules for evidence a pull request kept Cujo from reading: a limit it filled, a body it
made unsearchable or unreadable, a channel nobody else reads.

Pure, like every rule (``hits.py``). A reviewer whose clean can be bought by filling a
buffer launders the attack, so what could not be seen is itself evidence (docs/design.md
section 6.6, the evidence rules; ``cujo_action/limits.py`` names every cap).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from app_relay.decide.hits import (
    NOT_REQUESTS,
    Hit,
    Rule,
    RuleContext,
    egress_host,
    group_egress,
    hit_per_group,
    in_check_order,
    lineage,
    ordered,
    plural,
    severity_by_phase,
    tool_reading_its_config,
)
from cujo_action.limits import LIMITS
from cujo_action.schema import DECOY_IN_OUTPUT, RAW_METHOD, Egress, Phase, Report, parent_domain

# Methods that send a body somewhere (an upload, a form, an API write).
SENDS = frozenset({"POST", "PUT", "PATCH"})
# The phase a check's own evidence is in when a cut does not name one.
_CHECK_PHASE: dict[str, Phase] = {
    "install": "install",
    "detonation": "import",
    "tests": "test",
    "probes": "probe",
    "smoke": "smoke",
    "base": "install",
    "privileged": "install",
}


@dataclass(frozen=True)
class _Read:
    """A decoy read, from an event (with its id) or from the full list of readers."""

    pid: int
    parents: tuple[str | int, ...]
    ts: float | None
    path: str
    exe: str | None
    evidence: str | None  # the decoy event's id; None: only in decoy_readers


def _reads(report: Report) -> list[_Read]:
    reads = [
        _Read(e.pid, tuple(e.parents), e.ts, e.path, e.exe, e.id)
        for e in report.decoy_events
        if e.event in ("open", "read")
        and e.pid is not None
        and not tool_reading_its_config(e.path, e.exe)
    ]
    evented = {(r.pid, r.path) for r in reads}
    reads += [
        _Read(r.pid, tuple(r.parents), r.ts, r.path, None, None)
        for r in report.decoy_readers
        if (r.pid, r.path) not in evented and not tool_reading_its_config(r.path, None)
    ]
    return reads


def opaque_send(egress: Egress, ctx: RuleContext) -> bool:
    """Return whether a request sent a body nothing could read to a non-registry host."""
    return egress.opaque and egress.method in SENDS and not ctx.is_registry(egress.host)


def _channel(egress: Egress, ctx: RuleContext) -> str | None:
    """Return how the proxy could not see into a channel (None: it could)."""
    if egress.action == "refused" and egress.method in NOT_REQUESTS:
        return "raw TCP" if egress.method == RAW_METHOD else "TLS refusing the run's CA"
    if opaque_send(egress, ctx):
        return f"a {egress.method} of {egress.bytes_out} bytes that decode to nothing readable"
    return None


def _decoy_then_opaque(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in in_check_order(reports):
        reads = _reads(report)
        cut = next((c.id for c in report.cuts if c.limit == "report-decoy-events"), None)
        for egress in report.egress:
            how = _channel(egress, ctx)
            if how is None or egress.pid is None:
                continue
            holder = lineage(egress.pid, egress.parents)
            for read in reads:
                same = read.pid in holder or egress.pid in lineage(read.pid, read.parents)
                later = read.ts is None or egress.ts is None or read.ts <= egress.ts
                if not (same and later):
                    continue
                who = posixpath.basename(egress.exe or read.exe or "?")
                cmd = f": `{egress.cmdline}`" if egress.cmdline else ""
                # A read kept only among the readers has no event to cite: the cut that
                # dropped its event stands for it.
                cited = tuple(i for i in (read.evidence or cut, egress.id) if i)
                hits.append(
                    Hit(
                        check=report.check,
                        title=(
                            f"{egress.phase}: {who} (pid {egress.pid}{cmd}) read decoy "
                            f"{read.path}, then opened a channel to {egress.host or egress.url}"
                            f":{egress.port} the proxy could not see into ({how})"
                        ),
                        evidence=cited,
                    )
                )
                break
    return hits


def _opaque_egress(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups = group_egress(reports, lambda e: opaque_send(e, ctx) and not e.decoy_seen, egress_host)
    return hit_per_group(
        groups,
        lambda phase, host, seen: (
            f"{phase}: {plural(len(seen), 'request')} "
            f"({', '.join(ordered(e.method for e in seen))}) to {host or '(no host)'} "
            f"sent {sum(e.bytes_out for e in seen)} bytes that decode to nothing readable "
            "(encrypted or random): the content cannot be checked for secrets"
        ),
    )


def _unsearched(egress: Egress, ctx: RuleContext) -> bool:
    """Return whether a request that could not be searched is held against the run: to a
    host not expected, or to a registry over HTTP (a registry never needs a request Cujo
    cannot read, and it is forwarded, so it is a channel). A look-up of a registry's name
    that DNS reassembly forgot stays out: the registries are asked for all through an
    install, whatever a suite looked up before."""
    if not egress.unsearched:
        return False
    if ctx.is_registry(egress.host):
        return egress.route != "dns"
    return not ctx.expects(egress.host)


def _unsearched_egress(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups = group_egress(reports, lambda e: _unsearched(e, ctx), egress_host)
    return hit_per_group(
        groups,
        lambda phase, host, seen: (
            f"{phase}: {plural(len(seen), 'request')} to {host or '(no host)'} could not "
            f"be searched for decoys ({'; '.join(ordered(e.unsearched for e in seen))})"
        ),
    )


def _dns_tunnel(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups = group_egress(reports, lambda e: e.dns_tunnel, lambda e: parent_domain(e.host))
    return hit_per_group(
        groups,
        lambda phase, domain, seen: (
            f"{phase}: many distinct high-entropy names looked up under {domain} "
            f"(data sent as DNS labels; {plural(len(seen), 'query')} marked)"
        ),
        by_phase=True,
    )


def _evidence_flood(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in in_check_order(reports):
        for cut in report.cuts:
            limit = LIMITS[cut.limit]
            if not limit.flood:
                continue
            phase = cut.phase or _CHECK_PHASE[report.check]
            hits.append(
                Hit(
                    check=report.check,
                    title=(
                        f"{phase}: a flood filled the limit on {limit.what} "
                        f"({limit.value} {limit.unit}): {cut.dropped} more dropped"
                        + (f" ({cut.detail})" if cut.detail else "")
                    ),
                    evidence=(cut.id,),
                    severity=severity_by_phase(phase),
                )
            )
    return hits


def _decoy_in_output(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    # Without a path it was printed; with one, written to a file the runner reads after
    # the step (``$GITHUB_STEP_SUMMARY``: cujo_action/watch/filecommands.py).
    return [
        Hit(
            check=report.check,
            title=(
                f"a decoy was written to {obs.path}: {obs.detail}"
                if obs.path
                else f"a decoy was printed: {obs.detail}"
            ),
            evidence=(obs.id,),
        )
        for report in in_check_order(reports)
        for obs in report.observations
        if obs.kind == DECOY_IN_OUTPUT
    ]


EVASION_RULES: tuple[Rule, ...] = (
    Rule(
        "decoy-then-opaque-channel",
        "critical",
        "A process read a decoy, then opened a channel or sent a body the proxy could not read.",
        _decoy_then_opaque,
    ),
    Rule(
        "decoy-in-output",
        "critical",
        "A command printed a decoy secret (in any encoding the proxy decodes) to its output, "
        "or wrote one to a file the runner reads after the step (summary, outputs, state…).",
        _decoy_in_output,
    ),
    Rule(
        "unsearched-egress",
        "critical",
        "A request to an unexpected host, or any request to a registry, could not be searched "
        "for decoys (too big, nested too deep, its pieces' stream forgotten).",
        _unsearched_egress,
    ),
    Rule(
        "dns-tunnel",
        "critical",
        "Many distinct high-entropy names under one domain: data sent as DNS labels "
        "(critical during install and import, a warning later).",
        _dns_tunnel,
    ),
    Rule(
        "evidence-flood",
        "critical",
        "A flood filled a limit on evidence (look-ups, readers, entries) "
        "(critical during install and import, a warning later).",
        _evidence_flood,
    ),
    Rule(
        "opaque-egress",
        "warn",
        "A POST or PUT to a host that is not a registry sent a body that decodes to nothing "
        "readable.",
        _opaque_egress,
    ),
)

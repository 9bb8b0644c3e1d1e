"""Find code turning on the sandbox itself: harness tamper, sudo, proxy bypass, fork bomb.

Tampering with Cujo's harness, trying sudo, going around the proxy, flooding the process
table.

Pure, like every rule (``hits.py``). Each is critical.
"""

from __future__ import annotations

from collections.abc import Sequence

from app_relay.decide.hits import (
    Hit,
    Rule,
    RuleContext,
    host_name,
    in_check_order,
    observed,
    plural,
)
from cujo_action.schema import (
    HARNESS_TAMPER,
    PROCESS_FLOOD,
    RAW_METHOD,
    REFUSED_PACKETS,
    SUDO,
    Report,
)


def _proxy_bypass(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in in_check_order(reports):
        direct: dict[str, list[str]] = {}
        for egress in report.egress:
            # The namespace catches every connection (under full isolation no proxy is
            # set, so HTTP and TLS reach the proxy this way as a matter of course). One
            # that was neither, to a host that is not expected, is a channel of its own:
            # a reverse shell, a custom protocol.
            raw = egress.route == "direct" and egress.method == RAW_METHOD
            if raw and not ctx.expects(egress.host):
                direct.setdefault(host_name(egress.host) or egress.url, []).append(egress.id)
        for host, ids in direct.items():
            hits.append(
                Hit(
                    check=report.check,
                    title=f"{plural(len(ids), 'raw connection')} to {host} (neither HTTP nor "
                    "TLS; caught by the sandbox's network namespace)",
                    evidence=tuple(ids),
                )
            )
        for obs in report.observations:
            if obs.kind == REFUSED_PACKETS:
                hits.append(Hit(check=report.check, title=obs.detail, evidence=(obs.id,)))
    return hits


SANDBOX_ABUSE_RULES: tuple[Rule, ...] = (
    Rule(
        "harness-tamper",
        "critical",
        "Code tampered with Cujo's own harness (proxy, watcher, jail or reports).",
        observed(HARNESS_TAMPER, "harness tamper"),
    ),
    Rule(
        "sudo-use",
        "critical",
        "Code tried to gain root through sudo.",
        observed(SUDO, "sudo attempted"),
    ),
    Rule(
        "proxy-bypass",
        "critical",
        "Code went around the proxy: a raw connection (neither HTTP nor TLS) or packets the "
        "jail refused.",
        _proxy_bypass,
    ),
    Rule(
        "resource-abuse",
        "critical",
        "Code flooded the process table (a fork bomb) up to the sandbox's process limit.",
        observed(PROCESS_FLOOD, "process flood"),
    ),
)

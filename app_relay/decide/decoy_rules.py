"""Find what became of the decoy secrets: carried out, read, written or deleted.

A request carried a decoy out; a decoy file was read (though nothing carried it out),
written or deleted. A decoy opened and not read is a probe (``probe_rules.py``); a changed
workflow's step handing a secret to its own service as its credential is that secret's
use, not its leak (``secret_use.py``).

Pure, like every rule (``hits.py``). A decoy carried out is critical and listed first;
the decoy files read or changed are warnings, listed after the egress rules
(``rules.py`` orders them).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from app_relay.decide.hits import (
    Hit,
    Rule,
    RuleContext,
    host_name,
    in_check_order,
    opened_only,
    ordered,
    plural,
    tool_reading_its_config,
)
from app_relay.decide.secret_use import leaks
from cujo_action.schema import CheckName, Phase, Report


def _decoy_egress(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups: dict[tuple[CheckName, Phase, str], list[tuple[str, list[str], list[str]]]] = {}
    for report in in_check_order(reports):
        for egress in leaks(report):
            if egress.decoy_seen:
                key = (report.check, egress.phase, host_name(egress.host))
                groups.setdefault(key, []).append(
                    (egress.id, egress.decoy_seen, egress.decoy_where)
                )
    hits = []
    for (check, phase, host), seen in groups.items():
        decoys = ordered(d for _, names, _ in seen for d in names)
        where = ordered(w for _, _, places in seen for w in places) or ["where not recorded"]
        hits.append(
            Hit(
                check=check,
                title=(
                    f"{phase}: {plural(len(seen), 'request')} to {host} carried decoy "
                    f"{', '.join(decoys)} ({', '.join(where)})"
                ),
                evidence=tuple(i for i, _, _ in seen),
            )
        )
    return hits


def _decoy_read(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    in_order = in_check_order(reports)
    if any(True for r in in_order for _ in leaks(r)):
        # The value left the sandbox: decoy-egress reports that, as critical.
        return []
    groups: dict[str, tuple[CheckName, list[str], list[str], list[str]]] = {}
    for report in in_order:
        # A process that opened a decoy and read nothing probed it: decoy-probe says so.
        probed = opened_only(report)
        for event in report.decoy_events:
            read = event.event in ("open", "read")
            if not read or tool_reading_its_config(event.path, event.exe):
                continue
            if event.id in probed:
                continue
            check, ids, phases, exes = groups.setdefault(event.path, (report.check, [], [], []))
            ids.append(event.id)
            phases.append(event.phase)
            if event.exe:
                exes.append(posixpath.basename(event.exe))
    hits = []
    for path, (check, ids, phases, exes) in groups.items():
        by = f" by {', '.join(ordered(exes))}" if exes else ""
        hits.append(
            Hit(
                check=check,
                title=(
                    f"decoy file {path} was read{by} during {', '.join(ordered(phases))}, "
                    "though no request carried a decoy"
                ),
                evidence=tuple(ids),
            )
        )
    return hits


def _decoy_tamper(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups: dict[str, tuple[CheckName, list[str], list[str], list[str]]] = {}
    for report in in_check_order(reports):
        for event in report.decoy_events:
            if event.event in ("write", "delete"):
                _, ids, kinds, phases = groups.setdefault(event.path, (report.check, [], [], []))
                ids.append(event.id)
                kinds.append("written" if event.event == "write" else "deleted")
                phases.append(event.phase)
    return [
        Hit(
            check=check,
            title=(
                f"decoy file {path} was {' and '.join(ordered(kinds))} "
                f"during {', '.join(ordered(phases))}"
            ),
            evidence=tuple(ids),
        )
        for path, (check, ids, kinds, phases) in groups.items()
    ]


DECOY_EGRESS = Rule(
    "decoy-egress",
    "critical",
    "A request carried a decoy secret (in any phase, in any encoding the proxy decodes).",
    _decoy_egress,
)

DECOY_FILE_RULES: tuple[Rule, ...] = (
    Rule(
        "decoy-read",
        "warn",
        "A decoy secret file was read, though no request carried a decoy.",
        _decoy_read,
    ),
    Rule(
        "decoy-tamper",
        "warn",
        "A decoy secret file was written or deleted.",
        _decoy_tamper,
    ),
)

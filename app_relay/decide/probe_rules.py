"""Find code probing the sandbox where Cujo can see it: decoys looked at, probes run.

Malware that targets CI checks where it runs before it acts. Most checks read what the
kernel shows and leave no trace (``docs/limits.md``); two kinds are seen, and each is a
warning with its evidence: a decoy opened and not read, or a decoy folder listed
(``decoy-probe``), and a well-known environment probe run (``sandbox-probe``; the list is
``cujo_action/watch/sandbox_probing.py``). Running ``sudo`` is a probe too, and stays critical
(``sudo-use``). Malware also waits: a comparison of the clock with a fixed date in the
changed code (``date-gate``, from ``cujo_action/checks/dategates.py``) is a warning too.

Pure, like every rule (``hits.py``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from app_relay.decide.hits import (
    Hit,
    Rule,
    RuleContext,
    in_check_order,
    opened_only,
    ordered,
    tool_reading_its_config,
)
from cujo_action.schema import DATE_GATE, SANDBOX_PROBE, CheckName, Report


def _decoy_probe(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups: dict[str, tuple[CheckName, list[str], list[str], list[str], str]] = {}
    for report in in_check_order(reports):
        only_opened = opened_only(report)
        for event in report.decoy_events:
            if event.event == "list":
                how = "listed"
            elif event.id in only_opened and not tool_reading_its_config(event.path, event.exe):
                how = "opened and not read"
            else:
                continue
            check, ids, phases, exes, _ = groups.setdefault(
                event.path, (report.check, [], [], [], how)
            )
            ids.append(event.id)
            phases.append(event.phase)
            if event.exe:
                exes.append(posixpath.basename(event.exe))
    hits = []
    for path, (check, ids, phases, exes, how) in groups.items():
        what = "folder" if how == "listed" else "file"
        by = f" by {', '.join(ordered(exes))}" if exes else ""
        hits.append(
            Hit(
                check=check,
                title=(
                    f"probed a decoy without reading it: decoy {what} {path} was {how}{by} "
                    f"during {', '.join(ordered(phases))}"
                ),
                evidence=tuple(ids),
            )
        )
    return hits


def _sandbox_probe(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    return [
        Hit(check=report.check, title=f"probed the sandbox: {obs.detail}", evidence=(obs.id,))
        for report in in_check_order(reports)
        for obs in report.observations
        if obs.kind == SANDBOX_PROBE
    ]


def _date_gate(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    return [
        Hit(check=report.check, title=f"waits for a date? {obs.detail}", evidence=(obs.id,))
        for report in in_check_order(reports)
        for obs in report.observations
        if obs.kind == DATE_GATE
    ]


PROBE_RULES: tuple[Rule, ...] = (
    Rule(
        "decoy-probe",
        "warn",
        "A decoy file was opened and not read, or a decoy's folder was listed.",
        _decoy_probe,
    ),
    Rule(
        "sandbox-probe",
        "warn",
        "Code ran a well-known environment probe (systemd-detect-virt, dmidecode, capsh, …).",
        _sandbox_probe,
    ),
    Rule(
        "date-gate",
        "warn",
        "Changed code compares the current date or time with a fixed date, which a review "
        "run today never reaches.",
        _date_gate,
    ),
)

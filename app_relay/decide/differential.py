"""Tell what the head adds from what the base already does (base vs head).

Pure. The sandbox installs and tests the base beside the head under the same arming
(``cujo_action/checks/base_commit.py``); its report is reference only. A hard-rule hit whose
every piece of evidence the base showed too — the same phase, host and kind of egress,
the same decoy file touched the same way, the same kind of observation on the same path
— is something the pull request did not add: it becomes ``info`` ("also at base") and
never counts toward a block. A failing suite that fails at base too is "the suite fails
at base too", not a finding on the change. Whatever the head adds stays as the rule said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from cujo_action.schema import (
    BASE_CHECK,
    REFUSED_PACKETS,
    TESTS_FAILED,
    Cut,
    DecoyEvent,
    Egress,
    Observation,
    Report,
)

Key = tuple[str, ...]
Item = Egress | DecoyEvent | Observation | Cut

ALSO_AT_BASE = "also at base"
FAILS_AT_BASE_TOO = "the suite fails at base too"
_SINK_ADDRESS = re.compile(r"198\.1[89]\.\d+\.\d+")
_COUNT = re.compile(r"\b\d+ (packets|times)\b")


def split(reports: Sequence[Report]) -> tuple[list[Report], list[Report]]:
    """Return (the head's reports, the base's)."""
    head = [r for r in reports if r.check != BASE_CHECK]
    return head, [r for r in reports if r.check == BASE_CHECK]


def key_of(item: Item) -> Key:
    """Return what an evidence item did, as the base and the head are compared."""
    if isinstance(item, Egress):
        kind = "decoy" if item.decoy_seen else (
            "registry-write" if item.action == "registry-write" else item.route)  # fmt: skip
        host = item.host.strip().lower().rstrip(".") or item.url
        return ("egress", item.phase, host, kind)
    if isinstance(item, DecoyEvent):
        touched = {"open": "read", "read": "read", "list": "list"}.get(item.event, "write")
        return ("decoy", item.phase, item.path, touched)
    if isinstance(item, Cut):
        return ("cut", item.phase or "", item.limit)
    if item.kind == TESTS_FAILED:
        return ("obs", TESTS_FAILED)
    if item.kind == REFUSED_PACKETS:
        # The made-up address of a name and the count differ from run to run.
        detail = _COUNT.sub("", _SINK_ADDRESS.sub("sink", item.detail))
        return ("obs", item.kind, detail)
    return ("obs", item.kind, item.path or item.detail)


def behaviours(reports: Iterable[Report]) -> dict[Key, list[str]]:
    """Return every behaviour the reports show, with the evidence ids that show it."""
    seen: dict[Key, list[str]] = {}
    for report in reports:
        items: list[Item] = [
            *report.egress, *report.decoy_events, *report.observations, *report.cuts
        ]  # fmt: skip
        for item in items:
            seen.setdefault(key_of(item), []).append(item.id)
    return seen


def at_base(
    evidence: Iterable[str], index: Mapping[str, Item], base: Mapping[Key, list[str]]
) -> list[str] | None:
    """Return the base's evidence when the base showed every item of ``evidence``, else None."""
    shown: list[str] = []
    for eid in evidence:
        item = index.get(eid)
        if item is None or key_of(item) not in base:
            return None
        shown.extend(i for i in base[key_of(item)][:3] if i not in shown)
    return shown or None


def title_at_base(title: str, *, suite_fails: bool) -> str:
    """Return a downgraded finding's title, saying why it does not count."""
    return f"{FAILS_AT_BASE_TOO if suite_fails else ALSO_AT_BASE}: {title}"

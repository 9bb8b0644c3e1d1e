"""Make one finding per behaviour: hard-rule hits that share a cause become one finding.

Pure. A pull request that sends a decoy to one host during install, detonation and smoke
did one thing, though four rules saw it in three checks; a write to ``~/.bashrc`` seen by
two rules is one write. Two findings share a cause when their evidence names the same
host (egress), the same file (decoy events, observations with a path) or says the same
thing (observations without a path). The merged finding keeps the strongest rule's id and
severity, names every rule that found it in ``rules``, and cites every occurrence.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from app_relay.decide.secret_use import WORKFLOW_SECRET_USE
from app_relay.verdict import MAX_EVIDENCE, Finding, Item, evidence_items
from cujo_action.schema import Cut, DecoyEvent, Egress, Report

Cause = tuple[str, ...]


def cause_of(item: Item) -> Cause:
    """Return what an evidence item is about: a host, a file, or what it says."""
    if isinstance(item, Egress):
        host = item.host.strip().lower().rstrip(".")
        return ("host", host) if host else ("url", item.url)
    if isinstance(item, DecoyEvent):
        return ("file", posixpath.normpath(item.path))
    if isinstance(item, Cut):
        return ("limit", item.limit, item.phase or "")
    if item.path:
        return ("file", posixpath.normpath(item.path))
    return ("said", item.kind, item.detail)


def one_per_behaviour(findings: Sequence[Finding], reports: Sequence[Report]) -> list[Finding]:
    """Merge findings that share a cause and number them F1.., most severe first.

    ``findings`` come most severe first (as ``apply_rules`` orders them), so each group's
    first member is its strongest and the groups keep that order.
    """
    index = evidence_items(reports)
    parent = list(range(len(findings)))

    def root(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    owner: dict[Cause, int] = {}
    for n, finding in enumerate(findings):
        for eid in finding.evidence:
            # An id the reports do not hold is a cause of its own: it merges nothing.
            cause = cause_of(index[eid][1]) if eid in index else ("id", eid)
            if cause in owner:
                a, b = root(owner[cause]), root(n)
                parent[max(a, b)] = min(a, b)
            else:
                owner[cause] = n
    groups: dict[int, list[Finding]] = {}
    for n, finding in enumerate(findings):
        groups.setdefault(root(n), []).append(finding)
    merged = [_merge(group, index) for _, group in sorted(groups.items())]
    return [f.model_copy(update={"id": f"F{n}"}) for n, f in enumerate(merged, start=1)]


def _ordered(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _merge(group: Sequence[Finding], index: dict[str, tuple[Report, Item]]) -> Finding:
    strongest = group[0]
    if len(group) == 1:
        return strongest
    evidence = _ordered([eid for f in group for eid in f.evidence])
    rules = _ordered([rule for f in group for rule in f.rules])
    checks = _ordered([index[eid][0].check for eid in evidence if eid in index])
    many = len(evidence)
    # Each rule cites at most MAX_EVIDENCE ids; a count built from a capped list is a floor.
    floor = "at least " if any(len(f.evidence) >= MAX_EVIDENCE for f in group) else ""
    # A step's own use of its secret (``secret_use.py``) keeps its title, which names the
    # workflow, job and step: "carried decoy" would say a leak where there is none.
    decoy_title = (
        ""
        if strongest.rule == WORKFLOW_SECRET_USE.id
        else _decoy_title(evidence, checks, index, floor)
    )
    title = decoy_title or (
        f"{strongest.title} ({floor}{many} occurrences in {', '.join(checks) or 'the reports'})"
    )
    return Finding(
        id=strongest.id,
        rule=strongest.rule,
        rules=rules,
        severity=strongest.severity,
        check=strongest.check,
        title=title,
        evidence=evidence[:MAX_EVIDENCE],
    )


def _decoy_title(
    evidence: Sequence[str],
    checks: Sequence[str],
    index: dict[str, tuple[Report, Item]],
    floor: str,
) -> str:
    """Return the title of a group of requests to one host carrying decoys ('' if not)."""
    items = [index[eid][1] for eid in evidence if eid in index]
    egress = [item for item in items if isinstance(item, Egress)]
    if not egress or len(egress) != len(evidence) or len({cause_of(e) for e in egress}) != 1:
        return ""
    host = egress[0].host.strip().lower().rstrip(".") or egress[0].url
    n = len(egress)
    said = f"{', '.join(checks)}: {floor}{n} request{'s' if n != 1 else ''} to {host}"
    carried = [e for e in egress if e.decoy_seen]
    if not carried:
        return ""
    decoys = ", ".join(_ordered([d for e in carried for d in e.decoy_seen]))
    where = ", ".join(_ordered([w for e in carried for w in e.decoy_where])) or "where not recorded"
    if len(carried) == n:
        return f"{said} carried decoy {decoys} ({where})"
    return f"{said}; {len(carried)} of them carried decoy {decoys} ({where})"

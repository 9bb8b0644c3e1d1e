"""Turn the sandbox's reports into findings: the rulebook, in the order the rules apply.

Each rule has a kebab-case id, one severity, a one-line description, a section in
``docs/rules.md`` and a test file of its own (``tests/app_relay/decide/test_rule_<id>.py``). A rule
is a pure function of the reports and the run's context; it does no I/O. The rules live
by family beside this module: ``decoy_rules.py``, ``egress_rules.py``,
``persistence_rules.py``, ``abuse_rules.py``, ``evasion.py``, ``probe_rules.py``,
``workflow_rules.py`` and ``secret_use.py``;
``RULES`` below is the one order they apply in (the order of ``docs/rules.md``), and
``tests-fail``, the one rule about the run's outcome rather than what the code did, lives
here beside ``apply_rules``, which knows it by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app_relay.decide.abuse_rules import SANDBOX_ABUSE_RULES
from app_relay.decide.decoy_rules import DECOY_EGRESS, DECOY_FILE_RULES
from app_relay.decide.differential import Key, at_base, behaviours, key_of, split, title_at_base
from app_relay.decide.egress_rules import EARLY_EGRESS_RULES, RUNTIME_EGRESS_RULES
from app_relay.decide.evasion import EVASION_RULES
from app_relay.decide.hits import Hit, Rule, RuleContext, in_check_order
from app_relay.decide.persistence_rules import PERSISTENCE_RULES
from app_relay.decide.probe_rules import PROBE_RULES
from app_relay.decide.secret_use import WORKFLOW_SECRET_USE
from app_relay.decide.workflow_rules import WORKFLOW_BASE_RULE, WORKFLOW_CHANGE_RULE, WORKFLOW_RULES
from app_relay.verdict import MAX_EVIDENCE, SEVERITIES, Finding, Severity, evidence_items
from cujo_action.schema import FAILING_TEST, TESTS_FAILED, Observation, Report


def _tests_fail(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in in_check_order(reports):
        if report.check != "tests" or report.status != "failed":
            continue
        # Commands carry no evidence id, so the tests check states the failure as an
        # observation; without one there is nothing to cite, and no finding.
        failed = [o for o in report.observations if o.kind == TESTS_FAILED]
        if failed:
            # Each failing test it named is evidence too: the base is compared test by test.
            named = [o for o in report.observations if o.kind == FAILING_TEST]
            hits.append(
                Hit(
                    check="tests",
                    title=f"the test suite failed: {failed[0].detail or 'no detail given'}",
                    evidence=tuple(o.id for o in [*failed, *named]),
                )
            )
    return hits


MAX_NEW_NAMED = 5


def _new_at_head(hit: Hit, index: Mapping[str, object], base: Mapping[Key, list[str]]) -> str:
    """Return the title of a failing suite that fails at base too, but not the same way:
    the tests that fail at head and not at base, named."""
    if ("obs", TESTS_FAILED) not in base:
        return hit.title
    new = [
        item.path or item.detail
        for eid in hit.evidence
        if isinstance(item := index.get(eid), Observation)
        and item.kind == FAILING_TEST
        and key_of(item) not in base
    ]
    if not new:
        return hit.title
    shown = ", ".join(new[:MAX_NEW_NAMED]) + (
        f" and {len(new) - MAX_NEW_NAMED} more" if len(new) > MAX_NEW_NAMED else ""
    )
    return f"the suite fails at base too, but these fail only at head: {shown}; {hit.title}"


RULES: tuple[Rule, ...] = (
    DECOY_EGRESS,
    *EVASION_RULES,
    *EARLY_EGRESS_RULES,
    *PERSISTENCE_RULES,
    *SANDBOX_ABUSE_RULES,
    *WORKFLOW_RULES,
    WORKFLOW_SECRET_USE,
    *RUNTIME_EGRESS_RULES,
    *DECOY_FILE_RULES,
    *PROBE_RULES,
    WORKFLOW_BASE_RULE,
    WORKFLOW_CHANGE_RULE,
    Rule(
        "tests-fail",
        "warn",
        "The test suite ran and failed.",
        _tests_fail,
    ),
)


def apply_rules(reports: Sequence[Report], ctx: RuleContext) -> list[Finding]:
    """Run every rule and number the findings F1.., most severe first, in a stable order.

    Rules run on the head's reports. What the base did too (its report, ``base``) is
    ``info``, "also at base", citing the base's evidence as well (``differential.py``).
    """
    head, base = split(reports)
    seen_at_base = behaviours(base)
    index = {eid: item for eid, (_, item) in evidence_items(head).items()}
    ranked: list[tuple[int, int, int, Rule, Hit, Severity]] = []
    for rule_index, rule in enumerate(RULES):
        for hit_index, hit in enumerate(rule.find(head, ctx)):
            severity: Severity = hit.severity or rule.severity
            shown = at_base(hit.evidence, index, seen_at_base) if seen_at_base else None
            if shown is not None:
                severity = "info"
                title = title_at_base(hit.title, suite_fails=rule.id == "tests-fail")
                hit = Hit(hit.check, title, (*hit.evidence, *shown))  # noqa: PLW2901
            elif rule.id == "tests-fail" and seen_at_base:
                hit = Hit(hit.check, _new_at_head(hit, index, seen_at_base), hit.evidence)  # noqa: PLW2901
            rank = -SEVERITIES.index(severity)
            ranked.append((rank, rule_index, hit_index, rule, hit, severity))
    ranked.sort(key=lambda item: item[:3])
    return [
        Finding(
            id=f"F{n}",
            rule=rule.id,
            severity=severity,
            check=hit.check,
            title=hit.title,
            evidence=list(hit.evidence[:MAX_EVIDENCE]),
        )
        for n, (_, _, _, rule, hit, severity) in enumerate(ranked, start=1)
    ]

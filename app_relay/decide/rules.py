"""Turn the sandbox's reports into findings with deterministic hard rules.

Each rule has a kebab-case id, one severity, a one-line description, a section in
``docs/rules.md`` and a test file of its own (``tests/app_relay/decide/test_rule_<id>.py``). A rule
is a pure function of the reports and the run's context; it does no I/O.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

from app_relay.decide.behaviour import evidence_items
from app_relay.decide.differential import at_base, behaviours, split, title_at_base
from app_relay.decide.evasion import EVASION_RULES
from app_relay.decide.hits import RUNTIME_PHASES, Hit, Rule, RuleContext, RuleFn
from cujo_action.schema import (
    AUTOSTART_WRITE,
    CRON_WRITE,
    GIT_HOOK_WRITE,
    HARNESS_TAMPER,
    PACKAGE_INDEX_WRITE,
    PERSISTENCE_WRITE,
    PROCESS_FLOOD,
    PYTHON_STARTUP_WRITE,
    REFUSED_PACKETS,
    REGISTRY_READ_METHODS,
    SHELL_PROFILE_WRITE,
    SSH_ACCESS_WRITE,
    SUDO,
    SYSTEMD_UNIT_WRITE,
    TESTS_FAILED,
    WORKFLOW_COMMAND_WRITE,
    CheckName,
    Egress,
    Phase,
    Report,
)

__all__ = ["RULES", "Hit", "Rule", "RuleContext", "apply_rules"]
from app_relay.decide.hits import host_name as _host_name
from app_relay.decide.hits import in_check_order as _in_check_order
from app_relay.decide.hits import npm_reading_its_config as _npm_reading_its_config
from app_relay.decide.hits import ordered as _ordered
from app_relay.decide.hits import plural as _plural
from app_relay.decide.verdict import MAX_EVIDENCE, SEVERITIES, Finding, Severity

# --------------------------------------------------------------------------- egress


def _decoy_egress(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups: dict[tuple[CheckName, Phase, str], list[tuple[str, list[str], list[str]]]] = {}
    for report in _in_check_order(reports):
        for egress in report.egress:
            if egress.decoy_seen:
                key = (report.check, egress.phase, _host_name(egress.host))
                groups.setdefault(key, []).append(
                    (egress.id, egress.decoy_seen, egress.decoy_where)
                )
    hits = []
    for (check, phase, host), seen in groups.items():
        decoys = _ordered(d for _, names, _ in seen for d in names)
        where = _ordered(w for _, _, places in seen for w in places) or ["where not recorded"]
        hits.append(
            Hit(
                check=check,
                title=(
                    f"{phase}: {_plural(len(seen), 'request')} to {host} carried decoy "
                    f"{', '.join(decoys)} ({', '.join(where)})"
                ),
                evidence=tuple(i for i, _, _ in seen),
            )
        )
    return hits


def _egress_by_host(
    phases: tuple[Phase, ...],
    matches: Callable[[Egress, RuleContext], bool],
    what: Callable[[str], str],
) -> RuleFn:
    """Return a rule finding ``matches`` egress in ``phases``: one hit per check, phase, host."""

    def find(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
        groups = _by_host(reports, lambda e: e.phase in phases and matches(e, ctx), "method")
        return [
            Hit(
                check=check,
                title=(
                    f"{phase}: {_plural(len(seen), 'request')} "
                    f"({', '.join(_ordered(m for _, m in seen))}) {what(host)}"
                ),
                evidence=tuple(i for i, _ in seen),
            )
            for (check, phase, host), seen in groups.items()
        ]

    return find


def _unexpected(egress: Egress, ctx: RuleContext) -> bool:
    # Decide from the host alone: `action` is what the proxy says it did, and a report's
    # word is not what makes a host expected.
    return not ctx.expects(egress.host)


def _by_host(
    reports: Sequence[Report], matches: Callable[[Egress], bool], keep: str
) -> dict[tuple[CheckName, Phase, str], list[tuple[str, str]]]:
    """Return matching egress by (check, phase, host): each id with its ``keep`` field."""
    groups: dict[tuple[CheckName, Phase, str], list[tuple[str, str]]] = {}
    for report in _in_check_order(reports):
        for egress in report.egress:
            if matches(egress):
                key = (report.check, egress.phase, _host_name(egress.host))
                groups.setdefault(key, []).append((egress.id, str(getattr(egress, keep))))
    return groups


def _dns_over_https(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    early = ("install", "import")
    groups = _by_host(reports, lambda e: bool(e.dns_name) and e.phase in early, "dns_name")
    return [
        Hit(
            check=check,
            title=(
                f"{phase}: DNS-over-HTTPS to {host} (around the logging resolver) asked for "
                f"{', '.join(_ordered(name for _, name in seen))}"
            ),
            evidence=tuple(i for i, _ in seen),
        )
        for (check, phase, host), seen in groups.items()
    ]


def _unexpected_egress(phases: tuple[Phase, ...]) -> RuleFn:
    return _egress_by_host(
        phases,
        _unexpected,
        lambda host: f"to {host or '(no host)'}, neither a package registry nor in egress_allow",
    )


# Egress methods that are no HTTP request of their own: a tunnel, a raw connection.
_NOT_REQUESTS = frozenset({"CONNECT", "TCP"})


def _writes_registry(egress: Egress, ctx: RuleContext) -> bool:
    if egress.action == "registry-write":
        return True
    # A write the proxy did not mark (a proxy from before it refused them) still counts.
    return (
        egress.route != "dns"
        and ctx.is_registry(egress.host)
        and egress.method not in REGISTRY_READ_METHODS
        and egress.method not in _NOT_REQUESTS
    )


def _registry_write(phases: tuple[Phase, ...]) -> RuleFn:
    return _egress_by_host(
        phases,
        _writes_registry,
        lambda host: (
            f"tried to write to the package registry {host} (publish or upload); "
            "the sandbox refused"
        ),
    )


def _proxy_bypass(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in _in_check_order(reports):
        direct: dict[str, list[str]] = {}
        for egress in report.egress:
            # The namespace caught a client that ignored the proxy settings. A registry
            # reached that way is only a tool's habit; anything else is hiding.
            if egress.route == "direct" and not ctx.expects(egress.host):
                direct.setdefault(_host_name(egress.host) or egress.url, []).append(egress.id)
        for host, ids in direct.items():
            hits.append(
                Hit(
                    check=report.check,
                    title=f"{_plural(len(ids), 'connection')} to {host} ignored the proxy "
                    "settings (caught by the sandbox's network namespace)",
                    evidence=tuple(ids),
                )
            )
        for obs in report.observations:
            if obs.kind == REFUSED_PACKETS:
                hits.append(Hit(check=report.check, title=obs.detail, evidence=(obs.id,)))
    return hits


# --------------------------------------------------------------------------- decoy files


def _decoy_read(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    ordered = _in_check_order(reports)
    if any(e.decoy_seen for r in ordered for e in r.egress):
        # The value left the sandbox: decoy-egress reports that, as critical.
        return []
    groups: dict[str, tuple[CheckName, list[str], list[str], list[str]]] = {}
    for report in ordered:
        for event in report.decoy_events:
            if event.event not in ("open", "read") or _npm_reading_its_config(
                event.path, event.exe
            ):
                continue
            check, ids, phases, exes = groups.setdefault(event.path, (report.check, [], [], []))
            ids.append(event.id)
            phases.append(event.phase)
            if event.exe:
                exes.append(posixpath.basename(event.exe))
    hits = []
    for path, (check, ids, phases, exes) in groups.items():
        by = f" by {', '.join(_ordered(exes))}" if exes else ""
        hits.append(
            Hit(
                check=check,
                title=(
                    f"decoy file {path} was read{by} during {', '.join(_ordered(phases))}, "
                    "though no request carried a decoy"
                ),
                evidence=tuple(ids),
            )
        )
    return hits


def _decoy_tamper(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups: dict[str, tuple[CheckName, list[str], list[str], list[str]]] = {}
    for report in _in_check_order(reports):
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
                f"decoy file {path} was {' and '.join(_ordered(kinds))} "
                f"during {', '.join(_ordered(phases))}"
            ),
            evidence=tuple(ids),
        )
        for path, (check, ids, kinds, phases) in groups.items()
    ]


# --------------------------------------------------------------------------- observations


def _observed(kind: str, what: str) -> RuleFn:
    def find(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
        hits = []
        for report in _in_check_order(reports):
            for obs in report.observations:
                if obs.kind == kind:
                    said = " — ".join(part for part in (obs.path, obs.detail) if part)
                    hits.append(
                        Hit(
                            check=report.check,
                            title=f"{what}: {said}" if said else what,
                            evidence=(obs.id,),
                        )
                    )
        return hits

    return find


def _tests_fail(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in _in_check_order(reports):
        if report.check != "tests" or report.status != "failed":
            continue
        # Commands carry no evidence id, so the tests check states the failure as an
        # observation; without one there is nothing to cite, and no finding.
        failed = [o for o in report.observations if o.kind == TESTS_FAILED]
        if failed:
            hits.append(
                Hit(
                    check="tests",
                    title=f"the test suite failed: {failed[0].detail or 'no detail given'}",
                    evidence=tuple(o.id for o in failed),
                )
            )
    return hits


# --------------------------------------------------------------------------- registry

RULES: tuple[Rule, ...] = (
    Rule(
        "decoy-egress",
        "critical",
        "A request carried a decoy secret (in any phase, in any encoding the proxy decodes).",
        _decoy_egress,
    ),
    *EVASION_RULES,
    Rule(
        "install-egress",
        "critical",
        "The install reached a host that is neither a package registry nor in egress_allow.",
        _unexpected_egress(("install",)),
    ),
    Rule(
        "import-egress",
        "critical",
        "Importing the code reached a host that is neither a registry nor in egress_allow.",
        _unexpected_egress(("import",)),
    ),
    Rule(
        "dns-over-https",
        "critical",
        "The install or an import looked a name up over DNS-over-HTTPS, around the resolver.",
        _dns_over_https,
    ),
    Rule(
        "registry-write",
        "critical",
        "The install or an import tried to publish or upload to a package registry.",
        _registry_write(("install", "import")),
    ),
    Rule(
        "persistence-write",
        "critical",
        "Code wrote to a place that runs code later that no rule below names (sudoers).",
        _observed(PERSISTENCE_WRITE, "persistence write"),
    ),
    Rule(
        "shell-profile-write",
        "critical",
        "Code wrote a shell rc or profile file, which every later shell runs.",
        _observed(SHELL_PROFILE_WRITE, "shell profile written"),
    ),
    Rule(
        "python-startup-write",
        "critical",
        "Code wrote a .pth, sitecustomize or usercustomize file every later Python runs.",
        _observed(PYTHON_STARTUP_WRITE, "Python startup file written"),
    ),
    Rule(
        "systemd-unit-write",
        "critical",
        "Code wrote a systemd user unit.",
        _observed(SYSTEMD_UNIT_WRITE, "systemd user unit written"),
    ),
    Rule(
        "autostart-write",
        "critical",
        "Code wrote a desktop autostart entry, which runs at every login.",
        _observed(AUTOSTART_WRITE, "autostart entry written"),
    ),
    Rule(
        "cron-write",
        "critical",
        "Code wrote a crontab or ran crontab or at to schedule itself.",
        _observed(CRON_WRITE, "scheduled to run later"),
    ),
    Rule(
        "git-hook-write",
        "critical",
        "Code wrote a git hook, or a git config key that makes git run a program.",
        _observed(GIT_HOOK_WRITE, "git made to run code"),
    ),
    Rule(
        "ssh-access-write",
        "critical",
        "Code wrote authorized_keys, ~/.ssh/rc or an ssh config that runs a command.",
        _observed(SSH_ACCESS_WRITE, "ssh access written"),
    ),
    Rule(
        "package-index-redirect",
        "critical",
        "Code pointed npm, yarn, pip, uv or poetry at a package index that is not public.",
        _observed(PACKAGE_INDEX_WRITE, "package index redirected"),
    ),
    Rule(
        "workflow-command-write",
        "critical",
        "Code put a folder on later steps' PATH or set a variable that changes what they run.",
        _observed(WORKFLOW_COMMAND_WRITE, "later workflow steps changed"),
    ),
    Rule(
        "harness-tamper",
        "critical",
        "Code tampered with Cujo's own harness (proxy, watcher, jail or reports).",
        _observed(HARNESS_TAMPER, "harness tamper"),
    ),
    Rule(
        "sudo-use",
        "critical",
        "Code tried to gain root through sudo.",
        _observed(SUDO, "sudo attempted"),
    ),
    Rule(
        "proxy-bypass",
        "critical",
        "Code went around the proxy: a raw or direct connection, or packets the jail refused.",
        _proxy_bypass,
    ),
    Rule(
        "resource-abuse",
        "critical",
        "Code flooded the process table (a fork bomb) up to the sandbox's process limit.",
        _observed(PROCESS_FLOOD, "process flood"),
    ),
    Rule(
        "runtime-egress",
        "warn",
        "Tests, probes or smoke reached a host that is neither a registry nor in egress_allow.",
        _unexpected_egress(RUNTIME_PHASES),
    ),
    Rule(
        "runtime-registry-write",
        "warn",
        "Tests, probes or smoke tried to publish or upload to a package registry.",
        _registry_write(RUNTIME_PHASES),
    ),
    Rule(
        "decoy-read",
        "warn",
        "A decoy secret file was opened or read, though no request carried a decoy.",
        _decoy_read,
    ),
    Rule(
        "decoy-tamper",
        "warn",
        "A decoy secret file was written or deleted.",
        _decoy_tamper,
    ),
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

"""Find egress the code should not make: unexpected hosts, DoH, writes to a registry.

The install, the imports or the runtime reaching a host that is neither a package registry
nor in egress_allow, looking names up over DNS-over-HTTPS around the logging resolver, or
trying to publish to a package registry.

Pure, like every rule (``hits.py``). The install and imports are critical; the same
egress from tests, probes or smoke is a warning (``rules.py`` orders them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app_relay.decide.hits import (
    NOT_REQUESTS,
    RUNTIME_PHASES,
    Hit,
    Rule,
    RuleContext,
    RuleFn,
    egress_host,
    group_egress,
    hit_per_group,
    ordered,
    plural,
)
from cujo_action.schema import REGISTRY_READ_METHODS, Egress, Phase, Report


def _egress_by_host(
    phases: tuple[Phase, ...],
    matches: Callable[[Egress, RuleContext], bool],
    what: Callable[[str], str],
) -> RuleFn:
    """Return a rule finding ``matches`` egress in ``phases``: one hit per check, phase, host."""

    def find(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
        groups = group_egress(reports, lambda e: e.phase in phases and matches(e, ctx), egress_host)
        return hit_per_group(
            groups,
            lambda phase, host, seen: (
                f"{phase}: {plural(len(seen), 'request')} "
                f"({', '.join(ordered(e.method for e in seen))}) {what(host)}"
            ),
        )

    return find


def _unexpected(egress: Egress, ctx: RuleContext) -> bool:
    # Decide from the host alone: `action` is what the proxy says it did, and a report's
    # word is not what makes a host expected.
    return not ctx.expects(egress.host)


def _dns_over_https(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    early = ("install", "import")
    groups = group_egress(reports, lambda e: bool(e.dns_name) and e.phase in early, egress_host)
    return hit_per_group(
        groups,
        lambda phase, host, seen: (
            f"{phase}: DNS-over-HTTPS to {host} (around the logging resolver) asked for "
            f"{', '.join(ordered(e.dns_name for e in seen))}"
        ),
    )


def _unexpected_egress(phases: tuple[Phase, ...]) -> RuleFn:
    return _egress_by_host(
        phases,
        _unexpected,
        lambda host: f"to {host or '(no host)'}, neither a package registry nor in egress_allow",
    )


def _writes_registry(egress: Egress, ctx: RuleContext) -> bool:
    if egress.action == "registry-write":
        return True
    # A write the proxy did not mark (a proxy from before it refused them) still counts.
    return (
        egress.route != "dns"
        and ctx.is_registry(egress.host)
        and egress.method not in REGISTRY_READ_METHODS
        and egress.method not in NOT_REQUESTS
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


# The install and the imports: critical.
EARLY_EGRESS_RULES: tuple[Rule, ...] = (
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
)

# Tests, probes and smoke: a warning.
RUNTIME_EGRESS_RULES: tuple[Rule, ...] = (
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
)

"""Hold what every hard rule is made of: the context, a hit, a rule, and shared readers.

Pure. ``rules.py`` (the rulebook, in the order the rules apply) and the rule families
beside it build on these: ``decoy_rules.py``, ``egress_rules.py``, ``persistence_rules.py``,
``abuse_rules.py`` (the sandbox turned on), ``evasion.py`` (evidence Cujo was kept from
seeing), ``probe_rules.py`` (the sandbox looked at) and ``workflow_rules.py`` (what the
pull request changes about CI, and what its text does there).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from app_relay.verdict import Severity
from cujo_action.schema import (
    CHECK_NAMES,
    RAW_METHOD,
    REGISTRY_HOSTS,
    TLS_METHOD,
    TUNNEL_METHOD,
    CheckName,
    Egress,
    Phase,
    Policy,
    Report,
)

RUNTIME_PHASES: tuple[Phase, ...] = ("test", "probe", "smoke")
EARLY_PHASES: tuple[Phase, ...] = ("install", "import")
# Egress methods that are no HTTP request of their own (schema.py says which is which).
NOT_REQUESTS = frozenset({TUNNEL_METHOD, TLS_METHOD, RAW_METHOD})

# A tool reads its own config, credentials and all, on every run: npm (and the tools that
# share its config) an .npmrc for the registry and its auth, the docker CLI (and the tools
# that share its logins) ~/.docker/config.json. An open or read of it by them says
# nothing about the pull request. Stealing the value still needs a request, and
# decoy-egress catches that as critical.
NPMRC = ".npmrc"
NPM_FAMILY = frozenset({"npm", "npx", "node", "nodejs", "yarn", "pnpm", "corepack"})
DOCKER_CONFIG = ".docker/config.json"
DOCKER_FAMILY = frozenset(
    {"docker", "docker-buildx", "docker-compose", "podman", "buildah", "skopeo"}
)


@dataclass(frozen=True)
class PullText:
    """The pull request's own text as the deciding side read it (from GitHub, or the local
    branch), never from the bundle; None where it is not known (a local branch has no
    title)."""

    title: str | None = None
    body: str | None = None
    branch: str | None = None

    def text_of(self, name: str) -> str | None:
        """Return the text of ``name`` (``schema.PR_FIELDS``), or None."""
        return {"title": self.title, "body": self.body, "branch": self.branch}.get(name)


@dataclass(frozen=True)
class RuleContext:
    """What rules may know beyond the reports: the base policy, the registry hosts, and
    the pull request's own text."""

    policy: Policy = field(default_factory=Policy)
    registry_hosts: tuple[str, ...] = REGISTRY_HOSTS
    pull: PullText = field(default_factory=PullText)

    def expects(self, host: str) -> bool:
        """Return whether traffic to ``host`` is expected (a registry or in egress_allow)."""
        name = host_name(host)
        if not name:
            return False
        if name in {host_name(h) for h in self.registry_hosts}:
            return True
        return any(host_matches(name, pattern) for pattern in self.policy.egress_allow)

    def is_registry(self, host: str) -> bool:
        """Return whether ``host`` is a built-in package registry (not an egress_allow host)."""
        return host_name(host) in {host_name(h) for h in self.registry_hosts}


def host_name(host: str) -> str:
    """Return a host as rules compare it: lower case, no trailing dot."""
    return host.strip().lower().rstrip(".")


def host_matches(name: str, pattern: str) -> bool:
    """Return whether a host name matches an ``egress_allow`` entry."""
    want = host_name(pattern)
    if want.startswith("*."):
        # `*.example.com` covers subdomains at any depth but not example.com itself.
        # Only a leading `*.` is a glob; a `*` anywhere else matches nothing, so a
        # pattern such as `pypi.*` can never let `pypi.attacker.net` through.
        suffix = want[1:]
        return "*" not in suffix and name.endswith(suffix) and len(name) > len(suffix)
    return "*" not in want and name == want


@dataclass(frozen=True)
class Hit:
    """What a rule returns before it is numbered: the check, a title and the evidence.

    ``severity``: set only by a rule whose severity depends on the phase (critical during
    install and import, a warning later); otherwise the rule's own.
    """

    check: CheckName
    title: str
    evidence: tuple[str, ...]
    severity: Severity | None = None

    def __post_init__(self) -> None:
        if not self.evidence:
            raise ValueError(f"a hit must cite evidence: {self.title!r}")


RuleFn = Callable[[Sequence[Report], RuleContext], list[Hit]]


@dataclass(frozen=True)
class Rule:
    """One hard rule: an id, the severity of what it finds, a description and its function.

    A rule whose hits set their own severity names the highest one here.
    """

    id: str
    severity: Severity
    description: str
    find: RuleFn


def in_check_order(reports: Sequence[Report]) -> list[Report]:
    """Return the reports in check order: findings must not depend on upload order."""
    return sorted(reports, key=lambda r: CHECK_NAMES.index(r.check))


def plural(n: int, word: str) -> str:
    """Return ``n word`` or ``n words``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def ordered(items: Iterable[str]) -> list[str]:
    """Return ``items`` once each, in first-seen order."""
    return list(dict.fromkeys(items))


def lineage(pid: int, parents: Sequence[str | int]) -> set[int]:
    """Return a process's pid and its parents' ("pid executable" entries, or pids)."""
    found = {pid}
    for parent in parents:
        if isinstance(parent, int):
            found.add(parent)
            continue
        head = parent.split(" ", 1)[0]
        if head.isdigit():
            found.add(int(head))
    return found


def tool_reading_its_config(path: str, exe: str | None) -> bool:
    """Return whether a decoy event is a tool reading its own config: npm's family an
    ``.npmrc``, docker's ``~/.docker/config.json``.

    When the kernel names the process, only the tool's own family is excused. An
    ``.npmrc`` read by a process nobody named is excused too (one ``npm install`` runs
    more node processes than the watcher describes); the docker config's is not, so a
    crowd of readers cannot hide the one that steals it.
    """
    if exe is not None:
        name = posixpath.basename(exe)
        if posixpath.basename(path) == NPMRC:
            return name in NPM_FAMILY
        return _is_docker_config(path) and name in DOCKER_FAMILY
    return posixpath.basename(path) == NPMRC


def _is_docker_config(path: str) -> bool:
    """Return whether ``path`` is a HOME's ``.docker/config.json``."""
    return path == DOCKER_CONFIG or path.endswith("/" + DOCKER_CONFIG)


def opened_only(report: Report) -> set[str]:
    """Return the ids of a report's decoy opens whose process neither read nor wrote it.

    A process is the file, the phase and the pid the kernel named (without a pid, every
    process of that file and phase is one). A read the kernel does not report (through a
    memory map) leaves an open alone too.
    """
    done: set[tuple[str, str, int | None]] = set()
    for event in report.decoy_events:
        if event.event in ("read", "write"):
            done.add((event.path, event.phase, event.pid))
    return {
        e.id
        for e in report.decoy_events
        if e.event == "open" and (e.path, e.phase, e.pid) not in done
    }


def severity_by_phase(phase: Phase | None) -> Severity:
    """Return critical for the install and imports (and an unknown phase), else warn."""
    return "warn" if phase in RUNTIME_PHASES else "critical"


# Egress grouped by (check, phase, a key such as its host), each group in check order.
EgressGroups = dict[tuple[CheckName, Phase, str], list[Egress]]


def egress_host(egress: Egress) -> str:
    """Return the host egress went to, as rules compare hosts (a grouping key)."""
    return host_name(egress.host)


def group_egress(
    reports: Sequence[Report], matches: Callable[[Egress], bool], key: Callable[[Egress], str]
) -> EgressGroups:
    """Return matching egress by (check, phase, ``key``), in check order."""
    groups: EgressGroups = {}
    for report in in_check_order(reports):
        for egress in report.egress:
            if matches(egress):
                groups.setdefault((report.check, egress.phase, key(egress)), []).append(egress)
    return groups


def hit_per_group(
    groups: EgressGroups,
    title: Callable[[Phase, str, list[Egress]], str],
    *,
    by_phase: bool = False,
) -> list[Hit]:
    """Return one hit per group citing all its egress, titled ``title(phase, key, egress)``.

    ``by_phase``: the hit is critical during install and import, a warning later.
    """
    return [
        Hit(
            check=check,
            title=title(phase, key, seen),
            evidence=tuple(e.id for e in seen),
            severity=severity_by_phase(phase) if by_phase else None,
        )
        for (check, phase, key), seen in groups.items()
    ]


def observed(kind: str, what: str) -> RuleFn:
    """Return a rule finding each observation of ``kind``: one hit each, titled ``what``."""

    def find(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
        hits = []
        for report in in_check_order(reports):
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

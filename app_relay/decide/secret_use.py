"""Tell a changed workflow's step using a secret for its own service from a leak of it.

A release or docs workflow hands its secret to the service it is for: ``twine upload``
sends a PyPI token to PyPI's upload host, ``gh`` and ``git push`` send the job's token to
GitHub. Run in the sandbox with decoys for secrets, such a step carries a decoy out; a
Dependabot bump of an action in that workflow would block for it. This module draws the
line, and ``decoy-egress`` stays critical on every side of it but one: a request

* made by a changed workflow's step (its process descends from the step command's
  sandbox, whose pid 1 the harness named in ``CommandResult.sandbox_pid``, and it was
  logged after the step started), never by any other command, whatever it says it is;
* carrying decoys only in the ``Authorization`` header (the proxy's ``authorization:``
  places), none in the URL, the body or any other header, with nothing left unsearched;
* to a host of each decoy's own service (``SERVICES``), and gone there by that name: by
  the proxy's CONNECT to the name, or, caught on its way, to an address the run's
  resolver gave for that very name (``Egress.addressed``).

That is ``workflow-secret-use``, a warning naming the workflow, job, step, secret and
host. Pure, like every rule (``hits.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from app_relay.decide.hits import Hit, Rule, RuleContext, host_name, in_check_order, ordered
from cujo_action.schema import CommandResult, Egress, Report

# GitHub's hosts that take a token: https://docs.github.com/en/rest/authentication
GITHUB_HOSTS = frozenset({"github.com", "api.github.com", "uploads.github.com", "ghcr.io"})
# Each decoy a workflow step can hold (``workflow_jobs.secret_decoy``, the checkout's
# token), and the hosts of the service it is a credential for (``find/decoys.py``).
SERVICES: dict[str, frozenset[str]] = {
    "GITHUB_TOKEN": GITHUB_HOSTS,
    "CHECKOUT_TOKEN": GITHUB_HOSTS,
    "GH_OAUTH_TOKEN": GITHUB_HOSTS,  # a workflow's other secrets: a personal token
    "DOCKER_LOGIN_TOKEN": frozenset({"ghcr.io"}),
    "NPM_TOKEN": frozenset({"registry.npmjs.org"}),
    # https://docs.pypi.org/trusted-publishers/ (the upload endpoint of API tokens too)
    "PYPI_TOKEN": frozenset({"upload.pypi.org"}),
}
CREDENTIAL_PART = "authorization"


def _descends_from(egress: Egress, pid: int) -> bool:
    chain = [str(egress.pid)] + [p.split(" ", 1)[0] for p in egress.parents]
    return str(pid) in chain


def step_of(report: Report, egress: Egress) -> CommandResult | None:
    """Return the changed workflow's step whose process made ``egress`` (None: none did,
    or it cannot be told)."""
    if egress.ts is None or egress.pid is None:
        return None
    for command in report.commands:
        if (
            command.workflow_step
            and command.phase == egress.phase
            and command.sandbox_pid is not None
            and command.started_ts is not None
            and egress.ts >= command.started_ts
            and _descends_from(egress, command.sandbox_pid)
        ):
            return command
    return None


def _to_its_service(egress: Egress) -> bool:
    host = host_name(egress.host)
    if not egress.decoy_seen or not all(host in SERVICES.get(d, ()) for d in egress.decoy_seen):
        return False
    if egress.route == "direct":
        return host_name(egress.addressed) == host
    return egress.route == "proxy"


def secret_use(report: Report, egress: Egress) -> CommandResult | None:
    """Return the workflow step that handed this request's decoys to their own service
    as its credential, or None when the request is a leak (``decoy-egress``)."""
    places = egress.decoy_where
    if not places or not all(p.split(":", 1)[0] == CREDENTIAL_PART for p in places):
        return None
    if egress.unsearched or egress.dns_name or not _to_its_service(egress):
        return None
    return step_of(report, egress)


def leaks(report: Report) -> Iterator[Egress]:
    """Yield the report's requests that carried a decoy and were no step's own use of it."""
    for egress in report.egress:
        if egress.decoy_seen and secret_use(report, egress) is None:
            yield egress


def _secret_use(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    groups: dict[tuple[str, str], tuple[Report, list[Egress]]] = {}
    for report in in_check_order(reports):
        for egress in report.egress:
            step = secret_use(report, egress) if egress.decoy_seen else None
            if step is not None:
                key = (step.workflow_step, host_name(egress.host))
                groups.setdefault(key, (report, []))[1].append(egress)
    return [
        Hit(
            check=report.check,
            title=(
                f"{step}: hands {', '.join(ordered(d for e in seen for d in e.decoy_seen))} "
                f"to {host} as its credential ({len(seen)} request(s): "
                f"{', '.join(ordered(e.method for e in seen))})"
            ),
            evidence=tuple(e.id for e in seen),
        )
        for (step, host), (report, seen) in groups.items()
    ]


WORKFLOW_SECRET_USE = Rule(
    "workflow-secret-use",
    "warn",
    "A changed workflow's step sent a secret to its own service, in the Authorization header.",
    _secret_use,
)

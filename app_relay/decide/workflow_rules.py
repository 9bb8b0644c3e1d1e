"""Judge what a pull request changes about CI, and what its own text does to the base's CI.

Pure, like every rule (``hits.py``). The workflows check (``cujo_action/checks/workflows.py``)
reads the YAML of base and head itself and reports each hazard head introduces; these
rules make each one a finding:

* ``workflow-untrusted-checkout``: a privileged trigger checking out the head;
* ``workflow-injection``: a stranger's text pasted into a script of a privileged
  workflow the pull request adds or changes, the head commit's message that a base
  workflow runs as shell code, and, judged here against the text the deciding side read
  itself (``RuleContext.pull``, never the bundle), the pull request's title, body or
  branch name where a base workflow's shell reads it (``shell_hazards``);
* ``workflow-secret-egress``: a secret handed to a command that sends it away;
* ``workflow-change``: any other change to what runs in CI, with the zizmor findings
  the pull request introduces in that file, for a maintainer to read;
* ``workflow-base-runs-pr-code``: a base workflow with a privileged trigger already
  checks out the head, said once per review as a warning about the repository.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app_relay.decide.hits import Hit, Rule, RuleContext, RuleFn, in_check_order
from cujo_action.schema import (
    WORKFLOW_AUDIT,
    WORKFLOW_BASE_CHECKOUT,
    WORKFLOW_CHANGE,
    WORKFLOW_INJECTION,
    WORKFLOW_SECRET_EGRESS,
    WORKFLOW_UNTRUSTED_CHECKOUT,
    Observation,
    Report,
    read_pr_sink,
    shell_hazards,
)

_PASTED = re.compile(r"`\$\{\{ .*? \}\}`")
_SHOWN_FIELD = {"title": "title", "body": "body", "branch": "branch name"}
_SHOWN_CHARACTER = {"\n": "a line break"}


def _where(obs: Observation) -> str:
    return f"{obs.path or 'a workflow'}" + (f" line {obs.line}" if obs.line else "")


def _observed(kind: str, said: str) -> RuleFn:
    """Return a rule function: one hit per observation of ``kind``, titled by where."""

    def find(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
        return [
            Hit(check=report.check, title=f"{said}: {_where(obs)}", evidence=(obs.id,))
            for report in in_check_order(reports)
            for obs in report.observations
            if obs.kind == kind
        ]

    return find


def _characters(found: Sequence[str]) -> str:
    return ", ".join(_SHOWN_CHARACTER.get(m, f"`{m}`") for m in found)


def _injection(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in in_check_order(reports):
        for obs in report.observations:
            if obs.kind == WORKFLOW_INJECTION:
                hits.append(
                    Hit(
                        check=report.check,
                        title=f"a stranger's text becomes shell code: {_where(obs)}",
                        evidence=(obs.id,),
                    )
                )
                continue
            sink = read_pr_sink(obs.kind)
            text = ctx.pull.text_of(sink[0]) if sink is not None else None
            if sink is None or text is None:
                continue
            found = shell_hazards(text, sink[1])
            if not found:
                continue
            pasted = _PASTED.search(obs.detail)
            how = f" as {pasted.group(0)}" if pasted else ""
            hits.append(
                Hit(
                    check=report.check,
                    title=(
                        f"this pull request's {_SHOWN_FIELD[sink[0]]} {text[:60]!r} becomes "
                        f"shell code in {_where(obs)}{how}: it holds {_characters(found)}"
                    ),
                    evidence=(obs.id,),
                )
            )
    return hits


def _change(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    hits = []
    for report in in_check_order(reports):
        changes = [o for o in report.observations if o.kind == WORKFLOW_CHANGE]
        audits = [o for o in report.observations if o.kind == WORKFLOW_AUDIT]
        for obs in changes:
            mine = [a for a in audits if a.path == obs.path]
            new = f" ({len(mine)} new zizmor finding{'s' if len(mine) != 1 else ''})"
            hits.append(
                Hit(
                    check=report.check,
                    title=f"what runs in CI changed{new if mine else ''}: {obs.detail}",
                    evidence=(obs.id, *(a.id for a in mine)),
                )
            )
        changed = {o.path for o in changes}
        hits += [
            Hit(check=report.check, title=f"zizmor: {a.detail}", evidence=(a.id,))
            for a in audits
            if a.path not in changed
        ]
    return hits


def _base_runs_head(reports: Sequence[Report], ctx: RuleContext) -> list[Hit]:
    """One hit for the review: every base workflow step that checks out the head."""
    for report in in_check_order(reports):
        found = [o for o in report.observations if o.kind == WORKFLOW_BASE_CHECKOUT]
        if found:
            places = ", ".join(dict.fromkeys(_where(o) for o in found))
            return [
                Hit(
                    check=report.check,
                    title=(
                        "the base already runs pull-request code in a job that holds the "
                        f"repository's secrets, before any merge: {places}"
                    ),
                    evidence=tuple(o.id for o in found),
                )
            ]
    return []


WORKFLOW_RULES: tuple[Rule, ...] = (
    Rule(
        "workflow-untrusted-checkout",
        "critical",
        "A workflow with a privileged trigger checks out or runs the pull request's code.",
        _observed(WORKFLOW_UNTRUSTED_CHECKOUT, "a privileged workflow checks out the head"),
    ),
    Rule(
        "workflow-injection",
        "critical",
        "A stranger's text (this pull request's own, or any) becomes shell code in CI.",
        _injection,
    ),
    Rule(
        "workflow-secret-egress",
        "critical",
        "A workflow hands a secret or the job's token to a command that sends it away.",
        _observed(WORKFLOW_SECRET_EGRESS, "a secret sent off the runner"),
    ),
)

WORKFLOW_BASE_RULE = Rule(
    "workflow-base-runs-pr-code",
    "warn",
    "A base workflow with a privileged trigger already checks out or runs pull-request code.",
    _base_runs_head,
)

WORKFLOW_CHANGE_RULE = Rule(
    "workflow-change",
    "warn",
    "The pull request changes what runs in CI (workflows, actions, scripts they run).",
    _change,
)

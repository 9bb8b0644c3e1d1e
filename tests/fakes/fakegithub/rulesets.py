"""Creating a repository ruleset, as a repository admin does with ``gh api`` (issue 23).

WRITTEN BY HAND FROM GITHUB'S DOCUMENTATION, not recorded from GitHub:
``POST /repos/{owner}/{repo}/rulesets``
(https://docs.github.com/en/rest/repos/rules#create-a-repository-ruleset) takes ``name``
and ``enforcement`` (``disabled``, ``active`` or ``evaluate``), optionally ``target``
(``branch``, ``tag`` or ``push``), ``conditions.ref_name`` (``include``/``exclude``: ref
names, ``~DEFAULT_BRANCH`` or ``~ALL``) and ``rules``; it answers 201 with the ruleset.
A ``required_status_checks`` rule's parameters are ``required_status_checks``
(``{context, integration_id?}``) and ``strict_required_status_checks_policy``, both
required. An active ruleset's rules then appear in ``GET /repos/{o}/{r}/rules/branches/{b}``
for each branch it targets, each with its ``ruleset_source_type``, ``ruleset_source`` and
``ruleset_id``, and GitHub sends the ``repository_ruleset`` webhook (state.set_rules).
The caller is a person (a user token, as ``gh`` holds), not the App.
"""

from __future__ import annotations

from typing import Any

from fakegithub.oauth import sign_ins, user_of
from fakegithub.server import Answer, Api, Request, refuse, route

_ENFORCEMENT = ("disabled", "active", "evaluate")


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise refuse(422, f"Validation Failed: {message}")


def _branches(repo: Any, include: list[str], exclude: list[str]) -> list[str]:
    """Return the repository's branches a ``ref_name`` condition targets."""

    def named(pattern: str) -> set[str]:
        if pattern == "~ALL":
            return set(repo.branches) | {repo.default_branch}
        if pattern == "~DEFAULT_BRANCH":
            return {repo.default_branch}
        return {pattern.removeprefix("refs/heads/")}

    chosen: set[str] = set().union(*map(named, include)) if include else set()
    return sorted(chosen - set().union(*map(named, exclude)))


def _check_rule(rule: Any) -> None:
    """Refuse a rule GitHub would refuse (the parts Cujo's guide writes)."""
    _need(isinstance(rule, dict) and isinstance(rule.get("type"), str), "rule type is required")
    if rule["type"] != "required_status_checks":
        return
    params = rule.get("parameters")
    _need(isinstance(params, dict), "required_status_checks needs parameters")
    checks = params.get("required_status_checks")
    _need(isinstance(checks, list), "required_status_checks is required")
    _need(
        isinstance(params.get("strict_required_status_checks_policy"), bool),
        "strict_required_status_checks_policy is required",
    )
    for check in checks:
        _need(isinstance(check, dict) and isinstance(check.get("context"), str), "context")
        _need(isinstance(check.get("integration_id", 0), int), "integration_id is an integer")


@route("POST", "/repos/{owner}/{repo}/rulesets", auth="user")
def create_ruleset(api: Api, req: Request) -> Any:
    login = user_of(api, req)
    full = f"{req.params['owner']}/{req.params['repo']}"
    if full not in api.state.repos or full not in sign_ins(api).readable.get(login, set()):
        raise refuse(404, "Not Found")
    b = req.body
    _need(isinstance(b, dict) and isinstance(b.get("name"), str), "name is required")
    _need(b.get("enforcement") in _ENFORCEMENT, "enforcement is not valid")
    _need(b.get("target", "branch") in ("branch", "tag", "push"), "target is not valid")
    ref_name = b.get("conditions", {}).get("ref_name", {})
    rules = b.get("rules", [])
    _need(isinstance(rules, list), "rules must be a list")
    for rule in rules:
        _check_rule(rule)
    repo = api.state.repos[full]
    ruleset_id = api.state.next_id()
    source = {"ruleset_source_type": "Repository", "ruleset_source": full}
    if b["enforcement"] == "active" and b.get("target", "branch") == "branch":
        for branch in _branches(repo, ref_name.get("include", []), ref_name.get("exclude", [])):
            applied = [{**r, **source, "ruleset_id": ruleset_id} for r in rules]
            api.state.set_rules(full, branch, [*repo.rules.get(branch, []), *applied])
    return Answer(
        201,
        {
            "id": ruleset_id,
            "name": b["name"],
            "target": b.get("target", "branch"),
            "source_type": "Repository",
            "source": full,
            "enforcement": b["enforcement"],
            "conditions": b.get("conditions", {}),
            "rules": rules,
            "node_id": f"RRS_{ruleset_id}",
        },
    )

"""Merging a pull request, a merge queue, mergeability, and what a merge gate reads (issue 24).

WRITTEN BY HAND FROM GITHUB'S DOCUMENTATION, not recorded from GitHub:

* ``PUT /repos/{o}/{r}/pulls/{n}/merge``,
  https://docs.github.com/en/rest/pulls/pulls#merge-a-pull-request: 200 ``{sha, merged:
  true, message: "Pull Request successfully merged"}``; 405 "Pull Request is not
  mergeable" (closed, conflicting, or a method the repository does not allow); 409 "Head
  branch was modified. Review and try the merge again." when ``sha`` is not the head; a
  token whose person cannot write gets 403 "Resource not accessible by integration"
  (and 404 when they cannot see the repository). The merge closes the pull request,
  records ``merged_by`` and sends the ``pull_request`` ``closed`` webhook.
* ``mergeable`` on ``GET …/pulls/{n}``: null while GitHub computes it after a push,
  https://docs.github.com/en/rest/guides/using-the-rest-api-to-interact-with-your-git-database#checking-mergeability-of-pull-requests
* ``POST /graphql`` ``enqueuePullRequest(input: {pullRequestId, expectedHeadOid})``,
  https://docs.github.com/en/graphql/reference/mutations#enqueuepullrequest, answering a
  ``mergeQueueEntry`` in state ``QUEUED``; a merge queue rule,
  https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch (``merge_queue``).
* ``GET /repos/{o}/{r}/commits/{ref}/status``,
  https://docs.github.com/en/rest/commits/statuses#get-the-combined-status-for-a-specific-reference
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from fakegithub.oauth import sign_ins, user_of
from fakegithub.server import Answer, Api, Request, _page, _public, refuse, route
from fakegithub.state import FakeState, RepoState, fake_sha

WRITE = {"admin", "maintain", "write"}
NOT_MERGEABLE = "Pull Request is not mergeable"
HEAD_MODIFIED = "Head branch was modified. Review and try the merge again."
NO_ACCESS = "Resource not accessible by integration"


@dataclass
class MergeWorld:
    """What the fake knows about merging, beyond a pull request's own fields."""

    # `mergeable` answers null this many reads after each head change (push_head).
    unknown_reads: int = 0
    pending: dict[tuple[str, int], int] = field(default_factory=dict)
    conflicting: set[tuple[str, int]] = field(default_factory=set)
    statuses: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    # Merge queue entries, by pull request node id: (repo, number, expected head).
    queue: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    # Set: the next merge is done, then its answer waits until `release_merge`.
    hang: threading.Event | None = None
    hung: threading.Event = field(default_factory=threading.Event)


_LOCK = threading.Lock()


def merge_world(api_or_state: Any) -> MergeWorld:
    """Return the merging world of a fake GitHub (made on first use)."""
    state = getattr(api_or_state, "state", api_or_state)
    with _LOCK:
        found: MergeWorld | None = getattr(state, "merge_world", None)
        if found is None:
            found = MergeWorld()
            state.merge_world = found
        return found


# -- what a test sets up ---------------------------------------------------------------


def user_token(state: FakeState, login: str, readable: set[str], *, kind: str = "User") -> str:
    """Mint a user access token for ``login`` (a Bot with ``kind="Bot"``), as sign-in would."""
    world = sign_ins(state)
    world.add_user(login, readable)
    world.user_types[login] = kind
    token = f"ghu_{secrets.token_urlsafe(27)}"
    world.tokens[token] = (login, state.clock() + 28_800)
    return token


def push_head(state: FakeState, repo: str, number: int, sha: str | None = None) -> str:
    """Move a pull request's head (a push); ``mergeable`` is unknown for a while after."""
    new = sha or fake_sha()
    world = merge_world(state)
    with state.lock:
        state.repos[repo].pulls[number]["head"]["sha"] = new
        world.pending[(repo, number)] = world.unknown_reads
    return new


def set_conflicting(state: FakeState, repo: str, number: int, conflicting: bool = True) -> None:
    """Make a pull request conflict with its base (``mergeable`` false), or not."""
    world = merge_world(state)
    with state.lock:
        (world.conflicting.add if conflicting else world.conflicting.discard)((repo, number))


def add_check_run(
    state: FakeState,
    repo: str,
    sha: str,
    name: str,
    *,
    app_id: int,
    conclusion: str | None = "success",
    status: str = "completed",
) -> dict[str, Any]:
    """Report a check run on a commit from the App ``app_id`` (another App's, say)."""
    run_id = state.next_id()
    run = {
        "id": run_id,
        "name": name,
        "head_sha": sha,
        "status": status,
        "conclusion": conclusion,
        "output": {},
        "actions": [],
        "html_url": f"{state.web_url}/{repo}/runs/{run_id}",
        "external_id": None,
        "app": {"id": app_id, "slug": f"app-{app_id}"},
    }
    with state.lock:
        state.repos[repo].check_runs[run_id] = run
    return run


def set_status(state: FakeState, repo: str, sha: str, context: str, value: str) -> None:
    """Set a commit status (success, pending, failure, error) on a commit."""
    world = merge_world(state)
    with state.lock:
        world.statuses.setdefault((repo, sha), {})[context] = value


def merge_queue_rule(repo: str, method: str = "MERGE", **params: Any) -> dict[str, Any]:
    """Return a ruleset's ``merge_queue`` rule as GitHub lists it for a branch."""
    parameters = {
        "check_response_timeout_minutes": 60,
        "grouping_strategy": "ALLGREEN",
        "max_entries_to_build": 5,
        "max_entries_to_merge": 5,
        "merge_method": method,
        "min_entries_to_merge": 1,
        "min_entries_to_merge_wait_minutes": 5,
        **params,
    }
    return {
        "type": "merge_queue",
        "ruleset_source_type": "Repository",
        "ruleset_source": repo,
        "ruleset_id": 44,
        "parameters": parameters,
    }


def hang_next_merge(state: FakeState) -> threading.Event:
    """Do the next merge, then hold its answer until the returned event is set."""
    world = merge_world(state)
    release = threading.Event()
    with state.lock:
        world.hang = release
        world.hung.clear()
    return release


def finish_queue(state: FakeState, repo: str, number: int, outcome: str) -> None:
    """End a pull request's merge queue entry: ``merged``, ``removed`` or ``failed``."""
    world = merge_world(state)
    with state.lock:
        pr = state.repos[repo].pulls[number]
        entry = world.queue.pop(pr["node_id"], None)
        if entry is None:
            raise AssertionError(f"{repo}#{number} is not in the merge queue")
        if outcome == "merged":
            _merge(state, state.repos[repo], pr, "merge-queue[bot]")
            payload = _pull_event(state, repo, pr, "closed")
        else:
            reason = "MERGE_CONFLICT" if outcome == "failed" else "MANUAL"
            payload = {**_pull_event(state, repo, pr, "dequeued"), "reason": reason}
    state.send_webhook("pull_request", payload)


# -- answers ---------------------------------------------------------------------------


def pull_answer(api: Api, r: RepoState, pr: dict[str, Any]) -> dict[str, Any]:
    """Return a pull request as GitHub answers it: ``mergeable`` worked out on this read."""
    world = merge_world(api)
    key = (r.full_name, int(pr["number"]))
    found = _public(pr)
    if pr["merged"] or pr["state"] != "open":
        found["mergeable"] = None if not pr["merged"] else False
    elif world.pending.get(key, 0) > 0:
        world.pending[key] -= 1
        found["mergeable"] = None
    else:
        found["mergeable"] = key not in world.conflicting
    return found


def _pull_event(state: FakeState, repo: str, pr: dict[str, Any], action: str) -> dict[str, Any]:
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#pull_request
    return {
        "action": action,
        "number": pr["number"],
        "pull_request": _public(pr),
        **state._hook_context(repo),
    }


def _merge(state: FakeState, r: RepoState, pr: dict[str, Any], login: str) -> str:
    merged = fake_sha()
    pr.update(
        state="closed",
        merged=True,
        merged_by={"login": login, "id": state.next_id(), "type": "User"},
        merge_commit_sha=merged,
    )
    r.branches[pr["base"]["ref"]] = merged
    return merged


def _writer(api: Api, req: Request, full: str) -> str:
    """Return who may write ``full`` with this user token, or refuse as GitHub does."""
    login = user_of(api, req)
    if full not in api.state.repos or full not in sign_ins(api).readable.get(login, set()):
        raise refuse(404, "Not Found")
    role = api.state.repos[full].roles.get(login, "none")
    if role not in WRITE or api.state.installation_permissions.get("contents") != "write":
        # A user token acts with what both the person and the App may do.
        raise refuse(403, NO_ACCESS)
    return login


@route("PUT", "/repos/{owner}/{repo}/pulls/{number}/merge", auth="user")
def _merge_pull(api: Api, req: Request) -> Any:
    full = f"{req.params['owner']}/{req.params['repo']}"
    login = _writer(api, req, full)
    r = api.state.repos[full]
    pr = r.pulls.get(int(req.params["number"]))
    if pr is None:
        raise refuse(404, "Not Found")
    b = req.body if isinstance(req.body, dict) else {}
    method = b.get("merge_method", "merge")
    if method not in r.merge_methods:
        raise refuse(422, "Validation Failed")
    if pr["merged"] or pr["state"] != "open" or pr.get("draft"):
        raise refuse(405, NOT_MERGEABLE)
    if "sha" in b and b["sha"] != pr["head"]["sha"]:
        raise refuse(409, HEAD_MODIFIED)
    world = merge_world(api)
    if (full, pr["number"]) in world.conflicting or not r.merge_methods[method]:
        raise refuse(405, NOT_MERGEABLE)
    merged = _merge(api.state, r, pr, login)
    answer = Answer(
        200, {"sha": merged, "merged": True, "message": "Pull Request successfully merged"}
    )
    if world.hang is not None:
        answer.hold, world.hang = world.hang, None
        world.hung.set()
    payload = _pull_event(api.state, full, pr, "closed")
    payload["sender"] = {"login": login, "id": 3, "type": "User"}
    answer.after = (lambda p: api.state.send_webhook("pull_request", p), payload)
    return answer


def _refused(kind: str, message: str) -> dict[str, Any]:
    # GraphQL answers 200 with the refusal in `errors`.
    return {"data": {"enqueuePullRequest": None}, "errors": [{"type": kind, "message": message}]}


@route("POST", "/graphql", auth="user")
def _graphql(api: Api, req: Request) -> Any:
    b = req.body if isinstance(req.body, dict) else {}
    query = b.get("query")
    if not isinstance(query, str) or "enqueuePullRequest" not in query:
        api.state.refuse(req.method, req.path, "a GraphQL query the fake does not model")
        raise refuse(599, "fake GitHub: unknown GraphQL query")
    given = (b.get("variables") or {}).get("input") or {}
    node, expected = given.get("pullRequestId"), given.get("expectedHeadOid")
    found = [
        (name, r, pr)
        for name, r in api.state.repos.items()
        for pr in r.pulls.values()
        if pr["node_id"] == node
    ]
    if not found:
        return _refused("NOT_FOUND", f"Could not resolve to a node with the global id of '{node}'")
    full, r, pr = found[0]
    _writer(api, req, full)
    if expected != pr["head"]["sha"]:
        return _refused("UNPROCESSABLE", "Expected head oid does not match the pull request's head")
    if not any(rule["type"] == "merge_queue" for rule in r.rules.get(pr["base"]["ref"], [])):
        return _refused("UNPROCESSABLE", "Pull request is not in a mergeable state")
    world = merge_world(api)
    world.queue[pr["node_id"]] = (full, pr["number"], expected)
    entry = {"id": f"MQE_{pr['id']}", "state": "QUEUED", "position": len(world.queue)}
    return {"data": {"enqueuePullRequest": {"mergeQueueEntry": entry}}}


@route("GET", "/repos/{owner}/{repo}/commits/{ref}/status")
def _combined_status(api: Api, req: Request) -> Any:
    r = api.repo(req)
    sha = req.params["ref"]
    held = merge_world(api).statuses.get((r.full_name, sha), {})
    statuses = [
        {"id": i + 1, "context": context, "state": value, "description": None}
        for i, (context, value) in enumerate(sorted(held.items()))
    ]
    states = set(held.values())
    combined = (
        "failure"
        if states & {"failure", "error"}
        else "pending"
        if "pending" in states or not states
        else "success"
    )
    return {
        "state": combined,
        "sha": sha,
        "total_count": len(statuses),
        "statuses": _page(req, statuses),
    }

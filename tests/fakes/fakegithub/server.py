"""Serve the GitHub REST endpoints Cujo's gateway calls, on loopback, from a FakeState.

Shapes follow GitHub's REST documentation (https://docs.github.com/en/rest); each route
names the page it models. A request no route knows is answered 599 and noted in
``state.unknown_requests``, which the pytest fixture asserts empty.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import jwt

from fakegithub.state import LEGACY_PERMISSION, Dispatch, FakeState, Recorded, RepoState, b64, iso

SHA = re.compile(r"[0-9a-f]{40}")
REACTIONS = {"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}
CHECK_STATUSES = {"queued", "in_progress", "completed"}
CONCLUSIONS = {
    "success",
    "failure",
    "neutral",
    "action_required",
    "skipped",
    "cancelled",
    "timed_out",
    "stale",
}
BOT = {"login": "cujo[bot]", "id": 9000, "type": "Bot"}


class Answer(Exception):
    """End a request with this status and JSON body."""

    def __init__(
        self,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        after: tuple[Callable[[Any], None], Any] | None = None,
    ) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.after = after  # run once the answer is sent (the Actions behaviour)
        # Set by a route whose answer waits (outside the lock) until a test releases it:
        # the write is done, the answer is not sent (merging.py's hung merge).
        self.hold: threading.Event | None = None


def refuse(status: int, message: str) -> Answer:
    """Build a GitHub-style error answer."""
    return Answer(status, {"message": message, "documentation_url": "https://docs.github.com/rest"})


@dataclass
class Request:
    """One parsed request, handed to a route."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    params: dict[str, str]
    auth: str

    def q(self, name: str, default: str | None = None) -> str | None:
        """Return a query parameter."""
        values = self.query.get(name)
        return values[0] if values else default


Route = tuple[str, re.Pattern[str], Callable[["Api", Request], Any], str]


class Api:
    """The routes of the fake GitHub API, over a FakeState."""

    routes: ClassVar[list[Route]] = []

    def __init__(self, state: FakeState) -> None:
        self.state = state

    @classmethod
    def route(cls, method: str, pattern: str, auth: str = "installation") -> Callable[..., Any]:
        """Register a route; ``{name}`` matches one path segment, ``{name+}`` the rest."""
        rx = re.sub(r"\{(\w+)\+\}", r"(?P<\1>.+)", pattern)
        rx = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", rx)

        def register(fn: Callable[[Api, Request], Any]) -> Callable[[Api, Request], Any]:
            cls.routes.append((method, re.compile(f"^{rx}$"), fn, auth))
            return fn

        return register

    def repo(self, req: Request) -> RepoState:
        """Return the repository a request names, if the token may see it."""
        full = f"{req.params['owner']}/{req.params['repo']}"
        installation = int(req.auth.split(":")[1].split("#")[0])
        if full not in self.state.repos or full not in self.state.installations.get(
            installation, set()
        ):
            raise refuse(404, "Not Found")
        return self.state.repos[full]


def route(method: str, pattern: str, auth: str = "installation") -> Callable[..., Any]:
    """Register a route on Api."""
    return Api.route(method, pattern, auth)


def _page(req: Request, items: list[Any]) -> list[Any]:
    # https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api
    # 30 a page unless asked, at most 100.
    per_page = min(int(req.q("per_page", "30") or 30), 100)
    page = int(req.q("page", "1") or 1)
    return items[(page - 1) * per_page : page * per_page]


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise refuse(422, f"Validation Failed: {message}")


def _public(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if not k.startswith("_")}


# -- installations --------------------------------------------------------------------


@route("POST", "/app/installations/{installation_id}/access_tokens", auth="jwt")
def _access_token(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/apps#create-an-installation-access-token-for-an-app
    installation = int(req.params["installation_id"])
    if installation not in api.state.installations:
        raise refuse(404, "Not Found")
    token = api.state.issue_token(installation)
    return Answer(
        201,
        {
            "token": token.value,
            "expires_at": iso(token.expires_at),
            "permissions": {"checks": "write", "pull_requests": "write", "actions": "write"},
            "repository_selection": "selected",
        },
    )


@route("GET", "/app", auth="jwt")
def _app(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app
    found = {"id": api.state.app_id, "slug": "cujo", "name": "Cujo", "owner": {"login": "cujo"}}
    # Its events and OAuth client, written from the documentation (doctorreads.py, oauth.py).
    from fakegithub.doctorreads import app_policies  # here: both import this module
    from fakegithub.oauth import sign_ins

    found["events"] = list(app_policies(api).events)
    found["client_id"] = sign_ins(api).client_id
    found["permissions"] = dict(api.state.installation_permissions)
    return found


@route("GET", "/repos/{owner}/{repo}/installation", auth="jwt")
def _repo_installation(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app
    full = f"{req.params['owner']}/{req.params['repo']}"
    for installation, repos in api.state.installations.items():
        if full in repos:
            return {
                "id": installation,
                "app_id": api.state.app_id,
                "target_type": "Organization",
                "permissions": dict(api.state.installation_permissions),
                "events": ["pull_request", "issue_comment", "check_run", "workflow_run"],
            }
    raise refuse(404, "Not Found")


@route("GET", "/repos/{owner}/{repo}")
def _repository(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/repos/repos#get-a-repository
    r = api.repo(req)
    return {
        "id": r.id,
        "full_name": r.full_name,
        "default_branch": r.default_branch,
        "allow_merge_commit": r.merge_methods["merge"],
        "allow_squash_merge": r.merge_methods["squash"],
        "allow_rebase_merge": r.merge_methods["rebase"],
    }


# -- pull requests and contents -------------------------------------------------------


@route("GET", "/repos/{owner}/{repo}/pulls/{number}")
def _pull(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
    r = api.repo(req)
    pr = r.pulls.get(int(req.params["number"]))
    if pr is None:
        raise refuse(404, "Not Found")
    from fakegithub.merging import pull_answer  # here: merging.py imports this module

    return pull_answer(api, r, pr)


@route("GET", "/repos/{owner}/{repo}/pulls/{number}/files")
def _pull_files(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/pulls/pulls#list-pull-requests-files
    r = api.repo(req)
    number = int(req.params["number"])
    if number not in r.pulls:
        raise refuse(404, "Not Found")
    # "Responses include a maximum of 3000 files."
    patches = r.pull_patches.get(number, {})
    files = [
        {"sha": "0" * 40, "filename": p, "status": "modified", "additions": 1, "deletions": 0}
        | ({"patch": patches[p]} if p in patches else {})
        for p in r.pull_files.get(number, [])[:3000]
    ]
    return _page(req, files)


@route("GET", "/repos/{owner}/{repo}/contents/{path+}")
def _contents(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/repos/contents#get-repository-content
    r = api.repo(req)
    path = urllib.parse.unquote(req.params["path"])
    ref = req.q("ref") or r.default_branch
    data = r.files.get((ref, path))
    if data is None:
        raise refuse(404, "Not Found")
    large = len(data) > 1024 * 1024  # GitHub sends no content over 1 MB
    return {
        "type": "file",
        "encoding": "none" if large else "base64",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": "" if large else b64(data),
        "sha": "0" * 40,
    }


# -- check runs ----------------------------------------------------------------------


def _check_output(out: Any) -> None:
    _need(isinstance(out, dict), "output must be an object")
    _need(isinstance(out.get("title"), str), "output.title is required")
    _need(isinstance(out.get("summary"), str), "output.summary is required")
    _need(len(out["summary"]) <= 65535, "output.summary is too long")


def _check_actions(actions: Any) -> None:
    _need(isinstance(actions, list) and len(actions) <= 3, "actions: at most 3")
    for a in actions:
        _need(isinstance(a, dict) and set(a) == {"label", "description", "identifier"}, "action")
        _need(len(a["label"]) <= 20 and len(a["identifier"]) <= 20, "action label/identifier")
        _need(len(a["description"]) <= 40, "action description")


@route("POST", "/repos/{owner}/{repo}/check-runs")
def _create_check_run(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/checks/runs#create-a-check-run
    r, b = api.repo(req), req.body
    _need(isinstance(b, dict), "body must be an object")
    _need(isinstance(b.get("name"), str) and bool(b["name"]), "name is required")
    _need(isinstance(b.get("head_sha"), str) and bool(SHA.fullmatch(b["head_sha"])), "head_sha")
    status = b.get("status", "queued")
    _need(status in CHECK_STATUSES, "status")
    conclusion = b.get("conclusion")
    _need(conclusion is None or conclusion in CONCLUSIONS, "conclusion")
    _need(status != "completed" or conclusion is not None, "completed needs a conclusion")
    if "output" in b:
        _check_output(b["output"])
    if "actions" in b:
        _check_actions(b["actions"])
    run_id = api.state.next_id()
    run = {
        "id": run_id,
        "name": b["name"],
        "head_sha": b["head_sha"],
        "status": "completed" if conclusion else status,
        "conclusion": conclusion,
        "output": b.get("output", {}),
        "actions": b.get("actions", []),
        "html_url": f"{api.state.web_url}/{r.full_name}/runs/{run_id}",
        "external_id": b.get("external_id"),
        "app": {"id": api.state.app_id, "slug": "cujo"},
    }
    r.check_runs[run_id] = run
    return Answer(201, run)


@route("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}")
def _update_check_run(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/checks/runs#update-a-check-run
    r, b = api.repo(req), req.body
    run = r.check_runs.get(int(req.params["check_run_id"]))
    if run is None:
        raise refuse(404, "Not Found")
    _need(isinstance(b, dict) and bool(b), "body must be a non-empty object")
    if "status" in b:
        _need(b["status"] in CHECK_STATUSES, "status")
    if "conclusion" in b:
        _need(b["conclusion"] in CONCLUSIONS, "conclusion")
    _need(b.get("status") != "completed" or "conclusion" in b, "completed needs a conclusion")
    if "output" in b:
        _check_output(b["output"])
        run["output"] = b["output"]
    if "actions" in b:
        _check_actions(b["actions"])
        run["actions"] = b["actions"]
    if "status" in b:
        run["status"] = b["status"]
    if "conclusion" in b:
        # Providing a conclusion sets the status to completed.
        run["conclusion"], run["status"] = b["conclusion"], "completed"
    elif b.get("status") in ("queued", "in_progress"):
        run["conclusion"] = None
    return run


@route("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs")
def _check_runs_for_ref(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/checks/runs#list-check-runs-for-a-git-reference
    r = api.repo(req)
    name, app_id = req.q("check_name"), req.q("app_id")
    found = [
        run
        for run in r.check_runs.values()
        if run["head_sha"] == req.params["ref"]
        and (name is None or run["name"] == name)
        and (app_id is None or str(run["app"]["id"]) == app_id)
    ]
    found.sort(key=lambda run: -run["id"])  # newest first
    return {"total_count": len(found), "check_runs": _page(req, found)}


@route("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}")
def _get_check_run(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/checks/runs#get-a-check-run
    run = api.repo(req).check_runs.get(int(req.params["check_run_id"]))
    if run is None:
        raise refuse(404, "Not Found")
    return run


# -- reviews -------------------------------------------------------------------------


@route("POST", "/repos/{owner}/{repo}/pulls/{number}/reviews")
def _create_review(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/pulls/reviews#create-a-review-for-a-pull-request
    r, b = api.repo(req), req.body
    number = int(req.params["number"])
    if number not in r.pulls:
        raise refuse(404, "Not Found")
    _need(isinstance(b, dict), "body must be an object")
    event = b.get("event")
    if event == "APPROVE":
        # GitHub would accept it; Cujo must never send it (docs/design.md invariant 5).
        api.state.refuse(req.method, req.path, "a review with event APPROVE")
        raise refuse(599, "fake GitHub: Cujo must never approve")
    _need(event in ("COMMENT", "REQUEST_CHANGES"), "event")
    _need(isinstance(b.get("body"), str) and bool(b["body"]), "body is required for this event")
    _need(isinstance(b.get("commit_id"), str) and bool(SHA.fullmatch(b["commit_id"])), "commit_id")
    for c in b.get("comments", []):
        _need(isinstance(c, dict) and {"path", "body"} <= set(c), "comment path and body")
        _need(isinstance(c.get("line"), int) and c.get("side") in ("LEFT", "RIGHT"), "comment line")
    review_id = api.state.next_id()
    review = {
        "id": review_id,
        "node_id": f"PRR_{review_id}",
        "user": BOT,
        "body": b["body"],
        "state": "COMMENTED" if event == "COMMENT" else "CHANGES_REQUESTED",
        "commit_id": b["commit_id"],
        "html_url": f"{api.state.web_url}/{r.full_name}/pull/{number}",
        "submitted_at": iso(api.state.clock()),
        "_number": number,
        "_comments": b.get("comments", []),
    }
    r.reviews[review_id] = review
    return _public(review)


@route("PUT", "/repos/{owner}/{repo}/pulls/{number}/reviews/{review_id}/dismissals")
def _dismiss_review(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/pulls/reviews#dismiss-a-review-for-a-pull-request
    r, b = api.repo(req), req.body
    review = r.reviews.get(int(req.params["review_id"]))
    if review is None or review["_number"] != int(req.params["number"]):
        raise refuse(404, "Not Found")
    _need(isinstance(b, dict) and isinstance(b.get("message"), str), "message is required")
    _need(b.get("event", "DISMISS") == "DISMISS", "event must be DISMISS")
    if review["state"] == "COMMENTED":
        raise refuse(422, "Can not dismiss a commented pull request review")
    review["state"] = "DISMISSED"
    review["_dismissal"] = b["message"]
    return _public(review)


@route("GET", "/repos/{owner}/{repo}/pulls/{number}/reviews")
def _list_reviews(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/pulls/reviews#list-reviews-for-a-pull-request
    number = int(req.params["number"])
    items = [_public(v) for v in api.repo(req).reviews.values() if v["_number"] == number]
    return _page(req, items)


# -- reactions and comments ----------------------------------------------------------


def _react(api: Api, req: Request, target: tuple[str, int]) -> Any:
    r, b = api.repo(req), req.body
    _need(isinstance(b, dict) and b.get("content") in REACTIONS, "content")
    for existing in r.reactions:
        if existing["_target"] == target and existing["content"] == b["content"]:
            return Answer(200, _public(existing))  # already there: GitHub answers 200
    reaction = {
        "id": api.state.next_id(),
        "content": b["content"],
        "user": BOT,
        "created_at": iso(api.state.clock()),
        "_target": target,
    }
    r.reactions.append(reaction)
    return Answer(201, _public(reaction))


@route("POST", "/repos/{owner}/{repo}/issues/{number}/reactions")
def _issue_reaction(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/reactions/reactions#create-reaction-for-an-issue
    number = int(req.params["number"])
    if number not in api.repo(req).pulls:
        raise refuse(404, "Not Found")
    return _react(api, req, ("issue", number))


@route("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
def _comment_reaction(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/reactions/reactions#create-reaction-for-an-issue-comment
    comment_id = int(req.params["comment_id"])
    if comment_id not in api.repo(req).comments:
        raise refuse(404, "Not Found")
    return _react(api, req, ("comment", comment_id))


@route("POST", "/repos/{owner}/{repo}/issues/{number}/comments")
def _create_comment(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/issues/comments#create-an-issue-comment
    r, b = api.repo(req), req.body
    number = int(req.params["number"])
    if number not in r.pulls:
        raise refuse(404, "Not Found")
    _need(isinstance(b, dict) and isinstance(b.get("body"), str) and bool(b["body"]), "body")
    comment_id = api.state.next_id()
    comment = {
        "id": comment_id,
        "body": b["body"],
        "user": BOT,
        "html_url": f"{api.state.web_url}/{r.full_name}/pull/{number}#issuecomment-{comment_id}",
        "created_at": iso(api.state.clock()),
        "_number": number,
    }
    r.comments[comment_id] = comment
    return Answer(201, _public(comment))


@route("GET", "/repos/{owner}/{repo}/issues/{number}/comments")
def _list_comments(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/issues/comments#list-issue-comments
    number = int(req.params["number"])
    items = [_public(c) for c in api.repo(req).comments.values() if c["_number"] == number]
    return _page(req, items)


# -- permissions ---------------------------------------------------------------------


@route("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission")
def _permission(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user
    r = api.repo(req)
    login = req.params["username"]
    if login not in r.roles:
        raise refuse(404, "Not Found")
    role = r.roles[login]
    # A custom role answers its own name in role_name and its base in permission; the
    # fake models "custom-*" roles as based on write.
    permission = LEGACY_PERMISSION.get(role, "write")
    return {
        "permission": permission,
        "role_name": role,
        "user": {"login": login, "type": "User", "permissions": {}},
    }


# -- Actions -------------------------------------------------------------------------


def _workflow(r: RepoState, req: Request) -> Any:
    wf = r.workflows.get(urllib.parse.unquote(req.params["workflow"]))
    if wf is None:
        raise refuse(404, "Not Found")
    return wf


@route("GET", "/repos/{owner}/{repo}/actions/workflows/{workflow}")
def _get_workflow(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflows#get-a-workflow
    r = api.repo(req)
    wf = _workflow(r, req)
    return {"id": wf.id, "name": wf.name, "path": f".github/workflows/{wf.path}", "state": "active"}


@route("POST", "/repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches")
def _dispatch(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflows#create-a-workflow-dispatch-event
    r, b = api.repo(req), req.body
    wf = _workflow(r, req)
    refused = api.state.dispatch_refuses_run_details
    if refused is not None and isinstance(b, dict) and "return_run_details" in b:
        # Written from GitHub's documented validation answer, not recorded from a GHES.
        raise refuse(refused, 'Invalid request.\n\n"return_run_details" is not a permitted key.')
    _need(isinstance(b, dict) and isinstance(b.get("ref"), str), "ref is required")
    inputs = b.get("inputs", {})
    _need(isinstance(inputs, dict) and len(inputs) <= 10, "inputs: at most 10")
    _need(all(isinstance(v, str | bool) for v in inputs.values()), "inputs are strings")
    ref = b["ref"].removeprefix("refs/heads/")
    if ref not in r.branches:
        raise refuse(422, f"No ref found for: {b['ref']}")
    run = api.state.add_run(r.full_name, wf.path, head_sha=r.branches[ref], inputs=inputs)
    run["head_branch"] = ref
    dispatch = Dispatch(r.full_name, wf.path, ref, dict(inputs), run["id"], run["head_sha"])
    api.state.hooks_before_answer(dispatch)
    after = (api.state.hooks_after_answer, dispatch)
    if b.get("return_run_details") is True and api.state.dispatch_returns_details:
        return Answer(
            200,
            {"workflow_run_id": run["id"], "run_url": run["url"], "html_url": run["html_url"]},
            after=after,
        )
    return Answer(204, None, after=after)


# -- the App manifest flow -----------------------------------------------------------
# Written from GitHub's documentation (registering a GitHub App from a manifest; the
# conversion endpoint), not recorded: the web pages are github.com's, here on the API host.


def _new_app(api: Api, req: Request, owner: str) -> Any:
    form = urllib.parse.parse_qs(req.body if isinstance(req.body, str) else "")
    manifest = json.loads(form["manifest"][0])
    _need(isinstance(manifest.get("redirect_url"), str), "redirect_url is required")
    _need(isinstance(manifest.get("hook_attributes", {}).get("url"), str), "hook url required")
    code = f"code{len(api.state.manifest_codes) + 1}x{api.state.app_id}"
    api.state.manifest_codes[code] = (manifest, owner, api.state.clock())
    query = urllib.parse.urlencode({"code": code, "state": req.q("state", "")})
    # The owner confirmed the App on GitHub's page; GitHub sends the browser back.
    return Answer(302, None, headers={"Location": f"{manifest['redirect_url']}?{query}"})


@route("POST", "/settings/apps/new", auth="none")
def _new_user_app(api: Api, req: Request) -> Any:
    return _new_app(api, req, "octocat")


@route("POST", "/organizations/{org}/settings/apps/new", auth="none")
def _new_org_app(api: Api, req: Request) -> Any:
    return _new_app(api, req, req.params["org"])


@route("POST", "/app-manifests/{code}/conversions", auth="none")
def _convert_manifest(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest
    found = api.state.manifest_codes.pop(req.params["code"], None)
    if found is None or api.state.clock() - found[2] > 3600:  # one use, within the hour
        raise refuse(404, "Not Found")
    manifest, owner, _ = found
    slug = re.sub(r"[^a-z0-9]+", "-", manifest.get("name", "cujo").lower()).strip("-")
    # The App's OAuth client is the sign-in world's, its callback URLs the manifest's.
    from fakegithub.oauth import sign_ins  # here: oauth imports this module

    client = sign_ins(api)
    client.callback_urls = set(manifest.get("callback_urls", []))
    return Answer(
        201,
        {
            "id": api.state.app_id,
            "slug": slug,
            "node_id": "MDM6QXBwNTk=",
            "owner": {"login": owner},
            "name": manifest.get("name"),
            "html_url": f"{api.state.api_url}/apps/{slug}",
            "permissions": manifest.get("default_permissions", {}),
            "events": manifest.get("default_events", []),
            "client_id": client.client_id,
            "client_secret": client.client_secret,
            "webhook_secret": "e340154128314309424b7c8e90325147d99fdafa",
            "pem": api.state.manifest_app_pem,
        },
    )


@route("GET", "/repos/{owner}/{repo}/actions/workflows/{workflow}/runs")
def _workflow_runs(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflow-runs#list-workflow-runs-for-a-workflow
    r = api.repo(req)
    wf = _workflow(r, req)
    runs = [v for v in r.runs.values() if v["_workflow_file"] == wf.path]
    created = req.q("created")
    if created is not None:
        m = re.fullmatch(r">=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", created)
        _need(m is not None, "created must be >=YYYY-MM-DDTHH:MM:SSZ in this fake")
        assert m is not None
        runs = [v for v in runs if v["created_at"] >= m.group(1)]
    runs.sort(key=lambda v: (v["_created"], v["id"]), reverse=True)
    return {"total_count": len(runs), "workflow_runs": [_public(v) for v in _page(req, runs)]}


@route("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}")
def _get_run(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run
    run = api.repo(req).runs.get(int(req.params["run_id"]))
    if run is None:
        raise refuse(404, "Not Found")
    return _public(run)


@route("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs")
def _run_jobs(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflow-jobs#list-jobs-for-a-workflow-run
    run = api.repo(req).runs.get(int(req.params["run_id"]))
    if run is None:
        raise refuse(404, "Not Found")
    jobs = run.get("_jobs", [])
    return {"total_count": len(jobs), "jobs": _page(req, jobs)}


@route("POST", "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel")
def _cancel_run(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflow-runs#cancel-a-workflow-run
    run = api.repo(req).runs.get(int(req.params["run_id"]))
    if run is None:
        raise refuse(404, "Not Found")
    if run["status"] == "completed":
        raise refuse(409, "Cannot cancel a workflow run that is completed.")
    run["status"], run["conclusion"] = "completed", "cancelled"
    return Answer(202, {})


@route("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts")
def _run_artifacts(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/artifacts#list-workflow-run-artifacts
    r = api.repo(req)
    run_id = int(req.params["run_id"])
    if run_id not in r.runs:
        raise refuse(404, "Not Found")
    arts = [a for a in r.artifacts.values() if a["workflow_run"]["id"] == run_id]
    return {"total_count": len(arts), "artifacts": _page(req, arts)}


@route("GET", "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/zip")
def _artifact_zip(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/artifacts#download-an-artifact
    r = api.repo(req)
    art_id = int(req.params["artifact_id"])
    art = r.artifacts.get(art_id)
    if art is None:
        raise refuse(404, "Not Found")
    if art["expired"]:
        raise refuse(410, "Artifact has expired")
    # The archive lives on another host, as GitHub's pre-signed storage URLs do.
    return Answer(302, None, {"Location": api.state.blob_for(r.archives[art_id])})


@route("GET", "/repos/{owner}/{repo}/actions/jobs/{job_id}/logs")
def _job_logs(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/actions/workflow-jobs#download-job-logs-for-a-workflow-run
    r = api.repo(req)
    text = r.job_logs.get(int(req.params["job_id"]))
    if text is None:
        raise refuse(404, "Not Found")
    # Like an artifact, the log is served from storage through a short-lived URL.
    return Answer(302, None, {"Location": api.state.blob_for(text)})


# -- rules and protection ------------------------------------------------------------


@route("GET", "/repos/{owner}/{repo}/rules/branches/{branch+}")
def _branch_rules(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch
    r = api.repo(req)
    return _page(req, r.rules.get(urllib.parse.unquote(req.params["branch"]), []))


@route("GET", "/repos/{owner}/{repo}/branches/{branch+}/protection")
def _protection(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
    r = api.repo(req)
    if r.protection_refusal is not None:
        raise refuse(*r.protection_refusal)
    found = r.protection.get(urllib.parse.unquote(req.params["branch"]))
    if found is None:
        raise refuse(404, "Branch not protected")
    return found


@route("GET", "/repos/{owner}/{repo}/branches/{branch+}")
def _branch(api: Api, req: Request) -> Any:
    # https://docs.github.com/en/rest/branches/branches#get-a-branch (registered after the
    # protection read, whose path this pattern would also match)
    r = api.repo(req)
    name = urllib.parse.unquote(req.params["branch"])
    if name not in r.branches:
        raise refuse(404, "Branch not found")
    classic = r.protection.get(name)
    rsc = (classic or {}).get("required_status_checks") or {}
    contexts = list(rsc.get("contexts", []))
    checks = rsc.get("checks", [{"context": c, "app_id": None} for c in contexts])
    admins = ((classic or {}).get("enforce_admins") or {}).get("enabled", False)
    level = ("everyone" if admins else "non_admins") if rsc else "off"
    return {
        "name": name,
        "commit": {"sha": r.branches[name], "url": f"{api.state.api_url}/commits"},
        "_links": {"html": f"{api.state.web_url}/{r.full_name}/tree/{name}"},
        # GitHub says protected when only a ruleset applies, too.
        "protected": classic is not None or bool(r.rules.get(name)),
        "protection": {
            "enabled": classic is not None,
            "required_status_checks": {
                "enforcement_level": level,
                "contexts": contexts,
                "checks": checks,
            },
        },
        "protection_url": f"{api.state.api_url}/repos/{r.full_name}/branches/{name}/protection",
    }


# -- the HTTP side -------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, addr: tuple[str, int], handler: type, state: FakeState) -> None:
        super().__init__(addr, handler)
        self.state = state

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client gave up (a deadline test hangs up on purpose)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-github.test"
    sys_version = ""
    # One write per answer: headers and body sent apart meet Nagle and delayed ACK (40 ms).
    wbufsize = 1 << 16
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean."""

    def date_time_string(self, timestamp: float | None = None) -> str:
        """Stamp the ``Date`` header by GitHub's clock (the fake's), not the relay's (issue 23)."""
        return super().date_time_string(
            self.server.state.clock() if timestamp is None else timestamp
        )

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-GitHub-Api-Version-Selected", "2022-11-28")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"}


class ApiHandler(_Handler):
    """Answer the API host."""

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        state = self.server.state
        url = urllib.parse.urlsplit(self.path)
        path, query = url.path, urllib.parse.parse_qs(url.query)
        raw = self._read_body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        auth = self._auth()
        state.record(Recorded(self.command, path, query, body, self._headers(), auth))
        after = None
        fault = None
        try:
            spent = state.over_limit(auth)
            if spent is not None:
                raise _over_the_limit(auth, spent)
            fault = state.take_fault(self.command, path)
            if fault is not None:
                if fault.delay_s:
                    state.release.wait(fault.delay_s)
                if not fault.then_serve:
                    self._send(fault.status, fault.body or b"", _rated(state, auth, fault.headers))
                    return
            answer, after = self._route(path, query, body, auth)
            if answer.hold is not None:
                while not (answer.hold.wait(0.05) or state.release.is_set()):
                    pass  # the write is done; the answer waits for the test (or teardown)
        except Answer as exc:
            answer = exc
        except Exception as exc:  # a bug in the fake: fail the test loudly
            state.refuse(self.command, path, f"fake GitHub crashed: {exc!r}")
            answer = refuse(599, f"fake GitHub crashed: {exc!r}")
        if fault is not None and fault.drop_after:
            # The write happened; the answer is lost with the connection.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        payload = b"" if answer.body is None else json.dumps(answer.body).encode()
        status, headers = answer.status, dict(answer.headers)
        if self.command == "GET" and status == 200 and payload:
            status, payload = _conditional(self.headers.get("If-None-Match"), payload, headers)
        self._send(status, payload, _rated(state, auth, headers, counted=status != 304))
        if after is not None:
            fn, arg = after
            fn(arg)
        state.answered(self.command, path)

    def _auth(self) -> str:
        header = self.headers.get("Authorization")
        if header is None:
            return "none"
        scheme, _, cred = header.partition(" ")
        state = self.server.state
        if scheme.lower() == "bearer" and cred.count(".") == 2:
            try:
                claims = jwt.decode(
                    cred,
                    state.public_key_pem,
                    algorithms=["RS256"],
                    options={"require": ["iat", "exp", "iss"]},
                    leeway=60,
                )
            except jwt.PyJWTError:
                return "bad-jwt"
            if str(claims["iss"]) != str(state.app_id) or claims["exp"] - claims["iat"] > 660:
                return "bad-jwt"
            return "jwt"
        user = getattr(state, "sign_ins", None)
        held = user.tokens.get(cred) if user is not None else None
        if scheme.lower() in ("token", "bearer") and held is not None:  # oauth.py's users
            return f"user:{held[0]}" if held[1] > state.clock() else "expired-token"
        token = state.tokens.get(cred)
        if scheme.lower() in ("token", "bearer") and token is not None:
            if token.expires_at <= state.clock():
                return "expired-token"
            return f"installation:{token.installation_id}#{token.serial}"
        return "bad-token"

    def _route(
        self, path: str, query: dict[str, list[str]], body: Any, auth: str
    ) -> tuple[Answer, Any]:
        state = self.server.state
        for method, rx, fn, need in Api.routes:
            m = rx.match(path)
            if m is None or method != self.command:
                continue
            if need == "jwt" and auth != "jwt":
                raise refuse(401, "A JSON web token could not be decoded")
            if need == "installation" and not auth.startswith("installation:"):
                raise refuse(401, "Bad credentials")
            if need == "user" and not auth.startswith("user:"):
                raise refuse(401, "Bad credentials")
            req = Request(self.command, path, query, body, m.groupdict(), auth)
            with state.lock:
                result = fn(Api(state), req)
            answer = result if isinstance(result, Answer) else Answer(200, result)
            return answer, answer.after
        state.refuse(self.command, path, "no route")
        raise refuse(599, f"fake GitHub does not know {self.command} {path}")


# -- rate limits and conditional requests ---------------------------------------------
# Written from the documentation, not recorded (FakeState.spend says what is modelled).
# https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
# https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api#use-conditional-requests-if-appropriate


def _rated(
    state: FakeState, auth: str, headers: dict[str, str], *, counted: bool = True
) -> dict[str, str]:
    """Add the credential's rate-limit headers to an answer's, spending one request."""
    return {**headers, **state.spend(auth, counted=counted)}


def _over_the_limit(auth: str, headers: dict[str, str]) -> Answer:
    """GitHub's answer to a request over the primary rate limit: 403, none remaining."""
    who = (
        f"installation ID {auth.split(':')[1].split('#', maxsplit=1)[0]}"
        if auth.startswith("installation:")
        else "this client"
    )
    return Answer(
        403,
        {
            "message": f"API rate limit exceeded for {who}. If you reach out to GitHub "
            "Support for help, please include the request ID 0400:1A2B:3C4D.",
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
        },
        headers=dict(headers),
    )


def _conditional(
    if_none_match: str | None, payload: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    """Tag a GET's answer with a (weak) ETag; answer 304 and no body when it was sent back."""
    etag = f'W/"{hashlib.sha256(payload).hexdigest()[:32]}"'
    headers["ETag"] = etag
    sent = {tag.strip() for tag in (if_none_match or "").split(",")}
    # Weak comparison (RFC 9110 section 13.1.2): W/ does not matter.
    if "*" in sent or etag.removeprefix("W/") in {tag.removeprefix("W/") for tag in sent}:
        return 304, b""
    return 200, payload


class BlobHandler(_Handler):
    """Answer the archive host the artifact download redirects to."""

    def do_GET(self) -> None:
        state = self.server.state
        path = urllib.parse.urlsplit(self.path).path
        leaked = "authorization" in {k.lower() for k in self.headers}
        state.record(
            Recorded("GET", path, {}, None, self._headers(), "leaked" if leaked else "none", "blob")
        )
        if leaked:
            state.refuse("GET", path, "an Authorization header reached the archive host")
            self._send(599, b'{"message": "credentials sent to the archive host"}')
            return
        key = path.removeprefix("/blob/")
        with state.lock:
            found = state.blobs.get(key)
        if found is None or found[1] < state.clock():
            self._send(404, b"")
            return
        data = found[0]
        self.send_response(200)
        self.send_header("Content-Type", "application/zip")
        if state.blob_declares_length:
            self.send_header("Content-Length", str(len(data)))
        else:  # the body ends when the connection does
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class FakeGitHubServer:
    """Run the API host on 127.0.0.1 and the archive host on another loopback address."""

    def __init__(self, state: FakeState) -> None:
        self.state = state
        self.api = _Server(("127.0.0.1", 0), ApiHandler, state)
        try:
            self.blob = _Server(("127.0.0.2", 0), BlobHandler, state)
        except OSError:  # no 127.0.0.2 here: another port is still another origin
            self.blob = _Server(("127.0.0.1", 0), BlobHandler, state)
        self.url = f"http://127.0.0.1:{self.api.server_address[1]}"
        blob_host, blob_port = self.blob.server_address[:2]
        state.api_url = self.url
        state.blob_url = f"http://{blob_host}:{blob_port}"
        self._threads = [
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
            for s in (self.api, self.blob)
        ]

    def start(self) -> FakeGitHubServer:
        """Start serving."""
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Release held requests and stop serving."""
        self.state.release.set()
        for s in (self.api, self.blob):
            s.shutdown()
            s.server_close()

"""The proxy's answers to sunk requests: GitHub's API for the job, a plain server elsewhere."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from jobs import job_for

from cujo_action.arm.actionsjob import TOKEN_PERMISSIONS, github_facts
from cujo_action.limits import ANSWER_BODY
from cujo_action.net.lookalike.github_base import ECHO_BUDGET, git_blob_sha
from cujo_action.net.lookalike.github_facts import ACTIONS_BOT, ZEN, GitHubFacts
from cujo_action.net.lookalike.pick import Lookalike
from cujo_action.net.lookalike.web import JSON_OK, WELCOME, Answer, Asked, bodiless, nginx_page
from cujo_action.net.proxy.sink import response, well_formed

NOW = 1_780_000_000.0
API = "api.github.com"
INSTALLATION = "ghs_" + "A" * 36  # the job's GITHUB_TOKEN, a decoy
USER = "gho_" + "B" * 36  # gh's token, a decoy
FACTS = GitHubFacts(
    repository="acme/widget",
    repository_id=612_345_678,
    owner_id=4_242_424,
    base_sha="b" * 40,
    permissions=dict(TOKEN_PERMISSIONS),
    seed=7,
)
GITHUB_HEADERS = {
    "date", "content-type", "server", "x-github-request-id", "x-github-media-type",
    "x-github-api-version-selected", "x-ratelimit-limit", "x-ratelimit-remaining",
    "x-ratelimit-reset", "x-ratelimit-used", "x-ratelimit-resource",
    "access-control-allow-origin", "strict-transport-security", "x-content-type-options",
}  # fmt: skip


def lookalike(facts: GitHubFacts = FACTS, **options: Any) -> Lookalike:
    return Lookalike(facts, [INSTALLATION, USER, "AKIA" + "C" * 16], **options)


def ask(
    method: str,
    target: str,
    token: str | None = None,
    body: Any = None,
    *,
    host: str = API,
    headers: dict[str, str] | None = None,
    cut: bool = False,
) -> Asked:
    sent = dict(headers or {})
    if token is not None:
        sent["authorization"] = f"token {token}"
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return Asked(method, host, target, sent, raw, cut)


def headers(answer: Answer) -> dict[str, str]:
    return dict(answer.headers)


def data(answer: Answer) -> Any:
    assert headers(answer)["content-type"] == "application/json; charset=utf-8"
    return json.loads(answer.body)


# --------------------------------------------------------------------------- reading


def test_zen_is_a_proverb_chosen_per_request_with_githubs_headers() -> None:
    look = lookalike()
    answers = [look.answer(ask("GET", "/zen"), NOW + i) for i in range(40)]
    for answer in answers:
        assert answer.status == 200
        assert answer.body.decode() in ZEN
        seen = headers(answer)
        assert set(seen) >= GITHUB_HEADERS, sorted(seen)
        assert seen["content-type"] == "text/plain;charset=utf-8"
        assert seen["server"] == "github.com"
        assert seen["x-github-api-version-selected"] == "2022-11-28"
        # An installation token has no OAuth scopes; nobody asking has none either.
        assert "x-oauth-scopes" not in seen
    assert len({a.body for a in answers}) > 5
    assert len({headers(a)["x-github-request-id"] for a in answers}) == 40
    # Deterministic given the job's seed: another proxy with the same facts says the same.
    again = lookalike()
    assert [again.answer(ask("GET", "/zen"), NOW + i).body for i in range(40)] == [
        a.body for a in answers
    ]


def test_each_request_spends_the_hours_quota_and_rate_limit_shows_it_without_spending() -> None:
    look = lookalike()
    first = headers(look.answer(ask("GET", "/zen"), NOW))
    second = headers(look.answer(ask("GET", "/zen"), NOW + 1))
    assert first["x-ratelimit-limit"] == "60"  # unauthenticated
    assert int(second["x-ratelimit-used"]) == int(first["x-ratelimit-used"]) + 1
    assert int(second["x-ratelimit-remaining"]) == int(first["x-ratelimit-remaining"]) - 1
    assert NOW < int(first["x-ratelimit-reset"]) <= NOW + 3600
    rates = [data(look.answer(ask("GET", "/rate_limit"), NOW + 2)) for _ in range(3)]
    assert rates[0] == rates[2]  # reading the quota does not spend it
    rate = rates[0]
    assert set(rate) == {"resources", "rate"}
    assert rate["rate"] == rate["resources"]["core"]
    assert set(rate["rate"]) == {"limit", "used", "remaining", "reset"}
    assert rate["rate"]["used"] == int(second["x-ratelimit-used"])
    assert {"core", "search", "graphql", "code_search"} <= set(rate["resources"])
    assert rate["resources"]["graphql"]["limit"] == 0  # GraphQL needs a token
    # The job's token has GITHUB_TOKEN's quota, a user token a user's.
    token = data(look.answer(ask("GET", "/rate_limit", INSTALLATION), NOW))
    assert token["rate"]["limit"] == 1000
    assert data(look.answer(ask("GET", "/rate_limit", USER), NOW))["rate"]["limit"] == 5000


def test_an_exhausted_quota_is_githubs_403_until_the_hour_ends() -> None:
    look = lookalike()
    statuses = [look.answer(ask("GET", "/zen"), NOW).status for _ in range(61)]
    assert statuses[-1] == 403
    assert statuses.count(200) <= 60
    over = look.answer(ask("GET", "/zen"), NOW + 1)
    assert over.status == 403
    assert json.loads(over.body)["message"].startswith("API rate limit exceeded for 20.")
    assert headers(over)["x-ratelimit-remaining"] == "0"
    assert look.answer(ask("GET", "/zen"), NOW + 3601).status == 200


def test_meta_and_the_root_read_as_githubs() -> None:
    look = lookalike()
    meta = data(look.answer(ask("GET", "/meta"), NOW))
    assert set(meta) >= {
        "verifiable_password_authentication", "ssh_key_fingerprints", "ssh_keys", "hooks",
        "web", "api", "git", "packages", "pages", "actions", "domains",
    }  # fmt: skip
    # GitHub's published ed25519 host key fingerprint.
    assert meta["ssh_key_fingerprints"]["SHA256_ED25519"] == (
        "+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"
    )
    assert "140.82.112.0/20" in meta["api"]
    root = data(look.answer(ask("GET", "/"), NOW))
    assert root["rate_limit_url"] == "https://api.github.com/rate_limit"
    assert root["repository_url"] == "https://api.github.com/repos/{owner}/{repo}"


def test_the_jobs_repository_is_the_one_the_job_names_with_the_tokens_permissions() -> None:
    look = lookalike()
    repo = data(look.answer(ask("GET", "/repos/acme/widget", INSTALLATION), NOW))
    assert (repo["full_name"], repo["id"], repo["owner"]["id"]) == (
        "acme/widget",
        612_345_678,
        4_242_424,
    )
    assert repo["default_branch"] == "main"
    assert repo["visibility"] == "public"
    assert repo["html_url"] == "https://github.com/acme/widget"
    # The job's token may write contents: GitHub says it can push.
    assert repo["permissions"] == {
        "admin": False, "maintain": False, "push": True, "triage": True, "pull": True,
    }  # fmt: skip
    answer = look.answer(ask("GET", "/repos/ACME/Widget", INSTALLATION), NOW)
    assert headers(answer)["x-accepted-github-permissions"] == "metadata=read"
    # A read-only token cannot; nobody at all sees no permissions.
    read_only = lookalike(FACTS.model_copy(update={"permissions": {"contents": "read"}}))
    repo = data(read_only.answer(ask("GET", "/repos/acme/widget", INSTALLATION), NOW))
    assert repo["permissions"]["push"] is False
    assert "permissions" not in data(look.answer(ask("GET", "/repos/acme/widget"), NOW))
    # The default branch's head is the job's base.
    ref = data(look.answer(ask("GET", "/repos/acme/widget/git/ref/heads/main"), NOW))
    assert ref["object"]["sha"] == "b" * 40


def test_the_facts_come_from_the_job_cujo_made_up() -> None:
    job = job_for("acme/widget")
    facts = github_facts(job)
    repo = data(lookalike(facts).answer(ask("GET", f"/repos/{job.repository}"), NOW))
    assert (repo["full_name"], repo["id"], repo["owner"]["id"]) == (
        job.repository,
        job.repository_id,
        job.owner_id,
    )
    assert facts.permissions == dict(TOKEN_PERMISSIONS)
    assert facts.permissions["contents"] == "write"
    # After the push the job runs for, the default branch is at what it pushed.
    assert facts.default_branch == "main"
    assert facts.base_sha == job.push.after
    assert github_facts(job_for("acme/widget", branch="dev", default="main")).base_sha == ""


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        (None, 401, "Requires authentication"),
        (INSTALLATION, 403, "Resource not accessible by integration"),
    ],
)
def test_user_is_refused_as_github_refuses_an_installation_token(
    token: str | None, status: int, message: str
) -> None:
    answer = lookalike().answer(ask("GET", "/user", token), NOW)
    assert answer.status == status
    body = data(answer)
    assert body["message"] == message
    assert body["status"] == str(status)
    assert body["documentation_url"].startswith("https://docs.github.com/rest/users/")


def test_a_user_token_is_its_owner_with_its_scopes() -> None:
    answer = lookalike().answer(ask("GET", "/user", USER), NOW)
    user = data(answer)
    assert (answer.status, user["login"], user["id"]) == (200, "acme", 4_242_424)
    assert user["two_factor_authentication"] is True
    assert headers(answer)["x-oauth-scopes"] == "gist, read:org, repo, workflow"
    assert headers(answer)["cache-control"].startswith("private")


def test_installation_repositories_lists_the_jobs_repository() -> None:
    look = lookalike()
    listed = data(look.answer(ask("GET", "/installation/repositories", INSTALLATION), NOW))
    assert listed["total_count"] == 1
    assert [r["full_name"] for r in listed["repositories"]] == ["acme/widget"]
    assert look.answer(ask("GET", "/installation/repositories", USER), NOW).status == 403
    assert look.answer(ask("GET", "/installation/repositories"), NOW).status == 401


@pytest.mark.parametrize(
    "target", ["/octocat", "/repos/other/thing", "/users/else", "/rate_limit/x"]
)
def test_anything_else_is_githubs_404(target: str) -> None:
    answer = lookalike().answer(ask("GET", target), NOW)
    assert answer.status == 404
    assert json.loads(answer.body) == {
        "message": "Not Found",
        "documentation_url": "https://docs.github.com/rest",
        "status": "404",
    }
    assert set(headers(answer)) >= GITHUB_HEADERS


def test_a_token_cujo_did_not_plant_is_bad_credentials() -> None:
    look = lookalike()
    for token in ("ghs_" + "Z" * 36, "AKIA" + "C" * 16, "nonsense"):
        answer = look.answer(ask("GET", "/zen", token), NOW)
        assert (answer.status, data(answer)["message"]) == (401, "Bad credentials")
    # The checkout's way of sending its token (git's basic auth) is the token.
    basic = base64.b64encode(f"x-access-token:{INSTALLATION}".encode()).decode()
    answer = look.answer(ask("GET", "/user", headers={"authorization": f"basic {basic}"}), NOW)
    assert answer.status == 403  # an installation token, known


def test_the_api_version_asked_for_is_the_one_selected() -> None:
    asked = ask("GET", "/zen", headers={"x-github-api-version": "2026-03-10"})
    assert headers(lookalike().answer(asked, NOW))["x-github-api-version-selected"] == "2026-03-10"
    asked = ask("GET", "/zen", headers={"x-github-api-version": "1999-01-01"})
    assert headers(lookalike().answer(asked, NOW))["x-github-api-version-selected"] == "2022-11-28"


# --------------------------------------------------------------------------- a worm's next steps


def test_a_new_repository_is_created_as_asked() -> None:
    answer = lookalike().answer(
        ask("POST", "/user/repos", INSTALLATION, {"name": "Shai Hulud", "private": False}), NOW
    )
    repo = data(answer)
    assert answer.status == 201
    assert (repo["name"], repo["full_name"]) == ("Shai-Hulud", "acme/Shai-Hulud")
    assert headers(answer)["location"] == "https://api.github.com/repos/acme/Shai-Hulud"
    assert repo["created_at"] == "2026-05-28T20:26:40Z"
    assert repo["permissions"]["admin"] is True
    org = data(lookalike().answer(ask("POST", "/orgs/evil/repos", USER, {"name": "x"}), NOW))
    assert (org["full_name"], org["owner"]["type"]) == ("evil/x", "Organization")
    missing = lookalike().answer(ask("POST", "/user/repos", USER, {}), NOW)
    assert (missing.status, data(missing)["message"]) == (422, "Repository creation failed.")
    # A body cut short still names the repository, if its start says it.
    cut = ask(
        "POST", "/user/repos", USER, b'{"name": "loot", "description": "' + b"x" * 50, cut=True
    )
    assert data(lookalike().answer(cut, NOW))["name"] == "loot"


def test_a_gist_is_created_with_its_files_and_a_large_one_is_truncated() -> None:
    files = {
        "env.txt": {"content": "GITHUB_TOKEN=" + INSTALLATION},
        "big.txt": {"content": "y" * 20_000},
    }
    answer = lookalike().answer(
        ask("POST", "/gists", INSTALLATION, {"public": True, "description": "d", "files": files}),
        NOW,
    )
    gist = data(answer)
    assert answer.status == 201
    assert len(gist["id"]) == 32
    assert gist["html_url"].endswith(gist["id"])
    assert headers(answer)["location"] == gist["url"]
    env = gist["files"]["env.txt"]
    assert (env["content"], env["truncated"]) == ("GITHUB_TOKEN=" + INSTALLATION, False)
    big = gist["files"]["big.txt"]
    assert (big["size"], big["truncated"]) == (20_000, True)
    assert len(big["content"]) <= ECHO_BUDGET
    assert gist["public"] is True


def test_a_workflow_pushed_through_contents_is_committed() -> None:
    workflow = b"on: push\njobs: {}\n"
    body = {"message": "add ci", "content": base64.b64encode(workflow).decode(), "branch": "x"}
    answer = lookalike().answer(
        ask("PUT", "/repos/acme/widget/contents/.github/workflows/ci.yml", INSTALLATION, body),
        NOW,
    )
    out = data(answer)
    assert answer.status == 201
    content = out["content"]
    assert (content["path"], content["name"], content["size"]) == (
        ".github/workflows/ci.yml",
        "ci.yml",
        len(workflow),
    )
    assert content["sha"] == git_blob_sha(workflow)
    assert content["html_url"] == "https://github.com/acme/widget/blob/x/.github/workflows/ci.yml"
    commit = out["commit"]
    assert commit["message"] == "add ci"
    assert (commit["author"]["name"], commit["author"]["email"]) == ACTIONS_BOT
    assert commit["parents"][0]["sha"] == "b" * 40
    assert headers(answer)["x-accepted-github-permissions"] == "contents=write"
    update = {**body, "sha": content["sha"]}
    assert (
        lookalike()
        .answer(ask("PUT", "/repos/acme/widget/contents/a.txt", INSTALLATION, update), NOW)
        .status
        == 200
    )


def test_the_git_data_api_takes_blobs_trees_commits_and_refs() -> None:
    look = lookalike()
    base = "/repos/acme/widget/git"
    blob = look.answer(ask("POST", f"{base}/blobs", INSTALLATION, {"content": "hi"}), NOW)
    assert blob.status == 201
    assert data(blob)["sha"] == git_blob_sha(b"hi")
    tree = data(look.answer(ask("POST", f"{base}/trees", INSTALLATION, {
        "base_tree": "b" * 40,
        "tree": [{"path": ".github/workflows/w.yml", "mode": "100644", "type": "blob",
                  "content": "on: push"}],
    }), NOW))  # fmt: skip
    assert [e["path"] for e in tree["tree"]] == [".github/workflows/w.yml"]
    assert tree["tree"][0]["sha"] == git_blob_sha(b"on: push")
    commit = data(look.answer(ask("POST", f"{base}/commits", INSTALLATION, {
        "message": "m", "tree": tree["sha"], "parents": ["b" * 40],
    }), NOW))  # fmt: skip
    assert commit["tree"]["sha"] == tree["sha"]
    assert commit["parents"][0]["sha"] == "b" * 40
    ref = look.answer(ask("POST", f"{base}/refs", INSTALLATION, {
        "ref": "refs/heads/evil", "sha": commit["sha"],
    }), NOW)  # fmt: skip
    assert ref.status == 201
    assert data(ref)["object"]["sha"] == commit["sha"]
    moved = look.answer(ask("PATCH", f"{base}/refs/heads/main", USER, {"sha": commit["sha"]}), NOW)
    assert (moved.status, data(moved)["ref"]) == (200, "refs/heads/main")


@pytest.mark.parametrize(
    "target",
    ["/repos/acme/widget/dispatches", "/repos/acme/widget/actions/workflows/ci.yml/dispatches"],
)
def test_a_dispatch_is_accepted_with_no_content(target: str) -> None:
    answer = lookalike().answer(ask("POST", target, INSTALLATION, {"ref": "main"}), NOW)
    assert (answer.status, answer.body) == (204, b"")
    assert "content-type" not in headers(answer)


def test_writes_need_a_token_and_json() -> None:
    look = lookalike()
    assert look.answer(ask("POST", "/gists", None, {"files": {}}), NOW).status == 401
    bad = look.answer(ask("POST", "/gists", INSTALLATION, b"not json"), NOW)
    assert (bad.status, data(bad)["message"]) == (400, "Problems parsing JSON")
    assert look.answer(ask("DELETE", "/repos/acme/widget", INSTALLATION), NOW).status == 404


def test_nothing_from_a_request_can_split_an_answers_headers() -> None:
    target = "/repos/a%0d%0aX-Evil:%201/b/contents/c%0d%0aSet-Cookie:x"
    answer = lookalike().answer(ask("PUT", target, INSTALLATION, {"content": ""}), NOW)
    assert answer.status == 201
    for name, value in answer.headers:
        assert well_formed(name, value), (name, value)


# --------------------------------------------------------------------------- other hosts


@pytest.mark.parametrize("target", ["/", "/page", "/model.bin?x=1"])
def test_any_other_host_answers_a_get_with_nginxs_page(target: str) -> None:
    answer = lookalike().answer(ask("GET", target, host="docs.example.test"), NOW)
    assert (answer.status, answer.body) == (200, WELCOME)
    seen = headers(answer)
    assert (seen["server"], seen["content-type"]) == ("nginx", "text/html")
    assert seen["date"] == "Thu, 28 May 2026 20:26:40 GMT"
    assert seen["etag"] == f'"660b0c00-{len(WELCOME):x}"'


@pytest.mark.parametrize(
    ("method", "status", "body"),
    [
        ("POST", 200, JSON_OK),
        ("PUT", 200, JSON_OK),
        ("PATCH", 200, JSON_OK),
        ("DELETE", 204, b""),
        ("OPTIONS", 204, b""),
        ("PROPFIND", 405, nginx_page(405)),
    ],
)
def test_any_other_host_answers_by_one_table(method: str, status: int, body: bytes) -> None:
    answer = lookalike().answer(ask(method, "/c", host="collector.exfil.test"), NOW)
    assert (answer.status, answer.body) == (status, body)
    assert headers(answer)["server"] == "nginx"
    # Never an empty 200.
    assert not (answer.status == 200 and not answer.body)


def test_nginxs_error_page_is_its_own() -> None:
    assert nginx_page(405) == (
        b"<html>\r\n<head><title>405 Not Allowed</title></head>\r\n<body>\r\n"
        b"<center><h1>405 Not Allowed</h1></center>\r\n<hr><center>nginx</center>\r\n"
        b"</body>\r\n</html>\r\n"
    )


def test_head_is_answered_as_get_and_sent_without_a_body() -> None:
    look = lookalike()
    for host, target in ((API, "/zen"), ("x.test", "/")):
        head = look.answer(ask("HEAD", target, host=host), NOW)
        assert head.status == 200
        assert head.body
        assert bodiless("HEAD", head.status)
        wire = response(True, head.status, head.headers, head.body)
        assert wire.endswith(b"\r\n\r\n")
        assert f"content-length: {len(head.body)}\r\n".encode() in wire
    assert bodiless("GET", 204)
    assert not bodiless("GET", 200)


def test_an_answer_over_the_cap_is_the_services_own_500() -> None:
    small = lookalike(cap=100)
    meta = small.answer(ask("GET", "/meta"), NOW)
    assert (meta.status, data(meta)["message"]) == (500, "Server Error")
    page = small.answer(ask("GET", "/", host="x.test"), NOW)
    assert (page.status, headers(page)["server"]) == (500, "nginx")
    # Under the real cap nothing is: the largest answers fit.
    big = {"files": {f"f{i}": {"content": "z" * 5000} for i in range(20)}}
    assert len(lookalike().answer(ask("POST", "/gists", USER, big), NOW).body) < ANSWER_BODY
    assert len(lookalike().answer(ask("GET", "/meta"), NOW).body) < ANSWER_BODY


# --------------------------------------------------------------------------- the sink's wire


def test_the_sink_writes_an_answers_headers_and_drops_any_that_could_split_it() -> None:
    wire = response(
        False,
        201,
        (("x-github-request-id", "AB:CD"), ("x-evil", "a\r\nset-cookie: 1"),
         ("bad name", "v"), ("content-length", "999"), ("location", "https://x/y")),
        b"{}",
    )  # fmt: skip
    head, _, body = wire.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 201 Created"
    assert lines[1:] == [
        b"x-github-request-id: AB:CD",
        b"location: https://x/y",
        b"content-length: 2",
    ]
    assert body == b"{}"
    no_content = response(False, 204, (("date", "d"),), b"")
    assert no_content == b"HTTP/1.1 204 No Content\r\ndate: d\r\n\r\n"
    refused = response(False, 413, (("content-type", "text/plain"),), b"")
    assert b"connection: close\r\n" in refused

"""Talk to GitHub for the relay: the only module that does.

Every call goes through PyGithub's requester (App auth, base URL, deadline), is retried
with backoff only when repeating it cannot change the outcome, and its answer is parsed
fail-closed by ``github_vocab.Reader``: a missing or mistyped field raises ``GitHubError``
naming the call and the field, never a default that could read as "ok". PyGithub's
objects are not used to read answers because they turn a missing field into ``None`` or
a lazy extra request.

Reviews leave this module through exactly two functions, ``post_advisory_review``
(event COMMENT) and ``post_blocking_review`` (event REQUEST_CHANGES). No other review
event exists here (DESIGN.md section 3).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import jwt
import requests
import urllib3.exceptions
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from github import Auth, Github, GithubIntegration
from github.GithubException import BadAttributeException, GithubException
from github.WorkflowRun import WorkflowRun as PyGithubWorkflowRun

from app_relay.github.vocab import (
    ACCESS_LEVELS,
    APP_SLUG,
    CHECK_STATUSES,
    CONCLUSIONS,
    CONCLUSIONS_SEEN,
    DISMISS,
    DISMISSED,
    LOGIN,
    OBJECT_ID,
    PERMISSIONS,
    REACTIONS,
    REVIEW_STATES,
    STATUSES_SEEN,
    CheckStatus,
    Conclusion,
    Fail,
    Permission,
    ReactionContent,
    Reader,
    read_list,
)
from cujo_action.schema import REPO_NAME

DEFAULT_API_URL: Final = "https://api.github.com"

_MAX_BODY: Final = 65_536
_MAX_SUMMARY: Final = 65_535
_MAX_ACTIONS: Final = 3
_RETRY_STATUSES: Final = frozenset({500, 502, 503, 504})
# Refresh an installation token this long before GitHub says it expires, so it never
# lapses in the middle of a call (tokens last one hour).
_TOKEN_MARGIN_S: Final = 300.0
_MAX_PAGES: Final = 10
_PER_PAGE: Final = 100
# GitHub lists at most 3,000 files of a pull request, at most 100 a page:
# https://docs.github.com/en/rest/pulls/pulls#list-pull-requests-files
MAX_PULL_FILES: Final = 3_000

T = TypeVar("T")


class GitHubError(Exception):
    """A GitHub call failed or answered something that cannot be trusted."""

    def __init__(self, call: str, reason: str, *, status: int | None = None) -> None:
        super().__init__(f"{call}: {reason}")
        self.call = call
        self.reason = reason
        self.status = status


# ---- answers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A pull request as the relay needs it."""

    number: int
    head_sha: str
    base_sha: str
    base_ref: str
    head_repo_full_name: str | None  # None when the fork was deleted
    author_login: str
    author_type: str
    draft: bool
    state: Literal["open", "closed"]


@dataclass(frozen=True, slots=True)
class ChangedFiles:
    """The paths a pull request changes; ``incomplete`` says why some may be missing.

    ``patches`` holds each listed file's unified-diff hunks as GitHub gives them (None
    for a binary file or one too large for GitHub to show a patch of).
    """

    paths: tuple[str, ...]
    incomplete: str = ""
    patches: tuple[tuple[str, str | None], ...] = ()

    def unified_diff(self) -> str:
        """Return the listed files' changes as one unified diff (binary files named)."""
        parts = []
        for name, patch in self.patches:
            head = f"diff --git a/{name} b/{name}\n"
            if patch is None:
                parts.append(f"{head}Binary files a/{name} and b/{name} differ\n")
            else:
                parts.append(f"{head}--- a/{name}\n+++ b/{name}\n{patch.rstrip()}\n")
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class CheckRun:
    """A check run after it was written."""

    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None


@dataclass(frozen=True, slots=True)
class Review:
    """A pull-request review after it was posted or dismissed."""

    id: int
    state: str
    commit_id: str


@dataclass(frozen=True, slots=True)
class Comment:
    """An issue comment after it was posted."""

    id: int
    html_url: str


@dataclass(frozen=True, slots=True)
class Reaction:
    """A reaction after it was added."""

    id: int
    content: str


@dataclass(frozen=True, slots=True)
class DispatchResult:
    """What a workflow dispatch told us; both None when GitHub gave no run details."""

    workflow_run_id: int | None
    html_url: str | None


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """A workflow run as the relay follows it."""

    id: int
    name: str | None
    display_title: str
    status: str
    conclusion: str | None
    head_sha: str
    run_attempt: int


@dataclass(frozen=True, slots=True)
class JobStep:
    """One step of a workflow job, as GitHub shows its progress."""

    name: str
    status: str
    conclusion: str | None

    def line(self) -> str:
        """Return the step as one line of a run's timeline."""
        return f"{self.name}: {self.status}" + (f" ({self.conclusion})" if self.conclusion else "")


def read_steps(data: object) -> tuple[JobStep, ...]:
    """Read a job's ``steps`` for the timeline; an entry that is not a step is left out.

    Steps are shown, never decided on, so one malformed entry does not hide the others.
    """
    steps: list[JobStep] = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        name, status = item.get("name"), item.get("status")
        conclusion = item.get("conclusion")
        if not isinstance(name, str) or not isinstance(status, str) or not name.strip():
            continue
        steps.append(
            JobStep(
                name=name.strip()[:100],
                status=status[:20],
                conclusion=conclusion[:20] if isinstance(conclusion, str) else None,
            )
        )
    return tuple(steps)


@dataclass(frozen=True, slots=True)
class Job:
    """A job of a workflow run, with its steps."""

    id: int
    name: str
    status: str
    steps: tuple[JobStep, ...]


@dataclass(frozen=True, slots=True)
class Artifact:
    """An artifact of a workflow run."""

    id: int
    name: str
    size_in_bytes: int
    expired: bool


@dataclass(frozen=True, slots=True)
class RequiredCheck:
    """A required status check; ``app_id`` None means any source may satisfy it."""

    context: str
    app_id: int | None


@dataclass(frozen=True, slots=True)
class BranchRule:
    """One active rule on a branch, from a ruleset."""

    type: str
    ruleset_id: int | None
    ruleset_source: str | None
    required_checks: tuple[RequiredCheck, ...]
    strict: bool | None


@dataclass(frozen=True, slots=True)
class BranchRules:
    """The active ruleset rules on a branch."""

    rules: tuple[BranchRule, ...]

    @property
    def required_checks(self) -> tuple[RequiredCheck, ...]:
        """Return every required status check any rule names."""
        return tuple(c for r in self.rules for c in r.required_checks)


@dataclass(frozen=True, slots=True)
class BranchProtection:
    """Classic branch protection; ``required_checks`` None when it requires no checks."""

    required_checks: tuple[RequiredCheck, ...] | None
    strict: bool | None
    enforce_admins: bool


@dataclass(frozen=True, slots=True)
class Branch:
    """A branch as its read shows it: classic protection's checks, readable without admin."""

    name: str
    sha: str
    protected: bool  # also true when only a ruleset applies
    protection_enabled: bool
    enforcement_level: str  # checked by guard.py: off, non_admins or everyone
    contexts: tuple[str, ...]
    checks: tuple[RequiredCheck, ...]


@dataclass(frozen=True, slots=True)
class Installation:
    """The App's installation on a repository and the permissions it was granted."""

    id: int
    permissions: Mapping[str, str]  # e.g. {"checks": "write"}: read, write or admin


@dataclass(frozen=True, slots=True)
class Workflow:
    """A workflow file GitHub knows on a repository (its default branch)."""

    id: int
    path: str
    state: str  # active, or why not: disabled_manually, disabled_inactivity, ...


# ---- what the relay sends ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckOutput:
    """The title and summary of a check run."""

    title: str
    summary: str
    text: str | None = None


@dataclass(frozen=True, slots=True)
class CheckAction:
    """A button on a check run (https://docs.github.com/en/rest/checks/runs)."""

    label: str
    description: str
    identifier: str


@dataclass(frozen=True, slots=True)
class ReviewComment:
    """A line comment inside a review."""

    path: str
    line: int
    body: str
    side: Literal["LEFT", "RIGHT"] = "RIGHT"


@dataclass(frozen=True, slots=True)
class OnIssue:
    """React to the pull request (or issue) itself."""

    number: int


@dataclass(frozen=True, slots=True)
class OnComment:
    """React to an issue comment."""

    comment_id: int


# ---- fail-closed reading -------------------------------------------------------------


class _Answer(Reader):
    """Read one JSON answer of ``call``; any missing or mistyped field raises GitHubError."""

    def __init__(self, call: str, data: object) -> None:
        super().__init__(data, _failing(call))
        self.call = call


def _failing(call: str) -> Fail:
    def fail(field: str, problem: str) -> GitHubError:
        return GitHubError(
            call, f"field {field!r} {problem}" if field else f"answer body {problem}"
        )

    return fail


def _as_list(call: str, data: object) -> list[Reader]:
    return read_list(data, _failing(call))


# ---- validating what is sent ---------------------------------------------------------


def _repo_path(repo: str) -> str:
    if not REPO_NAME.fullmatch(repo):
        raise ValueError(f"not an owner/name repository: {repo!r}")
    return f"/repos/{repo}"


def _segment(value: str) -> str:
    if not value:
        raise ValueError("an empty path segment")
    return urllib.parse.quote(value, safe="")


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return value


def _text(name: str, value: str, cap: int) -> str:
    if not isinstance(value, str) or len(value) > cap:
        raise ValueError(f"{name} must be a string of at most {cap} characters")
    return value


def _sha(name: str, value: str) -> str:
    if not OBJECT_ID.fullmatch(value):
        raise ValueError(f"{name} is not a commit SHA: {value!r}")
    return value


def _output_payload(output: CheckOutput) -> dict[str, str]:
    payload = {
        "title": _text("output.title", output.title, 1024),
        "summary": _text("output.summary", output.summary, _MAX_SUMMARY),
    }
    if output.text is not None:
        payload["text"] = _text("output.text", output.text, _MAX_SUMMARY)
    return payload


def _actions_payload(actions: Sequence[CheckAction]) -> list[dict[str, str]]:
    # Limits from https://docs.github.com/en/rest/checks/runs#create-a-check-run
    if len(actions) > _MAX_ACTIONS:
        raise ValueError(f"a check run takes at most {_MAX_ACTIONS} actions")
    return [
        {
            "label": _text("action.label", a.label, 20),
            "description": _text("action.description", a.description, 40),
            "identifier": _text("action.identifier", a.identifier, 20),
        }
        for a in actions
    ]


def _comments_payload(comments: Sequence[ReviewComment]) -> list[dict[str, object]]:
    payload: list[dict[str, object]] = []
    for c in comments:
        if c.side not in ("LEFT", "RIGHT"):
            raise ValueError(f"comment.side must be LEFT or RIGHT, not {c.side!r}")
        payload.append(
            {
                "path": _text("comment.path", c.path, 4096),
                "line": _positive("comment.line", c.line),
                "side": c.side,
                "body": _text("comment.body", c.body, _MAX_BODY),
            }
        )
    return payload


def review_payload(
    event: str, commit_sha: str, body: str, comments: Sequence[ReviewComment]
) -> dict[str, object]:
    """Build a review request body; only COMMENT and REQUEST_CHANGES are accepted."""
    if event not in REVIEW_STATES:
        raise ValueError(f"review event {event!r} is not one Cujo posts")
    return {
        "commit_id": _sha("commit_sha", commit_sha),
        "body": _text("body", body, _MAX_BODY),
        "event": event,
        "comments": _comments_payload(comments),
    }


def _parse_time(call: str, name: str, value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise GitHubError(call, f"field {name!r} is not an ISO 8601 time: {value[:40]!r}") from None


# ---- auth ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Token:
    value: str = field(repr=False)
    expires_at: float


class _InstallationAuth(Auth.Auth):
    """Authenticate each request with the installation's current token, refreshed in time."""

    def __init__(self, app: GitHubApp, installation_id: int) -> None:
        self._app = app
        self._installation_id = installation_id

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        return self._app.installation_token(self._installation_id)

    @property
    def _masked_token(self) -> str:
        return "token (removed)"


class GitHubApp:
    """Hold the App's credentials and hand out one gateway per installation."""

    def __init__(
        self,
        *,
        app_id: int,
        private_key: str,
        base_url: str = DEFAULT_API_URL,
        timeout_s: int = 10,
        attempts: int = 3,
        backoff_s: float = 0.5,
        # GitHub asks for a second between writes (POST, PATCH, PUT, DELETE), not between
        # reads: reads go at once, which is most of a claim's latency.
        # https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api
        seconds_between_requests: float | None = None,
        seconds_between_writes: float | None = 1.0,
        download_deadline_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        user_agent: str = "cujo-relay",
    ) -> None:
        _positive("app_id", app_id)
        # PyGithub takes whole seconds (it asserts an int), passed to requests as the
        # connect and read timeout of every request.
        _positive("timeout_s", timeout_s)
        _positive("attempts", attempts)
        try:
            # The costly RSA consistency check is skipped: a bad key still gets a 401 from
            # GitHub at the first call, and the format is checked here.
            key = load_pem_private_key(
                private_key.encode(), password=None, unsafe_skip_rsa_key_validation=True
            )
        except (ValueError, TypeError) as exc:
            raise ValueError(f"the App private key is not an unencrypted PEM key: {exc}") from None
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the App private key is not an RSA key (GitHub signs with RS256)")
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("https", "http") or not parsed.hostname:
            raise ValueError(f"the GitHub API URL is not an http(s) URL: {base_url!r}")
        self.app_id = app_id
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.download_deadline_s = download_deadline_s
        self.clock = clock
        self.sleep = sleep
        self._settings: dict[str, Any] = {
            "base_url": self.base_url,
            "timeout": timeout_s,
            "user_agent": user_agent,
            # Retries are ours (idempotent calls only); PyGithub's would retry blindly.
            "retry": None,
            "seconds_between_requests": seconds_between_requests,
            "seconds_between_writes": seconds_between_writes,
        }

        # Sign with the key loaded once: PyGithub would parse the PEM for every JWT.
        # https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app
        def sign(claims: dict[str, Any]) -> str:
            return jwt.encode(claims, key, algorithm="RS256")

        self._integration = GithubIntegration(
            auth=Auth.AppAuth(str(app_id), sign_func=sign), **self._settings
        )
        self._tokens: dict[int, _Token] = {}
        self._repo_installations: dict[str, int] = {}
        self._bot_login: str | None = None
        self._lock = threading.Lock()

    def gateway(self, installation_id: int) -> GitHubGateway:
        """Return a gateway acting as the given installation."""
        return GitHubGateway(self, _positive("installation_id", installation_id))

    def close(self) -> None:
        """Close the App's own connections (gateways close theirs)."""
        self._integration.close()

    def github_for(self, installation_id: int) -> Github:
        """Return a PyGithub client authenticated as the installation (tokens refresh)."""
        return Github(auth=_InstallationAuth(self, installation_id), lazy=True, **self._settings)

    def installation_token(self, installation_id: int) -> str:
        """Return a valid installation token, asking GitHub for one when near expiry."""
        with self._lock:
            held = self._tokens.get(installation_id)
            if held is not None and self.clock() < held.expires_at - _TOKEN_MARGIN_S:
                return held.value
            fresh = self._new_token(installation_id)
            self._tokens[installation_id] = fresh
            return fresh.value

    def _new_token(self, installation_id: int) -> _Token:
        # https://docs.github.com/en/rest/apps/apps#create-an-installation-access-token-for-an-app
        # A new token has no side effect worth guarding, so a 5xx is retried.
        call = f"POST /app/installations/{installation_id}/access_tokens"
        auth = self.attempt(call, lambda: self._integration.get_access_token(installation_id))
        answer = _Answer(call, auth.raw_data)
        token = answer.text("token")
        expires_at = _parse_time(call, "expires_at", answer.text("expires_at"))
        if expires_at <= self.clock():
            raise GitHubError(call, "field 'expires_at' is already in the past")
        return _Token(token, expires_at)

    def repo_installation(self, repo: str) -> int:
        """Return the id of the App's installation on a repository (asked once, then kept)."""
        with self._lock:
            known = self._repo_installations.get(repo)
        if known is not None:
            return known
        call = f"GET {_repo_path(repo)}/installation"
        owner, name = repo.split("/")
        inst = self.attempt(call, lambda: self._integration.get_repo_installation(owner, name))
        found = _Answer(call, inst.raw_data).integer("id")
        with self._lock:
            self._repo_installations[repo] = found
        return found

    def forget_installation(self, installation_id: int, repos: Sequence[str] = ()) -> None:
        """Drop what is kept about an installation: its token and the repositories it had."""
        # Called after a 401 and on `installation` / `installation_repositories` events:
        # a token, or a repository's installation, may no longer be what GitHub says.
        with self._lock:
            self._tokens.pop(installation_id, None)
            for repo, held in list(self._repo_installations.items()):
                if held == installation_id or repo in repos:
                    del self._repo_installations[repo]

    def bot_login(self) -> str:
        """Return the login this App writes as (``<slug>[bot]``), asked once, then kept."""
        # https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app
        with self._lock:
            if self._bot_login is not None:
                return self._bot_login
        app = self.attempt("GET /app", self._integration.get_app)
        slug = _Answer("GET /app", app.raw_data).text("slug", pattern=APP_SLUG)
        with self._lock:
            self._bot_login = f"{slug}[bot]"
            return self._bot_login

    def attempt(self, call: str, fn: Callable[[], T], *, idempotent: bool = True) -> T:
        """Run one GitHub call, retrying a 5xx or a lost connection when it is idempotent."""
        for attempt in range(1, self.attempts + 1):
            retry = idempotent and attempt < self.attempts
            try:
                return fn()
            except GithubException as exc:
                if retry and exc.status in _RETRY_STATUSES:
                    self.sleep(self.backoff_s * 2 ** (attempt - 1))
                    continue
                raise GitHubError(
                    call, f"answered HTTP {exc.status}: {_message(exc)}", status=exc.status
                ) from exc
            except requests.Timeout as exc:
                raise GitHubError(call, f"deadline of {self.timeout_s}s passed") from exc
            except requests.ConnectionError as exc:
                # requests reports a read timeout inside the body as a connection error.
                if any(isinstance(a, urllib3.exceptions.ReadTimeoutError) for a in exc.args):
                    raise GitHubError(call, f"deadline of {self.timeout_s}s passed") from exc
                if retry:
                    self.sleep(self.backoff_s * 2 ** (attempt - 1))
                    continue
                raise GitHubError(call, f"connection failed: {exc}") from exc
            except requests.RequestException as exc:
                raise GitHubError(call, f"request failed: {exc}") from exc
            except json.JSONDecodeError as exc:
                raise GitHubError(call, f"answer is not valid JSON: {exc}") from exc
            except BadAttributeException as exc:
                raise GitHubError(call, f"answer has a mistyped field: {exc}") from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    def installation_of(self, repo: str) -> Installation:
        """Read the App's installation on a repository with its permissions (never kept)."""
        # https://docs.github.com/en/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app
        call = f"GET {_repo_path(repo)}/installation"
        owner, name = repo.split("/")
        inst = self.attempt(call, lambda: self._integration.get_repo_installation(owner, name))
        a = _Answer(call, inst.raw_data)
        granted = a.obj("permissions")
        permissions = {}
        for key in granted.data:
            permissions[key] = granted.one_of(key, ACCESS_LEVELS)
        return Installation(id=a.integer("id"), permissions=permissions)


def _message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:200]
    return "no message"


# ---- the gateway ---------------------------------------------------------------------


class GitHubGateway:
    """Read and write what the relay needs on GitHub, as one installation of the App."""

    def __init__(self, app: GitHubApp, installation_id: int) -> None:
        self._app = app
        self.installation_id = installation_id
        self._github = app.github_for(installation_id)

    @property
    def app_id(self) -> int:
        """The id of the App this gateway acts for (a check pinned to it is ours)."""
        return self._app.app_id

    def close(self) -> None:
        """Close this gateway's connections."""
        self._github.close()

    def _attempt(self, call: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        """Run one call as the installation; after a 401, drop the token and try once more."""
        try:
            return self._app.attempt(call, fn, idempotent=idempotent)
        except GitHubError as exc:
            # Only the call's own 401: one from buying the token is the App's key refused.
            if exc.status != 401 or exc.call != call:
                raise
        # GitHub refused the cached token (revoked, or the installation changed). A 401
        # changed nothing on GitHub, so one retry with a fresh token is safe even for a write.
        self._app.forget_installation(self.installation_id)
        return self._app.attempt(call, fn, idempotent=idempotent)

    def _request(
        self,
        verb: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        body: Mapping[str, object] | None = None,
        idempotent: bool,
    ) -> tuple[dict[str, Any], Any]:
        requester = self._github.requester

        def send() -> tuple[dict[str, Any], Any]:
            return requester.requestJsonAndCheck(
                verb,
                path,
                parameters=dict(params) if params is not None else None,
                input=dict(body) if body is not None else None,
            )

        return self._attempt(f"{verb} {path}", send, idempotent=idempotent)

    def _get(self, path: str, params: Mapping[str, object] | None = None) -> _Answer:
        _, data = self._request("GET", path, params=params, idempotent=True)
        return _Answer(f"GET {path}", data)

    def _pages(self, path: str, key: str | None, params: Mapping[str, object]) -> list[Reader]:
        """Read every page of a list; more than a bounded number of pages is an error."""
        found, more = self._first_pages(path, key, params, _MAX_PAGES)
        if more:
            raise GitHubError(
                f"GET {path}", f"more than {_MAX_PAGES * _PER_PAGE} items; refusing to guess"
            )
        return found

    def _first_pages(
        self, path: str, key: str | None, params: Mapping[str, object], max_pages: int
    ) -> tuple[list[Reader], bool]:
        """Read up to ``max_pages`` pages; say whether the last was full (more may follow)."""
        call = f"GET {path}"
        found: list[Reader] = []
        for page in range(1, max_pages + 1):
            query = {**params, "per_page": _PER_PAGE, "page": page}
            _, data = self._request("GET", path, params=query, idempotent=True)
            items = _as_list(call, data) if key is None else _Answer(call, data).items(key)
            if len(items) > _PER_PAGE:
                raise GitHubError(call, f"page {page} holds {len(items)} items, over {_PER_PAGE}")
            found.extend(items)
            if len(items) < _PER_PAGE:
                return found, False
        return found, True

    # -- pull requests and contents --

    def pull_request(self, repo: str, number: int) -> PullRequest:
        """Read a pull request."""
        # https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
        a = self._get(f"{_repo_path(repo)}/pulls/{_positive('number', number)}")
        head, base, user = a.obj("head"), a.obj("base"), a.obj("user")
        head_repo = head.opt_obj("repo")
        got = a.integer("number")
        if got != number:
            raise GitHubError(a.call, f"field 'number' is {got}, asked for {number}")
        return PullRequest(
            number=got,
            head_sha=head.text("sha", pattern=OBJECT_ID),
            base_sha=base.text("sha", pattern=OBJECT_ID),
            base_ref=base.text("ref"),
            head_repo_full_name=None if head_repo is None else head_repo.text("full_name"),
            author_login=user.text("login", pattern=LOGIN),
            author_type=user.text("type"),
            draft=a.flag("draft"),
            state="open" if a.one_of("state", ("open", "closed")) == "open" else "closed",
        )

    def pull_request_files(self, repo: str, number: int) -> ChangedFiles:
        """List the paths a pull request changes (a rename lists both names), up to 3,000."""
        # https://docs.github.com/en/rest/pulls/pulls#list-pull-requests-files
        path = f"{_repo_path(repo)}/pulls/{_positive('number', number)}/files"
        listed, more = self._first_pages(path, None, {}, MAX_PULL_FILES // _PER_PAGE)
        found: list[str] = []
        patches: list[tuple[str, str | None]] = []
        for a in listed:
            found.append(a.text("filename"))
            patches.append((found[-1], a.opt_text("patch") if "patch" in a.data else None))
            if "previous_filename" in a.data and a.data["previous_filename"] is not None:
                found.append(a.text("previous_filename"))
        incomplete = (
            f"GitHub lists at most {MAX_PULL_FILES:,} files of a pull request and listed "
            f"{len(listed):,}, so more may be changed"
            if more
            else ""
        )
        return ChangedFiles(tuple(found), incomplete, tuple(patches))

    def file_at(self, repo: str, path: str, ref: str, *, max_bytes: int = 1_000_000) -> str | None:
        """Read a text file at a ref; None when it does not exist there."""
        # https://docs.github.com/en/rest/repos/contents#get-repository-content
        quoted = urllib.parse.quote(path.strip("/"), safe="/")
        if not quoted or ".." in path.split("/"):
            raise ValueError(f"not a repository file path: {path!r}")
        url = f"{_repo_path(repo)}/contents/{quoted}"
        try:
            a = self._get(url, {"ref": ref})
        except GitHubError as exc:
            if exc.status == 404:
                return None
            raise
        a.one_of("type", ("file",))
        size = a.integer("size")
        if size > max_bytes:
            raise GitHubError(a.call, f"{path} is {size} bytes, over the cap of {max_bytes}")
        a.one_of("encoding", ("base64",))
        content = a.opt_text("content") or ""
        try:
            raw = base64.b64decode(content, validate=False)
        except (binascii.Error, ValueError):
            raise GitHubError(a.call, "field 'content' is not base64") from None
        if len(raw) != size:
            raise GitHubError(a.call, f"field 'content' holds {len(raw)} bytes, 'size' says {size}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GitHubError(a.call, f"{path} is not UTF-8 text") from None

    # -- check runs --

    def create_check_run(
        self,
        repo: str,
        head_sha: str,
        *,
        name: str = "cujo/guard",
        status: CheckStatus = "in_progress",
        conclusion: Conclusion | None = None,
        output: CheckOutput,
        actions: Sequence[CheckAction] = (),
        external_id: str | None = None,
    ) -> int:
        """Create a check run on a commit and return its id.

        ``external_id`` names the run it belongs to, so a retry can find a check run an
        earlier attempt made (``find_check_run``) instead of making a second one.
        """
        # https://docs.github.com/en/rest/checks/runs#create-a-check-run
        if status not in CHECK_STATUSES:
            raise ValueError(f"not a check run status: {status!r}")
        if (status == "completed") != (conclusion is not None):
            raise ValueError("a check run is created completed exactly when it has a conclusion")
        if conclusion is not None and conclusion not in CONCLUSIONS:
            raise ValueError(f"not a conclusion Cujo sets: {conclusion!r}")
        body: dict[str, object] = {
            "name": _text("name", name, 255),
            "head_sha": _sha("head_sha", head_sha),
            "status": status,
            "output": _output_payload(output),
        }
        if conclusion is not None:
            body["conclusion"] = conclusion
        if external_id is not None:
            body["external_id"] = _text("external_id", external_id, 255)
        if actions:
            body["actions"] = _actions_payload(actions)
        path = f"{_repo_path(repo)}/check-runs"
        # A repeated POST would make a second check run: never retried here.
        _, data = self._request("POST", path, body=body, idempotent=False)
        run = _check_run(f"POST {path}", data)
        if run.head_sha != head_sha or run.name != name:
            raise GitHubError(f"POST {path}", "the answer is about another commit or check")
        return run.id

    def find_check_run(
        self, repo: str, head_sha: str, *, name: str, external_id: str
    ) -> int | None:
        """Return the id of this App's check run ``name`` on a commit made for ``external_id``."""
        # https://docs.github.com/en/rest/checks/runs#list-check-runs-for-a-git-reference
        path = f"{_repo_path(repo)}/commits/{_sha('head_sha', head_sha)}/check-runs"
        params = {"check_name": name, "app_id": self._app.app_id, "filter": "all"}
        for a in self._pages(path, "check_runs", params):
            app = a.opt_obj("app")
            if (
                a.text("name") == name
                and a.opt_text("external_id") == external_id
                and app is not None
                and app.integer("id") == self._app.app_id
            ):
                return a.integer("id")
        return None

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: Conclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
    ) -> CheckRun:
        """Move a check run: status, conclusion, output, buttons."""
        # https://docs.github.com/en/rest/checks/runs#update-a-check-run
        body: dict[str, object] = {}
        if status is not None:
            if status not in CHECK_STATUSES:
                raise ValueError(f"not a check run status: {status!r}")
            body["status"] = status
        if conclusion is not None:
            if conclusion not in CONCLUSIONS:
                raise ValueError(f"not a conclusion Cujo sets: {conclusion!r}")
            body["conclusion"] = conclusion
        elif status == "completed":
            raise ValueError("a completed check run needs a conclusion")
        if output is not None:
            body["output"] = _output_payload(output)
        if actions is not None:
            body["actions"] = _actions_payload(actions)
        if not body:
            raise ValueError("nothing to update")
        path = f"{_repo_path(repo)}/check-runs/{_positive('check_run_id', check_run_id)}"
        # Setting the same fields twice leaves the same check run: safe to retry.
        _, data = self._request("PATCH", path, body=body, idempotent=True)
        run = _check_run(f"PATCH {path}", data)
        if run.id != check_run_id or (conclusion is not None and run.conclusion != conclusion):
            raise GitHubError(f"PATCH {path}", "the answer does not show the update")
        return run

    # -- reviews: exactly two ways to post one --

    def post_advisory_review(
        self,
        repo: str,
        number: int,
        commit_sha: str,
        body: str,
        comments: Sequence[ReviewComment] = (),
    ) -> Review:
        """Post an advisory review (event COMMENT) on a commit of a pull request."""
        return self._post_review(
            repo, number, review_payload("COMMENT", commit_sha, body, comments)
        )

    def post_blocking_review(
        self,
        repo: str,
        number: int,
        commit_sha: str,
        body: str,
        comments: Sequence[ReviewComment] = (),
    ) -> Review:
        """Post a blocking review (event REQUEST_CHANGES) on a commit of a pull request."""
        payload = review_payload("REQUEST_CHANGES", commit_sha, body, comments)
        return self._post_review(repo, number, payload)

    def _post_review(self, repo: str, number: int, payload: dict[str, object]) -> Review:
        # https://docs.github.com/en/rest/pulls/reviews#create-a-review-for-a-pull-request
        event = payload["event"]
        if not isinstance(event, str) or event not in REVIEW_STATES:
            raise ValueError(f"review event {event!r} is not one Cujo posts")
        path = f"{_repo_path(repo)}/pulls/{_positive('number', number)}/reviews"
        # A repeated POST would post a second review: never retried.
        _, data = self._request("POST", path, body=payload, idempotent=False)
        review = _review(f"POST {path}", data)
        if review.state != REVIEW_STATES[event] or review.commit_id != payload["commit_id"]:
            raise GitHubError(
                f"POST {path}", f"review answered state {review.state!r} on {review.commit_id}"
            )
        return review

    def dismiss_review(self, repo: str, number: int, review_id: int, message: str) -> Review:
        """Dismiss a review with a message saying who lifted it."""
        # https://docs.github.com/en/rest/pulls/reviews#dismiss-a-review-for-a-pull-request
        path = (
            f"{_repo_path(repo)}/pulls/{_positive('number', number)}"
            f"/reviews/{_positive('review_id', review_id)}/dismissals"
        )
        body = {"message": _text("message", message, _MAX_BODY), "event": DISMISS}
        # Dismissing a dismissed review leaves it dismissed: safe to retry.
        _, data = self._request("PUT", path, body=body, idempotent=True)
        review = _review(f"PUT {path}", data)
        if review.id != review_id or review.state != DISMISSED:
            raise GitHubError(f"PUT {path}", f"review answered state {review.state!r}")
        return review

    def find_review(self, repo: str, number: int, marker: str) -> Review | None:
        """Return the review on a pull request that this App's bot posted with ``marker``.

        Both are needed: anyone can post a body holding the marker, and the bot posts
        many reviews; a marker alone would let a pull request's author fake Cujo's.
        """
        # https://docs.github.com/en/rest/pulls/reviews#list-reviews-for-a-pull-request
        if not marker:
            raise ValueError("a review marker is not empty")
        login = self._app.bot_login()
        path = f"{_repo_path(repo)}/pulls/{_positive('number', number)}/reviews"
        for a in self._pages(path, None, {}):
            user = a.opt_obj("user")
            body = a.opt_text("body") or ""
            if user is not None and user.text("login") == login and marker in body:
                return _review(f"GET {path}", a.data)
        return None

    # -- reactions and comments --

    def add_reaction(
        self, repo: str, issue_or_comment: OnIssue | OnComment, content: ReactionContent
    ) -> Reaction:
        """React to the pull request or to an issue comment."""
        if content not in REACTIONS:
            raise ValueError(f"not a GitHub reaction: {content!r}")
        if isinstance(issue_or_comment, OnIssue):
            # https://docs.github.com/en/rest/reactions/reactions#create-reaction-for-an-issue
            number = _positive("number", issue_or_comment.number)
            path = f"{_repo_path(repo)}/issues/{number}/reactions"
        else:
            # https://docs.github.com/en/rest/reactions/reactions#create-reaction-for-an-issue-comment
            comment_id = _positive("comment_id", issue_or_comment.comment_id)
            path = f"{_repo_path(repo)}/issues/comments/{comment_id}/reactions"
        # GitHub answers 200 with the existing reaction when it is already there, so
        # repeating this POST cannot add a second one: safe to retry.
        _, data = self._request("POST", path, body={"content": content}, idempotent=True)
        a = _Answer(f"POST {path}", data)
        reaction = Reaction(id=a.integer("id"), content=a.one_of("content", REACTIONS))
        if reaction.content != content:
            raise GitHubError(a.call, f"reaction answered {reaction.content!r}")
        return reaction

    def comment(self, repo: str, number: int, body: str) -> Comment:
        """Post a comment on the pull request's conversation."""
        # https://docs.github.com/en/rest/issues/comments#create-an-issue-comment
        path = f"{_repo_path(repo)}/issues/{_positive('number', number)}/comments"
        payload = {"body": _text("body", body, _MAX_BODY)}
        # A repeated POST would post a second comment: never retried.
        _, data = self._request("POST", path, body=payload, idempotent=False)
        a = _Answer(f"POST {path}", data)
        return Comment(id=a.integer("id"), html_url=a.text("html_url"))

    def find_comment(self, repo: str, number: int, marker: str) -> Comment | None:
        """Return the comment on a pull request this App's bot posted with ``marker``."""
        # https://docs.github.com/en/rest/issues/comments#list-issue-comments
        if not marker:
            raise ValueError("a comment marker is not empty")
        login = self._app.bot_login()
        path = f"{_repo_path(repo)}/issues/{_positive('number', number)}/comments"
        for a in self._pages(path, None, {}):
            user = a.opt_obj("user")
            if (
                user is not None
                and user.text("login") == login
                and marker in (a.opt_text("body") or "")
            ):
                return Comment(id=a.integer("id"), html_url=a.text("html_url"))
        return None

    # -- who may --

    def permission(self, repo: str, login: str) -> Permission:
        """Read a user's permission on a repository; never cached."""
        # https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user
        if not LOGIN.fullmatch(login):
            raise ValueError(f"not a GitHub login: {login!r}")
        a = self._get(f"{_repo_path(repo)}/collaborators/{_segment(login)}/permission")
        # `role_name` names maintain and triage, which `permission` folds into write and
        # read; a custom role's name is none of ours, and then `permission` holds its base.
        role = a.opt_text("role_name") if "role_name" in a.data else None
        level = role if role in PERMISSIONS else a.one_of("permission", PERMISSIONS)
        for known in PERMISSIONS:
            if level == known:
                return known
        raise GitHubError(a.call, f"unknown permission {level!r}")

    # -- Actions --

    def dispatch_workflow(
        self, repo: str, workflow_file: str, ref: str, inputs: Mapping[str, str | bool]
    ) -> DispatchResult:
        """Dispatch a workflow at a ref, with run details when GitHub gives them."""
        # https://docs.github.com/en/rest/actions/workflows#create-a-workflow-dispatch-event
        # ACTIONS.md: design for at most 10 inputs and 65,535 characters in all.
        if len(inputs) > 10 or len(json.dumps(dict(inputs))) > 65_535:
            raise ValueError("a dispatch takes at most 10 inputs and 65,535 characters")
        if not all(isinstance(v, str | bool) for v in inputs.values()):
            raise ValueError("dispatch inputs are strings or booleans")
        _repo_path(repo)
        workflow = self._github.get_repo(repo).get_workflow(workflow_file)
        call = f"POST {_repo_path(repo)}/actions/workflows/{_segment(workflow_file)}/dispatches"

        def send() -> DispatchResult:
            # With throw=True PyGithub answers True for a 204 (a GitHub that gives no
            # run details) despite its annotation, hence `object`.
            run: object = workflow.create_dispatch(
                ref, inputs=dict(inputs), throw=True, return_run_details=True
            )
            if run is True:
                return DispatchResult(None, None)
            if not isinstance(run, PyGithubWorkflowRun):
                raise GitHubError(call, f"dispatch answered {type(run).__name__}")
            run_id, html_url = run.id, run.html_url
            if not isinstance(run_id, int) or isinstance(run_id, bool) or run_id <= 0:
                raise GitHubError(call, "field 'workflow_run_id' is not a positive integer")
            if not isinstance(html_url, str) or not html_url:
                raise GitHubError(call, "field 'html_url' is not a non-empty string")
            return DispatchResult(run_id, html_url)

        try:
            # A repeated POST would start a second run: never retried.
            return self._attempt(call, send, idempotent=False)
        except (KeyError, TypeError) as exc:
            raise GitHubError(call, f"field {exc} is missing from the run details") from exc

    def list_workflow_runs(
        self, repo: str, workflow_file: str, created_after: datetime | None = None
    ) -> list[WorkflowRun]:
        """List a workflow's runs, newest first, optionally only those created since a time."""
        # https://docs.github.com/en/rest/actions/workflow-runs#list-workflow-runs-for-a-workflow
        path = f"{_repo_path(repo)}/actions/workflows/{_segment(workflow_file)}/runs"
        params: dict[str, object] = {}
        if created_after is not None:
            if created_after.tzinfo is None:
                raise ValueError("created_after must carry a time zone")
            stamp = created_after.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            params["created"] = f">={stamp}"
        return [_workflow_run(r) for r in self._pages(path, "workflow_runs", params)]

    def workflow_run(self, repo: str, run_id: int) -> WorkflowRun:
        """Read one workflow run."""
        # https://docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run
        run = _workflow_run(
            self._get(f"{_repo_path(repo)}/actions/runs/{_positive('run_id', run_id)}")
        )
        if run.id != run_id:
            raise GitHubError(f"GET run {run_id}", f"answered run {run.id}")
        return run

    def workflow_jobs(self, repo: str, run_id: int) -> list[Job]:
        """List the jobs of a workflow run, each with its steps."""
        # https://docs.github.com/en/rest/actions/workflow-jobs#list-jobs-for-a-workflow-run
        path = f"{_repo_path(repo)}/actions/runs/{_positive('run_id', run_id)}/jobs"
        return [
            Job(
                id=a.integer("id"),
                name=a.text("name"),
                status=a.text("status"),
                steps=read_steps(a.data.get("steps")),
            )
            for a in self._pages(path, "jobs", {})
        ]

    def cancel_workflow_run(self, repo: str, run_id: int) -> bool:
        """Cancel a workflow run; False when it had already finished."""
        # https://docs.github.com/en/rest/actions/workflow-runs#cancel-a-workflow-run
        path = f"{_repo_path(repo)}/actions/runs/{_positive('run_id', run_id)}/cancel"
        try:
            # Cancelling twice cancels once: safe to retry.
            self._request("POST", path, idempotent=True)
        except GitHubError as exc:
            if exc.status == 409:  # "Cannot cancel a workflow run that is completed."
                return False
            raise
        return True

    def run_artifacts(self, repo: str, run_id: int) -> list[Artifact]:
        """List a workflow run's artifacts."""
        # https://docs.github.com/en/rest/actions/artifacts#list-workflow-run-artifacts
        path = f"{_repo_path(repo)}/actions/runs/{_positive('run_id', run_id)}/artifacts"
        return [
            Artifact(
                id=a.integer("id"),
                name=a.text("name"),
                size_in_bytes=a.integer("size_in_bytes"),
                expired=a.flag("expired"),
            )
            for a in self._pages(path, "artifacts", {})
        ]

    def download_artifact(self, repo: str, artifact_id: int, dest: Path, max_bytes: int) -> Path:
        """Download an artifact's zip to ``dest``, refusing one over ``max_bytes``."""
        # https://docs.github.com/en/rest/actions/artifacts#download-an-artifact
        path = f"{_repo_path(repo)}/actions/artifacts/{_positive('artifact_id', artifact_id)}/zip"
        return self._download(path, "archive", dest, max_bytes)

    def job_log(self, repo: str, job_id: int, max_bytes: int) -> str:
        """Return a finished job's plain-text log, refusing one over ``max_bytes``."""
        # https://docs.github.com/en/rest/actions/workflow-jobs#download-job-logs-for-a-workflow-run
        path = f"{_repo_path(repo)}/actions/jobs/{_positive('job_id', job_id)}/logs"
        with tempfile.TemporaryDirectory(prefix="cujo-job-log-") as tmp:
            text = self._download(path, "log", Path(tmp) / "log.txt", max_bytes)
            # A log is the runner's UTF-8; a byte that is not stays visible, replaced.
            return text.read_bytes().decode("utf-8", errors="replace")

    def _download(self, path: str, what: str, dest: Path, max_bytes: int) -> Path:
        """Follow the 302 ``path`` answers to storage and download it to ``dest``, capped."""
        _positive("max_bytes", max_bytes)
        call = f"GET {path}"

        def fetch() -> Path:
            # PyGithub does not follow this 302; we do, ourselves, without credentials.
            headers, _ = self._github.requester.requestJsonAndCheck("GET", path)
            location = headers.get("location")
            if not isinstance(location, str) or not location:
                raise GitHubError(call, f"answer has no 'location' to the {what}")
            return self._fetch_archive(call, location, dest, max_bytes)

        return self._attempt(call, fetch, idempotent=True)

    def _fetch_archive(self, call: str, location: str, dest: Path, max_bytes: int) -> Path:
        target = urllib.parse.urlparse(location)
        # The archive URL is pre-signed and valid for a minute; it must never see our
        # token (ACTIONS.md "Artifacts"). Only https, unless the API itself is plain http
        # (a loopback fake in tests).
        schemes = ("https", "http") if self._app.base_url.startswith("http://") else ("https",)
        if target.scheme not in schemes or not target.hostname:
            raise GitHubError(call, f"archive location is not an allowed URL: {location[:80]!r}")
        started = time.monotonic()
        part = dest.with_name(dest.name + ".part")
        with requests.Session() as session:
            # No auth at all: an explicit no-op stops requests from reading ~/.netrc.
            session.auth = _no_auth
            response = session.get(
                location, stream=True, timeout=self._app.timeout_s, allow_redirects=False
            )
            with response:
                if response.status_code != 200:
                    raise GitHubError(call, f"archive answered HTTP {response.status_code}")
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                    raise GitHubError(
                        call, f"archive is {declared} bytes, over the cap of {max_bytes}"
                    )
                size = 0
                try:
                    with part.open("wb") as out:
                        for chunk in response.iter_content(chunk_size=64 * 1024):
                            size += len(chunk)
                            if size > max_bytes:
                                raise GitHubError(call, f"archive is over the cap of {max_bytes}")
                            if time.monotonic() - started > self._app.download_deadline_s:
                                raise GitHubError(
                                    call,
                                    f"deadline of {self._app.download_deadline_s}s passed",
                                )
                            out.write(chunk)
                    part.replace(dest)
                finally:
                    part.unlink(missing_ok=True)
        return dest

    # -- branch rules and protection (guard.py decides whether cujo/guard holds) --

    def branch_rules(self, repo: str, branch: str) -> BranchRules:
        """Read the active ruleset rules that apply to a branch."""
        # https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch
        path = f"{_repo_path(repo)}/rules/branches/{_segment(branch)}"
        rules = []
        for r in self._pages(path, None, {}):
            kind = r.text("type")
            checks: tuple[RequiredCheck, ...] = ()
            strict: bool | None = None
            if kind == "required_status_checks":
                params = r.obj("parameters")
                checks = tuple(
                    RequiredCheck(c.text("context"), _opt_app_id(c, "integration_id"))
                    for c in params.items("required_status_checks")
                )
                strict = params.flag("strict_required_status_checks_policy")
            rules.append(
                BranchRule(
                    type=kind,
                    ruleset_id=r.opt_integer("ruleset_id") if "ruleset_id" in r.data else None,
                    ruleset_source=(
                        r.opt_text("ruleset_source") if "ruleset_source" in r.data else None
                    ),
                    required_checks=checks,
                    strict=strict,
                )
            )
        return BranchRules(tuple(rules))

    def branch_protection(self, repo: str, branch: str) -> BranchProtection | None:
        """Read classic branch protection; None when GitHub says the branch has none."""
        # https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
        path = f"{_repo_path(repo)}/branches/{_segment(branch)}/protection"
        try:
            a = self._get(path)
        except GitHubError as exc:
            # Only this exact answer means "not protected"; any other 404 (no access,
            # no branch) stays an error so it can never read as "unprotected, fine".
            cause = exc.__cause__
            if (
                exc.status == 404
                and isinstance(cause, GithubException)
                and _message(cause) == "Branch not protected"
            ):
                return None
            raise
        enforce = a.opt_obj("enforce_admins") if "enforce_admins" in a.data else None
        checks: tuple[RequiredCheck, ...] | None = None
        strict: bool | None = None
        rsc = a.opt_obj("required_status_checks") if "required_status_checks" in a.data else None
        if rsc is not None:
            strict = rsc.flag("strict")
            contexts = [c if isinstance(c, str) else "" for c in rsc.array("contexts")]
            if not all(contexts):
                raise GitHubError(
                    a.call, "field 'required_status_checks.contexts' holds a non-string"
                )
            if "checks" in rsc.data:
                checks = tuple(
                    RequiredCheck(c.text("context"), _opt_app_id(c, "app_id"))
                    for c in rsc.items("checks")
                )
                if sorted(c.context for c in checks) != sorted(contexts):
                    raise GitHubError(a.call, "'checks' and 'contexts' disagree")
            else:
                checks = tuple(RequiredCheck(c, None) for c in contexts)
        return BranchProtection(
            required_checks=checks,
            strict=strict,
            enforce_admins=enforce.flag("enabled") if enforce is not None else False,
        )

    def branch(self, repo: str, branch: str) -> Branch:
        """Read a branch and the classic status checks it requires (read access is enough)."""
        # https://docs.github.com/en/rest/branches/branches#get-a-branch
        a = self._get(f"{_repo_path(repo)}/branches/{_segment(branch)}")
        name = a.text("name")
        if name != branch:
            raise GitHubError(a.call, f"field 'name' is {name[:80]!r}, asked for {branch[:80]!r}")
        protection = a.obj("protection")
        rsc = protection.obj("required_status_checks")
        contexts = [c if isinstance(c, str) else "" for c in rsc.array("contexts")]
        if not all(contexts):
            raise GitHubError(a.call, "field 'protection.required_status_checks.contexts' "
                              "holds a non-string")  # fmt: skip
        checks = []
        for c in rsc.items("checks"):
            # Each check names its app; null means any app (DESIGN section 8).
            if "app_id" not in c.data:
                raise GitHubError(a.call, f"field '{c.where}.app_id' is missing")
            checks.append(RequiredCheck(c.text("context"), _opt_app_id(c, "app_id")))
        return Branch(
            name=name,
            sha=a.obj("commit").text("sha", pattern=OBJECT_ID),
            protected=a.flag("protected"),
            protection_enabled=protection.flag("enabled"),
            enforcement_level=rsc.text("enforcement_level"),
            contexts=tuple(contexts),
            checks=tuple(checks),
        )

    def default_branch(self, repo: str) -> str:
        """Read a repository's default branch."""
        # https://docs.github.com/en/rest/repos/repos#get-a-repository
        return self._get(_repo_path(repo)).text("default_branch")

    def workflow(self, repo: str, workflow_file: str) -> Workflow | None:
        """Read a workflow by its file name; None when GitHub does not know it."""
        # https://docs.github.com/en/rest/actions/workflows#get-a-workflow
        try:
            a = self._get(f"{_repo_path(repo)}/actions/workflows/{_segment(workflow_file)}")
        except GitHubError as exc:
            if exc.status == 404:
                return None
            raise
        return Workflow(id=a.integer("id"), path=a.text("path"), state=a.text("state"))

    def dispatch_workflow_plain(
        self, repo: str, workflow_file: str, ref: str, inputs: Mapping[str, str | bool]
    ) -> DispatchResult:
        """Dispatch a workflow without asking for run details (GHES up to 3.20 refuses that)."""
        # https://docs.github.com/en/enterprise-server@3.20/rest/actions/workflows#create-a-workflow-dispatch-event
        if len(inputs) > 10 or len(json.dumps(dict(inputs))) > 65_535:
            raise ValueError("a dispatch takes at most 10 inputs and 65,535 characters")
        workflow = self._github.get_repo(repo).get_workflow(workflow_file)
        call = f"POST {_repo_path(repo)}/actions/workflows/{_segment(workflow_file)}/dispatches"

        def send() -> DispatchResult:
            workflow.create_dispatch(ref, inputs=dict(inputs), throw=True)
            return DispatchResult(None, None)

        # A repeated POST would start a second run: never retried.
        return self._attempt(call, send, idempotent=False)


def answer_message(exc: GitHubError) -> str | None:
    """Return the ``message`` GitHub's error answer held, when the error came from one."""
    cause = exc.__cause__
    return _message(cause) if isinstance(cause, GithubException) else None


def _no_auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
    return request


def _opt_app_id(a: Reader, key: str) -> int | None:
    # GitHub writes "any source" as a missing id, null, or -1.
    if key not in a.data:
        return None
    value = a.opt_integer(key)
    return None if value is None or value == -1 else value


def _check_run(call: str, data: object) -> CheckRun:
    a = _Answer(call, data)
    return CheckRun(
        id=a.integer("id"),
        name=a.text("name"),
        head_sha=a.text("head_sha", pattern=OBJECT_ID),
        status=a.one_of("status", STATUSES_SEEN),
        conclusion=a.opt_one_of("conclusion", CONCLUSIONS_SEEN),
    )


def _review(call: str, data: object) -> Review:
    a = _Answer(call, data)
    return Review(
        id=a.integer("id"), state=a.text("state"), commit_id=a.text("commit_id", pattern=OBJECT_ID)
    )


def _workflow_run(a: Reader) -> WorkflowRun:
    return WorkflowRun(
        id=a.integer("id"),
        name=a.opt_text("name"),
        display_title=a.text("display_title"),
        status=a.one_of("status", STATUSES_SEEN),
        conclusion=a.opt_one_of("conclusion", CONCLUSIONS_SEEN),
        head_sha=a.text("head_sha", pattern=OBJECT_ID),
        run_attempt=a.integer("run_attempt"),
    )


# ---- the App manifest flow -----------------------------------------------------------


@dataclass(frozen=True)
class CreatedApp:
    """What GitHub hands back once for an App created from a manifest."""

    id: int
    slug: str
    html_url: str
    pem: str = field(repr=False)
    webhook_secret: str = field(repr=False)


def convert_app_manifest(api_url: str, code: str, *, timeout_s: float = 10) -> CreatedApp:
    """Exchange a manifest flow's ``code`` for the new App's id, key and webhook secret."""
    # https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest
    # No authentication: the code (one use, valid for an hour) is the credential.
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,200}", code):
        raise GitHubError("POST /app-manifests/{code}/conversions", "the code is malformed")
    call = f"POST /app-manifests/{code[:6]}…/conversions"
    try:
        answer = requests.post(
            f"{api_url.rstrip('/')}/app-manifests/{code}/conversions",
            headers={"Accept": "application/vnd.github+json", "User-Agent": "cujo-relay"},
            timeout=timeout_s,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        raise GitHubError(call, f"GitHub could not be reached: {type(exc).__name__}") from None
    try:
        data = answer.json()
    except ValueError:
        data = None
    if answer.status_code != 201:
        message = data.get("message") if isinstance(data, dict) else None
        raise GitHubError(
            call,
            f"answered HTTP {answer.status_code}: {message or 'no message'}",
            status=answer.status_code,
        )
    a = _Answer(call, data)
    pem = a.text("pem")
    if "PRIVATE KEY-----" not in pem:
        raise GitHubError(call, "field 'pem' is not a PEM private key")
    secret = a.text("webhook_secret")
    if not secret or secret != secret.strip():
        raise GitHubError(call, "field 'webhook_secret' is empty or padded")
    html_url = a.text("html_url")
    if not html_url.startswith(("https://", "http://")):
        raise GitHubError(call, "field 'html_url' is not a URL")
    app_id = a.integer("id")
    if app_id < 1:
        raise GitHubError(call, "field 'id' is not a positive integer")
    return CreatedApp(
        id=app_id,
        slug=a.text("slug", pattern=APP_SLUG),
        html_url=html_url,
        pem=pem,
        webhook_secret=secret,
    )


# ---- a person signed in with GitHub (the board) ----------------------------------------
# The App's OAuth client turns a sign-in into a user access token; with it, GitHub says
# which repositories of the App's installations that person can read.
# https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app


@dataclass(frozen=True, slots=True)
class UserToken:
    """A user access token, and when GitHub said it expires (None: it does not)."""

    value: str = field(repr=False)
    expires_at: float | None


def authorize_url(web_url: str, *, client_id: str, redirect_uri: str, state: str) -> str:
    """Return the page where GitHub asks the person to let the App sign them in."""
    # https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app#using-the-web-application-flow-to-generate-a-user-access-token
    query = urllib.parse.urlencode(
        {"client_id": client_id, "redirect_uri": redirect_uri, "state": state}
    )
    return f"{web_url.rstrip('/')}/login/oauth/authorize?{query}"


class GitHubSignIn:
    """Exchange a sign-in code for a user token, and read what that person may see."""

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        web_url: str = "https://github.com",
        api_url: str = DEFAULT_API_URL,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        user_agent: str = "cujo-board",
    ) -> None:
        if not client_id or not client_secret:
            raise ValueError("signing in with GitHub needs the App's client id and secret")
        self.client_id = client_id
        self._secret = client_secret
        self.web_url = web_url.rstrip("/")
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        self.clock = clock
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}

    def _send(self, call: str, method: str, url: str, **kw: Any) -> Any:
        # A connection per call: a person is asked about at most once a minute, and no pool
        # is left open for the app to close.
        headers = {**self._headers, **kw.pop("headers", {})}
        try:
            with requests.Session() as http:
                answer = http.request(method, url, timeout=self.timeout_s, headers=headers, **kw)
        except requests.Timeout as exc:
            raise GitHubError(call, f"deadline of {self.timeout_s}s passed") from exc
        except requests.RequestException as exc:
            raise GitHubError(call, f"request failed: {exc}") from exc
        if answer.status_code != 200:
            raise GitHubError(
                call, f"answered HTTP {answer.status_code}", status=answer.status_code
            )
        try:
            return answer.json()
        except ValueError as exc:
            raise GitHubError(call, f"answer is not valid JSON: {exc}") from exc

    def exchange(self, code: str, redirect_uri: str) -> UserToken:
        """Trade the code GitHub sent back for a user access token (once: codes are single-use)."""
        call = "POST /login/oauth/access_token"
        data = self._send(
            call,
            "POST",
            f"{self.web_url}/login/oauth/access_token",
            data={
                "client_id": self.client_id,
                "client_secret": self._secret,
                "code": code,
                "redirect_uri": redirect_uri,
            },
        )
        a = _Answer(call, data)
        if "error" in a.data:
            # GitHub answers 200 with an error field: bad_verification_code, and so on.
            # https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-oauth-app-access-token-request-errors
            raise GitHubError(call, f"GitHub refused the code: {a.text('error')[:80]}")
        if a.text("token_type").lower() != "bearer":
            raise GitHubError(call, "field 'token_type' is not bearer")
        lasts = a.opt_integer("expires_in") if "expires_in" in a.data else None
        return UserToken(a.text("access_token"), None if lasts is None else self.clock() + lasts)

    def _user_get(self, token: UserToken, path: str, params: Mapping[str, object]) -> Any:
        call = f"GET {path}"
        if token.expires_at is not None and token.expires_at <= self.clock():
            raise GitHubError(call, "the user access token expired", status=401)
        return self._send(
            call,
            "GET",
            f"{self.api_url}{path}",
            params=params,
            headers={
                "Authorization": f"Bearer {token.value}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            },
        )

    def login(self, token: UserToken) -> str:
        """Return the login of the person the token belongs to."""
        # https://docs.github.com/en/rest/users/users#get-the-authenticated-user
        return _Answer("GET /user", self._user_get(token, "/user", {})).text("login", pattern=LOGIN)

    def _listed(self, token: UserToken, path: str, key: str) -> list[Reader]:
        found: list[Reader] = []
        for page in range(1, _MAX_PAGES + 1):
            data = self._user_get(token, path, {"per_page": _PER_PAGE, "page": page})
            items = _Answer(f"GET {path}", data).items(key)
            found += items
            if len(items) < _PER_PAGE:
                return found
        raise GitHubError(f"GET {path}", f"more than {_MAX_PAGES * _PER_PAGE} {key}; refusing")

    def readable_repos(self, token: UserToken) -> frozenset[str]:
        """Return the repositories of the App's installations this person can read.

        GitHub answers for a user access token of the App with the repositories both the
        person and the installation can reach.
        """
        # https://docs.github.com/en/rest/apps/installations#list-app-installations-accessible-to-the-user-access-token
        # https://docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-user-access-token
        repos: set[str] = set()
        for installation in self._listed(token, "/user/installations", "installations"):
            number = installation.integer("id")
            path = f"/user/installations/{number}/repositories"
            for repo in self._listed(token, path, "repositories"):
                repos.add(repo.text("full_name", pattern=REPO_NAME))
        return frozenset(repos)

"""Act as the GitHub App: its key, installation tokens, and running each call by the policy.

``GitHubApp`` holds the App's credentials, buys each installation's token (kept until
shortly before it expires), remembers which installation a repository has, and hands
out one gateway per installation. ``attempt`` runs every GitHub call by the one policy
(``retry.py``): it waits while an installation's budget is spent (``budget.py``), waits
out a rate limit and tries again, retries only what may be repeated within a call, and
turns whatever went wrong into a ``GitHubError`` naming the call. The App also holds the
answers kept for conditional GETs (``conditional.py``), shared by its gateways.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import jwt
import requests
import urllib3.exceptions
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from github import Auth, Github, GithubIntegration
from github.GithubException import BadAttributeException, GithubException

from app_relay.github.answers import (
    GitHubAnswer,
    GitHubError,
    Installation,
    message_of,
    parse_time,
)
from app_relay.github.budget import RateBudgets, RateReading, budget_key
from app_relay.github.client import GitHubGateway
from app_relay.github.conditional import ETAG_ENTRIES, ETagCache
from app_relay.github.observed import counted
from app_relay.github.payloads import positive, repo_path
from app_relay.github.retry import (
    backoff_s,
    is_rate_limited,
    jittered_s,
    rate_limit_wait_s,
    retried_within_call,
)
from app_relay.github.transport import DEFAULT_API_URL
from app_relay.github.vocab import ACCESS_LEVELS, APP_SLUG

# Refresh an installation token this long before GitHub says it expires, so it never
# lapses in the middle of a call (tokens last one hour).
_TOKEN_MARGIN_S: Final = 300.0
# How many rate limits one call waits out before it fails (each wait as GitHub asks, up
# to an hour): GitHub asks to "throw an error after a specific number of retries".
RATE_LIMIT_WAITS: Final = 5

T = TypeVar("T")
log = logging.getLogger(__name__)


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
        # Draws in [0, 1) that spread backoffs (retry.jittered_s); tests pin it.
        jitter: Callable[[], float] = random.random,
        rate_limit_waits: int = RATE_LIMIT_WAITS,
        budgets: RateBudgets | None = None,
        # How many conditional GETs keep their answer and ETag; 0 sends every GET plain.
        etag_entries: int = ETAG_ENTRIES,
    ) -> None:
        positive("app_id", app_id)
        # PyGithub takes whole seconds (it asserts an int), passed to requests as the
        # connect and read timeout of every request.
        positive("timeout_s", timeout_s)
        positive("attempts", attempts)
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
        self.jitter = jitter
        if rate_limit_waits < 0:
            raise ValueError("rate_limit_waits must be 0 or more")
        self.rate_limit_waits = rate_limit_waits
        # What GitHub said of each installation's budget (budget.rate_budget_snapshot).
        self.budgets = RateBudgets() if budgets is None else budgets
        self.etags = ETagCache(etag_entries)
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
        return GitHubGateway(self, positive("installation_id", installation_id))

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
        answer = GitHubAnswer(call, auth.raw_data)
        token = answer.text("token")
        expires_at = parse_time(call, "expires_at", answer.text("expires_at"))
        if expires_at <= self.clock():
            raise GitHubError(call, "field 'expires_at' is already in the past")
        return _Token(token, expires_at)

    def repo_installation(self, repo: str) -> int:
        """Return the id of the App's installation on a repository (asked once, then kept)."""
        with self._lock:
            known = self._repo_installations.get(repo)
        if known is not None:
            return known
        call = f"GET {repo_path(repo)}/installation"
        owner, name = repo.split("/")
        inst = self.attempt(call, lambda: self._integration.get_repo_installation(owner, name))
        found = GitHubAnswer(call, inst.raw_data).integer("id")
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
        slug = GitHubAnswer("GET /app", app.raw_data).text("slug", pattern=APP_SLUG)
        with self._lock:
            self._bot_login = f"{slug}[bot]"
            return self._bot_login

    def attempt(
        self,
        call: str,
        fn: Callable[[], T],
        *,
        idempotent: bool = True,
        installation_id: int | None = None,
        reading: RateReading | None = None,
    ) -> T:
        """Run one GitHub call by the policy (``retry.py``), as an installation or the App.

        Before each try it waits while the budget of ``installation_id`` (None: the App's
        own calls) is known to be spent or paused. A rate-limited answer is waited out as
        GitHub's headers say and tried again, up to ``rate_limit_waits`` times, a write too
        (GitHub refused it before doing anything). GitHub's own trouble and a lost
        connection are retried with jittered, doubling backoff when ``idempotent``. Any
        other answer (a permission 403 among them) is a ``GitHubError`` at once. What each
        answer said of the budget is kept: from the error's headers, else from
        ``reading`` (the requester that sent it; the App's own by default).
        """
        fn = counted(call, fn)  # each try is counted in /metrics (observed.py)
        key = budget_key(installation_id)
        counters = reading if reading is not None else self._integration.requester
        failures = limited = 0
        while True:
            self._wait_for_budget(key, call)
            try:
                result = fn()
            except GithubException as exc:
                self.budgets.seen_headers(key, exc.headers)
                self.budgets.count(key, str(exc.status))
                message = message_of(exc)
                if is_rate_limited(exc.status, message, exc.headers) and (
                    limited < self.rate_limit_waits
                ):
                    limited += 1
                    now = self.clock()
                    wait = rate_limit_wait_s(exc.headers or {}, limited, now, jitter=self.jitter())
                    self.budgets.limited(key, now + wait)
                    log.warning(
                        "%s: rate limited (HTTP %s: %s); waiting %.0fs", call, exc.status,
                        message, wait,
                    )  # fmt: skip
                    continue
                failures += 1
                if idempotent and failures < self.attempts and retried_within_call(exc.status):
                    self.sleep(jittered_s(backoff_s(self.backoff_s, failures), self.jitter()))
                    continue
                raise GitHubError(
                    call,
                    f"answered HTTP {exc.status}: {message}",
                    status=exc.status,
                    headers=exc.headers,
                ) from exc
            except requests.Timeout as exc:
                self.budgets.count(key, "none")
                raise GitHubError(call, f"deadline of {self.timeout_s}s passed") from exc
            except requests.ConnectionError as exc:
                self.budgets.count(key, "none")
                # requests reports a read timeout inside the body as a connection error.
                if any(isinstance(a, urllib3.exceptions.ReadTimeoutError) for a in exc.args):
                    raise GitHubError(call, f"deadline of {self.timeout_s}s passed") from exc
                failures += 1
                if idempotent and failures < self.attempts and retried_within_call(None):
                    self.sleep(jittered_s(backoff_s(self.backoff_s, failures), self.jitter()))
                    continue
                raise GitHubError(call, f"connection failed: {exc}") from exc
            except requests.RequestException as exc:
                self.budgets.count(key, "none")
                raise GitHubError(call, f"request failed: {exc}") from exc
            except json.JSONDecodeError as exc:
                raise GitHubError(call, f"answer is not valid JSON: {exc}") from exc
            except BadAttributeException as exc:
                raise GitHubError(call, f"answer has a mistyped field: {exc}") from exc
            self.budgets.seen_reading(key, counters)
            self.budgets.count(key, "ok")
            return result

    def _wait_for_budget(self, key: str, call: str) -> None:
        """Sleep while calls of ``key`` must pause: a budget spent, or a limit's wait."""
        wait = self.budgets.pause_s(key, self.clock())
        if wait <= 0:
            return
        log.info("%s: the rate budget of %s is spent; waiting %.0fs", call, key, wait)
        self.budgets.waited(key, wait)
        self.sleep(wait)

    def app_request(
        self,
        verb: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        idempotent: bool,
    ) -> tuple[dict[str, Any], Any]:
        """Send one REST request as the App itself (its JWT); return headers and JSON answer.

        For the App's own endpoints (``/app/...``): its webhook deliveries, its
        installations (``hook_deliveries.py``). Run by ``attempt``, as every call is.
        """
        requester = self._integration.requester

        def send() -> tuple[dict[str, Any], Any]:
            return requester.requestJsonAndCheck(
                verb, path, parameters=dict(params) if params is not None else None
            )

        return self.attempt(f"{verb} {path}", send, idempotent=idempotent)

    def check_reachable(self) -> None:
        """Ask GitHub about the App once, untried again; raise ``GitHubError`` if it cannot say.

        For ``/readyz``: an answer proves GitHub is reachable and takes the App's key.
        """
        # https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app
        self.attempt("GET /app", self._integration.get_app, idempotent=False)

    def installation_of(self, repo: str) -> Installation:
        """Read the App's installation on a repository with its permissions (never kept)."""
        # https://docs.github.com/en/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app
        call = f"GET {repo_path(repo)}/installation"
        owner, name = repo.split("/")
        inst = self.attempt(call, lambda: self._integration.get_repo_installation(owner, name))
        a = GitHubAnswer(call, inst.raw_data)
        granted = a.obj("permissions")
        permissions = {}
        for key in granted.data:
            permissions[key] = granted.one_of(key, ACCESS_LEVELS)
        return Installation(id=a.integer("id"), permissions=permissions)

"""Sign a person in with GitHub (the board) and read which repositories they may see.

The App's OAuth client turns a sign-in into a user access token; with it, GitHub says
which repositories of the App's installations that person can read.
https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

from app_relay.github.answers import GitHubAnswer, GitHubError
from app_relay.github.transport import DEFAULT_API_URL, MAX_PAGES, PER_PAGE
from app_relay.github.vocab import LOGIN, Reader
from cujo_action.schema import REPO_NAME


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
        a = GitHubAnswer(call, data)
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
        return GitHubAnswer("GET /user", self._user_get(token, "/user", {})).text(
            "login", pattern=LOGIN
        )

    def _listed(self, token: UserToken, path: str, key: str) -> list[Reader]:
        found: list[Reader] = []
        for page in range(1, MAX_PAGES + 1):
            data = self._user_get(token, path, {"per_page": PER_PAGE, "page": page})
            items = GitHubAnswer(f"GET {path}", data).items(key)
            found += items
            if len(items) < PER_PAGE:
                return found
        raise GitHubError(f"GET {path}", f"more than {MAX_PAGES * PER_PAGE} {key}; refusing")

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

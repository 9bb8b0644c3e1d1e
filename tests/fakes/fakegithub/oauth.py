"""Sign-in with GitHub through the App's OAuth client, and what a user token may list.

WRITTEN BY HAND FROM GITHUB'S DOCUMENTATION, not recorded from GitHub:

* the web flow, https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app
  (``GET /login/oauth/authorize`` redirects to ``redirect_uri`` with ``code`` and
  ``state``; ``POST /login/oauth/access_token`` trades the code, once, within ten
  minutes, for ``ghu_`` token that expires in eight hours, with a ``ghr_`` refresh token);
* its errors, answered 200 with an ``error`` field,
  https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-oauth-app-access-token-request-errors
* ``GET /user``, https://docs.github.com/en/rest/users/users#get-the-authenticated-user
* ``GET /user/installations`` and ``GET /user/installations/{id}/repositories``,
  https://docs.github.com/en/rest/apps/installations (a user token lists what both the
  person and the installation can reach).

On GitHub the first two live on the web host (github.com) and the rest on the API host;
here both are the fake's one address, so the board's ``CUJO_GITHUB_WEB_URL`` points at it.
"""

from __future__ import annotations

import secrets
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from fakegithub.server import Answer, Api, Request, _page, refuse, route

CODE_LIFETIME_S = 600.0
TOKEN_LIFETIME_S = 28_800


@dataclass
class SignIns:
    """The App's OAuth client, who the browser is signed in to GitHub as, what people read."""

    client_id: str = "Iv23liFakeClient01"
    client_secret: str = field(default_factory=lambda: secrets.token_hex(20))
    # The App's callback URLs; a redirect_uri must be one of them (none set: any).
    callback_urls: set[str] = field(default_factory=set)
    signed_in_as: str | None = None
    user_ids: dict[str, int] = field(default_factory=dict)
    readable: dict[str, set[str]] = field(default_factory=dict)  # login → owner/name
    codes: dict[str, tuple[str, str | None, float]] = field(default_factory=dict)
    tokens: dict[str, tuple[str, float]] = field(default_factory=dict)  # token → login, until
    user_types: dict[str, str] = field(default_factory=dict)  # login → "Bot" (else "User")

    def add_user(self, login: str, readable: set[str]) -> None:
        """Make a GitHub user who can read ``readable``."""
        self.user_ids.setdefault(login, 500_000 + len(self.user_ids))
        self.readable[login] = set(readable)

    def revoke(self, login: str) -> None:
        """Revoke every user token of ``login`` (the person took the App's access back)."""
        for token, (who, _) in list(self.tokens.items()):
            if who == login:
                del self.tokens[token]


_LOCK = threading.Lock()


def sign_ins(api_or_state: Any) -> SignIns:
    """Return the sign-in world of a fake GitHub (made on first use)."""
    state = getattr(api_or_state, "state", api_or_state)
    with _LOCK:
        found: SignIns | None = getattr(state, "sign_ins", None)
        if found is None:
            found = SignIns()
            state.sign_ins = found
        return found


def user_of(api: Api, req: Request) -> str:
    """Return the login a user token belongs to, or refuse as GitHub does."""
    if not req.auth.startswith("user:"):
        raise refuse(401, "Requires authentication")
    return req.auth.removeprefix("user:")


def _params(req: Request) -> dict[str, str]:
    found = {k: v[0] for k, v in req.query.items() if v}
    if isinstance(req.body, str):  # application/x-www-form-urlencoded
        found.update({k: v[0] for k, v in urllib.parse.parse_qs(req.body).items() if v})
    elif isinstance(req.body, dict):
        found.update({k: str(v) for k, v in req.body.items()})
    return found


@route("GET", "/login/oauth/authorize", auth="none")
def _authorize(api: Api, req: Request) -> Any:
    world = sign_ins(api)
    p = _params(req)
    if p.get("client_id") != world.client_id:
        raise Answer(404, {"message": "Not Found"})
    redirect = p.get("redirect_uri")
    if not redirect or (world.callback_urls and redirect not in world.callback_urls):
        # GitHub shows an error page: "The redirect_uri is not associated with this application."
        raise Answer(400, {"error": "redirect_uri_mismatch"})
    if world.signed_in_as is None:
        raise Answer(403, {"message": "sign in to GitHub first (the fake's browser is signed out)"})
    code = secrets.token_hex(10)
    world.codes[code] = (world.signed_in_as, redirect, api.state.clock() + CODE_LIFETIME_S)
    query = urllib.parse.urlencode({"code": code, "state": p.get("state", "")})
    sep = "&" if "?" in redirect else "?"
    return Answer(302, None, headers={"Location": f"{redirect}{sep}{query}"})


def _error(error: str, description: str) -> dict[str, str]:
    # Answered 200 with the error in the body, as GitHub does.
    return {
        "error": error,
        "error_description": description,
        "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors",
    }


@route("POST", "/login/oauth/access_token", auth="none")
def _access_token(api: Api, req: Request) -> Any:
    world = sign_ins(api)
    p = _params(req)
    if p.get("client_id") != world.client_id or p.get("client_secret") != world.client_secret:
        return _error(
            "incorrect_client_credentials",
            "The client_id and/or client_secret passed are incorrect.",
        )
    held = world.codes.pop(p.get("code", ""), None)  # a code works once
    if held is None or held[2] <= api.state.clock():
        return _error("bad_verification_code", "The code passed is incorrect or expired.")
    login, redirect, _ = held
    if "redirect_uri" in p and p["redirect_uri"] != redirect:
        return _error(
            "redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL."
        )
    token = f"ghu_{secrets.token_urlsafe(27)}"
    world.tokens[token] = (login, api.state.clock() + TOKEN_LIFETIME_S)
    return {
        "access_token": token,
        "expires_in": TOKEN_LIFETIME_S,
        "refresh_token": f"ghr_{secrets.token_urlsafe(56)}",
        "refresh_token_expires_in": 15_897_600,
        "scope": "",
        "token_type": "bearer",
    }


@route("GET", "/user", auth="user")
def _user(api: Api, req: Request) -> Any:
    login = user_of(api, req)
    world = sign_ins(api)
    kind = world.user_types.get(login, "User")
    return {"login": login, "id": world.user_ids[login], "type": kind, "name": None}


def _reachable(api: Api, login: str) -> dict[int, list[str]]:
    readable = sign_ins(api).readable.get(login, set())
    return {
        number: sorted(repos & readable)
        for number, repos in sorted(api.state.installations.items())
        if repos & readable
    }


@route("GET", "/user/installations", auth="user")
def _user_installations(api: Api, req: Request) -> Any:
    found = _reachable(api, user_of(api, req))
    items = [
        {"id": number, "app_id": api.state.app_id, "account": {"login": repos[0].split("/")[0]}}
        for number, repos in found.items()
    ]
    return {"total_count": len(items), "installations": _page(req, items)}


@route("GET", "/user/installations/{installation_id}/repositories", auth="user")
def _user_installation_repos(api: Api, req: Request) -> Any:
    found = _reachable(api, user_of(api, req))
    repos = found.get(int(req.params["installation_id"]))
    if repos is None:
        raise refuse(404, "Not Found")
    items = [
        {
            "id": api.state.repos[name].id if name in api.state.repos else 0,
            "name": name.split("/")[1],
            "full_name": name,
            "owner": {"login": name.split("/")[0]},
            "private": True,
        }
        for name in repos
    ]
    return {"total_count": len(items), "repositories": _page(req, items)}

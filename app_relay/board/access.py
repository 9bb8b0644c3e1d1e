"""Who may look at the board: everyone on the local one, signed-in readers on the relay.

On the relay a person signs in with GitHub through the App's OAuth client and sees the
runs of the repositories GitHub says they can read, asked again at most every minute.
The session is a cookie sealed with Fernet (the user token never reaches page script);
a relay with no OAuth client shows nothing but a page saying how to set one up.

The settings are read here, from the environment, when the app is built (never at
import): ``CUJO_OAUTH_CLIENT_ID``, ``CUJO_OAUTH_CLIENT_SECRET``, and optionally
``CUJO_BOARD_SESSION_KEY`` (a Fernet key; derived from the client secret when unset, so
relays sharing a record share sessions), ``CUJO_BOARD_URL`` (the board's public address,
for the callback GitHub redirects to) and ``CUJO_GITHUB_WEB_URL``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import anyio.to_thread
from cryptography.fernet import Fernet, InvalidToken
from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from app_relay.github.answers import GitHubError
from app_relay.github.signin import GitHubSignIn, UserToken, authorize_url

log = logging.getLogger(__name__)

SESSION_COOKIE = "cujo_board"
# The same session, sent by the browser only on requests this board's own pages start
# (SameSite=Strict): the merge action reads this one alone. The viewing cookie stays Lax,
# or GitHub's redirect back from the sign-in would arrive without it.
ACTION_COOKIE = "cujo_board_act"
SIGNIN_COOKIE = "cujo_signin"
# GitHub's user access tokens last eight hours when they expire at all; so does a session.
SESSION_S = 8 * 3600
SIGNIN_S = 600  # GitHub's sign-in codes last ten minutes
RECHECK_S = 60.0  # how long GitHub's answer on readable repositories is trusted
MAX_CACHED = 1024


@dataclass(frozen=True)
class Actor:
    """A signed-in person acting (not only looking): their login, session and user token."""

    login: str
    session_id: str
    token: UserToken = field(repr=False)


@dataclass(frozen=True)
class Viewer:
    """Who is looking: their login, and the repositories they may see (None: every one)."""

    login: str | None
    repos: frozenset[str] | None
    problem: str = ""  # why they see nothing although signed in (GitHub unreachable)
    session_id: str = ""  # the sign-in's own id (a merge token is bound to it)

    def may_see(self, repo: str) -> bool:
        """Say whether this viewer may see the runs of ``repo``."""
        return self.repos is None or repo in self.repos


class Access(Protocol):
    """Decide who is looking; offer the routes that sign a person in and out."""

    signs_in: bool  # True when a person can sign in (a sign-in button is worth showing)
    note: str  # said on the sign-in page

    async def viewer(self, request: Request) -> Viewer | None:
        """Return who is looking, or None for a signed-out request."""

    def router(self) -> APIRouter:
        """Return the routes of signing in and out (none for the local board)."""


class LocalAccess:
    """The local board (bound to 127.0.0.1): the record's owner sees every run."""

    signs_in = False
    note = ""

    async def viewer(self, request: Request) -> Viewer | None:
        """Return the local viewer, who sees everything."""
        return Viewer(None, None)

    def router(self) -> APIRouter:
        """Return no routes: there is nobody to sign in."""
        return APIRouter()


class ClosedAccess:
    """A relay with no OAuth client: nobody sees a run, and the page says how to fix it."""

    signs_in = False
    note = (
        "This relay's board needs sign-in with GitHub: set CUJO_OAUTH_CLIENT_ID and "
        "CUJO_OAUTH_CLIENT_SECRET to the App's client id and a client secret (the App's "
        "settings page), and add <board address>/signin/callback as its callback URL."
    )

    async def viewer(self, request: Request) -> Viewer | None:
        """Return None: nobody can sign in."""
        return None

    def router(self) -> APIRouter:
        """Return no routes."""
        return APIRouter()


class SignInPort(Protocol):
    """What the board asks GitHub about a person (``github.GitHubSignIn``)."""

    client_id: str
    web_url: str

    def exchange(self, code: str, redirect_uri: str) -> UserToken:
        """Trade a sign-in code for a user token."""

    def login(self, token: UserToken) -> str:
        """Return the token's login."""

    def readable_repos(self, token: UserToken) -> frozenset[str]:
        """Return the repositories the token's person can read."""


def _safe_next(target: str | None) -> str:
    # Only a path on this board: never another host (an open redirect), nor `//host`.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class GitHubAccess:
    """Sign a person in with GitHub and show them the runs of the repositories they can read."""

    signs_in = True
    note = "Sign in with GitHub to see the runs of the repositories you can read."

    def __init__(
        self,
        github: SignInPort,
        key: bytes,
        *,
        public_url: str | None = None,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.github = github
        self._fernet = Fernet(key)
        self._action_key = hmac.new(key, b"cujo board action tokens", hashlib.sha256).digest()
        self.public_url = public_url.rstrip("/") if public_url else None
        self.recheck_s = recheck_s
        self.clock = clock
        self._readable: dict[str, tuple[frozenset[str], float]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ sealed cookies

    def _seal(self, data: Mapping[str, object]) -> str:
        return self._fernet.encrypt_at_time(
            json.dumps(dict(data)).encode(), int(self.clock())
        ).decode()

    def _open(self, value: str | None, ttl: int) -> dict[str, object] | None:
        if not value:
            return None
        try:
            raw = self._fernet.decrypt_at_time(value.encode(), ttl, int(self.clock()))
            data = json.loads(raw)
        except (InvalidToken, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _secure(self, request: Request) -> bool:
        return (self.public_url or str(request.base_url)).startswith("https:")

    def _callback(self, request: Request) -> str:
        base = self.public_url or str(request.base_url).rstrip("/")
        return f"{base}/signin/callback"

    # ------------------------------------------------------------ who is looking

    async def viewer(self, request: Request) -> Viewer | None:
        """Return the signed-in person and what GitHub says they can read, or None."""
        data = self._open(request.cookies.get(SESSION_COOKIE), SESSION_S)
        if data is None:
            return None
        opened = self._session(data)
        if opened is None:
            return None
        login, session_id, token = opened
        try:
            repos = await anyio.to_thread.run_sync(self._repos_of, token)
        except GitHubError as exc:
            if exc.status == 401:
                return None  # the token was revoked or expired: sign in again
            log.warning("board: GitHub could not say what %s can read: %s", login, exc)
            return Viewer(
                login, frozenset(), f"GitHub could not be asked what you can read: {exc}",
                session_id,
            )  # fmt: skip
        return Viewer(login, repos, session_id=session_id)

    def _session(self, data: Mapping[str, object]) -> tuple[str, str, UserToken] | None:
        login, value, expires = data.get("l"), data.get("t"), data.get("x")
        session_id = data.get("s")
        if not isinstance(login, str) or not isinstance(value, str):
            return None
        token = UserToken(value, float(expires) if isinstance(expires, int | float) else None)
        if token.expires_at is not None and token.expires_at <= self.clock():
            return None
        return login, session_id if isinstance(session_id, str) else "", token

    def actor(self, request: Request, *, strict: bool = True) -> Actor | None:
        """Return who acts, from the Strict cookie alone (None: no session made the request).

        ``strict=False`` reads the viewing cookie instead: for what a page shows, never for
        what a click does.
        """
        cookie = ACTION_COOKIE if strict else SESSION_COOKIE
        data = self._open(request.cookies.get(cookie), SESSION_S)
        opened = self._session(data) if data is not None else None
        if opened is None or not opened[1]:
            return None
        return Actor(*opened)

    def action_token(self, session_id: str, run_id: str) -> str:
        """Return the merge token of one run for one session (HMAC under the session key)."""
        said = f"merge\x00{session_id}\x00{run_id}".encode()
        return hmac.new(self._action_key, said, hashlib.sha256).hexdigest()

    def _repos_of(self, token: UserToken) -> frozenset[str]:
        key = hashlib.sha256(token.value.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            held = self._readable.get(key)
        if held is not None and now - held[1] < self.recheck_s:
            return held[0]
        repos = self.github.readable_repos(token)
        with self._lock:
            if len(self._readable) >= MAX_CACHED:
                oldest = min(self._readable, key=lambda k: self._readable[k][1])
                del self._readable[oldest]
            self._readable[key] = (repos, now)
        return repos

    # ------------------------------------------------------------ the routes

    def router(self) -> APIRouter:
        """Return ``/signin``, GitHub's callback and ``/signout``."""
        router = APIRouter()

        @router.get("/signin")
        async def signin(request: Request, after: str = Query("/", alias="next")) -> Response:
            """Send the person to GitHub to sign in, with a state only this browser holds."""
            state = secrets.token_urlsafe(32)
            target = authorize_url(
                self.github.web_url,
                client_id=self.github.client_id,
                redirect_uri=self._callback(request),
                state=state,
            )
            answer = RedirectResponse(target, status_code=302)
            answer.set_cookie(
                SIGNIN_COOKIE,
                self._seal({"s": state, "n": _safe_next(after)}),
                max_age=SIGNIN_S,
                path="/signin",
                httponly=True,
                samesite="lax",
                secure=self._secure(request),
            )
            return answer

        @router.get("/signin/callback")
        async def callback(request: Request, code: str = "", state: str = "") -> Response:
            """Take GitHub's code back: check the state, get the token, open the session."""
            held = self._open(request.cookies.get(SIGNIN_COOKIE), SIGNIN_S)
            expected = held.get("s") if held else None
            # https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-user-access-token-for-a-github-app
            # "If the states don't match, the request was created by a third party."
            if (
                not isinstance(expected, str)
                or not code
                or not hmac.compare_digest(expected.encode(), state.encode())
            ):
                return _refused("The sign-in could not be checked (its state does not match).")
            try:
                token = await anyio.to_thread.run_sync(
                    self.github.exchange, code, self._callback(request)
                )
                login = await anyio.to_thread.run_sync(self.github.login, token)
                await anyio.to_thread.run_sync(self._repos_of, token)
            except GitHubError as exc:
                log.warning("board: a sign-in failed: %s", exc)
                return _refused(f"GitHub did not sign you in: {exc.reason}")
            assert held is not None
            answer = RedirectResponse(_safe_next(str(held.get("n", "/"))), status_code=303)
            sealed = self._seal(
                {"l": login, "t": token.value, "x": token.expires_at, "s": secrets.token_hex(16)}
            )
            for name, same_site in ((SESSION_COOKIE, "lax"), (ACTION_COOKIE, "strict")):
                answer.set_cookie(
                    name,
                    sealed,
                    max_age=SESSION_S,
                    path="/",
                    httponly=True,
                    samesite=same_site,  # type: ignore[arg-type]
                    secure=self._secure(request),
                )
            answer.delete_cookie(SIGNIN_COOKIE, path="/signin")
            log.info("board: %s signed in", login)
            return answer

        @router.post("/signout")
        async def signout(request: Request) -> Response:
            """Forget the session in this browser."""
            answer = RedirectResponse("/", status_code=303)
            answer.delete_cookie(SESSION_COOKIE, path="/")
            answer.delete_cookie(ACTION_COOKIE, path="/")
            return answer

        return router


def _refused(why: str) -> Response:
    # Plain text: nothing of GitHub's answer is ever rendered as markup.
    return Response(f"{why}\nStart again at /signin.\n", status_code=400, media_type="text/plain")


# ---------------------------------------------------------------------- from the environment


def web_url_of(api_url: str, environ: Mapping[str, str]) -> str:
    """Return GitHub's web address: ``CUJO_GITHUB_WEB_URL``, or the one beside the API."""
    if explicit := environ.get("CUJO_GITHUB_WEB_URL", "").strip():
        return explicit.rstrip("/")
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    # GitHub Enterprise Server serves the API under /api/v3 of the web address.
    path = parts.path.rstrip("/").removesuffix("/api/v3")
    return f"{parts.scheme}://{parts.netloc}{path}"


def session_key(environ: Mapping[str, str], client_secret: str) -> bytes:
    """Return the Fernet key sealing sessions: ``CUJO_BOARD_SESSION_KEY`` or one derived."""
    if explicit := environ.get("CUJO_BOARD_SESSION_KEY", "").strip():
        Fernet(explicit.encode())  # raises ValueError for a malformed key
        return explicit.encode()
    derived = hmac.new(client_secret.encode(), b"cujo board session key", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(derived)


def access_from_env(environ: Mapping[str, str], api_url: str) -> Access:
    """Return the relay board's access: sign-in with GitHub when the App's client is set."""
    client_id = environ.get("CUJO_OAUTH_CLIENT_ID", "").strip()
    client_secret = environ.get("CUJO_OAUTH_CLIENT_SECRET", "").strip()
    if not client_id or not client_secret:
        return ClosedAccess()
    github = GitHubSignIn(
        client_id=client_id,
        client_secret=client_secret,
        web_url=web_url_of(api_url, environ),
        api_url=api_url,
    )
    return GitHubAccess(
        github,
        session_key(environ, client_secret),
        public_url=environ.get("CUJO_BOARD_URL", "").strip() or None,
    )

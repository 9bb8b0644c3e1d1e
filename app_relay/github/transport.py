"""Send one installation's requests to GitHub: the base every part of the gateway builds on.

``GatewayTransport`` holds the installation's PyGithub requester and sends each REST
call through the App's ``attempt`` (the one call policy, ``retry.py``, which also keeps
the installation's rate budget, ``budget.py``); after the call's own 401 it drops the
installation's token and tries once more with a fresh one. It also reads lists page by
page, bounded, and sends the reads a poll repeats as conditional requests: each URL's
``ETag`` kept (``conditional.py``) and sent back in ``If-None-Match``, a 304 answered with
the answer kept. ``InstallationApp`` is what a gateway needs of the App, so this module
does not import ``app_auth.py`` (which makes gateways).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

from github import Github

from app_relay.github.answers import GitHubAnswer, GitHubError, answer_list
from app_relay.github.budget import RateBudgets, RateReading, budget_key
from app_relay.github.conditional import ETagCache
from app_relay.github.vocab import Reader

DEFAULT_API_URL: Final = "https://api.github.com"
MAX_PAGES: Final = 10
PER_PAGE: Final = 100

T = TypeVar("T")


class InstallationApp(Protocol):
    """What a gateway needs of the App it acts for (``GitHubApp`` is one)."""

    @property
    def app_id(self) -> int: ...

    @property
    def base_url(self) -> str: ...

    @property
    def timeout_s(self) -> int: ...

    @property
    def download_deadline_s(self) -> float: ...

    @property
    def budgets(self) -> RateBudgets: ...

    @property
    def etags(self) -> ETagCache: ...

    def github_for(self, installation_id: int) -> Github: ...

    def attempt(
        self,
        call: str,
        fn: Callable[[], T],
        *,
        idempotent: bool = True,
        installation_id: int | None = None,
        reading: RateReading | None = None,
    ) -> T: ...

    def forget_installation(self, installation_id: int, repos: Sequence[str] = ()) -> None: ...

    def bot_login(self) -> str: ...


class GatewayTransport:
    """Send requests to GitHub as one installation of the App, each by the call policy."""

    def __init__(self, app: InstallationApp, installation_id: int) -> None:
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
        installation, reading = self.installation_id, self._github.requester
        try:
            return self._app.attempt(
                call, fn, idempotent=idempotent, installation_id=installation, reading=reading
            )
        except GitHubError as exc:
            # Only the call's own 401: one from buying the token is the App's key refused.
            if exc.status != 401 or exc.call != call:
                raise
        # GitHub refused the cached token (revoked, or the installation changed). A 401
        # changed nothing on GitHub, so one retry with a fresh token is safe even for a write.
        self._app.forget_installation(self.installation_id)
        return self._app.attempt(
            call, fn, idempotent=idempotent, installation_id=installation, reading=reading
        )

    def _request(
        self,
        verb: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        body: Mapping[str, object] | None = None,
        idempotent: bool,
    ) -> tuple[dict[str, Any], Any]:
        """Send one REST request and return its headers and JSON answer."""
        requester = self._github.requester

        def send() -> tuple[dict[str, Any], Any]:
            return requester.requestJsonAndCheck(
                verb,
                path,
                parameters=dict(params) if params is not None else None,
                input=dict(body) if body is not None else None,
            )

        return self._attempt(f"{verb} {path}", send, idempotent=idempotent)

    def _conditional_get(self, path: str, params: Mapping[str, object] | None = None) -> Any:
        """GET with the ETag kept for this URL; a 304 answers with the answer kept.

        GitHub does not count a 304 against the rate limit. An answer without an ETag is
        not kept; a 304 to a request that named none is an error, never an empty answer.
        """
        call = f"GET {path}"
        requester = self._github.requester
        query = {k: str(v) for k, v in (params or {}).items()}
        key = (self.installation_id, path, tuple(sorted(query.items())))
        etags = self._app.etags

        def send() -> Any:
            held = etags.get(key)
            headers = {"If-None-Match": held.etag} if held is not None else None
            status, answered, text = requester.requestJson(
                "GET", path, parameters=dict(query) or None, headers=headers
            )
            if status == 304:
                if held is None:
                    raise GitHubError(call, "answered 304 Not Modified to a request naming no ETag")
                self._app.budgets.not_modified(budget_key(self.installation_id))
                return json.loads(held.text)
            try:
                data = json.loads(text) if text else None
            except ValueError:
                if status < 400:
                    raise  # an answer that is not JSON: the policy names it
                data = None  # an error page (a proxy's 502, say): its status says enough
            if status >= 400:
                raise requester.createException(
                    status, answered, data if isinstance(data, dict) else {}
                )
            if status == 200 and isinstance(text, str):
                etags.put(key, str(answered.get("etag", "")), text)
            return data

        return self._attempt(call, send, idempotent=True)

    def _get(
        self, path: str, params: Mapping[str, object] | None = None, *, conditional: bool = False
    ) -> GitHubAnswer:
        """Read one object with a GET (always idempotent, so retried by the policy).

        ``conditional`` sends it with the ETag kept for it (``_conditional_get``): for
        reads a poll repeats.
        """
        if conditional:
            return GitHubAnswer(f"GET {path}", self._conditional_get(path, params))
        _, data = self._request("GET", path, params=params, idempotent=True)
        return GitHubAnswer(f"GET {path}", data)

    def _pages(
        self,
        path: str,
        key: str | None,
        params: Mapping[str, object],
        *,
        conditional: bool = False,
    ) -> list[Reader]:
        """Read every page of a list; more than a bounded number of pages is an error."""
        found, more = self._first_pages(path, key, params, MAX_PAGES, conditional=conditional)
        if more:
            raise GitHubError(
                f"GET {path}", f"more than {MAX_PAGES * PER_PAGE} items; refusing to guess"
            )
        return found

    def _first_pages(
        self,
        path: str,
        key: str | None,
        params: Mapping[str, object],
        max_pages: int,
        *,
        conditional: bool = False,
    ) -> tuple[list[Reader], bool]:
        """Read up to ``max_pages`` pages; say whether the last was full (more may follow).

        ``conditional`` sends each page with the ETag kept for it (``_conditional_get``).
        """
        call = f"GET {path}"
        found: list[Reader] = []
        for page in range(1, max_pages + 1):
            query = {**params, "per_page": PER_PAGE, "page": page}
            if conditional:
                data = self._conditional_get(path, query)
            else:
                _, data = self._request("GET", path, params=query, idempotent=True)
            items = answer_list(call, data) if key is None else GitHubAnswer(call, data).items(key)
            if len(items) > PER_PAGE:
                raise GitHubError(call, f"page {page} holds {len(items)} items, over {PER_PAGE}")
            found.extend(items)
            if len(items) < PER_PAGE:
                return found, False
        return found, True

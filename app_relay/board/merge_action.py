"""The run page's merge: its panel (the gate's reading, live) and ``POST /runs/{id}/merge``.

docs/design.md section 12. The browser sends only which run, a token bound to its session and
that run (an HMAC under the session key), and the merge method; the session comes from
the ``SameSite=Strict`` cookie alone, and ``Origin`` must be the board's own. The relay
reloads the run from its record, reads GitHub itself (twice) and pins the merge to the
reviewed head (``merge/attempt.py``). The person's own user token makes the merge; the
App's token is never used for it. The panel shows the gate's reading, cached at most
``SHOWN_S`` for display only (a click never uses it).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import parse_qs

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app_relay.board.access import Actor, GitHubAccess
from app_relay.github.answers import GitHubError
from app_relay.github.vocab import MERGE_METHODS
from app_relay.merge.attempt import MergeDesk, Stopping, facts_of
from app_relay.merge.gate import Blocker, GateReading
from app_relay.observe import metrics
from app_relay.store import MergeAttempt, RunRecord, StoreError, UnknownRun

log = logging.getLogger(__name__)

SHOWN_S: Final = 15.0  # how long a reading is shown before GitHub is read again
RETRY_AFTER_S: Final = 5  # a stopping relay's 503: another relay (or this one) takes it soon
MAX_SHOWN = 256
MAX_FORM = 4096


@dataclass(frozen=True)
class MergePanel:
    """What the run page shows of merging: a reading, the action, or who merged what."""

    kind: Literal["none", "merged", "in-flight", "ready", "blocked", "unread", "link"]
    run_id: str = ""
    blockers: tuple[Blocker, ...] = ()
    head_sha: str = ""
    methods: tuple[str, ...] = ()
    queue: bool = False
    token: str = ""
    attempt: MergeAttempt | None = None
    last: MergeAttempt | None = None  # the latest attempt that ended without merging
    note: str = ""
    github_href: str = ""

    def version(self) -> str:
        """Return a short hash of what the panel shows (the live stream sends it on change)."""
        said = "|".join(
            str(x)
            for x in (
                self.kind,
                [(b.code, b.words) for b in self.blockers],
                self.head_sha,
                self.methods,
                self.queue,
                self.attempt.id if self.attempt else None,
                self.attempt.state if self.attempt else None,
                self.last.id if self.last else None,
                self.note,
            )
        )
        return hashlib.sha256(said.encode()).hexdigest()[:16]


class ShownReadings:
    """Keep each (run, person)'s last reading for ``SHOWN_S``: the page's display only."""

    def __init__(self, shown_s: float = SHOWN_S, clock: Callable[[], float] = time.monotonic):
        self.shown_s = shown_s
        self.clock = clock
        self._held: dict[tuple[str, str], tuple[GateReading, float, int]] = {}
        self._lock = threading.Lock()

    def get(
        self, key: tuple[str, str], read: Callable[[], GateReading], news: int = 0
    ) -> GateReading:
        """Return the kept reading of ``key`` while fresh, else ``read()`` and keep it.

        ``news`` counts the GitHub events about the repository: a new one makes it stale.
        """
        now = self.clock()
        with self._lock:
            held = self._held.get(key)
        if held is not None and now - held[1] < self.shown_s and held[2] == news:
            return held[0]
        reading = read()
        with self._lock:
            if len(self._held) >= MAX_SHOWN:
                self._held.pop(next(iter(self._held)))
            self._held[key] = (reading, now, news)
        return reading

    def forget(self, run_id: str) -> None:
        """Drop the readings of one run (after a click, the page reads GitHub again)."""
        with self._lock:
            for key in [k for k in self._held if k[0] == run_id]:
                del self._held[key]


def merge_panel(
    desk: MergeDesk | None,
    access: object,
    shown: ShownReadings,
    run: RunRecord,
    actor: Actor | None,
    web_url: str,
    *,
    settle: bool = True,
) -> MergePanel:
    """Work out the run's merge panel (reads the record, and GitHub at most every SHOWN_S)."""
    if run.session_kind != "github" or run.pr_number is None or desk is None:
        return MergePanel("none", run.run_id)
    attempts = desk.store.run_merges(run.run_id)
    github_href = f"{web_url.rstrip('/')}/{run.repo}/pull/{run.pr_number}"
    for kept in reversed(attempts):
        # A page view asks GitHub how an unknown one ended.
        attempt = desk.settle(kept) if settle and kept.state == "unknown" else kept
        if attempt.state == "merged":
            return MergePanel("merged", run.run_id, head_sha=attempt.head_sha, attempt=attempt)
        if attempt.in_flight:
            return MergePanel("in-flight", run.run_id, head_sha=attempt.head_sha, attempt=attempt)
    last = attempts[-1] if attempts else None
    if actor is None:
        return MergePanel(
            "unread",
            run.run_id,
            note="Sign in again to see whether this head can be merged.",
            last=last,
            github_href=github_href,
        )
    try:
        offered = desk.github.merge_offered(run.repo)
        reading = shown.get(
            (run.run_id, actor.login),
            lambda: desk.read(desk.github.gateway_for(run.repo), actor.token, facts_of(run)),
            desk.store.merge_news(run.repo),
        )
    except (GitHubError, ValueError) as exc:
        return MergePanel(
            "unread",
            run.run_id,
            note=f"GitHub could not be read: {exc}",
            last=last,
            github_href=github_href,
        )
    common = {
        "run_id": run.run_id,
        "blockers": reading.blockers,
        "head_sha": run.head_sha,
        "methods": reading.methods,
        "queue": reading.queue,
        "last": last,
        "github_href": github_href,
    }
    if not offered:
        # Without contents: write (the opt-in) the page reads the gate and links to GitHub.
        return MergePanel("link", **common)  # type: ignore[arg-type]
    if not reading.ready:
        return MergePanel("blocked", **common)  # type: ignore[arg-type]
    token = access.action_token(actor.session_id, run.run_id) if isinstance(
        access, GitHubAccess
    ) else ""  # fmt: skip
    return MergePanel("ready", token=token, **common)  # type: ignore[arg-type]


def _plain(status: int, text: str, **headers: str) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain", headers=headers)


def board_origin(access: GitHubAccess, request: Request) -> str:
    """Return the origin the board serves from (its public URL's, else the request's)."""
    base = access.public_url or str(request.base_url).rstrip("/")
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def merge_router(
    desk: MergeDesk | None,
    access: object,
    shown: ShownReadings,
    may_see: Callable[[Request, str], Awaitable[bool]],
) -> APIRouter:
    """Return ``POST /runs/{run_id}/merge``; without a desk or a sign-in it answers 404."""
    router = APIRouter()

    @router.post("/runs/{run_id}/merge")
    async def merge(request: Request, run_id: str) -> Response:
        """Merge the run's reviewed head for the signed-in person, if GitHub's gate agrees."""
        body = await request.body()
        if len(body) > MAX_FORM:
            return _plain(413, "The request is larger than a merge form.")
        # application/x-www-form-urlencoded, as the page's form sends it: three fields.
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
        token, method, run = (fields.get(k, [""])[0] for k in ("token", "method", "run"))
        if desk is None or not isinstance(access, GitHubAccess):
            return _plain(404, "This board does not merge.")
        if request.headers.get("origin", "") != board_origin(access, request):
            metrics.merge_attempt("forbidden")
            log.warning("merge refused: the request came from another origin")
            return _plain(403, "The merge must be asked from this board's own page.")
        actor = access.actor(request)
        if actor is None or run != run_id:
            metrics.merge_attempt("forbidden")
            return _plain(403, "Sign in again: this request carries no session of this board.")
        expected = access.action_token(actor.session_id, run_id)
        if not hmac.compare_digest(expected.encode(), token.encode()):
            metrics.merge_attempt("forbidden")
            log.warning(
                "merge refused for %s: the token is not this session's for this run", actor.login
            )
            return _plain(403, "This page's merge token is not for this run and session: reload.")
        if desk.stopping.is_set():
            metrics.merge_attempt("stopping")
            return _plain(
                503, "This relay is stopping: send the request again.",
                **{"Retry-After": str(RETRY_AFTER_S)},
            )  # fmt: skip
        if method not in MERGE_METHODS:
            return _plain(400, f"Choose a merge method: {', '.join(MERGE_METHODS)}.")
        try:
            record = await anyio.to_thread.run_sync(desk.store.get_run, run_id)
        except UnknownRun:
            return _plain(404, "No such run.")
        if not await may_see(request, record.repo):
            return _plain(404, "No such run.")
        try:
            clicked = await anyio.to_thread.run_sync(
                lambda: desk.click(run_id, login=actor.login, user=actor.token, method=method)
            )
        except (StoreError, ValueError) as exc:
            # A run with nothing to merge (a local review's): said plainly, nothing sent.
            return _plain(409, f"This run cannot be merged: {exc}")
        except Stopping:
            metrics.merge_attempt("stopping")
            return _plain(
                503, "This relay is stopping: send the request again.",
                **{"Retry-After": str(RETRY_AFTER_S)},
            )  # fmt: skip
        shown.forget(run_id)
        target = f"/runs/{run_id}?merge={clicked.outcome}#merge"
        return RedirectResponse(target, status_code=303)

    return router


class MergeView:
    """The board's side of merging: the panel of a run page, and the merge route."""

    def __init__(self, desk: MergeDesk | None, access: object, web_url: str) -> None:
        self.desk = desk
        self.access = access
        self.web_url = web_url
        self.shown = ShownReadings()

    async def may_see(self, request: Request, repo: str) -> bool:
        """Say whether the request's viewer may see ``repo``'s runs."""
        viewer = await self.access.viewer(request)  # type: ignore[attr-defined]
        return viewer is not None and bool(viewer.may_see(repo))

    def router(self) -> APIRouter:
        """Return the merge route."""
        return merge_router(self.desk, self.access, self.shown, self.may_see)

    def panel(self, request: Request, run: RunRecord, settle: bool = True) -> MergePanel:
        """Return the run's merge panel as the request's viewer sees it.

        Display only: the viewing (Lax) session's token reads the gate; a click needs the
        Strict one. A page view asks GitHub how an unknown merge ended; the live stream
        (every second) leaves that to the webhook and the relay's periodic pass.
        """
        actor = self.access.actor if isinstance(self.access, GitHubAccess) else None
        who = actor(request, strict=False) if actor is not None else None
        return merge_panel(
            self.desk, self.access, self.shown, run, who, self.web_url, settle=settle
        )

"""Serve the board: ``/`` lists runs, ``/runs/{id}`` shows one live, over server-sent events.

Pages are rendered on the server (Jinja2, autoescaped: text from a pull request is inert
on the page, docs/design.md invariant 10); the one script, ``board.js``, appends what the
streams send. A stream polls the record (another process may be writing it) and ends
after ``stream_s``; the browser reconnects on its own, which also checks access again
and lets the server stop without waiting on open pages.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from app_relay.board import view
from app_relay.board.access import Access, Viewer
from app_relay.board.catchup_view import catch_up_line
from app_relay.board.merge_action import MergeView
from app_relay.board.runpage import Bundles, RunPage, gather, news
from app_relay.merge.attempt import MergeDesk
from app_relay.runstate.machine import RunState
from app_relay.store import (
    RunLine,
    RunRecord,
    Store,
    UnknownRun,
)
from app_relay.words.hold import holds_words
from cujo_action.schema import utcnow

STATIC = Path(__file__).parent / "static"
PAGE_SIZE = 50
# No script but our own file, no inline script or style, no frames, forms post here only.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _sse(event: str, html: str, event_id: str | None = None) -> str:
    # Each line of the data gets its own `data:` field; the browser joins them with \n.
    # https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
    head = f"id: {event_id}\n" if event_id is not None else ""
    data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"{head}event: {event}\n{data}\n"


def _cursor(text: str | None) -> tuple[datetime, str] | None:
    if not text:
        return None
    at, _, run_id = text.partition("~")
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return None
    return (when, run_id) if run_id and when.tzinfo is not None else None


def board_router(
    store: Store,
    access: Access,
    *,
    web_url: str = "https://github.com",
    poll_s: float = 1.0,
    stream_s: float = 20.0,
    clock: Callable[[], datetime] = utcnow,
    page_size: int = PAGE_SIZE,
    desk: MergeDesk | None = None,
) -> APIRouter:
    """Return the board's routes over ``store``, shown to whom ``access`` lets in.

    With a ``desk`` a signed-in person may merge a reviewed head from its run page.
    """
    pages = BoardPages(
        store, access, web_url=web_url, poll_s=poll_s, stream_s=stream_s, clock=clock,
        page_size=page_size, desk=desk,
    )  # fmt: skip
    return pages.router()


class BoardPages:
    """The board's pages and streams: each route a method, each step of one a method."""

    def __init__(
        self,
        store: Store,
        access: Access,
        *,
        web_url: str,
        poll_s: float,
        stream_s: float,
        clock: Callable[[], datetime],
        page_size: int,
        desk: MergeDesk | None,
    ) -> None:
        self.store, self.access, self.web_url = store, access, web_url
        self.poll_s, self.stream_s, self.clock = poll_s, stream_s, clock
        self.page_size, self.desk = page_size, desk
        self.env = _templates()
        self.bundles = Bundles()
        self.merging = MergeView(desk, access, web_url)

    def router(self) -> APIRouter:
        """Return the routes: sign-in, merging, the list, a run, their streams, static files."""
        router = APIRouter()
        router.include_router(self.access.router())
        router.include_router(self.merging.router())
        router.add_api_route("/", self.runs, methods=["GET"], response_class=HTMLResponse)
        router.add_api_route("/live", self.runs_live, methods=["GET"])
        router.add_api_route(
            "/runs/{run_id}", self.run_page, methods=["GET"], response_class=HTMLResponse
        )
        router.add_api_route("/runs/{run_id}/live", self.run_live, methods=["GET"])
        router.add_api_route("/static/{name}", self.static, methods=["GET"])
        return router

    # ------------------------------------------------------------------ steps

    def render(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(now=self.clock(), **values)
        return HTMLResponse(html, status_code=status, headers=_HEADERS)

    def signed_out(self, request: Request) -> HTMLResponse:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return self.render("signin.html", 401, access=self.access, viewer=None, after=target)

    def rows(
        self,
        viewer: Viewer,
        repo: str | None,
        states: list[RunState],
        before: tuple[datetime, str] | None,
    ) -> tuple[list[RunLine], str | None]:
        """Return one page of the runs ``viewer`` may see, and the cursor of the next."""
        repos = ({repo} if viewer.may_see(repo) else set()) if repo else viewer.repos
        lines = self.store.run_lines(
            self.page_size + 1, repos=repos, states=states or None, before=before
        )
        more = None
        if len(lines) > self.page_size:
            lines = lines[: self.page_size]
            last = lines[-1]
            more = f"{last.started_at.isoformat()}~{last.run_id}"
        return lines, more

    def seen_run(self, viewer: Viewer, run_id: str) -> RunRecord | None:
        """Return the run, or None when it does not exist for ``viewer``."""
        try:
            run = self.store.get_run(run_id)
        except UnknownRun:
            return None
        # A run of a repository the viewer cannot read does not exist for them.
        return run if viewer.may_see(run.repo) else None

    def readable_page(self, viewer: Viewer, run_id: str) -> RunPage | None:
        if self.seen_run(viewer, run_id) is None:
            return None
        try:
            return gather(self.store, self.bundles, run_id, self.web_url)
        except UnknownRun:
            return None

    # ------------------------------------------------------------------ routes

    async def runs(
        self,
        request: Request,
        repo: str | None = None,
        state: list[str] = Query(default=[]),  # noqa: B008 (FastAPI's way to declare it)
        before: str | None = None,
        fragment: str | None = None,
    ) -> Response:
        """List runs, newest first, filtered by repository and state."""
        viewer = await self.access.viewer(request)
        if viewer is None:
            return self.signed_out(request)
        store = self.store
        chosen: list[RunState] = [s for s in view.LOOKS if s in state]
        lines, more = await anyio.to_thread.run_sync(
            self.rows, viewer, repo or None, chosen, _cursor(before)
        )
        merged = await anyio.to_thread.run_sync(store.merged_runs, [x.run_id for x in lines])
        if fragment == "rows":
            return self.render("_rows.html", lines=lines, merged=merged)
        repos = [r for r in await anyio.to_thread.run_sync(store.run_repos) if viewer.may_see(r)]
        last_catch_up = await anyio.to_thread.run_sync(store.last_catch_up)
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "fragment"]
        more_href = (
            f"/?{urlencode([*[(k, v) for k, v in kept if k != 'before'], ('before', more)])}"
            if more
            else None
        )
        return self.render(
            "list.html",
            access=self.access,
            viewer=viewer,
            lines=lines,
            merged=merged,
            more_href=more_href,
            repos=repos,
            repo=repo or "",
            chosen=chosen,
            live_href=f"/live?{urlencode([*kept, ('v', _fingerprint(lines))])}",
            catch_up=catch_up_line(last_catch_up, self.clock()),
        )

    async def runs_live(
        self,
        request: Request,
        repo: str | None = None,
        state: list[str] = Query(default=[]),  # noqa: B008 (FastAPI's way to declare it)
        before: str | None = None,
        v: str = "",
    ) -> Response:
        """Say, as a stream, when the rows of this list changed: the page fetches them again.

        Only the viewer's own rows are compared, so the stream says nothing of runs they
        cannot see.
        """
        viewer = await self.access.viewer(request)
        if viewer is None:
            return self.signed_out(request)
        chosen: list[RunState] = [s for s in view.LOOKS if s in state]
        cursor = _cursor(before)

        async def stream() -> AsyncIterator[str]:
            yield "retry: 1000\n\n"
            seen = v
            with anyio.move_on_after(self.stream_s):
                while True:
                    lines, _ = await anyio.to_thread.run_sync(
                        self.rows, viewer, repo or None, chosen, cursor
                    )
                    now = _fingerprint(lines)
                    if now != seen:
                        seen = now
                        yield _sse("changed", now)
                    else:
                        yield ": quiet\n\n"
                    await anyio.sleep(self.poll_s)

        return StreamingResponse(stream(), media_type="text/event-stream", headers=_HEADERS)

    async def run_page(self, request: Request, run_id: str) -> Response:
        """Show one run: its timeline as it grows, checks, findings, verdict and hold."""
        viewer = await self.access.viewer(request)
        if viewer is None:
            return self.signed_out(request)
        page = await anyio.to_thread.run_sync(self.readable_page, viewer, run_id)
        if page is None:
            return self.render(
                "missing.html", 404, access=self.access, viewer=viewer, run_id=run_id
            )
        panel = await anyio.to_thread.run_sync(self.merging.panel, request, page.run)
        return self.render("run.html", access=self.access, viewer=viewer, page=page, panel=panel)

    async def run_live(
        self, request: Request, run_id: str, after: int = 0, v: str = "", fx: str = ""
    ) -> Response:
        """Stream a run's new timeline lines, and its body again whenever the run changes."""
        viewer = await self.access.viewer(request)
        if viewer is None:
            return self.signed_out(request)
        if await anyio.to_thread.run_sync(self.seen_run, viewer, run_id) is None:
            return Response("no such run", status_code=404, media_type="text/plain")
        # A reconnecting browser sends the last id it saw: "<last event>-<run version>".
        seen, _, seen_version = request.headers.get("last-event-id", "").partition("-")
        cursor = max(after, int(seen) if seen.isdigit() else 0)
        live = _RunStream(self, request, run_id, cursor, seen_version or v, fx)
        return StreamingResponse(live.stream(), media_type="text/event-stream", headers=_HEADERS)

    async def static(self, name: str) -> Response:
        """Serve the board's stylesheet and script."""
        types = {"board.css": "text/css", "board.js": "text/javascript"}
        if name not in types:
            return Response(status_code=404)
        body = (STATIC / name).read_bytes()
        return Response(
            body, media_type=types[name], headers={"Cache-Control": "max-age=300", **_NOSNIFF}
        )


class _RunStream:
    """One open run page's stream: its new timeline lines, its body when the run changes,
    its merge panel when that changes."""

    def __init__(
        self, pages: BoardPages, request: Request, run_id: str, cursor: int, known: str, fx: str
    ) -> None:
        self.pages, self.request, self.run_id = pages, request, run_id
        self.cursor, self.version = cursor, known
        self.shown = {int(x) for x in fx.split(",") if x.isdigit()}
        self.panel_version = request.query_params.get("m", "")

    async def stream(self) -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        with anyio.move_on_after(self.pages.stream_s):
            while True:
                sent = False
                async for message in self._changes():
                    sent = True
                    yield message
                if not sent:
                    yield ": quiet\n\n"
                await anyio.sleep(self.pages.poll_s)

    async def _changes(self) -> AsyncIterator[str]:
        pages, store, run_id = self.pages, self.pages.store, self.run_id
        got = await anyio.to_thread.run_sync(
            news, store, run_id, self.cursor, frozenset(self.shown)
        )
        if got.entries:
            self.cursor = got.last_event
            self.shown.update(int(e.dom_id[3:]) for e in got.entries if e.dom_id[:2] == "fx")
            item = pages.env.get_template("_entry.html")
            html = "".join(item.render(entry=entry) for entry in got.entries)
            # One message per batch, so a resumed stream never skips a line.
            yield _sse("timeline", html, f"{self.cursor}-{self.version}")
        if got.version != self.version or got.steps:
            self.version = got.version
            page = await anyio.to_thread.run_sync(
                gather, store, pages.bundles, run_id, pages.web_url
            )
            body = pages.env.get_template("_run_body.html")
            yield _sse(
                "run", body.render(page=page, now=pages.clock()), f"{self.cursor}-{self.version}"
            )
        if pages.desk is None:
            return
        run = await anyio.to_thread.run_sync(store.get_run, run_id)
        panel = await anyio.to_thread.run_sync(pages.merging.panel, self.request, run, False)
        if panel is not None and panel.version() != self.panel_version:
            self.panel_version = panel.version()
            html = pages.env.get_template("_merge.html").render(panel=panel, now=pages.clock())
            yield _sse("merge", html)


def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("app_relay.board", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        look=view.look,
        mode_words=view.mode_words,
        holds_words=holds_words,
        short_sha=view.short_sha,
        age=view.age,
        duration=view.duration,
        judge_words=view.judge_words,
        states=list(view.LOOKS),
    )
    return env


def _fingerprint(lines: Sequence[RunLine]) -> str:
    # What the list shows of each row that can change (its age is drawn from the time).
    said = "|".join(f"{x.run_id}:{x.state}:{x.finished_at}:{x.holds}" for x in lines)
    return hashlib.sha256(said.encode()).hexdigest()[:16]


_NOSNIFF = {"X-Content-Type-Options": "nosniff"}

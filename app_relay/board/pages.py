"""Serve the board: ``/`` lists runs, ``/runs/{id}`` shows one live, over server-sent events.

Pages are rendered on the server (Jinja2, autoescaped: text from a pull request is inert
on the page, docs/design.md invariant 10); the one script, ``board.js``, appends what the
streams send. A stream polls the record (another process may be writing it) and ends
after ``stream_s``; the browser reconnects on its own, which also checks access again
and lets the server stop without waiting on open pages.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
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
from app_relay.merge.attempt import MergeDesk
from app_relay.runstate.machine import RunState
from app_relay.store import (
    PRUNED,
    CommandRecord,
    Effect,
    RunEvent,
    RunLine,
    RunRecord,
    Store,
    UnknownRun,
)
from app_relay.words.hold import holds_words
from app_relay.words.review_body import evidence_lines
from cujo_action.evidence.reader import Bundle, BundleError, read_bundle
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


@dataclass(frozen=True)
class RunPage:
    """Everything one run's page shows, read from the record in one go."""

    run: RunRecord
    entries: list[view.Entry]
    last_event: int
    effects_shown: list[int]
    commands: list[CommandRecord]
    dismissal: view.Dismissal | None
    checks: list[view.CheckLine]
    checks_note: str
    evidence: dict[str, str]
    links: list[view.Link]
    version: str


class _Bundles:
    """Keep the last few bundles read back for run pages (a finished run's never changes)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._held: dict[tuple[str, str], tuple[Bundle | None, str]] = {}
        self._lock = threading.Lock()

    def read(self, run: RunRecord) -> tuple[Bundle | None, str]:
        if run.reports_dir is None:
            return None, ""
        key = (run.run_id, run.reports_dir)
        with self._lock:
            if key in self._held:
                return self._held[key]
        try:
            found: tuple[Bundle | None, str] = (
                read_bundle(
                    Path(run.reports_dir),
                    run_id=run.run_id,
                    head_sha=run.head_sha,
                    base_sha=run.base_sha,
                ),
                "",
            )
        except (BundleError, OSError) as exc:
            # Read and checked once when the run finished; now it is gone or changed.
            found = (None, f"the reports can no longer be read: {exc}")
        with self._lock:
            if len(self._held) >= self.size:
                self._held.pop(next(iter(self._held)))
            self._held[key] = found
        return found


def _version(run: RunRecord, commands: Sequence[CommandRecord]) -> str:
    said = "|".join(
        str(x)
        for x in (
            run.state,
            run.updated_at.isoformat(),
            run.finished_at,
            run.holds,
            run.lifted,
            run.review_id,
            run.check_run_id,
            run.workflow_run_id,
            len(commands),
        )
    )
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def _checks(
    run: RunRecord, bundle: Bundle | None, problem: str, events: Sequence[RunEvent]
) -> tuple[list[view.CheckLine], str]:
    """Return the checks to list, and a sentence about them."""
    pruned = [e for e in events if e.kind == PRUNED]
    if pruned and run.reports_dir is None:
        # Bundle retention (runs/retention.py) deleted the reports; the record keeps the rest.
        return [], f"Evidence pruned: {pruned[-1].detail}; the verdict and findings remain."
    if problem:
        return [], problem
    if bundle is not None and bundle.failure is not None:
        return [], f"the sandbox stopped at {bundle.failure.stage}: {bundle.failure.reason}"
    if bundle is not None:
        lines = [
            view.CheckLine(
                r.check,
                r.status,
                r.summary,
                r.isolation,
                len(r.egress) + len(r.decoy_events) + len(r.observations),
            )
            for r in bundle.reports
        ]
        return lines, "" if lines else "the sandbox sent no report"
    if run.mode == "diff":
        return [], "a diff review runs no sandbox checks: the model read the diff"
    steps = view.stages_from_steps(events)
    if steps:
        return steps, "the sandbox job's steps as GitHub reports them"
    if run.state in ("running", "waiting"):
        return [], "no check has reported yet"
    return [], "no reports were kept for this run"


def gather(store: Store, bundles: _Bundles, run_id: str, web_url: str) -> RunPage:
    """Read one run's page from the record."""
    run = store.get_run(run_id)
    events = store.timeline(run_id)
    effects: list[Effect] = store.effects(run_id)
    commands = store.run_commands(run_id)
    bundle, problem = bundles.read(run)
    checks, note = _checks(run, bundle, problem, events)
    entries = view.timeline(events, effects)
    return RunPage(
        run=run,
        entries=entries,
        last_event=events[-1].id if events else 0,
        effects_shown=[int(e.dom_id[3:]) for e in entries if e.dom_id.startswith("fx-")],
        commands=commands,
        dismissal=view.dismissal(commands),
        checks=checks,
        checks_note=note,
        evidence=evidence_lines(bundle.reports) if bundle is not None else {},
        links=view.links(
            web_url,
            repo=run.repo,
            session_kind=run.session_kind,
            pr_number=run.pr_number,
            head_sha=run.head_sha,
            workflow_run_id=run.workflow_run_id,
            check_run_id=run.check_run_id,
            review_id=run.review_id,
        ),
        version=_version(run, commands),
    )


@dataclass(frozen=True)
class News:
    """What changed on a run since a stream last looked."""

    entries: list[view.Entry]
    last_event: int
    version: str
    steps: bool  # a sandbox step moved: the checks list changed too


def news(store: Store, run_id: str, after: int, shown: frozenset[int]) -> News:
    """Read a run's events above ``after`` and the writes made that ``shown`` lacks."""
    run = store.get_run(run_id)
    commands = store.run_commands(run_id)
    events = store.timeline(run_id, after=after)
    effects = [e for e in store.effects(run_id) if e.id not in shown]
    return News(
        entries=view.timeline(events, effects, earlier_state=after > 0),
        last_event=events[-1].id if events else after,
        version=_version(run, commands),
        steps=any(e.kind == "step" for e in events),
    )


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
    bundles = _Bundles()
    router = APIRouter()
    router.include_router(access.router())
    merging = MergeView(desk, access, web_url)
    router.include_router(merging.router())
    panel_of = merging.panel

    def render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = env.get_template(name).render(now=clock(), **values)
        return HTMLResponse(html, status_code=status, headers=_HEADERS)

    def signed_out(request: Request) -> HTMLResponse:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return render("signin.html", 401, access=access, viewer=None, after=target)

    def visible(viewer: Viewer, repo: str | None) -> set[str] | frozenset[str] | None:
        if repo:
            return {repo} if viewer.may_see(repo) else set()
        return viewer.repos

    def rows(
        viewer: Viewer,
        repo: str | None,
        states: list[RunState],
        before: tuple[datetime, str] | None,
    ) -> tuple[list[RunLine], str | None]:
        lines = store.run_lines(
            page_size + 1, repos=visible(viewer, repo), states=states or None, before=before
        )
        more = None
        if len(lines) > page_size:
            lines = lines[:page_size]
            last = lines[-1]
            more = f"{last.started_at.isoformat()}~{last.run_id}"
        return lines, more

    def fingerprint(lines: Sequence[RunLine]) -> str:
        # What the list shows of each row that can change (its age is drawn from the time).
        said = "|".join(f"{x.run_id}:{x.state}:{x.finished_at}:{x.holds}" for x in lines)
        return hashlib.sha256(said.encode()).hexdigest()[:16]

    @router.get("/", response_class=HTMLResponse)
    async def runs(
        request: Request,
        repo: str | None = None,
        state: list[str] = Query(default=[]),  # noqa: B008 (FastAPI's way to declare it)
        before: str | None = None,
        fragment: str | None = None,
    ) -> Response:
        """List runs, newest first, filtered by repository and state."""
        viewer = await access.viewer(request)
        if viewer is None:
            return signed_out(request)
        chosen: list[RunState] = [s for s in view.LOOKS if s in state]
        lines, more = await anyio.to_thread.run_sync(
            rows, viewer, repo or None, chosen, _cursor(before)
        )
        merged = await anyio.to_thread.run_sync(store.merged_runs, [x.run_id for x in lines])
        if fragment == "rows":
            return render("_rows.html", lines=lines, merged=merged)
        repos = [r for r in await anyio.to_thread.run_sync(store.run_repos) if viewer.may_see(r)]
        last_catch_up = await anyio.to_thread.run_sync(store.last_catch_up)
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "fragment"]
        more_href = (
            f"/?{urlencode([*[(k, v) for k, v in kept if k != 'before'], ('before', more)])}"
            if more
            else None
        )
        return render(
            "list.html",
            access=access,
            viewer=viewer,
            lines=lines,
            merged=merged,
            more_href=more_href,
            repos=repos,
            repo=repo or "",
            chosen=chosen,
            live_href=f"/live?{urlencode([*kept, ('v', fingerprint(lines))])}",
            catch_up=catch_up_line(last_catch_up, clock()),
        )

    @router.get("/live")
    async def runs_live(
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
        viewer = await access.viewer(request)
        if viewer is None:
            return signed_out(request)
        chosen: list[RunState] = [s for s in view.LOOKS if s in state]
        cursor = _cursor(before)

        async def stream() -> AsyncIterator[str]:
            yield "retry: 1000\n\n"
            seen = v
            with anyio.move_on_after(stream_s):
                while True:
                    lines, _ = await anyio.to_thread.run_sync(
                        rows, viewer, repo or None, chosen, cursor
                    )
                    now = fingerprint(lines)
                    if now != seen:
                        seen = now
                        yield _sse("changed", now)
                    else:
                        yield ": quiet\n\n"
                    await anyio.sleep(poll_s)

        return StreamingResponse(stream(), media_type="text/event-stream", headers=_HEADERS)

    def seen_run(viewer: Viewer, run_id: str) -> RunRecord | None:
        try:
            run = store.get_run(run_id)
        except UnknownRun:
            return None
        # A run of a repository the viewer cannot read does not exist for them.
        return run if viewer.may_see(run.repo) else None

    def readable_page(viewer: Viewer, run_id: str) -> RunPage | None:
        if seen_run(viewer, run_id) is None:
            return None
        try:
            return gather(store, bundles, run_id, web_url)
        except UnknownRun:
            return None

    @router.get("/runs/{run_id}", response_class=HTMLResponse)
    async def run_page(request: Request, run_id: str) -> Response:
        """Show one run: its timeline as it grows, checks, findings, verdict and hold."""
        viewer = await access.viewer(request)
        if viewer is None:
            return signed_out(request)
        page = await anyio.to_thread.run_sync(readable_page, viewer, run_id)
        if page is None:
            return render("missing.html", 404, access=access, viewer=viewer, run_id=run_id)
        panel = await anyio.to_thread.run_sync(panel_of, request, page.run)
        return render("run.html", access=access, viewer=viewer, page=page, panel=panel)

    @router.get("/runs/{run_id}/live")
    async def run_live(
        request: Request, run_id: str, after: int = 0, v: str = "", fx: str = ""
    ) -> Response:
        """Stream a run's new timeline lines, and its body again whenever the run changes."""
        viewer = await access.viewer(request)
        if viewer is None:
            return signed_out(request)
        if await anyio.to_thread.run_sync(seen_run, viewer, run_id) is None:
            return Response("no such run", status_code=404, media_type="text/plain")
        # A reconnecting browser sends the last id it saw: "<last event>-<run version>".
        seen, _, seen_version = request.headers.get("last-event-id", "").partition("-")
        cursor = max(after, int(seen) if seen.isdigit() else 0)
        known = seen_version or v
        shown = {int(x) for x in fx.split(",") if x.isdigit()}

        async def stream() -> AsyncIterator[str]:
            nonlocal cursor
            yield "retry: 1000\n\n"
            version = known
            item = env.get_template("_entry.html")
            panel_version = request.query_params.get("m", "")
            with anyio.move_on_after(stream_s):
                while True:
                    got = await anyio.to_thread.run_sync(
                        news, store, run_id, cursor, frozenset(shown)
                    )
                    sent = False
                    if got.entries:
                        cursor = got.last_event
                        shown.update(int(e.dom_id[3:]) for e in got.entries if e.dom_id[:2] == "fx")
                        html = "".join(item.render(entry=entry) for entry in got.entries)
                        # One message per batch, so a resumed stream never skips a line.
                        yield _sse("timeline", html, f"{cursor}-{version}")
                        sent = True
                    if got.version != version or got.steps:
                        version = got.version
                        page = await anyio.to_thread.run_sync(
                            gather, store, bundles, run_id, web_url
                        )
                        body = env.get_template("_run_body.html")
                        yield _sse(
                            "run", body.render(page=page, now=clock()), f"{cursor}-{version}"
                        )
                        sent = True
                    panel = None
                    if desk is not None:
                        run = await anyio.to_thread.run_sync(store.get_run, run_id)
                        panel = await anyio.to_thread.run_sync(panel_of, request, run, False)
                    if panel is not None and panel.version() != panel_version:
                        panel_version = panel.version()
                        html = env.get_template("_merge.html").render(panel=panel, now=clock())
                        yield _sse("merge", html)
                        sent = True
                    if not sent:
                        yield ": quiet\n\n"
                    await anyio.sleep(poll_s)

        return StreamingResponse(stream(), media_type="text/event-stream", headers=_HEADERS)

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        """Serve the board's stylesheet and script."""
        types = {"board.css": "text/css", "board.js": "text/javascript"}
        if name not in types:
            return Response(status_code=404)
        body = (STATIC / name).read_bytes()
        return Response(
            body, media_type=types[name], headers={"Cache-Control": "max-age=300", **_NOSNIFF}
        )

    return router


_NOSNIFF = {"X-Content-Type-Options": "nosniff"}

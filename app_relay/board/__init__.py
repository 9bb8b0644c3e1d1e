"""The board: every run on one page, each run live on its own (docs/design.md section 9)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI
from starlette.middleware.trustedhost import TrustedHostMiddleware

from app_relay.board.access import (
    Access,
    ClosedAccess,
    GitHubAccess,
    LocalAccess,
    Viewer,
    access_from_env,
    web_url_of,
)
from app_relay.board.pages import board_router
from app_relay.store import Store

__all__ = [
    "Access",
    "ClosedAccess",
    "GitHubAccess",
    "LocalAccess",
    "Viewer",
    "access_from_env",
    "board_app",
    "board_router",
    "web_url_of",
]


def board_app(
    store: Store,
    access: Access | None = None,
    *,
    web_url: str = "https://github.com",
    poll_s: float = 1.0,
    stream_s: float = 20.0,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
) -> FastAPI:
    """Return an app that serves the board alone (``cujo board``: every run, no sign-in).

    It answers only requests naming one of ``hosts``: a web page whose own name was made
    to resolve to 127.0.0.1 (DNS rebinding) cannot read the record through the browser.
    """
    app = FastAPI(title="Cujo board", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))
    app.include_router(
        board_router(
            store, access or LocalAccess(), web_url=web_url, poll_s=poll_s, stream_s=stream_s
        )
    )
    return app

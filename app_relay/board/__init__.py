"""The board: every run on one page, each run live on its own (DESIGN section 9)."""

from __future__ import annotations

from fastapi import FastAPI

from app_relay.store import Store

from .access import (
    Access,
    ClosedAccess,
    GitHubAccess,
    LocalAccess,
    Viewer,
    access_from_env,
    web_url_of,
)
from .pages import board_router

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
) -> FastAPI:
    """Return an app that serves the board alone (``cujo board``: every run, no sign-in)."""
    app = FastAPI(title="Cujo board", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(
        board_router(
            store, access or LocalAccess(), web_url=web_url, poll_s=poll_s, stream_s=stream_s
        )
    )
    return app

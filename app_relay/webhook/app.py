"""Serve the relay over HTTP: ``POST /webhook`` records verified deliveries, workers do the rest.

The routes are their features' own: the webhook (``receive.py``: verify, record through
the intake's writer, ``intake.py``, and answer 202), ``/healthz``, ``/readyz`` and
``/metrics`` (``health.py``), and the board at ``/`` (``app_relay.board``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from fastapi import FastAPI

from app_relay.board import Access, access_from_env, board_router, web_url_of
from app_relay.merge.attempt import MergeDesk
from app_relay.settings import RelaySettings
from app_relay.store import Store
from app_relay.webhook.health import Readiness, RecordCollector, health_router
from app_relay.webhook.intake import DeliveryIntake
from app_relay.webhook.receive import MAX_BODY, Receiver


def create_app(
    settings: RelaySettings,
    store: Store,
    *,
    max_body: int = MAX_BODY,
    on_recorded: Callable[[], None] | None = None,
    board: Access | None = None,
    readiness: Readiness | None = None,
    merges: MergeDesk | None = None,
) -> FastAPI:
    """Return the relay's ASGI app over ``store``; ``on_recorded`` wakes the workers.

    The board is served at ``/`` to whom ``board`` lets in (by default: people signed in
    with GitHub, when the App's OAuth client is set in the environment; nobody otherwise).
    ``readiness`` answers ``/readyz`` (by default: the record and the intake alone).
    ``merges`` lets signed-in people merge a reviewed head from its run page.
    """
    app = FastAPI(title="Cujo relay", docs_url=None, redoc_url=None, openapi_url=None)
    intake = DeliveryIntake(store)
    app.state.intake = intake  # closed by whoever serves the app, after the server stops
    ready = readiness if readiness is not None else Readiness(store)
    ready.intake = intake.problems
    app.include_router(health_router(ready, RecordCollector(store)))
    secret = settings.webhook_secret.reveal().encode()
    receiver = Receiver(secret, intake, max_body=max_body, on_recorded=on_recorded)
    app.include_router(receiver.router())
    api_url = settings.github_api_url
    access = board if board is not None else access_from_env(os.environ, api_url)
    app.include_router(
        board_router(store, access, web_url=web_url_of(api_url, os.environ), desk=merges)
    )
    return app

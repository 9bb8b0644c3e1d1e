"""Turn an App manifest flow's code into the new App's id, keys, secrets and OAuth client.

``cujo relay register`` sends the person to GitHub with the App manifest
(``app-manifest.json``, beside this module); GitHub sends back a one-use code, exchanged
here.
https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import requests

from app_relay.github.answers import GitHubAnswer, GitHubError
from app_relay.github.vocab import APP_SLUG


def app_manifest() -> dict[str, Any]:
    """Return the App manifest as kept in the repository: the permissions and events Cujo asks."""
    manifest: dict[str, Any] = json.loads(
        files("app_relay.github").joinpath("app-manifest.json").read_text(encoding="utf-8")
    )
    return manifest


@dataclass(frozen=True)
class CreatedApp:
    """What GitHub hands back once for an App created from a manifest."""

    id: int
    slug: str
    html_url: str
    pem: str = field(repr=False)
    webhook_secret: str = field(repr=False)
    # The App's OAuth client, for the board's sign-in with GitHub (the secret is shown once).
    client_id: str = ""
    client_secret: str = field(default="", repr=False)


def convert_app_manifest(api_url: str, code: str, *, timeout_s: float = 10) -> CreatedApp:
    """Exchange a manifest flow's ``code`` for the new App's id, key and webhook secret."""
    # https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest
    # No authentication: the code (one use, valid for an hour) is the credential.
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,200}", code):
        raise GitHubError("POST /app-manifests/{code}/conversions", "the code is malformed")
    call = f"POST /app-manifests/{code[:6]}…/conversions"
    try:
        answer = requests.post(
            f"{api_url.rstrip('/')}/app-manifests/{code}/conversions",
            headers={"Accept": "application/vnd.github+json", "User-Agent": "cujo-relay"},
            timeout=timeout_s,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        raise GitHubError(call, f"GitHub could not be reached: {type(exc).__name__}") from None
    try:
        data = answer.json()
    except ValueError:
        data = None
    if answer.status_code != 201:
        message = data.get("message") if isinstance(data, dict) else None
        raise GitHubError(
            call,
            f"answered HTTP {answer.status_code}: {message or 'no message'}",
            status=answer.status_code,
        )
    a = GitHubAnswer(call, data)
    pem = a.text("pem")
    if "PRIVATE KEY-----" not in pem:
        raise GitHubError(call, "field 'pem' is not a PEM private key")
    secret = a.text("webhook_secret")
    if not secret or secret != secret.strip():
        raise GitHubError(call, "field 'webhook_secret' is empty or padded")
    html_url = a.text("html_url")
    if not html_url.startswith(("https://", "http://")):
        raise GitHubError(call, "field 'html_url' is not a URL")
    client_id, client_secret = a.text("client_id"), a.text("client_secret")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", client_id) or not re.fullmatch(
        r"[A-Za-z0-9_-]{1,200}", client_secret
    ):
        raise GitHubError(call, "fields 'client_id' and 'client_secret' are not GitHub's")
    app_id = a.integer("id")
    if app_id < 1:
        raise GitHubError(call, "field 'id' is not a positive integer")
    return CreatedApp(
        id=app_id,
        slug=a.text("slug", pattern=APP_SLUG),
        html_url=html_url,
        pem=pem,
        webhook_secret=secret,
        client_id=client_id,
        client_secret=client_secret,
    )

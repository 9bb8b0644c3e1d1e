"""`cujo relay register`: create the Cujo App from its manifest and keep its credentials.

GitHub's manifest flow
(https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest):
a page POSTs the manifest as the form field ``manifest`` to
``{github}/settings/apps/new?state=S`` (or ``/organizations/ORG/settings/apps/new``);
once the owner confirms, GitHub sends the browser to the manifest's ``redirect_url``
with ``code`` and ``state``; the code is exchanged within an hour at
``POST /app-manifests/{code}/conversions`` for the App's id, private key and a webhook
secret GitHub generated, and the App's OAuth client id and secret (the board's sign-in,
whose callback the manifest sets to the relay's ``/signin/callback``). These are written to
the relay's settings folder as ``relay.env`` (the variables ``cujo relay serve`` reads) and
``app-private-key.pem``, both 0600, and never printed. Then the command stops: the relay
itself starts with ``cujo relay serve``.
"""

from __future__ import annotations

import argparse
import html
import ipaddress
import json
import os
import re
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

if TYPE_CHECKING:  # github/ brings PyGithub: imported when a code is exchanged
    from app_relay.github.manifest import CreatedApp

DEFAULT_GITHUB_URL = "https://github.com"
DONE_PATH = "/register/done"
SIGNIN_CALLBACK_PATH = "/signin/callback"
ENV_FILE = "relay.env"
KEY_FILE = "app-private-key.pem"
_ORG = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"


class RegisterError(Exception):
    """The registration cannot go on; the message says what to fix."""


def api_url_for(github_url: str) -> str:
    """Return the REST API of a GitHub: api.github.com, or GHES's ``/api/v3``."""
    parts = urlsplit(github_url)
    if parts.hostname == "github.com":
        return "https://api.github.com"
    return f"{github_url.rstrip('/')}/api/v3"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(name: str, url: str) -> str:
    """Return ``url`` without a trailing slash if it is https (or http on loopback)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host or parts.query or parts.fragment:
        raise RegisterError(f"{name} must be an https URL, got {url!r}")
    if parts.scheme == "http" and not _loopback(host):
        raise RegisterError(f"{name} must use https ({url!r} would carry secrets in clear text)")
    return url.rstrip("/")


def build_manifest(relay_url: str, *, name: str = "Cujo", merge: bool = False) -> dict[str, Any]:
    """Return the App manifest for a relay at ``relay_url`` (``app_manifest``, filled in).

    ``merge`` (``--merge``) asks ``contents: write`` so people may merge from the run
    page (docs/design.md section 12); without it the App reads contents only.
    """
    from app_relay.github.manifest import app_manifest  # noqa: PLC0415 (as above)

    manifest = app_manifest()
    manifest["name"] = name
    manifest["hook_attributes"] = {"url": f"{relay_url}/webhook", "active": True}
    manifest["redirect_url"] = f"{relay_url}{DONE_PATH}"
    # The board's sign-in with GitHub comes back here (app_relay/board/access.py).
    manifest["callback_urls"] = [f"{relay_url}{SIGNIN_CALLBACK_PATH}"]
    if merge:
        # GitHub lets a user access token merge only what the App may write as well.
        manifest["default_permissions"] = {**manifest["default_permissions"], "contents": "write"}
    return manifest


def new_app_url(github_url: str, org: str | None, state: str) -> str:
    """Return where the manifest is POSTed: the user's or the organisation's new-App page."""
    owner = f"/organizations/{quote(org, safe='')}" if org else ""
    return f"{github_url}{owner}/settings/apps/new?state={quote(state, safe='')}"


def start_page(action: str, manifest: dict[str, Any], owner: str) -> str:
    """Return the page whose one button sends the manifest to GitHub."""
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
        for k, v in sorted(manifest["default_permissions"].items())
    )
    field = html.escape(json.dumps(manifest), quote=True)
    return (
        "<!doctype html><meta charset=utf-8><title>Register Cujo</title>"
        "<h1>Create the Cujo GitHub App</h1>"
        f"<p>Owner: <b>{html.escape(owner)}</b>. Webhooks go to "
        f"<code>{html.escape(manifest['hook_attributes']['url'])}</code>.</p>"
        f"<table><tr><th>permission</th><th>access</th></tr>{rows}</table>"
        f'<form method="post" action="{html.escape(action, quote=True)}">'
        f'<input type="hidden" name="manifest" value="{field}">'
        '<button type="submit">Create the App on GitHub</button></form>'
    )


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 (never following a link, never replacing a file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _env_value(value: str) -> str:
    # Plain KEY=value, as systemd's EnvironmentFile, docker's env_file and `set -a; .` read.
    if not value or any(c.isspace() or c in "\"'\\$`#" for c in value):
        raise RegisterError("GitHub's answer holds a value that cannot go in an env file")
    return value


def settings_paths(folder: Path) -> tuple[Path, Path]:
    """Return the env file and the key file a registration writes in ``folder``."""
    return folder / ENV_FILE, folder / KEY_FILE


def write_settings(folder: Path, app: CreatedApp, api_url: str, relay_url: str = "") -> Path:
    """Write the App's settings (0600) into ``folder``; return the env file's path."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    env, key = settings_paths(folder)
    lines = [
        "# Written by `cujo relay register`: the Cujo App's settings for `cujo relay serve`.",
        f"# The App: {app.html_url}",
        f"CUJO_APP_ID={app.id}",
        f"CUJO_PRIVATE_KEY_FILE={_env_value(str(key.resolve()))}",
        f"CUJO_WEBHOOK_SECRET={_env_value(app.webhook_secret)}",
        f"CUJO_GITHUB_API_URL={_env_value(api_url)}",
        "# The board's sign-in with GitHub: the App's OAuth client, and the address whose",
        f"# {SIGNIN_CALLBACK_PATH} the manifest made the App's callback URL.",
        f"CUJO_OAUTH_CLIENT_ID={_env_value(app.client_id)}",
        f"CUJO_OAUTH_CLIENT_SECRET={_env_value(app.client_secret)}",
    ]
    if relay_url:
        lines.append(f"CUJO_BOARD_URL={_env_value(relay_url)}")
    _write_private(key, app.pem.strip() + "\n")
    try:
        _write_private(env, "\n".join(lines) + "\n")
    except BaseException:
        key.unlink()
        raise
    return env


@dataclass
class Registration:
    """One registration in progress: its state token, and what it ended with."""

    github_url: str
    api_url: str
    relay_url: str
    org: str | None
    folder: Path
    name: str = "Cujo"
    merge: bool = False  # --merge: ask contents: write, for the run page's merge action
    state: str = ""
    created: CreatedApp | None = None
    env_file: Path | None = None

    def __post_init__(self) -> None:
        self.state = self.state or secrets.token_urlsafe(24)
        self.lock = threading.Lock()
        self.finished = threading.Event()

    def page(self) -> str:
        """Return the start page."""
        manifest = build_manifest(self.relay_url, name=self.name, merge=self.merge)
        owner = f"the organisation {self.org}" if self.org else "your account"
        return start_page(new_app_url(self.github_url, self.org, self.state), manifest, owner)

    def finish(self, query: dict[str, list[str]]) -> tuple[int, str]:
        """Answer GitHub's redirect: check the state, exchange the code, keep the settings."""
        from app_relay.github.answers import GitHubError  # noqa: PLC0415
        from app_relay.github.manifest import convert_app_manifest  # noqa: PLC0415

        state = query.get("state", [""])[0]
        code = query.get("code", [""])[0]
        with self.lock:
            if self.created is not None:
                return 410, "This App was already created; its settings are written."
            if not secrets.compare_digest(state.encode(), self.state.encode()):
                return 400, "The state does not match this registration: start again at /."
            if not code:
                return 400, "GitHub sent no code: start again at /."
            try:
                app = convert_app_manifest(self.api_url, code)
            except GitHubError as exc:
                return 502, f"GitHub did not hand over the App: {exc.reason}. Start again at /."
            self.env_file = write_settings(self.folder, app, self.api_url, self.relay_url)
            self.created = app
        self.finished.set()
        install = f"{app.html_url}/installations/new"
        return 200, (
            f"The App <b>{html.escape(app.slug)}</b> (id {app.id}) is created and its settings "
            f"are in <code>{html.escape(str(self.env_file))}</code> (0600). Next: "
            f'<a href="{html.escape(install, quote=True)}">install it on your repositories</a>, '
            "then start the relay with <code>cujo relay serve</code>."
        )


class _Handler(BaseHTTPRequestHandler):
    server: RegisterServer

    def log_message(self, format: str, *args: Any) -> None:
        """Say nothing per request (the query holds the one-time code)."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        registration = self.server.registration
        if url.path == "/":
            self._send(200, registration.page())
        elif url.path == DONE_PATH:
            status, message = registration.finish(parse_qs(url.query))
            self._send(status, f"<!doctype html><meta charset=utf-8><p>{message}</p>")
        else:
            self._send(404, "Not here: open / to register the Cujo App.")

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(data)


class RegisterServer(ThreadingHTTPServer):
    """Serve the registration's two pages on one address."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], registration: Registration) -> None:
        super().__init__(address, _Handler)
        self.registration = registration


def add_register_parser(relay_sub: Any) -> None:
    """Add `cujo relay register` to the `relay` subcommands."""
    reg = relay_sub.add_parser("register", help="create the Cujo GitHub App from its manifest")
    reg.add_argument("--url", required=True, help="the relay's public https URL")
    reg.add_argument("--org", help="create the App in this organisation (default: your account)")
    reg.add_argument("--name", default="Cujo", help="the App's name (unique on GitHub)")
    reg.add_argument("--github-url", default=DEFAULT_GITHUB_URL, help="github.com or your GHES")
    reg.add_argument("--settings-dir", type=Path, help="where relay.env goes (default: data dir)")
    reg.add_argument("--host", default="127.0.0.1", help="address to serve the pages on")
    reg.add_argument("--port", type=int, default=8000, help="port to serve the pages on")
    reg.add_argument(
        "--merge",
        action="store_true",
        help="let people merge from the run page: asks contents: write (default: read)",
    )


def relay_register(args: argparse.Namespace, default_folder: Callable[[], Path]) -> int:
    """Serve the manifest flow until the App is created; write its settings; exit 0."""
    try:
        relay_url = check_url("--url", args.url)
        github_url = check_url("--github-url", args.github_url)
        if args.org is not None and not _valid_org(args.org):
            raise RegisterError(f"--org {args.org!r} is not an organisation login")
        api_url = check_url(
            "CUJO_GITHUB_API_URL", os.environ.get("CUJO_GITHUB_API_URL") or api_url_for(github_url)
        )
        folder = args.settings_dir or default_folder()
        taken = [p for p in settings_paths(folder) if p.exists() or p.is_symlink()]
        if taken:
            raise RegisterError(
                f"{taken[0]} exists: an App is registered there already; move it away or "
                "give --settings-dir"
            )
        registration = Registration(
            github_url=github_url,
            api_url=api_url,
            relay_url=relay_url,
            org=args.org,
            folder=folder,
            name=args.name,
            merge=args.merge,
        )
        server = RegisterServer((args.host, args.port), registration)
    except (RegisterError, OSError) as exc:
        print(f"cujo relay register: {exc}", file=sys.stderr)
        return 2
    host, port = str(server.server_address[0]), int(server.server_address[1])
    print(
        f"cujo relay register: open {relay_url}/ (served here on http://{host}:{port}/) "
        "and press the button; GitHub sends you back here once the App exists.",
        file=sys.stderr,
        flush=True,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        registration.finished.wait()
    except KeyboardInterrupt:
        print("cujo relay register: stopped; no App was registered", file=sys.stderr)
        return 130
    finally:
        server.shutdown()
        server.server_close()
    created = registration.created
    assert created is not None
    print(
        f"cujo relay register: created {created.html_url} (id {created.id}); settings in "
        f"{registration.env_file} (0600). Install it: {created.html_url}/installations/new",
        file=sys.stderr,
    )
    return 0


def _valid_org(org: str) -> bool:
    return re.fullmatch(_ORG, org) is not None

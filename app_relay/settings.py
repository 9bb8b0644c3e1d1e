"""Read the relay's settings from the environment (DESIGN.md section 10), when asked.

Nothing here runs at import. ``load_settings`` reads every variable, collects every
problem (each naming its variable and the fix) and raises them together, so one start
tells the operator all that is wrong. Secret values never appear in a repr or a message.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_GITHUB_API_URL = "https://api.github.com"
DEFAULT_WORKFLOW = "cujo.yml"
# A workflow file name as GitHub's dispatch endpoint takes it (the file in
# .github/workflows/ on the default branch):
# https://docs.github.com/en/rest/actions/workflows#create-a-workflow-dispatch-event
_WORKFLOW_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.ya?ml$")
# GitHub hands out App keys as PEM: "-----BEGIN RSA PRIVATE KEY-----"
# https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/managing-private-keys-for-github-apps
_PEM_KEY = re.compile(
    r"-----BEGIN (?:RSA |EC )?PRIVATE KEY-----\s+[A-Za-z0-9+/=\s]+"
    r"-----END (?:RSA |EC )?PRIVATE KEY-----"
)
_LOOPBACK_NAMES = {"localhost"}


class Secret:
    """A value that must never be printed: its repr and str are masked."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """Return the value itself, for the one call that needs it."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Problem:
    """One variable that is missing or malformed, and how to fix it."""

    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.message}"


class SettingsError(Exception):
    """The environment does not configure a relay; each problem names its variable."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"the relay's settings are incomplete:\n{lines}")

    def variables(self) -> set[str]:
        """Return the names of the variables that are wrong."""
        return {p.variable for p in self.problems}


@dataclass(frozen=True)
class RelaySettings:
    """What the relay needs to run: the App's identity, its secrets, its record."""

    app_id: int
    private_key: Secret
    webhook_secret: Secret
    github_api_url: str
    database_url: str
    workflow: str
    anthropic_api_key: Secret | None

    def __repr__(self) -> str:
        shown = make_url(self.database_url).render_as_string(hide_password=True)
        key = "None" if self.anthropic_api_key is None else repr(self.anthropic_api_key)
        return (
            f"RelaySettings(app_id={self.app_id}, private_key={self.private_key!r}, "
            f"webhook_secret={self.webhook_secret!r}, github_api_url={self.github_api_url!r}, "
            f"database_url={shown!r}, workflow={self.workflow!r}, anthropic_api_key={key})"
        )


def default_database_url(environ: Mapping[str, str]) -> str:
    """Return the local SQLite record `cujo review` and the board also use."""
    if home := environ.get("CUJO_HOME"):
        folder = Path(home)
    else:
        xdg = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        folder = Path(xdg) / "cujo"
    return f"sqlite:///{folder / 'cujo.db'}"


def load_settings(environ: Mapping[str, str] | None = None) -> RelaySettings:
    """Read the relay's settings from ``environ`` (the process environment by default)."""
    env = os.environ if environ is None else environ
    problems: list[Problem] = []
    app_id = _app_id(env, problems)
    private_key = _private_key(env, problems)
    webhook_secret = _webhook_secret(env, problems)
    api_url = _github_api_url(env, problems)
    database_url = _database_url(env, problems)
    workflow = _workflow(env, problems)
    anthropic = env.get("ANTHROPIC_API_KEY", "").strip()
    if problems:
        raise SettingsError(problems)
    assert app_id is not None
    assert private_key is not None
    assert webhook_secret is not None
    return RelaySettings(
        app_id=app_id,
        private_key=private_key,
        webhook_secret=webhook_secret,
        github_api_url=api_url,
        database_url=database_url,
        workflow=workflow,
        # Optional: without it the deterministic judge decides (DESIGN.md section 7).
        anthropic_api_key=Secret(anthropic) if anthropic else None,
    )


def _app_id(env: Mapping[str, str], problems: list[Problem]) -> int | None:
    raw = env.get("CUJO_APP_ID", "").strip()
    if not raw:
        problems.append(
            Problem(
                "CUJO_APP_ID",
                "missing; set it to the App ID shown on the GitHub App's settings page",
            )
        )
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        problems.append(
            Problem(
                "CUJO_APP_ID",
                f"must be a positive whole number (the App ID, not its client ID), got {raw!r}",
            )
        )
        return None
    return int(raw)


def _private_key(env: Mapping[str, str], problems: list[Problem]) -> Secret | None:
    inline = env.get("CUJO_PRIVATE_KEY", "")
    path = env.get("CUJO_PRIVATE_KEY_FILE", "").strip()
    if inline.strip() and path:
        problems.append(
            Problem(
                "CUJO_PRIVATE_KEY",
                "set together with CUJO_PRIVATE_KEY_FILE; keep one of them, so it is clear "
                "which key signs the App's tokens",
            )
        )
        return None
    if path:
        try:
            text = Path(path).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII"
            problems.append(
                Problem(
                    "CUJO_PRIVATE_KEY_FILE",
                    f"cannot read {path}: {why}; point it at the .pem file downloaded from "
                    "the GitHub App's settings page",
                )
            )
            return None
        variable = "CUJO_PRIVATE_KEY_FILE"
        where = f"{path} is"
    elif inline.strip():
        # Environment files often carry the key on one line with literal "\n".
        text = inline if "\n" in inline else inline.replace("\\n", "\n")
        variable = "CUJO_PRIVATE_KEY"
        where = "the value is"
    else:
        problems.append(
            Problem(
                "CUJO_PRIVATE_KEY",
                "missing; set CUJO_PRIVATE_KEY to the App's PEM private key, or "
                "CUJO_PRIVATE_KEY_FILE to the .pem file's path",
            )
        )
        return None
    if not _PEM_KEY.search(text):
        problems.append(
            Problem(
                variable,
                f"{where} not a PEM private key (-----BEGIN RSA PRIVATE KEY----- …); "
                "generate one on the GitHub App's settings page",
            )
        )
        return None
    return Secret(text.strip() + "\n")


def _webhook_secret(env: Mapping[str, str], problems: list[Problem]) -> Secret | None:
    raw = env.get("CUJO_WEBHOOK_SECRET", "")
    if not raw.strip():
        problems.append(
            Problem(
                "CUJO_WEBHOOK_SECRET",
                "missing; set it to the webhook secret entered in the GitHub App's settings "
                "(without it no delivery can be verified)",
            )
        )
        return None
    if raw != raw.strip():
        problems.append(
            Problem(
                "CUJO_WEBHOOK_SECRET",
                "has leading or trailing whitespace, so no signature would match; remove it",
            )
        )
        return None
    return Secret(raw)


def _github_api_url(env: Mapping[str, str], problems: list[Problem]) -> str:
    raw = env.get("CUJO_GITHUB_API_URL", "").strip() or DEFAULT_GITHUB_API_URL
    parts = urlsplit(raw)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host or parts.query or parts.fragment:
        problems.append(
            Problem(
                "CUJO_GITHUB_API_URL",
                f"must be an https URL such as {DEFAULT_GITHUB_API_URL} "
                f"(or https://HOST/api/v3 for GitHub Enterprise Server), got {raw!r}",
            )
        )
    elif parts.scheme == "http" and not _is_loopback(host):
        # Installation tokens travel to this URL; plain http only to a fake on loopback.
        problems.append(
            Problem(
                "CUJO_GITHUB_API_URL",
                f"uses http to {host}; installation tokens would travel in clear text: "
                "use https (http is allowed only on loopback, for tests)",
            )
        )
    return raw.rstrip("/")


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _database_url(env: Mapping[str, str], problems: list[Problem]) -> str:
    raw = env.get("CUJO_DATABASE_URL", "").strip()
    if not raw:
        return default_database_url(env)
    try:
        url = make_url(raw)
    except ArgumentError:
        problems.append(
            Problem(
                "CUJO_DATABASE_URL",
                "is not a database URL; use sqlite:////path/to/cujo.db or "
                "postgresql+psycopg://USER:PASSWORD@HOST/DB",
            )
        )
        return raw
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        problems.append(
            Problem(
                "CUJO_DATABASE_URL",
                f"names the {url.get_backend_name()!r} backend; the record runs on sqlite or "
                "postgresql",
            )
        )
    return raw


def _workflow(env: Mapping[str, str], problems: list[Problem]) -> str:
    raw = env.get("CUJO_WORKFLOW", "").strip() or DEFAULT_WORKFLOW
    if not _WORKFLOW_FILE.match(raw):
        problems.append(
            Problem(
                "CUJO_WORKFLOW",
                "must be the file name of the workflow in .github/workflows/ on the "
                f"default branch, such as {DEFAULT_WORKFLOW}, got {raw!r}",
            )
        )
    return raw

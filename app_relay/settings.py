"""Read the relay's settings from the environment (DESIGN.md section 10), when asked.

``RelaySettings`` is a pydantic-settings model: each ``CUJO_*`` variable is a field (the
Anthropic key and ``XDG_DATA_HOME`` keep their own names) with a validator that says
what is wrong and how to fix it. Nothing here runs at import. ``load_settings`` reads the
environment once, and pydantic collects every problem, so one start tells the operator
all that is wrong; each problem names its variable. Secret values never appear in a
repr or a message.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_GITHUB_API_URL = "https://api.github.com"
DEFAULT_WORKFLOW = "cujo.yml"
# A finished run's bundle (its evidence) is kept this many days (CUJO_BUNDLE_DAYS).
DEFAULT_BUNDLE_DAYS = 30.0
ENV_PREFIX = "CUJO_"
# How the relay's logs are written (CUJO_LOG_FORMAT; ``observe/logs.py`` writes them).
LogFormat = Literal["json", "text"]
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
# What a variable that is required but absent (or empty) is told.
_MISSING = {
    "CUJO_APP_ID": "missing; set it to the App ID shown on the GitHub App's settings page",
    "CUJO_PRIVATE_KEY": (
        "missing; set CUJO_PRIVATE_KEY to the App's PEM private key, or "
        "CUJO_PRIVATE_KEY_FILE to the .pem file's path"
    ),
    "CUJO_WEBHOOK_SECRET": (
        "missing; set it to the webhook secret entered in the GitHub App's settings "
        "(without it no delivery can be verified)"
    ),
}


class Secret(SecretStr):
    """A value that must never be printed: its repr and str are masked."""

    def reveal(self) -> str:
        """Return the value itself, for the one call that needs it."""
        return self.get_secret_value()


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


class _Refused(ValueError):
    """A validator's refusal of one variable (not always its field's own), and the fix."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(message)
        self.variable = variable
        self.message = message


def _raw(value: object) -> object:
    """Return a secret's text, so values given as ``Secret`` are checked like text."""
    return value.get_secret_value() if isinstance(value, SecretStr) else value


class RelaySettings(BaseSettings):
    """What the relay needs to run: the App's identity, its secrets, its record.

    Built from keyword arguments it takes only them (tests do); ``load_settings`` fills
    it from the environment. Validators run in field order, so the key file is known when
    the key is checked, and the record's folder when its URL is defaulted.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, populate_by_name=True)

    app_id: int
    private_key_file: str | None = None
    private_key: Secret = Field(default=None, validate_default=True)
    webhook_secret: Secret
    github_api_url: str = DEFAULT_GITHUB_API_URL
    home: str | None = None  # CUJO_HOME: the folder of the local record
    xdg_data_home: str | None = Field(default=None, validation_alias="XDG_DATA_HOME")
    database_url: str = Field(default="", validate_default=True)
    workflow: str = DEFAULT_WORKFLOW
    # Optional: without it the deterministic judge decides (DESIGN.md section 7).
    anthropic_api_key: Secret | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")
    # How patient the relay is, in seconds (tests shorten them): the outbox's first retry
    # and its lease on an effect, a relay's lease on a run and on a delivery, and how
    # often it reconciles runs nobody holds.
    effect_retry_s: float = 2.0
    effect_lease_s: float = 60.0
    run_lease_s: float = 300.0
    delivery_lease_s: float = 30.0
    reconcile_every_s: float = 60.0
    # Catch-up (DESIGN.md section 9, runs/missed_webhooks.py): how often a pass asks GitHub again
    # for failed webhook deliveries and sweeps open pull requests (0 turns it off), how far
    # back it looks (GitHub redelivers for three days), how lately updated a pull
    # request is left to its own webhook, and how much one pass may do.
    catch_up_every_s: float = 300.0
    catch_up_window_s: float = 255_600.0  # 71 hours: inside GitHub's three days
    catch_up_grace_s: float = 120.0
    catch_up_max_redeliveries: int = 50
    catch_up_max_pulls: int = 50
    # Caps and a queue (issue 23, runstate/caps.py): at most this many sandbox runs of one
    # repository, and of one author, in flight; `.cujo.yml` may only lower them.
    max_runs_per_repo: int = 4
    max_runs_per_author: int = 2

    # Operating the relay (issue 23, observable): its log lines as JSON or plain text;
    # how many days a finished run's bundle is kept; how long a stop lets the work in
    # hand finish before handing it back; how old the oldest waiting delivery may grow
    # before /readyz says the intake is backed up.
    log_format: LogFormat = "json"
    bundle_days: float = DEFAULT_BUNDLE_DAYS
    stop_grace_s: float = 20.0
    ready_backlog_s: float = 120.0

    # CUJO_JOBS_POLL_S: how often the jobs of running sandbox runs are read between their
    # webhooks (a fallback, by conditional requests), in seconds.
    jobs_poll_s: float = 60.0

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Take the values given; the environment comes in through ``load_settings``."""
        return (init_settings,)

    @field_validator("app_id", mode="before")
    @classmethod
    def _app_id(cls, value: object) -> object:
        if isinstance(value, int):
            raw = str(value)
        elif isinstance(value, str):
            raw = value.strip()
        else:
            return value
        if not raw:
            raise _Refused("CUJO_APP_ID", _MISSING["CUJO_APP_ID"])
        if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
            raise _Refused(
                "CUJO_APP_ID",
                f"must be a positive whole number (the App ID, not its client ID), got {raw!r}",
            )
        return int(raw)

    @field_validator("private_key", mode="before")
    @classmethod
    def _private_key(cls, value: object, info: ValidationInfo) -> Secret:
        inline = _raw(value) or ""
        path = (info.data.get("private_key_file") or "").strip()
        if not isinstance(inline, str):
            raise _Refused("CUJO_PRIVATE_KEY", "is not text")
        if inline.strip() and path:
            raise _Refused(
                "CUJO_PRIVATE_KEY",
                "set together with CUJO_PRIVATE_KEY_FILE; keep one of them, so it is clear "
                "which key signs the App's tokens",
            )
        if path:
            try:
                text = Path(path).read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII"
                raise _Refused(
                    "CUJO_PRIVATE_KEY_FILE",
                    f"cannot read {path}: {why}; point it at the .pem file downloaded from "
                    "the GitHub App's settings page",
                ) from None
            variable, where = "CUJO_PRIVATE_KEY_FILE", f"{path} is"
        elif inline.strip():
            # Environment files often carry the key on one line with literal "\n".
            text = inline if "\n" in inline else inline.replace("\\n", "\n")
            variable, where = "CUJO_PRIVATE_KEY", "the value is"
        else:
            raise _Refused("CUJO_PRIVATE_KEY", _MISSING["CUJO_PRIVATE_KEY"])
        if not _PEM_KEY.search(text):
            raise _Refused(
                variable,
                f"{where} not a PEM private key (-----BEGIN RSA PRIVATE KEY----- …); "
                "generate one on the GitHub App's settings page",
            )
        return Secret(text.strip() + "\n")

    @field_validator("webhook_secret", mode="before")
    @classmethod
    def _webhook_secret(cls, value: object) -> object:
        raw = _raw(value)
        if not isinstance(raw, str):
            return value
        if not raw.strip():
            raise _Refused("CUJO_WEBHOOK_SECRET", _MISSING["CUJO_WEBHOOK_SECRET"])
        if raw != raw.strip():
            raise _Refused(
                "CUJO_WEBHOOK_SECRET",
                "has leading or trailing whitespace, so no signature would match; remove it",
            )
        return Secret(raw)

    @field_validator("github_api_url", mode="before")
    @classmethod
    def _github_api_url(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        raw = value.strip() or DEFAULT_GITHUB_API_URL
        parts = urlsplit(raw)
        host = parts.hostname or ""
        if parts.scheme not in ("https", "http") or not host or parts.query or parts.fragment:
            raise _Refused(
                "CUJO_GITHUB_API_URL",
                f"must be an https URL such as {DEFAULT_GITHUB_API_URL} "
                f"(or https://HOST/api/v3 for GitHub Enterprise Server), got {raw!r}",
            )
        if parts.scheme == "http" and not _is_loopback(host):
            # Installation tokens travel to this URL; plain http only to a fake on loopback.
            raise _Refused(
                "CUJO_GITHUB_API_URL",
                f"uses http to {host}; installation tokens would travel in clear text: "
                "use https (http is allowed only on loopback, for tests)",
            )
        return raw.rstrip("/")

    @field_validator("database_url", mode="before")
    @classmethod
    def _database_url(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        raw = value.strip()
        if not raw:
            return default_database_url(info.data.get("home"), info.data.get("xdg_data_home"))
        try:
            url = make_url(raw)
        except ArgumentError:
            raise _Refused(
                "CUJO_DATABASE_URL",
                "is not a database URL; use sqlite:////path/to/cujo.db or "
                "postgresql+psycopg://USER:PASSWORD@HOST/DB",
            ) from None
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise _Refused(
                "CUJO_DATABASE_URL",
                f"names the {url.get_backend_name()!r} backend; the record runs on sqlite or "
                "postgresql",
            )
        return raw

    @field_validator("workflow", mode="before")
    @classmethod
    def _workflow(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        raw = value.strip() or DEFAULT_WORKFLOW
        if not _WORKFLOW_FILE.match(raw):
            raise _Refused(
                "CUJO_WORKFLOW",
                "must be the file name of the workflow in .github/workflows/ on the "
                f"default branch, such as {DEFAULT_WORKFLOW}, got {raw!r}",
            )
        return raw

    @field_validator("anthropic_api_key", mode="before")
    @classmethod
    def _anthropic_api_key(cls, value: object) -> object:
        raw = _raw(value)
        if isinstance(raw, str):
            return Secret(raw.strip()) if raw.strip() else None
        return value

    @field_validator(
        "effect_retry_s",
        "effect_lease_s",
        "run_lease_s",
        "delivery_lease_s",
        "reconcile_every_s",
        mode="before",
    )
    @classmethod
    def _seconds(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        name = str(info.field_name)
        variable, raw = ENV_PREFIX + name.upper(), value.strip()
        if not raw:
            return cls.model_fields[name].default
        try:
            seconds = float(raw)
        except ValueError:
            raise _Refused(variable, f"is {raw!r}, not a number of seconds") from None
        if not 0 <= seconds <= 86_400:
            raise _Refused(variable, "must be between 0 and 86400 seconds")
        return seconds

    @field_validator(
        "catch_up_every_s",
        "catch_up_window_s",
        "catch_up_grace_s",
        "catch_up_max_redeliveries",
        "catch_up_max_pulls",
        mode="before",
    )
    @classmethod
    def _catch_up(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        name = str(info.field_name)
        variable, raw = ENV_PREFIX + name.upper(), value.strip()
        if not raw:
            return cls.model_fields[name].default
        whole = name.startswith("catch_up_max_")
        try:
            number = int(raw) if whole else float(raw)
        except ValueError:
            what = "a whole number" if whole else "a number of seconds"
            raise _Refused(variable, f"is {raw!r}, not {what}") from None
        top = 100_000 if whole else 3 * 86_400
        if not 0 <= number <= top:
            unit = "" if whole else " seconds"
            raise _Refused(variable, f"must be between 0 and {top}{unit}")
        return number

    @field_validator("max_runs_per_repo", "max_runs_per_author", mode="before")
    @classmethod
    def _run_caps(cls, value: object, info: ValidationInfo) -> object:
        name = str(info.field_name)
        variable = ENV_PREFIX + name.upper()
        if isinstance(value, str):
            raw = value.strip()
            if not raw:
                return cls.model_fields[name].default
            try:
                value = int(raw)
            except ValueError:
                raise _Refused(variable, f"is {raw!r}, not a whole number") from None
        if isinstance(value, int) and not 1 <= value <= 1000:
            raise _Refused(variable, "must be between 1 and 1000 runs in flight")
        return value

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        raw = value.strip().lower() or "json"
        if raw not in get_args(LogFormat):
            raise _Refused(
                "CUJO_LOG_FORMAT",
                f"is {value!r}; use json (one object a line, for a log collector) or text "
                "(plain lines, for a person)",
            )
        return raw

    @field_validator("bundle_days", "stop_grace_s", "ready_backlog_s", mode="before")
    @classmethod
    def _operating(cls, value: object, info: ValidationInfo) -> object:
        name = str(info.field_name)
        variable = ENV_PREFIX + name.upper()
        unit, most = ("days", 36_500.0) if name == "bundle_days" else ("seconds", 86_400.0)
        if isinstance(value, str):
            raw = value.strip()
            if not raw:
                return cls.model_fields[name].default
            try:
                value = float(raw)
            except ValueError:
                raise _Refused(variable, f"is {raw!r}, not a number of {unit}") from None
        if isinstance(value, int | float) and not 0 < value <= most:
            raise _Refused(variable, f"must be more than 0 and at most {most:g} {unit}")
        return value

    @field_validator("jobs_poll_s", mode="before")
    @classmethod
    def _jobs_poll_s(cls, value: object) -> object:
        # At least a second, the maintenance loop's tick: polling faster spends the budget.
        if isinstance(value, str):
            raw = value.strip()
            if not raw:
                return cls.model_fields["jobs_poll_s"].default
            try:
                value = float(raw)
            except ValueError:
                raise _Refused("CUJO_JOBS_POLL_S", f"is {raw!r}, not a number of seconds") from None
        if isinstance(value, int | float) and not 1 <= value <= 86_400:
            raise _Refused("CUJO_JOBS_POLL_S", "must be between 1 and 86400 seconds")
        return value

    def __repr__(self) -> str:
        shown = make_url(self.database_url).render_as_string(hide_password=True)
        key = "None" if self.anthropic_api_key is None else repr(self.anthropic_api_key)
        return (
            f"RelaySettings(app_id={self.app_id}, private_key={self.private_key!r}, "
            f"webhook_secret={self.webhook_secret!r}, github_api_url={self.github_api_url!r}, "
            f"database_url={shown!r}, workflow={self.workflow!r}, anthropic_api_key={key})"
        )

    __str__ = __repr__


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_database_url(home: str | None, xdg_data_home: str | None) -> str:
    """Return the local SQLite record `cujo review` and the board also use."""
    if home:
        folder = Path(home)
    else:
        folder = Path(xdg_data_home or Path.home() / ".local" / "share") / "cujo"
    return f"sqlite:///{folder / 'cujo.db'}"


class _Environment(EnvSettingsSource):
    """The settings' variables as found in ``environ``, by pydantic-settings' own rules.

    Names are matched as written in DESIGN.md, in capitals (``CUJO_APP_ID``), so a
    lower-case ``cujo_app_id`` is not read.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        super().__init__(RelaySettings, case_sensitive=False)
        # In place of the process environment it read: the one given. An empty variable
        # is an absent one.
        self.env_vars = {
            name.lower(): value
            for name, value in environ.items()
            if name == name.upper() and value != ""
        }


def _variable(loc: tuple[int | str, ...]) -> str:
    # A field read under its own name (ANTHROPIC_API_KEY) is named by it, others by prefix.
    name = str(loc[0]) if loc else ""
    return name if name.isupper() else ENV_PREFIX + name.upper()


def _problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors(include_input=False):
        cause: Any = (error.get("ctx") or {}).get("error")
        if isinstance(cause, _Refused):
            problems.append(Problem(cause.variable, cause.message))
            continue
        variable = _variable(error["loc"])
        if error["type"] == "missing" and variable in _MISSING:
            problems.append(Problem(variable, _MISSING[variable]))
        else:
            problems.append(Problem(variable, error["msg"]))
    return problems


def load_settings(environ: Mapping[str, str] | None = None) -> RelaySettings:
    """Read the relay's settings from ``environ`` (the process environment by default)."""
    values = _Environment(os.environ if environ is None else environ)()
    try:
        return RelaySettings(**values)
    except ValidationError as exc:
        raise SettingsError(_problems(exc)) from None

"""Read the relay's settings from the environment (docs/design.md section 10.5), when asked.

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
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    Field,
    GetCoreSchemaHandler,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticUseDefault, core_schema
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
# The relay's own patience, in seconds: an operator leaves these alone, and the tests
# shorten them so a retry, a lease running out or a reconcile happens within a test. The
# settings table marks them so.
TUNING = frozenset(
    {
        "effect_retry_s",
        "effect_lease_s",
        "run_lease_s",
        "delivery_lease_s",
        "reconcile_every_s",
        "jobs_poll_s",
    }
)
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


@dataclass(frozen=True)
class Bounds:
    """The range of a numeric setting: ``Annotated[float, Bounds(0, 86_400)]``.

    One check for every number the relay reads: a value given as text is parsed (blank:
    the default), and a number outside ``low``..``high`` is refused naming the variable
    and the range it must be in. ``above_low`` leaves ``low`` itself out; ``whole`` asks
    for a whole number. ``unit`` words the range ("between 0 and 86400 seconds").
    """

    low: float
    high: float
    unit: str = "seconds"
    whole: bool = False
    above_low: bool = False

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Check the value before pydantic reads it as ``source``."""
        return core_schema.with_info_before_validator_function(self.check, handler(source))

    def check(self, value: object, info: ValidationInfo) -> object:
        """Return ``value`` as a number within bounds; raise ``_Refused`` saying the fix."""
        variable = ENV_PREFIX + str(info.field_name).upper()
        if isinstance(value, str):
            raw = value.strip()
            if not raw:
                raise PydanticUseDefault
            try:
                value = int(raw) if self.whole else float(raw)
            except ValueError:
                what = "a whole number" if self.whole else f"a number of {self.unit}"
                raise _Refused(variable, f"is {raw!r}, not {what}") from None
        if isinstance(value, int | float) and not isinstance(value, bool):
            above = self.low < value if self.above_low else self.low <= value
            if not (above and value <= self.high):
                raise _Refused(variable, self.rule())
        return value

    def rule(self) -> str:
        """Say the range, as the error and the settings table word it."""
        if self.above_low:
            said = f"must be more than {self.low:g} and at most {self.high:g} {self.unit}"
        else:
            said = f"must be between {self.low:g} and {self.high:g} {self.unit}"
        return said.rstrip()


class RelaySettings(BaseSettings):
    """What the relay needs to run: the App's identity, its secrets, its record.

    Built from keyword arguments it takes only them (tests do); ``load_settings`` fills
    it from the environment. Validators run in field order, so the key file is known when
    the key is checked, and the record's folder when its URL is defaulted.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, populate_by_name=True)

    app_id: int = Field(description="The App's id, shown on the GitHub App's settings page.")
    private_key_file: str | None = Field(
        None,
        description="The path of the App's private key, a .pem file (this or "
        "`CUJO_PRIVATE_KEY` is required).",
    )
    private_key: Secret = Field(
        default=None,
        validate_default=True,
        description="The App's private key itself, PEM (this or `CUJO_PRIVATE_KEY_FILE`); "
        "one line with `\\n` for each line break is accepted.",
    )
    webhook_secret: Secret = Field(
        description="The webhook secret GitHub generated; every delivery is verified with it."
    )
    github_api_url: str = Field(
        DEFAULT_GITHUB_API_URL,
        description="GitHub's API: `https://HOST/api/v3` for GitHub Enterprise Server; http "
        "only on loopback (tests).",
    )
    home: str | None = Field(
        None, description="The folder of the local record (`cujo.db`) and bundles."
    )
    xdg_data_home: str | None = Field(
        default=None,
        validation_alias="XDG_DATA_HOME",
        description="Without `CUJO_HOME`, the record is in `$XDG_DATA_HOME/cujo` "
        "(`~/.local/share/cujo`).",
    )
    database_url: str = Field(
        default="",
        validate_default=True,
        description="The record: a SQLite file in the folder above by default, "
        "`postgresql+psycopg://…` for several relays.",
    )
    workflow: str = Field(
        DEFAULT_WORKFLOW,
        description="The file name of the sandbox workflow in each repository's "
        "`.github/workflows/` on its default branch.",
    )
    # Optional: without it the deterministic judge decides (docs/design.md section 7).
    anthropic_api_key: Secret | None = Field(
        default=None,
        validation_alias="ANTHROPIC_API_KEY",
        description="Optional: the model judge and the diff review; without it the hard "
        "rules decide.",
    )
    # How patient the relay is, in seconds. Operators leave these at their defaults; tests
    # shorten them so a retry, a lease running out or a reconcile happens within a test.
    effect_retry_s: Annotated[float, Bounds(0, 86_400)] = Field(
        2.0, description="The outbox's first wait before it makes a GitHub write again."
    )
    effect_lease_s: Annotated[float, Bounds(0, 86_400)] = Field(
        60.0, description="How long a relay holds a GitHub write it is making."
    )
    run_lease_s: Annotated[float, Bounds(0, 86_400)] = Field(
        300.0, description="How long a relay holds a run it works on."
    )
    delivery_lease_s: Annotated[float, Bounds(0, 86_400)] = Field(
        30.0, description="How long a worker holds a webhook delivery it works on."
    )
    reconcile_every_s: Annotated[float, Bounds(0, 86_400)] = Field(
        60.0, description="How often runs nobody holds (a relay died) are reconciled."
    )
    # Catch-up (docs/design.md section 9, runs/missed_webhooks.py): how far back it looks (GitHub
    # redelivers for three days) and how much one pass may do.
    catch_up_every_s: Annotated[float, Bounds(0, 3 * 86_400)] = Field(
        300.0,
        description="How often the relay asks GitHub again for failed webhook deliveries "
        "and sweeps open pull requests (0 turns it off).",
    )
    catch_up_window_s: Annotated[float, Bounds(0, 3 * 86_400)] = Field(
        255_600.0,  # 71 hours: inside GitHub's three days
        description="How far back a pass looks for deliveries (71 hours: inside the three "
        "days GitHub redelivers for).",
    )
    catch_up_grace_s: Annotated[float, Bounds(0, 3 * 86_400)] = Field(
        120.0,
        description="A pull request updated this lately is left to its own webhook.",
    )
    catch_up_max_redeliveries: Annotated[int, Bounds(0, 100_000, "", whole=True)] = Field(
        50, description="At most this many redeliveries asked in one pass."
    )
    catch_up_max_pulls: Annotated[int, Bounds(0, 100_000, "", whole=True)] = Field(
        50, description="At most this many pull requests swept in one pass."
    )
    # Caps and a queue (runstate/caps.py), since anyone who opens a pull request starts a run;
    # `.cujo.yml` may only lower them.
    max_runs_per_repo: Annotated[int, Bounds(1, 1000, "runs in flight", whole=True)] = Field(
        4, description="Sandbox runs in flight per repository; the rest wait in the queue."
    )
    max_runs_per_author: Annotated[int, Bounds(1, 1000, "runs in flight", whole=True)] = Field(
        2, description="Sandbox runs in flight per pull-request author."
    )
    # Operating the relay (docs/operating.md).
    log_format: LogFormat = Field(
        "json",
        description="`json`: one object a line, for a log collector; `text`: plain lines, "
        "for a person.",
    )
    bundle_days: Annotated[float, Bounds(0, 36_500, "days", above_low=True)] = Field(
        DEFAULT_BUNDLE_DAYS,
        description="How many days a finished run's bundle (its evidence) is kept.",
    )
    stop_grace_s: Annotated[float, Bounds(0, 86_400, above_low=True)] = Field(
        20.0,
        description="How long a stop lets the work in hand finish before handing it back.",
    )
    ready_backlog_s: Annotated[float, Bounds(0, 86_400, above_low=True)] = Field(
        120.0,
        description="How old the oldest waiting delivery may grow before `/readyz` says "
        "the intake is backed up.",
    )
    # At least a second, the maintenance loop's tick: polling faster spends the budget.
    jobs_poll_s: Annotated[float, Bounds(1, 86_400)] = Field(
        60.0,
        description="How often the jobs of running sandbox runs are read between their "
        "webhooks (a fallback, by conditional requests).",
    )

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

    Names are matched as documented, in capitals (``CUJO_APP_ID``), so a
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


def variable_of(name: str) -> str:
    """Return the environment variable that sets the field ``name``."""
    alias = RelaySettings.model_fields[name].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + name.upper()


def table() -> str:
    """Return every setting as the Markdown table ``docs/operating.md`` shows."""
    rows = [
        "| Variable | Default | Accepted | What it sets |",
        "|---|---|---|---|",
    ]
    for name, field in RelaySettings.model_fields.items():
        default = field.default
        if field.is_required():
            shown = "required"
        elif default is None or default == "":
            shown = "—"
        elif isinstance(default, int | float):
            shown = f"{default:g}"
        else:
            shown = f"`{default}`"
        bounds = [m for m in field.metadata if isinstance(m, Bounds)]
        accepted = bounds[0].rule().removeprefix("must be ") if bounds else "—"
        what = field.description or ""
        if name in TUNING:
            what = f"Tuning knob (tests shorten it): {what[0].lower()}{what[1:]}"
        cells = [f"`{variable_of(name)}`", shown, accepted, what]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())

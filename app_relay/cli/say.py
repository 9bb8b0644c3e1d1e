"""Say what the ``cujo`` command could not do: why it failed, and a record's URL as shown."""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError


def shown_url(url: str) -> str:
    """Return the record's URL as printed: a password in it (PostgreSQL) is masked."""
    return make_url(url).render_as_string(hide_password=True)


def reason_of(exc: BaseException) -> str:
    """Return why ``exc`` happened in one line: the system's words and the path, if any."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    if isinstance(exc, SQLAlchemyError):
        return str(getattr(exc, "orig", None) or exc).splitlines()[0]
    return str(exc) or type(exc).__name__

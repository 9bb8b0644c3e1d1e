"""The relay's logs: one JSON object a line, each naming the delivery and run it is about.

The delivery and the run being worked are kept in context variables (``about``): the
webhook sets the delivery for its request, a worker for the delivery it handles, and
acting on a run (``runs/lease.py``) sets the run. Every line, the libraries' included,
carries both (``null`` when there is none), so one delivery's or one run's story is
one filter away. ``CUJO_LOG_FORMAT=text`` gives the same lines in plain text, for a
person at a terminal.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Final, TextIO

from app_relay.settings import LogFormat

_DELIVERY: ContextVar[str | None] = ContextVar("cujo_delivery", default=None)
_RUN: ContextVar[str | None] = ContextVar("cujo_run", default=None)
_UNSET: Final = object()


def current() -> tuple[str | None, str | None]:
    """Return the delivery and the run this thread (or task) is working on now."""
    return _DELIVERY.get(), _RUN.get()


@contextmanager
def about(*, delivery: object = _UNSET, run: object = _UNSET) -> Iterator[None]:
    """Name the delivery and/or run that the lines logged inside are about."""
    tokens = []
    if delivery is not _UNSET:
        tokens.append((_DELIVERY, _DELIVERY.set(None if delivery is None else str(delivery))))
    if run is not _UNSET:
        tokens.append((_RUN, _RUN.set(None if run is None else str(run))))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class _Context(logging.Filter):
    """Stamp each record with the delivery and run of the thread that logs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add ``delivery`` and ``run`` to ``record`` (never drops one)."""
        record.delivery, record.run = current()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, delivery, run, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """Return ``record`` as one line of JSON."""
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "delivery": getattr(record, "delivery", None),
            "run": getattr(record, "run", None),
            "process": record.process,
            "thread": record.threadName,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """Plain lines for a person: time, level, logger, the ids when there are any, message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ids)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """Return ``record`` as one plain line (its traceback on the lines after)."""
        ids = [
            f"{name}={value}"
            for name in ("delivery", "run")
            if (value := getattr(record, name, None)) is not None
        ]
        record.ids = f" [{' '.join(ids)}]" if ids else ""
        return super().format(record)


def handler(fmt: LogFormat = "json", stream: TextIO | None = None) -> logging.Handler:
    """Return a handler writing lines in ``fmt`` to ``stream`` (stderr), ids stamped."""
    made = logging.StreamHandler(stream if stream is not None else sys.stderr)
    made.addFilter(_Context())
    made.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    return made


def configure(fmt: LogFormat = "json", *, level: int = logging.INFO) -> None:
    """Send every logger's lines to stderr in ``fmt``, in place of the handlers set before."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(fmt))
    root.setLevel(level)

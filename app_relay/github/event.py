"""A webhook delivery from GitHub, verified, parsed and read fail-closed; pure.

The webhook (``webhook/receive.py``) checks the signature and parses the body into an
``Event``; the features read its payload with ``payload_reader``, whose every gap raises
``MalformedEvent`` naming the field (retrying cannot help, so the delivery is refused).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app_relay.github.vocab import Reader

# GitHub's payloads nest about ten deep and their numbers are ids, counts and times that
# fit in 64 bits: JSON far deeper or longer than that is no webhook GitHub sends.
MAX_JSON_DEPTH = 64
MAX_JSON_INT_DIGITS = 20


class MalformedEvent(ValueError):
    """A verified payload lacks what its event promises; retrying cannot help."""


@dataclass(frozen=True)
class Event:
    """One verified delivery, parsed."""

    delivery_id: str
    name: str  # X-GitHub-Event
    payload: Mapping[str, Any]

    @property
    def action(self) -> str | None:
        """Return the payload's ``action``, if it has one."""
        action = self.payload.get("action")
        return action if isinstance(action, str) else None

    @property
    def installation_id(self) -> int | None:
        """Return the App installation the event is for, if it names one."""
        installation = self.payload.get("installation")
        if isinstance(installation, Mapping):
            found = installation.get("id")
            if isinstance(found, int) and not isinstance(found, bool):
                return found
        return None

    @property
    def repo(self) -> str | None:
        """Return the repository's ``owner/name``, if the event is about one."""
        repository = self.payload.get("repository")
        if isinstance(repository, Mapping):
            name = repository.get("full_name")
            if isinstance(name, str):
                return name
        return None

    @classmethod
    def parse(cls, delivery_id: str, name: str, body: bytes) -> Event:
        """Parse a verified raw body; raise ``MalformedEvent`` unless it is a JSON object."""
        payload = parse_json(body)
        if not isinstance(payload, dict):
            raise MalformedEvent("the body is JSON but not an object")
        return cls(delivery_id=delivery_id, name=name, payload=payload)


def parse_json(body: bytes) -> object:
    """Parse a webhook body; raise ``MalformedEvent`` for anything GitHub would not send.

    Malformed, too deep, an integer too long or a number JSON does not allow (NaN,
    Infinity, 1e999) is refused with the reason, never an exception of another kind.
    """
    try:
        payload = json.loads(
            body, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_no_constant
        )
    except MalformedEvent:
        raise
    except RecursionError:
        raise MalformedEvent(f"the body is JSON nested deeper than {MAX_JSON_DEPTH}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and int() limits
        raise MalformedEvent(f"the body is not JSON: {exc}") from None
    _check_depth(payload)
    return payload


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise MalformedEvent(
            f"the body is JSON with an integer of {len(text.lstrip('-'))} digits, "
            f"over {MAX_JSON_INT_DIGITS}"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise MalformedEvent(f"the body is JSON with a number out of range: {text[:40]}")
    return value


def _no_constant(text: str) -> object:
    raise MalformedEvent(f"the body holds {text}, which JSON does not allow")


def _check_depth(payload: object) -> None:
    # Level by level, keeping only the containers: a deep value costs no deep stack, and
    # the scalars most of a payload holds cost one test each (this runs before every 202).
    level = [payload] if isinstance(payload, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise MalformedEvent(f"the body is JSON nested deeper than {MAX_JSON_DEPTH}")
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]


def _malformed(field: str, problem: str) -> MalformedEvent:
    return MalformedEvent(f"{field or 'the payload'} {problem}")


def payload_reader(event: Event) -> Reader:
    """Read an event's payload fail-closed: a gap raises ``MalformedEvent`` naming it."""
    return Reader(event.payload, _malformed)

"""GitHub's vocabulary and the fail-closed reader of its JSON, in one pure module.

Every status, conclusion, reaction, permission, review event and webhook action the relay
sends or accepts is spelled here once; the rest of ``github/`` (REST answers),
``runs/runners.py`` (workflow webhooks), ``runs/review_request.py`` (pull request
webhooks) and ``runstate/machine.py`` (what the check shows) share it. ``Reader`` reads
one JSON object as GitHub documents it: a missing or mistyped field raises the caller's
own error naming the field and what was expected, never a default that could read as
"ok". No I/O here, and no HTTP client.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any, Final, Literal, get_args

# ---- check runs, workflow runs and jobs ---------------------------------------------
# https://docs.github.com/en/rest/checks/runs#create-a-check-run

# The check run Cujo posts on every head, and the one a branch rule requires for a hold.
GUARD: Final = "cujo/guard"

CheckStatus = Literal["queued", "in_progress", "completed"]
Conclusion = Literal["success", "failure", "neutral", "action_required", "skipped", "cancelled"]
# What the relay sets on a check run.
CHECK_STATUSES: Final[frozenset[str]] = frozenset(get_args(CheckStatus))
CONCLUSIONS: Final[frozenset[str]] = frozenset(get_args(Conclusion))
# What GitHub may answer for a check run, a workflow run or a job: wider than what the
# relay sets. https://docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run
STATUSES_SEEN: Final = CHECK_STATUSES | {"waiting", "requested", "pending"}
CONCLUSIONS_SEEN: Final = CONCLUSIONS | {"timed_out", "stale", "startup_failure"}

# ---- reactions, permissions, reviews ------------------------------------------------

# https://docs.github.com/en/rest/reactions/reactions#about-reactions
ReactionContent = Literal["+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"]
REACTIONS: Final[frozenset[str]] = frozenset(get_args(ReactionContent))
# https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user
Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
PERMISSIONS: Final[tuple[Permission, ...]] = get_args(Permission)
# https://docs.github.com/en/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app
# The access an installation is granted to each of its permissions.
ACCESS_LEVELS: Final = ("read", "write", "admin")
# https://docs.github.com/en/rest/pulls/reviews#create-a-review-for-a-pull-request
# The two review events Cujo posts (never APPROVE), and the state GitHub answers for each.
REVIEW_STATES: Final = {"COMMENT": "COMMENTED", "REQUEST_CHANGES": "CHANGES_REQUESTED"}
# Dismissing a review: the event sent, and the state GitHub answers.
DISMISS: Final = "DISMISS"
DISMISSED: Final = "DISMISSED"
# How a pull request may be merged: https://docs.github.com/en/rest/pulls/pulls#merge-a-pull-request
MERGE_METHODS: Final = ("merge", "squash", "rebase")

# ---- webhook actions ----------------------------------------------------------------
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#workflow_job
WORKFLOW_JOB_ACTIONS: Final = frozenset({"queued", "in_progress", "waiting", "completed"})
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#workflow_run
WORKFLOW_RUN_ACTIONS: Final = frozenset({"requested", "in_progress", "completed"})

# ---- names --------------------------------------------------------------------------

APP_SLUG: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,33}")
LOGIN: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")
# A commit as the REST API may answer it (SHA-1, or SHA-256 in a repository that uses it);
# as webhooks and dispatch inputs carry it (SHA-1), it is cujo_action.schema's SHA.
OBJECT_ID: Final = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")

# ---- the fail-closed reader ---------------------------------------------------------

Fail = Callable[[str, str], Exception]
"""Build the caller's error from a field's path ("" for the whole body) and what is wrong."""


def _kind(value: object) -> str:
    return type(value).__name__


def _shown(value: object) -> str:
    return repr(str(value)[:40])


class Reader:
    """Read one JSON object; any missing or mistyped field raises the caller's error.

    ``where`` is the object's path in the document ("" for the body itself); errors name
    each field by its full path, e.g. ``pull_request.head.sha``.
    """

    def __init__(self, data: object, fail: Fail, where: str = "") -> None:
        if not isinstance(data, dict):
            raise fail(where, "is not a JSON object")
        self.data: dict[str, Any] = data
        self.fail = fail
        self.where = where

    def has(self, key: str) -> bool:
        """Say whether the object holds ``key`` at all (null counts)."""
        return key in self.data

    def _field(self, key: str) -> tuple[str, object]:
        name = f"{self.where}.{key}" if self.where else key
        if key not in self.data:
            raise self.fail(name, "is missing")
        return name, self.data[key]

    def _bad(self, name: str, want: str, value: object) -> Exception:
        return self.fail(name, f"is not {want} (got {_kind(value)})")

    def obj(self, key: str) -> Reader:
        """Return the object at ``key``."""
        name, value = self._field(key)
        if not isinstance(value, dict):
            raise self._bad(name, "an object", value)
        return Reader(value, self.fail, name)

    def opt_obj(self, key: str) -> Reader | None:
        """Return the object at ``key``, or None when it is null."""
        name, value = self._field(key)
        return None if value is None else Reader(value, self.fail, name)

    def text(
        self,
        key: str,
        *,
        pattern: re.Pattern[str] | None = None,
        what: str | None = None,
        max_len: int | None = None,
    ) -> str:
        """Return the non-empty string at ``key``, matching ``pattern`` (named ``what``)."""
        name, value = self._field(key)
        if not isinstance(value, str) or not value:
            raise self._bad(name, "a non-empty string", value)
        if max_len is not None and len(value) > max_len:
            raise self.fail(name, f"is longer than {max_len} characters")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(name, f"is not {what}" if what else f"is malformed: {value[:80]!r}")
        return value

    def opt_text(self, key: str) -> str | None:
        """Return the string at ``key``, or None when it is null."""
        name, value = self._field(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._bad(name, "a string or null", value)
        return value

    def one_of(self, key: str, allowed: Collection[str]) -> str:
        """Return the string at ``key``, one of ``allowed``."""
        name, value = self._field(key)
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(name, f"is not one of {sorted(allowed)}: {_shown(value)}")
        return value

    def opt_one_of(self, key: str, allowed: Collection[str]) -> str | None:
        """Return the string at ``key``, one of ``allowed``, or None when it is null."""
        name, value = self._field(key)
        if value is None:
            return None
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(name, f"is not one of {sorted(allowed)} or null: {_shown(value)}")
        return value

    def _whole(self, name: str, value: object, want: str, *, positive: bool = False) -> int:
        # A boolean is not an integer here, though Python's bool is one.
        if not isinstance(value, int) or isinstance(value, bool) or (positive and value <= 0):
            raise self._bad(name, want, value)
        return value

    def integer(self, key: str) -> int:
        """Return the integer at ``key`` (a boolean is not one)."""
        return self._whole(*self._field(key), "an integer")

    def opt_integer(self, key: str) -> int | None:
        """Return the integer at ``key``, or None when it is null."""
        name, value = self._field(key)
        return None if value is None else self._whole(name, value, "an integer or null")

    def positive(self, key: str) -> int:
        """Return the positive integer at ``key`` (an id, a number, an attempt)."""
        return self._whole(*self._field(key), "a positive integer", positive=True)

    def opt_positive(self, key: str) -> int | None:
        """Return the positive integer at ``key``, or None when it is null."""
        name, value = self._field(key)
        if value is None:
            return None
        return self._whole(name, value, "a positive integer or null", positive=True)

    def flag(self, key: str) -> bool:
        """Return the boolean at ``key``."""
        name, value = self._field(key)
        if not isinstance(value, bool):
            raise self._bad(name, "a boolean", value)
        return value

    def array(self, key: str) -> list[object]:
        """Return the list at ``key``, its items unread."""
        name, value = self._field(key)
        if not isinstance(value, list):
            raise self._bad(name, "a list", value)
        return value

    def items(self, key: str) -> list[Reader]:
        """Return the list of objects at ``key``, each as a reader."""
        name = f"{self.where}.{key}" if self.where else key
        return [Reader(v, self.fail, f"{name}[{i}]") for i, v in enumerate(self.array(key))]


def read_list(data: object, fail: Fail) -> list[Reader]:
    """Read a body that is a JSON list of objects, each as a reader."""
    if not isinstance(data, list):
        raise fail("", "is not a JSON list")
    return [Reader(v, fail, f"[{i}]") for i, v in enumerate(data)]

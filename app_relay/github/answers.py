"""Read what GitHub answered into typed answers, fail-closed, or raise ``GitHubError``.

Every answer is read by ``GitHubAnswer`` (``vocab.Reader`` raising ``GitHubError``): a
missing or mistyped field names the call and the field, never a default that could read
as "ok". The frozen types here are what the gateway hands callers; the ones about branch
protection live with its reading in ``protection.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

from github.GithubException import GithubException

from app_relay.github.retry import wait_headers
from app_relay.github.vocab import Fail, Reader, read_list


class GitHubError(Exception):
    """A GitHub call failed or answered something that cannot be trusted."""

    def __init__(
        self,
        call: str,
        reason: str,
        *,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{call}: {reason}")
        self.call = call
        self.reason = reason
        self.status = status
        # Only what says how long to wait (retry.WAIT_HEADERS), for the outbox.
        self.headers = wait_headers(headers)


# ---- answers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A pull request as the relay needs it."""

    number: int
    head_sha: str
    base_sha: str
    base_ref: str
    head_repo_full_name: str | None  # None when the fork was deleted
    author_login: str
    author_type: str
    draft: bool
    state: Literal["open", "closed"]
    # GitHub's word for the author's standing here (OWNER, MEMBER, ..., FIRST_TIMER, NONE).
    author_association: str = "NONE"
    # The pull request's own text, as an attacker writes it (None where the answer has
    # none): the workflow rules judge what the base's workflows make of it.
    title: str | None = None
    body: str | None = None
    head_ref: str | None = None


@dataclass(frozen=True, slots=True)
class ChangedFiles:
    """The paths a pull request changes; ``incomplete`` says why some may be missing.

    ``patches`` holds each listed file's unified-diff hunks as GitHub gives them (None
    for a binary file or one too large for GitHub to show a patch of).
    """

    paths: tuple[str, ...]
    incomplete: str = ""
    patches: tuple[tuple[str, str | None], ...] = ()

    def unified_diff(self) -> str:
        """Return the listed files' changes as one unified diff (binary files named)."""
        parts = []
        for name, patch in self.patches:
            head = f"diff --git a/{name} b/{name}\n"
            if patch is None:
                parts.append(f"{head}Binary files a/{name} and b/{name} differ\n")
            else:
                parts.append(f"{head}--- a/{name}\n+++ b/{name}\n{patch.rstrip()}\n")
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class CheckRun:
    """A check run after it was written; ``answered_at`` is GitHub's ``Date`` of that answer."""

    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    answered_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Review:
    """A pull-request review after it was posted or dismissed.

    ``submitted_at`` is GitHub's own time of the review; ``answered_at`` the ``Date`` of
    GitHub's answer (a dismissal has no time of its own in its answer).
    """

    id: int
    state: str
    commit_id: str
    submitted_at: datetime | None = None
    answered_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Comment:
    """An issue comment after it was posted."""

    id: int
    html_url: str


@dataclass(frozen=True, slots=True)
class Reaction:
    """A reaction after it was added."""

    id: int
    content: str


@dataclass(frozen=True, slots=True)
class DispatchResult:
    """What a workflow dispatch told us; both None when GitHub gave no run details."""

    workflow_run_id: int | None
    html_url: str | None


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """A workflow run as the relay follows it."""

    id: int
    name: str | None
    display_title: str
    status: str
    conclusion: str | None
    head_sha: str
    run_attempt: int


@dataclass(frozen=True, slots=True)
class JobStep:
    """One step of a workflow job, as GitHub shows its progress."""

    name: str
    status: str
    conclusion: str | None

    def line(self) -> str:
        """Return the step as one line of a run's timeline."""
        return f"{self.name}: {self.status}" + (f" ({self.conclusion})" if self.conclusion else "")


def read_steps(data: object) -> tuple[JobStep, ...]:
    """Read a job's ``steps`` for the timeline; an entry that is not a step is left out.

    Steps are shown, never decided on, so one malformed entry does not hide the others.
    """
    steps: list[JobStep] = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        name, status = item.get("name"), item.get("status")
        conclusion = item.get("conclusion")
        if not isinstance(name, str) or not isinstance(status, str) or not name.strip():
            continue
        steps.append(
            JobStep(
                name=name.strip()[:100],
                status=status[:20],
                conclusion=conclusion[:20] if isinstance(conclusion, str) else None,
            )
        )
    return tuple(steps)


@dataclass(frozen=True, slots=True)
class Job:
    """A job of a workflow run, with its steps."""

    id: int
    name: str
    status: str
    steps: tuple[JobStep, ...]


@dataclass(frozen=True, slots=True)
class Artifact:
    """An artifact of a workflow run."""

    id: int
    name: str
    size_in_bytes: int
    expired: bool


@dataclass(frozen=True, slots=True)
class Installation:
    """The App's installation on a repository and the permissions it was granted."""

    id: int
    permissions: Mapping[str, str]  # e.g. {"checks": "write"}: read, write or admin


@dataclass(frozen=True, slots=True)
class Workflow:
    """A workflow file GitHub knows on a repository (its default branch)."""

    id: int
    path: str
    state: str  # active, or why not: disabled_manually, disabled_inactivity, ...


# ---- fail-closed reading -------------------------------------------------------------


class GitHubAnswer(Reader):
    """Read one JSON answer of ``call``; any missing or mistyped field raises GitHubError."""

    def __init__(self, call: str, data: object) -> None:
        super().__init__(data, failing(call))
        self.call = call


def failing(call: str) -> Fail:
    """Return the error builder that names ``call`` and the field that is wrong."""

    def fail(field: str, problem: str) -> GitHubError:
        return GitHubError(
            call, f"field {field!r} {problem}" if field else f"answer body {problem}"
        )

    return fail


def answer_list(call: str, data: object) -> list[Reader]:
    """Read an answer of ``call`` that is a JSON list of objects, each as a reader."""
    return read_list(data, failing(call))


def parse_time(call: str, name: str, value: str) -> float:
    """Read field ``name`` of an answer of ``call``, an ISO 8601 time, as epoch seconds."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise GitHubError(call, f"field {name!r} is not an ISO 8601 time: {value[:40]!r}") from None


def message_of(exc: GithubException) -> str:
    """Return the ``message`` of GitHub's error answer (at most 200 characters)."""
    data = exc.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:200]
    return "no message"


def answer_message(exc: GitHubError) -> str | None:
    """Return the ``message`` GitHub's error answer held, when the error came from one."""
    cause = exc.__cause__
    return message_of(cause) if isinstance(cause, GithubException) else None


# ---- GitHub's clock ---------------------------------------------------------------------


def github_time(text: object) -> datetime | None:
    """Read a time GitHub wrote (ISO 8601, ``Z`` or an offset); None if it is no such time."""
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.astimezone(UTC) if at.tzinfo is not None else None


def answered_at(headers: Mapping[str, str] | None) -> datetime | None:
    """Return the ``Date`` header of GitHub's answer (its clock, whole seconds), if readable.

    https://docs.github.com/en/rest/using-the-rest-api/getting-started-with-the-rest-api
    """
    value = (headers or {}).get("date")
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        at = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return at.astimezone(UTC) if at.tzinfo is not None else None

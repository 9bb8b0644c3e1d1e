"""Name what an expression reads, what of it a stranger writes, and how a shell reads it.

Pure. ``contexts`` lists the context paths an expression reads (``github.head_ref``,
``secrets.NPM_TOKEN``, ``env.TITLE``), normalised (lower case, ``['x']`` as ``.x``, an
index as ``*``); ``stranger_fields`` says which of them a stranger writes under the
workflow's privileged triggers, and which of this pull request's own texts each carries;
``shell_context`` says how a shell reads the text pasted in at one point of its script.
https://docs.github.com/en/actions/security-for-github-actions/security-guides/security-hardening-for-github-actions#understanding-the-risk-of-script-injections
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# The triggers whose jobs hold the repository's secrets (and a token that can write) while
# a pull request from anyone decides what they read.
PRIVILEGED_TRIGGERS = ("pull_request_target", "workflow_run", "issue_comment")

_PRT = frozenset({"pull_request_target"})
_COMMENT = frozenset({"issue_comment"})
_RUN = frozenset({"workflow_run"})


@dataclass(frozen=True)
class StrangerField:
    """A context a stranger writes: its path, the triggers it does so under, and which of
    the pull request's own texts (title, body, branch, commits) it carries."""

    path: str
    triggers: frozenset[str]
    carries: frozenset[str] = frozenset()


def _field(path: str, triggers: frozenset[str], *carries: str) -> StrangerField:
    return StrangerField(path, triggers, frozenset(carries))


STRANGER_FIELDS: tuple[StrangerField, ...] = (
    _field("github.head_ref", _PRT, "branch"),
    _field("github.event.pull_request.head.ref", _PRT, "branch"),
    _field("github.event.pull_request.head.label", _PRT, "branch"),
    _field("github.event.pull_request.head.repo.default_branch", _PRT),
    _field("github.event.pull_request.title", _PRT, "title"),
    _field("github.event.pull_request.body", _PRT, "body"),
    # A comment on a pull request: its issue is the pull request.
    _field("github.event.issue.title", _COMMENT, "title"),
    _field("github.event.issue.body", _COMMENT, "body"),
    _field("github.event.comment.body", _COMMENT),
    # A run of the pull request's own CI: its branch, its title, its head commit.
    _field("github.event.workflow_run.head_branch", _RUN, "branch"),
    _field("github.event.workflow_run.display_title", _RUN, "title", "commits"),
    _field("github.event.workflow_run.head_commit.message", _RUN, "commits"),
    _field("github.event.workflow_run.head_commit.author.name", _RUN),
    _field("github.event.workflow_run.head_commit.author.email", _RUN),
    _field("github.event.workflow_run.pull_requests.*.head.ref", _RUN, "branch"),
)

# Where the pull request's head is named: checking one of these out runs its code.
HEAD_REFS = (
    "github.head_ref",
    "github.event.pull_request.head.sha",
    "github.event.pull_request.head.ref",
    "github.event.pull_request.merge_commit_sha",
    "github.event.workflow_run.head_sha",
    "github.event.workflow_run.head_branch",
    "github.event.workflow_run.pull_requests.*.head.sha",
    "github.event.workflow_run.pull_requests.*.head.ref",
)
HEAD_REPOSITORIES = (
    "github.event.pull_request.head.repo.full_name",
    "github.event.pull_request.head.repo.clone_url",
    "github.event.workflow_run.head_repository.full_name",
)
# What names the pull request by number: `refs/pull/N/head` with one of these is its head.
PULL_NUMBERS = (
    "github.event.issue.number",
    "github.event.pull_request.number",
    "github.event.number",
    "github.event.workflow_run.pull_requests.*.number",
)

# A context path: a name, then `.name` or `[...]` parts (spaces allowed around them).
_PATH = re.compile(
    r"(?<![\w.'\"-])([A-Za-z_][\w-]*)((?:\s*\.\s*[\w*-]+|\s*\[\s*(?:'[^']*'|\"[^\"]*\"|[^\]]*)\s*\])*)"
)
_PART = re.compile(r"\.\s*([\w*-]+)|\[\s*(?:'([^']*)'|\"([^\"]*)\"|([^\]]*?))\s*\]")
_STRING = re.compile(r"'(?:[^']|'')*'")
_INDEXED = re.compile(r"\s*\[\s*'([\w*-]+)'\s*\]")
_CONTEXT_NAMES = frozenset(
    {"github", "env", "secrets", "inputs", "steps", "needs", "vars", "matrix", "job", "runner"}
)


def contexts(expression: str) -> list[str]:
    """Return the context paths ``expression`` reads, normalised, in order (once each)."""
    # `x['name']` reads x.name; any other string literal reads nothing, whatever it spells.
    bare = _STRING.sub("''", _INDEXED.sub(r".\1", expression))
    found: list[str] = []
    for match in _PATH.finditer(bare):
        name = match.group(1).lower()
        if name not in _CONTEXT_NAMES:
            continue
        parts = [name]
        for part in _PART.finditer(match.group(2)):
            word = next(g for g in part.groups() if g is not None).strip().lower()
            parts.append("*" if word.isdigit() or word == "*" else word)
        path = ".".join(parts)
        if path not in found:
            found.append(path)
    return found


def _segments_match(a: list[str], b: list[str]) -> bool:
    return all(x == y or "*" in (x, y) for x, y in zip(a, b, strict=False))


def covers(path: str, field: str) -> bool:
    """Return whether reading ``path`` reads ``field``: the field itself, or an object
    holding it (``toJSON(github.event)`` reads the pull request's title too)."""
    a, b = path.split("."), field.split(".")
    return len(a) <= len(b) and _segments_match(a, b)


def stranger_fields(path: str, triggers: Iterable[str]) -> list[StrangerField]:
    """Return the fields a stranger writes that reading ``path`` reads, under ``triggers``."""
    live = set(triggers)
    return [f for f in STRANGER_FIELDS if f.triggers & live and covers(path, f.path)]


def names_any(path: str, fields: Iterable[str]) -> bool:
    """Return whether ``path`` is one of ``fields`` (or an index of one, ``*`` for any)."""
    a = path.split(".")
    return any(len(a) == len(f.split(".")) and _segments_match(a, f.split(".")) for f in fields)


def secret_names(path: str) -> list[str]:
    """Return the secrets reading ``path`` hands over (``*``: all of them), or []."""
    if path in ("github.token", "secrets.github_token"):
        return ["GITHUB_TOKEN"]
    if path == "secrets":
        return ["*"]
    if path.startswith("secrets."):
        return [path.removeprefix("secrets.").split(".")[0].upper()]
    return []


# --------------------------------------------------------------------------- how a shell reads it

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w-]*)\1")
POSIX_SHELLS = ("", "bash", "sh")


def blank_expressions(script: str) -> str:
    """Return ``script`` with every ``${{ }}`` replaced by as many ``x`` (same offsets)."""
    return re.sub(r"\$\{\{.*?\}\}", lambda m: "x" * len(m.group(0)), script, flags=re.DOTALL)


def shell_context(script: str, offset: int, shell: str = "") -> str:
    """Return how the shell reads text pasted at ``offset`` of ``script`` (schema's
    ``SHELL_CONTEXTS``); any shell but bash or sh reads it as ``bare`` (the strictest)."""
    if shell.split(" ", 1)[0].rsplit("/", 1)[-1] not in POSIX_SHELLS:
        return "bare"
    text = blank_expressions(script)[:offset]
    state = "bare"
    heredocs: list[tuple[str, bool]] = []  # delimiters waiting for the line's end
    in_heredoc: tuple[str, bool] | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if in_heredoc is not None:
            end = text.find("\n", i)
            line = text[i:] if end < 0 else text[i:end]
            if end >= 0 and line.strip() == in_heredoc[0]:
                in_heredoc = heredocs.pop(0) if heredocs else None
            i = len(text) if end < 0 else end + 1
            continue
        if state == "single":
            state = "bare" if ch == "'" else state
        elif state == "double":
            if ch == "\\":
                i += 1
            elif ch == '"':
                state = "bare"
        elif state == "comment":
            if ch == "\n":
                state = "bare"
                in_heredoc = heredocs.pop(0) if heredocs else None
        elif ch == "\\":
            i += 1
        elif ch == "'":
            state = "single"
        elif ch == '"':
            state = "double"
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n;|&("):
            state = "comment"
        elif ch == "<" and (found := _HEREDOC.match(text, i)):
            heredocs.append((found.group(2), bool(found.group(1))))
            i = found.end() - 1
        elif ch == "\n" and heredocs:
            in_heredoc = heredocs.pop(0)
        i += 1
    if in_heredoc is not None:
        return "literal" if in_heredoc[1] else "heredoc"
    return state

"""Find, in a workflow's YAML, what hands the repository's secrets to a stranger.

Pure, over ``Workflow`` (``parse.py``), and independent of zizmor's audit names:

* ``untrusted_checkouts``: a privileged trigger (``pull_request_target``,
  ``workflow_run``, ``issue_comment``) whose job checks out the pull request's head (the
  "pwn request");
* ``injections``: a context a stranger writes pasted by ``${{ }}`` into a ``run:``
  script or an ``actions/github-script`` script of a privileged workflow;
* ``secret_egresses``: a secret or the job's token handed to a command that sends it off
  the runner (``curl``, ``wget``, ``nc``, a ``/dev/tcp`` socket…; the job's token sent to
  GitHub's own hosts is its use);
* ``pr_sinks``: where a privileged workflow's shell reads the pull request's own title,
  body, branch or commit message, and how (``shell_context``).

Each hazard has a key made of names (file, job, step, what), never of lines, so the
head's hazards can be told from the base's however the lines moved.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from cujo_action.schema import (
    WORKFLOW_INJECTION,
    WORKFLOW_SECRET_EGRESS,
    WORKFLOW_UNTRUSTED_CHECKOUT,
)
from cujo_action.workflow.contexts import (
    HEAD_REFS,
    HEAD_REPOSITORIES,
    PRIVILEGED_TRIGGERS,
    PULL_NUMBERS,
    StrangerField,
    contexts,
    names_any,
    secret_names,
    shell_context,
    stranger_fields,
)
from cujo_action.workflow.parse import Job, Step, Text, Workflow

# Commands that send what they are given off the runner.
NET_TOOLS = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "telnet", "ssh", "scp", "sftp", "rsync",
     "ftp", "tftp", "http", "https", "xh", "aria2c", "dig", "nslookup", "invoke-webrequest",
     "invoke-restmethod", "iwr", "irm"}
)  # fmt: skip
# Words before the command a line runs (``sudo curl``, ``FOO=1 curl``, ``xargs curl``).
_PREFIXES = frozenset({"sudo", "exec", "command", "env", "time", "nohup", "xargs", "then", "do"})
# GitHub's own hosts: the job's token sent there is the token's use, not its theft.
_GITHUB_HOSTS = re.compile(
    r"^(?:github\.com|api\.github\.com|uploads\.github\.com|[\w.-]+\.githubusercontent\.com|ghcr\.io)$"
)
_GITHUB_URL_VARIABLES = re.compile(
    r"\$\{?GITHUB_(?:API|SERVER|GRAPHQL)_URL\b|\$\{\{\s*github\.(?:api|server|graphql)_url\s*\}\}"
)
_URL_HOST = re.compile(r"\b[a-z][a-z0-9+.-]*://(?:[^/\s\"'@]*@)?([A-Za-z0-9.-]+)")
_RAW_SOCKET = re.compile(r"/dev/(?:tcp|udp)/")
_ENV_DUMP = re.compile(r"(?:^|[;&|(]\s*)(?:env|printenv|export\s+-p|set)\s*(?:\||>)")
_SEGMENTS = re.compile(r"\|\|?|&&?|;|\$\(|`|\(|\)")
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_GIT_FETCHES = re.compile(r"\bgit\b.*\b(?:fetch|checkout|switch|pull|clone|worktree|reset)\b")
_GH_CHECKOUT = re.compile(r"\bgh\s+pr\s+checkout\b")


@dataclass(frozen=True)
class Hazard:
    """One hazard in one file: the observation it makes, where, its key, and what it is."""

    kind: str
    path: str
    line: int
    key: tuple[str, ...]
    detail: str


@dataclass(frozen=True)
class Sink:
    """Where a privileged workflow's shell reads a pull request's own text."""

    path: str
    line: int
    job: str
    step: str
    expression: str
    carries: frozenset[str]  # title, body, branch, commits
    context: str  # how the shell reads it (schema.SHELL_CONTEXTS)
    triggers: tuple[str, ...]


def privileged(workflow: Workflow) -> tuple[str, ...]:
    """Return the workflow's privileged triggers, in the order it names them."""
    return tuple(t for t in workflow.triggers if t in PRIVILEGED_TRIGGERS)


def where(step: Step) -> str:
    """Return a step as a person finds it: its name, in its job."""
    return f"step `{step.ident}` of job `{step.job}`"


def hazards(workflow: Workflow) -> list[Hazard]:
    """Return every hazard of ``workflow``, the most telling first."""
    return [
        *untrusted_checkouts(workflow),
        *injections(workflow),
        *secret_egresses(workflow),
    ]


# --------------------------------------------------------------------------- checking out the head


def _paths_in(text: str) -> list[str]:
    return [path for m in _EXPRESSION.finditer(text) for path in contexts(m.group(1))]


def _names_head(text: str) -> bool:
    """Return whether ``text`` (a ref, a repository, a command) names the pull request's head."""
    paths = _paths_in(text)
    if any(names_any(p, HEAD_REFS) or names_any(p, HEAD_REPOSITORIES) for p in paths):
        return True
    # refs/pull/N/head (or /merge), N from the event.
    return "pull/" in text and (
        "refs/pull/" in text or any(names_any(p, PULL_NUMBERS) for p in paths)
    )


def _checkout_of_head(step: Step) -> tuple[int, str] | None:
    """Return (line, how) where ``step`` checks out the pull request's head, or None."""
    action = step.uses.split("@", 1)[0].lower()
    if action == "actions/checkout":
        for key in ("ref", "repository"):
            text = step.with_.get(key)
            if text is not None and _names_head(text.value):
                return text.line, f"`actions/checkout` with `{key}: {text.value.strip()}`"
    if step.run is not None:
        for line, command, _ in logical_lines(step.run):
            if _GH_CHECKOUT.search(command) or (
                _GIT_FETCHES.search(command) and _names_head(command)
            ):
                return line, f"`{command.strip()[:200]}`"
    return None


def untrusted_checkouts(workflow: Workflow) -> list[Hazard]:
    """Return each step of a privileged workflow that checks out the pull request's head."""
    triggers = privileged(workflow)
    if not triggers:
        return []
    found = []
    for step in workflow.steps():
        checkout = _checkout_of_head(step)
        if checkout is None:
            continue
        line, how = checkout
        job = workflow.job(step.job)
        guard = " ".join(f"`if: {c}`" for c in (job.if_ if job else "", step.if_) if c)
        found.append(
            Hazard(
                WORKFLOW_UNTRUSTED_CHECKOUT,
                workflow.path,
                line,
                ("untrusted-checkout", workflow.path, step.job, step.ident),
                f"{workflow.path} ({', '.join(triggers)}): {where(step)} checks out the pull "
                f"request's head with {how}: code from any fork then runs in a job that "
                "holds the repository's secrets and a token that can write"
                + (f" (guarded by {guard})" if guard else ""),
            )
        )
    return found


# --------------------------------------------------------------------------- injection


def _env_scopes(workflow: Workflow, job: Job | None, step: Step) -> dict[str, Text]:
    """Return the variables a step sees from ``env:`` (the step's over the job's over the
    workflow's), by name as ``env.NAME`` reads it (without case)."""
    scopes = [workflow.env, job.env if job else {}, step.env]
    return {name.lower(): text for scope in scopes for name, text in scope.items()}


def _fields_read(
    expression: str, triggers: tuple[str, ...], env: dict[str, Text]
) -> tuple[list[StrangerField], str]:
    """Return the stranger's fields ``expression`` reads (through ``env.X`` too) and how."""
    fields: list[StrangerField] = []
    via = ""
    for path in contexts(expression):
        direct = stranger_fields(path, triggers)
        fields += direct
        name = path.removeprefix("env.")
        if not direct and path.startswith("env.") and name in env:
            through = [
                f
                for expr, _, _ in env[name].expressions
                for inner in contexts(expr)
                for f in stranger_fields(inner, triggers)
            ]
            if through:
                fields += through
                via = f" (through `env.{name.upper()}`)"
    return list(dict.fromkeys(fields)), via


def _script_sinks(step: Step) -> Iterator[tuple[str, Text]]:
    if step.run is not None:
        yield "run: script", step.run
    if step.uses.split("@", 1)[0].lower() == "actions/github-script" and "script" in step.with_:
        yield "github-script script", step.with_["script"]


def injections(workflow: Workflow) -> list[Hazard]:
    """Return each place a privileged workflow pastes a stranger's text into a script."""
    triggers = privileged(workflow)
    if not triggers:
        return []
    found = []
    for step in workflow.steps():
        env = _env_scopes(workflow, workflow.job(step.job), step)
        for sink, text in _script_sinks(step):
            for expression, line, _ in text.expressions:
                fields, via = _fields_read(expression, triggers, env)
                if not fields:
                    continue
                read = ", ".join(f"`{f.path}`" for f in fields[:4])
                found.append(
                    Hazard(
                        WORKFLOW_INJECTION,
                        workflow.path,
                        line,
                        ("injection", workflow.path, step.job, step.ident, sink, expression),
                        f"{workflow.path} ({', '.join(triggers)}): {where(step)} pastes "
                        f"`${{{{ {expression} }}}}`{via} into its {sink}: {read}, which anyone "
                        "opening a pull request or comment writes, becomes code in a job that "
                        "holds the repository's secrets",
                    )
                )
    return found


def pr_sinks(workflow: Workflow) -> list[Sink]:
    """Return where a privileged workflow's shell reads this kind of pull request's texts."""
    triggers = privileged(workflow)
    if not triggers:
        return []
    found = []
    for step in workflow.steps():
        if step.run is None:
            continue
        env = _env_scopes(workflow, workflow.job(step.job), step)
        for expression, line, offset in step.run.expressions:
            fields, _ = _fields_read(expression, triggers, env)
            carries = frozenset(c for f in fields for c in f.carries)
            if carries:
                found.append(
                    Sink(
                        path=workflow.path,
                        line=line,
                        job=step.job,
                        step=step.ident,
                        expression=expression,
                        carries=carries,
                        context=shell_context(step.run.value, offset, step.shell),
                        triggers=triggers,
                    )
                )
    return found


# --------------------------------------------------------------------------- secrets sent away


def logical_lines(text: Text) -> Iterator[tuple[int, str, int]]:
    """Yield each command line of a script (continuations joined): line, text, offset."""
    start, pending, first = 0, "", 0
    value = text.value
    for raw in value.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        if not pending:
            first = start
        start += len(raw)
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        yield text.line_at(first), pending + body, first
        pending = ""
    if pending:
        yield text.line_at(first), pending, first


def _secret_env(workflow: Workflow, job: Job | None, step: Step) -> dict[str, set[str]]:
    """Return the variables of a step's ``env:`` that hold secrets, with which."""
    held: dict[str, set[str]] = {}
    for scope in (workflow.env, job.env if job else {}, step.env):
        for name, text in scope.items():
            names = {s for expr, _, _ in text.expressions for p in contexts(expr)
                     for s in secret_names(p)}  # fmt: skip
            if names:
                held[name] = names
            else:
                held.pop(name, None)  # a nearer scope set it to something else
    return held


def command_words(command: str) -> list[str]:
    """Return the command each segment of a shell line runs (its first word, lower case)."""
    words = []
    for segment in _SEGMENTS.split(command):
        tokens = segment.split()
        while tokens and (
            "=" in tokens[0].split("/")[0] or tokens[0] in _PREFIXES or tokens[0].startswith("-")
        ):
            tokens.pop(0)
        if tokens:
            words.append(tokens[0].strip("\"'").rsplit("/", 1)[-1].lower())
    return words


def _sent_secrets(command: str, env_secrets: dict[str, set[str]]) -> set[str]:
    found = {s for m in _EXPRESSION.finditer(command) for p in contexts(m.group(1))
             for s in secret_names(p)}  # fmt: skip
    for name, names in env_secrets.items():
        if re.search(rf"\$\{{?{re.escape(name)}\b", command):
            found |= names
    if env_secrets and _ENV_DUMP.search(command):
        found |= {s for names in env_secrets.values() for s in names}
    return found


def _sends_away(command: str, secrets: set[str]) -> str:
    """Return how ``command`` sends what it holds off the runner ('' when it does not).

    A generic sender (``curl``, ``nc``, a ``/dev/tcp`` socket) given a secret sends it
    wherever it is pointed; a tool with a service of its own (``docker login``, ``twine``,
    ``git push``) is that service's use and left to the audit and the run.
    """
    tools = [w for w in command_words(command) if w in NET_TOOLS]
    raw = bool(_RAW_SOCKET.search(command))
    if not tools and not raw:
        return ""
    hosts = [h.lower() for h in _URL_HOST.findall(command)]
    github_only = all(_GITHUB_HOSTS.match(h) for h in hosts) and (
        bool(hosts) or bool(_GITHUB_URL_VARIABLES.search(command))
    )
    if secrets <= {"GITHUB_TOKEN"} and github_only and not raw:
        return ""  # the job's token sent to GitHub: what it is for
    how = ", ".join(dict.fromkeys([*tools, *(["/dev/tcp"] if raw else [])]))
    away = [h for h in hosts if not _GITHUB_HOSTS.match(h)]
    return how + (f" to {', '.join(dict.fromkeys(away))}" if away else "")


def secret_egresses(workflow: Workflow) -> list[Hazard]:
    """Return each command of a workflow that hands a secret to something sending it away."""
    found = []
    for step in workflow.steps():
        if step.run is None:
            continue
        env_secrets = _secret_env(workflow, workflow.job(step.job), step)
        for line, command, _ in logical_lines(step.run):
            secrets = _sent_secrets(command, env_secrets)
            if not secrets:
                continue
            how = _sends_away(command, secrets)
            if not how:
                continue
            named = ", ".join(sorted("every secret" if s == "*" else s for s in secrets))
            found.append(
                Hazard(
                    WORKFLOW_SECRET_EGRESS,
                    workflow.path,
                    line,
                    ("secret-egress", workflow.path, step.job, step.ident, named, how),
                    f"{workflow.path}: {where(step)} hands {named} to {how}: "
                    f"`{command.strip()[:300]}`",
                )
            )
    return found

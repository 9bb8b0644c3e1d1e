"""Define the data that crosses Cujo's boundaries: the policy, the plan and the reports.

This is the module of ``cujo_action`` that ``app_relay`` imports (with ``limits`` and the
bundle reader, ``evidence/reader.py``). It also holds what both sides must spell alike:
the value types (``RunId``, ``Sha``, ``PullNumber``, ``RepoName``: every pattern for them
lives here), the stage marks a run prints, and the hostname rule of a parent domain.
Every string and list in a report is capped here; writers clip to the caps (``clip``
counts bytes of JSON) and fit a report to its budget, and a reader takes an over-cap
report as far as it fits and says so with a cut (``reportfit``), refusing only what it
cannot trust.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, NamedTuple

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from cujo_action import limits
from cujo_action.limits import LimitId

REPORT_SCHEMA: Final = "cujo.report/1"
PLAN_SCHEMA: Final = "cujo.plan/1"

# Caps (``limits.py`` names each with its behaviour when reached). Producers truncate to
# these before building a model (see ``clip``) and say what they cut (``Cut``).
MAX_SHORT = 256
MAX_TEXT = 2_000
MAX_TAIL = limits.OUTPUT_TAIL
MAX_COMMANDS = limits.REPORT_COMMANDS
MAX_EGRESS = limits.REPORT_EGRESS
MAX_DECOY_EVENTS = limits.REPORT_DECOY_EVENTS
MAX_DECOY_READERS = limits.DECOY_READERS
MAX_OBSERVATIONS = limits.REPORT_OBSERVATIONS
MAX_CUTS = 64
MAX_REPORT_BYTES = limits.REPORT_BYTES

# Package registries the proxy forwards to (verifying upstream TLS); every other host is
# answered by the proxy itself. A policy's `egress_allow` adds to these.
REGISTRY_HOSTS: tuple[str, ...] = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
)
# A registry is only read through the sandbox: the proxy forwards these methods to a
# registry and answers any other (a publish, an upload) itself, logged as "registry-write".
# Hosts a policy's `egress_allow` adds are not registries and keep every method.
REGISTRY_READ_METHODS: tuple[str, ...] = ("GET", "HEAD")
# The egress methods of what carried no HTTP request of its own: a CONNECT tunnel; a
# connection the namespace caught that began TLS the proxy could not see through (the
# client refused the run's CA); one that was neither HTTP nor TLS (a raw channel).
TUNNEL_METHOD = "CONNECT"
TLS_METHOD = "TLS"
RAW_METHOD = "TCP"

# Observation kinds the hard rules act on (the checks and the jail emit them).
PERSISTENCE_WRITE: Final = "persistence_write"
HARNESS_TAMPER: Final = "harness_tamper"
SUDO: Final = "sudo"
# A well-known environment probe was run (``cujo_action/watch/sandbox_probing.py``).
SANDBOX_PROBE: Final = "sandbox_probe"
REFUSED_PACKETS: Final = "refused_packets"
PROCESS_FLOOD: Final = "process_flood"
MEMORY_LIMIT: Final = "memory_limit"
TESTS_FAILED: Final = "tests_failed"
# One failing test the runner named (its id in ``path``), at head or at base.
FAILING_TEST: Final = "failing_test"
# A decoy (in any encoding the proxy decodes) in what a pull request's command printed.
DECOY_IN_OUTPUT: Final = "decoy_in_output"
# An added line comparing the clock with a fixed date (cujo_action/checks/dategates.py).
DATE_GATE: Final = "date_gate"
# Writes that make code run later (cujo_action/watch/persistence.py names the places).
SHELL_PROFILE_WRITE: Final = "shell_profile_write"
PYTHON_STARTUP_WRITE: Final = "python_startup_write"
SYSTEMD_UNIT_WRITE: Final = "systemd_unit_write"
AUTOSTART_WRITE: Final = "autostart_write"
CRON_WRITE: Final = "cron_write"
GIT_HOOK_WRITE: Final = "git_hook_write"
SSH_ACCESS_WRITE: Final = "ssh_access_write"
PACKAGE_INDEX_WRITE: Final = "package_index_write"
TOOL_CONFIG_WRITE: Final = "tool_config_write"
WORKFLOW_COMMAND_WRITE: Final = "workflow_command_write"
# What the workflows check finds in what the pull request changes about CI
# (``cujo_action/checks/workflows.py``), one rule each in ``app_relay/decide/workflow_rules.py``.
WORKFLOW_UNTRUSTED_CHECKOUT: Final = "workflow_untrusted_checkout"
WORKFLOW_INJECTION: Final = "workflow_injection"
WORKFLOW_SECRET_EGRESS: Final = "workflow_secret_egress"  # noqa: S105 (a kind, not a secret)
WORKFLOW_CHANGE: Final = "workflow_change"
# A zizmor finding the pull request introduces (its audit id, severity and confidence).
WORKFLOW_AUDIT: Final = "workflow_audit"
# A base workflow with a privileged trigger that already checks out the pull request's
# head: a fact about the repository, true before any merge of this pull request.
WORKFLOW_BASE_CHECKOUT: Final = "workflow_base_checkout"
# Where a base workflow with a privileged trigger puts a field of the pull request's own
# text (title, body, branch) into a shell, and how the shell reads it there (``pr_sink``):
# the relay, which reads that text itself, judges what it becomes.
PR_SINK_PREFIX: Final = "workflow_pr_"
PR_FIELDS: Final = ("title", "body", "branch")
# What text a shell reads bare must not hold: each makes it run, expand or redirect
# something the text chose (``shell_hazards`` reads them by where the text stands).
SHELL_METACHARACTERS: Final = ("$(", "`", ";", "|", "&", ">", "<", "\n", "${")

CheckName = Literal[
    "install", "detonation", "tests", "probes", "smoke", "workflows", "privileged", "base"
]
# The checks of the head, each expected to report: what the verdict is on.
CHECK_NAMES: tuple[CheckName, ...] = (
    "install",
    "detonation",
    "tests",
    "probes",
    "smoke",
    "workflows",
    "privileged",
)
# The head installed and tested a second time in the job of a base workflow with a
# privileged trigger that already runs pull-request code (``Plan.privileged``): where such
# code meets secrets before any merge. Skipped where the base has no such workflow.
PRIVILEGED_CHECK: Final = "privileged"
# The checks of the head that read it without running any of it (checks/static_check.py):
# no uid, no command, no plan needed.
READING_CHECKS: tuple[CheckName, ...] = ("workflows",)
# The checks of the head that run it only where the plan needs them (``privileged``: where
# a base workflow with a privileged trigger runs the head); elsewhere each reports ok,
# with nothing run and no uid.
WHEN_NEEDED_CHECKS: tuple[CheckName, ...] = ("privileged",)
# The checks of the head that always run it, each as a uid of its own in a sandbox of its
# own.
RUNNING_CHECKS: tuple[CheckName, ...] = tuple(
    c for c in CHECK_NAMES if c not in (*READING_CHECKS, *WHEN_NEEDED_CHECKS)
)
# The base, installed and tested beside the head under the same arming: what it does is
# what the pull request did not add (app_relay/decide/differential.py).
BASE_CHECK: Final = "base"
ALL_CHECKS: tuple[CheckName, ...] = (*CHECK_NAMES, "base")
Phase = Literal["install", "import", "test", "probe", "smoke"]
Status = Literal["ok", "failed", "skipped", "error"]
Isolation = Literal["full", "partial"]

Short = Annotated[str, StringConstraints(max_length=MAX_SHORT)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
Tail = Annotated[str, StringConstraints(max_length=MAX_TAIL)]
EvidenceId = Annotated[str, StringConstraints(pattern=r"^[a-z]+:[a-z_]+:[0-9]+$", max_length=64)]

# ---- the shared value types: every check of one, on either side and in the shell
# scripts (``python -m cujo_action check-id``), is the compiled pattern or the type here.
RUN_ID_CHARS: Final = r"[A-Za-z0-9._-]{1,64}"
SHA_HEX: Final = r"[0-9a-f]{40}"
PULL_NUMBER_DIGITS: Final = r"[1-9][0-9]{0,9}"
REPO_NAME_CHARS: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}"
RUN_ID: Final = re.compile(rf"^{RUN_ID_CHARS}$")
SHA: Final = re.compile(rf"^{SHA_HEX}$")
PULL_NUMBER: Final = re.compile(rf"^{PULL_NUMBER_DIGITS}$")
REPO_NAME: Final = re.compile(rf"^{REPO_NAME_CHARS}$")
# A branch as the sandbox names one (GITHUB_REF, the checkout's HEAD): what git accepts
# (``git check-ref-format``), in the characters nothing reads as shell, option or path.
BRANCH_CHARS: Final = (
    r"(?!-)(?!\.)(?!.*\.\.)(?!.*//)(?!.*/\.)(?!.*\.lock(?:/|$))[A-Za-z0-9._/+-]{1,255}(?<![./])"
)
BRANCH: Final = re.compile(rf"^{BRANCH_CHARS}$")
RunId = Annotated[str, StringConstraints(pattern=RUN_ID.pattern)]
Sha = Annotated[str, StringConstraints(pattern=SHA.pattern)]
PullNumber = Annotated[int, Field(ge=1)]
RepoName = Annotated[str, StringConstraints(pattern=REPO_NAME.pattern)]


def _branch(name: str) -> str:
    # A validator, not a pattern: pydantic's regex engine has no look-around.
    if not BRANCH.fullmatch(name):
        raise ValueError("not a branch name the sandbox uses")
    return name


Branch = Annotated[str, AfterValidator(_branch)]


_CUT_MARK: Final = "…[cut]…"
# What one character costs in a report's JSON (pydantic writes UTF-8 and escapes as
# serde_json does): a control character is six bytes (\u0001), so a field's cap must be
# counted in bytes of its encoding, or a pull request chooses how big its report grows.
_TWO_BYTE_ESCAPES: Final = frozenset('"\\\b\f\n\r\t')
_SURROGATE = re.compile("[\ud800-\udfff]")
_NEEDS_COUNTING = re.compile('[\x00-\x1f"\\\\\x80-\U0010ffff]')


def _char_cost(ch: str) -> int:
    code = ord(ch)
    if ch in _TWO_BYTE_ESCAPES:
        return 2
    if code < 0x20:
        return 6
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def json_size(text: str) -> int:
    """Return how many bytes ``text`` takes inside a report's JSON string (no quotes)."""
    if _NEEDS_COUNTING.search(text) is None:
        return len(text)
    return sum(_char_cost(ch) for ch in text)


def clip(text: str, limit: int, *, keep: Literal["head", "tail"] = "head") -> str:
    """Return ``text`` within ``limit`` bytes of its JSON encoding, marking the cut.

    A string within ``limit`` bytes is within ``limit`` characters too, so a clipped
    value always fits its field's cap. Lone surrogates (a file name that is not UTF-8,
    as ``os.readlink`` decodes it) cannot be written as JSON: they are spelled out.
    """
    if _SURROGATE.search(text):
        try:
            raw = text.encode("utf-8", "surrogateescape")  # the bytes the name was
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "surrogatepass")
        text = raw.decode("utf-8", "backslashreplace")
    # Only as many characters as the limit are ever counted: a long text is cut anyway.
    if len(text) <= limit and (len(text) * 6 <= limit or json_size(text) <= limit):
        return text
    room = limit - json_size(_CUT_MARK)
    if room <= 0:
        return _fit_chars(text[:limit], limit)
    if keep == "head":
        return _fit_chars(text[:room], room) + _CUT_MARK
    return _CUT_MARK + _fit_chars(text[-room:][::-1], room)[::-1]


def _fit_chars(text: str, room: int) -> str:
    """Return the longest head of ``text`` whose JSON encoding is within ``room`` bytes."""
    used = 0
    for n, ch in enumerate(text):
        used += _char_cost(ch)
        if used > room:
            return text[:n]
    return text


def was_clipped(text: str | None) -> bool:
    """Return whether ``clip`` cut ``text`` (it carries the cut mark)."""
    return text is not None and _CUT_MARK in text


def utcnow() -> datetime:
    """Return the current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


# How a shell reads text a workflow interpolates into its script (``${{ }}`` is pasted in
# before the shell starts): bare, inside double or single quotes, in a here-document whose
# delimiter is unquoted (``heredoc``) or quoted (``literal``), or in a comment.
SHELL_CONTEXTS: Final = ("bare", "double", "single", "heredoc", "literal", "comment")
_EXPANDS: Final = ("$(", "`", "${")
# A line of a here-document that could be its delimiter (one word alone on its line).
_DELIMITER_LINE = re.compile(r"^[ \t]*[A-Za-z_][\w-]*[ \t]*$", re.MULTILINE)


def _read_bare(rest: str, first: str) -> list[str]:
    """Return ``first`` and the metacharacters of what is read bare after a break-out."""
    return [first, *(m for m in SHELL_METACHARACTERS if m in rest and m != first)]


def shell_hazards(text: str, context: str) -> list[str]:
    """Return the ``SHELL_METACHARACTERS`` that let ``text`` run or redirect something
    where a shell reads it in ``context`` (none: [])."""
    if context in ("double", "single"):
        # Inside double quotes expansions still run; either quote, met in the text, ends
        # the quoting, and what follows is read bare.
        found = [m for m in _EXPANDS if m in text] if context == "double" else []
        quote = '"' if context == "double" else "'"
        rest = text.partition(quote)[2]
        return found + [m for m in SHELL_METACHARACTERS if m in rest and m not in found]
    if context in ("heredoc", "literal"):
        found = [m for m in _EXPANDS if m in text] if context == "heredoc" else []
        # A line that could be the delimiter ends the document, if anything follows it.
        for line in _DELIMITER_LINE.finditer(text):
            rest = text[line.end() + 1 :]
            if line.start() > 0 and rest.strip():
                return found + [m for m in _read_bare(rest, "\n") if m not in found]
        return found
    if context == "comment":
        # A line break ends the comment: the next line is read bare.
        return _read_bare(text.partition("\n")[2], "\n") if "\n" in text else []
    return [m for m in SHELL_METACHARACTERS if m in text]


def pr_sink(field: str, context: str) -> str:
    """Return the observation kind of a base workflow's shell reading a pull request field."""
    if field not in PR_FIELDS or context not in SHELL_CONTEXTS:
        raise ValueError(f"no pull request sink {field!r} in {context!r}")
    return f"{PR_SINK_PREFIX}{field}_{context}"


def read_pr_sink(kind: str) -> tuple[str, str] | None:
    """Return the (field, context) an observation kind names, or None (``pr_sink``)."""
    if not kind.startswith(PR_SINK_PREFIX):
        return None
    field, _, context = kind.removeprefix(PR_SINK_PREFIX).partition("_")
    return (field, context) if field in PR_FIELDS and context in SHELL_CONTEXTS else None


# --------------------------------------------------------------------------- hostnames


def normalize_host(host: str) -> str:
    """Return ``host`` as compared: lower case, no trailing dot, no IPv6 brackets."""
    return host.strip().strip("[]").rstrip(".").lower()


# Generic second levels under two-letter country codes (co.uk, com.au, ne.jp, gob.mx…).
_SECOND_LEVELS = frozenset(
    {b"co", b"com", b"net", b"org", b"ac", b"gov", b"edu", b"ne", b"or", b"go", b"gob", b"ltd",
     b"plc", b"nic", b"mil", b"sch", b"nom"}
)  # fmt: skip


def registrable_length(labels: Sequence[bytes]) -> int:
    """Return how many labels, from the right, make the name's parent domain."""
    if (
        len(labels) >= 3
        and len(labels[-1]) == 2
        and labels[-1].isalpha()
        and labels[-2].lower() in _SECOND_LEVELS
    ):
        return 3
    return min(2, len(labels))


def parent_domain(name: str) -> str:
    """Return the domain a name's data labels are sent under (``registrable_length``)."""
    labels = [label for label in normalize_host(name).encode().split(b".") if label]
    return b".".join(labels[len(labels) - registrable_length(labels) :]).decode()


# --------------------------------------------------------------------------- stages

# A run marks its stages with lines of their own (``evidence/stages.py`` follows them on
# Actions, the local runner reads them from the run's output):
#     cujo-stage <stage> began | ended <status> | skipped <why>
STAGE_PREFIX: Final = "cujo-stage"
# In the order the workflow's steps follow them; checks of one row run at the same time.
STAGES: Final = (
    "prepare",
    "arm",
    "install",
    "detonation",
    "base",
    "privileged",
    "tests",
    "probes",
    "smoke",
    "workflows",
    "bundle",
)
_STAGE_MARK = re.compile(
    rf"^{STAGE_PREFIX} (?P<stage>[a-z]+) (?P<what>began|ended|skipped)(?: (?P<why>.*))?$"
)


class StageMark(NamedTuple):
    """A stage mark as read: the stage, began/ended/skipped, and the status or why."""

    stage: str
    what: str
    why: str | None


def stage_mark(stage: str, what: str, why: str = "") -> str:
    """Return the line that marks ``stage`` as begun, ended (with its status) or skipped."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    detail = " ".join(why.split())[:200]
    return f"{STAGE_PREFIX} {stage} {what}" + (f" {detail}" if detail else "")


def read_stage_mark(line: str) -> StageMark | None:
    """Return the stage mark ``line`` holds (its line ending aside), or None."""
    m = _STAGE_MARK.match(line.rstrip("\r\n"))
    return None if m is None else StageMark(m["stage"], m["what"], m["why"])


# The base policy file, at the root of the repository, read at the base commit only.
POLICY_FILE: Final = ".cujo.yml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# --------------------------------------------------------------------------- policy


class Timeouts(_Strict):
    install: int = Field(600, ge=1, le=3600)
    test: int = Field(900, ge=1, le=7200)
    smoke: int = Field(120, ge=1, le=3600)
    probes: int = Field(300, ge=1, le=3600)


class ModelSettings(_Strict):
    diff: Short = "claude-haiku-4-5"
    judge: Short = "claude-sonnet-4-5"
    budget_tokens: int = Field(24_000, ge=1_000, le=200_000)


class RunCaps(_Strict):
    """Sandbox runs in flight: ``.cujo.yml`` may only lower the relay's caps (runstate/caps.py)."""

    repo: int | None = Field(None, ge=1, le=1000)
    author: int | None = Field(None, ge=1, le=1000)


class Policy(_Strict):
    """The repository's ``.cujo.yml``, always read at the base commit."""

    mode: Literal["sandbox", "diff"] = "sandbox"
    branches: list[Short] = Field(default_factory=lambda: ["*"], max_length=50)
    drafts: bool = False
    on_error: Literal["hold", "pass"] = "hold"
    # An unproven run holds the merge (action_required) unless this says pass (neutral):
    # GitHub counts neutral as passing a required check.
    on_unproven: Literal["hold", "pass"] = "hold"
    install: Text = ""
    test: Text = ""
    smoke: Text = ""
    egress_allow: list[Short] = Field(default_factory=list, max_length=50)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    model: ModelSettings = Field(default_factory=ModelSettings)
    # Runs in flight per repository and per author; the relay's settings are the ceiling.
    caps: RunCaps = Field(default_factory=RunCaps)


class PolicyError(ValueError):
    """A ``.cujo.yml`` that cannot be used; the message names file, line, key and fix."""

    def __init__(self, path: str, line: int | None, key: str, reason: str) -> None:
        self.path, self.line, self.key, self.reason = path, line, key, reason
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {key}: {reason}" if key else f"{where}: {reason}")


def _node_line(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """Return the 1-based line of the YAML node at ``loc`` (the deepest one found)."""
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next(
                (
                    (k, v)
                    for k, v in node.value
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part)
                ),
                None,
            )
            if nxt is None:
                break
            line, node = nxt[0].start_mark.line + 1, nxt[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def load_policy(text: str | None, path: str = POLICY_FILE) -> Policy:
    """Parse a ``.cujo.yml`` text (None or empty: the defaults) or raise PolicyError."""
    if text is None or not text.strip():
        return Policy()
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data: Any = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(path, line, "", f"not valid YAML ({exc.problem})") from None
    except yaml.YAMLError as exc:
        raise PolicyError(path, None, "", f"not valid YAML ({exc})") from None
    if data is None:
        return Policy()
    if not isinstance(data, dict):
        raise PolicyError(path, 1, "", "must be a mapping of settings such as `mode: sandbox`")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            known = ", ".join(_known_keys(loc[:-1]))
            reason = f"unknown key; known keys here are {known}"
        else:
            reason = f"{err['msg']} (got {err.get('input')!r})"
        raise PolicyError(path, _node_line(root, loc), key, reason) from None


def _known_keys(parent: tuple[int | str, ...]) -> list[str]:
    model: type[BaseModel] = Policy
    for part in parent:
        field = model.model_fields.get(str(part))
        ann = field.annotation if field else None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
    return sorted(model.model_fields)


# --------------------------------------------------------------------------- plan

# How many commits a push lists (the newest, ``head_commit`` last) and how many paths a
# commit lists as added, removed or modified: GitHub lists more, a payload reads the last.
PUSH_COMMITS: Final = 20
PUSH_PATHS: Final = 100


# The account GitHub commits a merge as: the web-flow user (https://github.com/web-flow),
# name, address and login.
WEB_FLOW: Final = ("GitHub", "noreply@github.com", "web-flow")
NOREPLY_DOMAIN: Final = "users.noreply.github.com"
ZERO_SHA: Final = "0" * 40  # what a push's ``before`` is when it made the branch


def noreply(login: str, account_id: int) -> str:
    """Return the private address GitHub gives an account's commits (``ID+login@…``)."""
    return f"{account_id}+{login}@{NOREPLY_DOMAIN}"


class Upstream(_Strict):
    """The repository a pull request merges into, as GitHub names it, and its branches."""

    repository: RepoName  # GITHUB_REPOSITORY: the upstream's, never a path of this machine
    owner_id: int = Field(ge=1)  # the owner's account id; the owner is who merges
    branch: Branch  # the base branch, which the merge is pushed to
    default_branch: Branch


class PushedCommit(_Strict):
    """One commit as a push event lists it (``commits``, ``head_commit``)."""

    id: Sha
    tree_id: Sha
    message: Text
    timestamp: Short  # ISO 8601 with the author's offset, as GitHub writes it
    author_name: Short
    author_email: Short
    committer_name: Short
    committer_email: Short
    added: list[Text] = Field(default_factory=list, max_length=PUSH_PATHS)
    removed: list[Text] = Field(default_factory=list, max_length=PUSH_PATHS)
    modified: list[Text] = Field(default_factory=list, max_length=PUSH_PATHS)


class Push(_Strict):
    """A push to the base branch: what a check's job reads as (event, ref, SHA, HEAD)."""

    before: Sha  # the branch's commit before the push
    after: Sha  # the commit pushed, which the check checks out
    merged: bool = False  # ``after`` is the merge of head into base
    commits: list[PushedCommit] = Field(default_factory=list, max_length=PUSH_COMMITS)


class PullTarget(_Strict):
    """The pull request as a base workflow with a privileged trigger receives it, and that
    workflow: what the ``privileged`` check's job reads as (``arm/pullevent.py``).

    The job is the base's (its ref the base branch, its SHA the base commit) and checks
    out the pull request's head, as the workflow that was found does.
    """

    number: PullNumber
    branch: Short  # the pull request's branch (GITHUB_HEAD_REF): the author's text
    head_sha: Sha
    title: Short
    body: Text = ""
    author: Short  # the author's login
    author_id: int = Field(ge=1)
    workflow: Short  # the base workflow's path that runs the head
    workflow_name: Short
    trigger: Short  # the workflow's privileged trigger, as the report names it
    # What the pull request's page counts: its commits, lines and files.
    commits: int = Field(default=1, ge=0)
    additions: int = Field(default=0, ge=0)
    deletions: int = Field(default=0, ge=0)
    changed_files: int = Field(default=0, ge=0)


class Plan(_Strict):
    """What the sandbox will run, settled once by ``prepare`` before anything runs."""

    schema_: Literal["cujo.plan/1"] = Field(PLAN_SCHEMA, alias="schema")
    run_id: Short
    repo: Text
    base_sha: Sha
    head_sha: Sha
    policy_from: Sha  # always base_sha: the policy is read at base, never head
    policy: Policy
    ecosystem: Literal["python", "node", "unknown"]
    build_files: list[Short] = Field(default_factory=list, max_length=50)
    install: Text = ""
    test: Text = ""
    smoke: Text = ""
    # Why the plan cannot prove anything (empty when it can), e.g. no build files.
    unproven_reason: Text = ""
    # Choices the plan made that a maintainer should know (e.g. which ecosystem ran).
    notes: list[Text] = Field(default_factory=list, max_length=20)
    # Where the test environment was settled from (dependency groups, extras, tox, CI…).
    test_sources: list[Short] = Field(default_factory=list, max_length=20)
    # The base's own install and tests, settled from base's build files (empty: the base
    # run is skipped, and nothing is "also at base").
    base_ecosystem: Literal["python", "node", "unknown"] = "unknown"
    base_install: Text = ""
    base_test: Text = ""
    changed_files: list[Text] = Field(default_factory=list, max_length=2_000)
    head_dir: Text
    base_dir: Text
    # What runs is what runs after the merge: the checks of the head run on the merge of
    # head into base (``head_dir`` is checked out at it; at head where it conflicts, and a
    # note says so), the base check on the base, each in a job that reads as the push of
    # its commit to ``upstream.branch``. None only in a plan made before these existed.
    upstream: Upstream | None = None
    push: Push | None = None
    base_push: Push | None = None
    # A base workflow with a privileged trigger that checks out the head: the head is
    # installed and tested again in that workflow's job, checked out at ``privileged_dir``
    # (the head commit). None: the base has none, and the ``privileged`` check is skipped.
    privileged: PullTarget | None = None
    privileged_dir: Text = ""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- report


class CommandResult(_Strict):
    cmd: Text
    phase: Phase
    exit_code: int | None  # None: it never finished (killed on timeout, or not started)
    timed_out: bool = False
    duration_s: float = Field(ge=0)
    stdout_tail: Tail = ""
    stderr_tail: Tail = ""
    output_truncated: bool = False
    # A changed workflow's step (``checks/workflow_runner.py``): "<file> · job <id> · step
    # <n>: <name>", as the harness labelled it (empty for any other command).
    workflow_step: Short = ""
    # When it started (seconds since the epoch) and its sandbox's pid 1, from which every
    # process it ran descends (``Egress.parents`` names it): what ties a request to it.
    started_ts: float | None = None
    sandbox_pid: int | None = None


class Egress(_Strict):
    """One outbound request the proxy saw, and whether it carried a decoy."""

    id: EvidenceId
    phase: Phase
    host: Short
    port: int = Field(ge=0, le=65535)
    method: Short
    url: Text
    bytes_out: int = Field(ge=0)
    # What the proxy did: forwarded to a registry, answered itself ("sunk"), refused a
    # tunnel, or answered a write to a registry ("registry-write": never forwarded).
    action: Literal["forwarded", "sunk", "refused", "registry-write"] = "sunk"
    # How it left: through the proxy settings (where no namespace catches connections),
    # caught by the namespace's redirect (every connection under full isolation, where no
    # proxy is set), or as a DNS query.
    route: Literal["proxy", "direct", "dns"] = "proxy"
    decoy_seen: list[Short] = Field(default_factory=list, max_length=20)  # decoy names
    decoy_where: list[Short] = Field(default_factory=list, max_length=20)  # e.g. body:base64
    # A DNS-over-HTTPS request: the name it asked for (empty for any other request).
    dns_name: Short = ""
    # When it was made (seconds since the epoch), and the sandbox process that made it,
    # where the harness could tell (its socket looked up while it waited on the harness).
    ts: float | None = None
    pid: int | None = None
    exe: Text | None = None
    cmdline: Text | None = None
    parents: list[Short] = Field(default_factory=list, max_length=8)  # "pid executable"
    origin: Short = ""  # what started that process, where the harness could tell
    # Why part of it could not be searched for decoys (empty: all of it was): a body over
    # the proxy's limit, encodings nested deeper than the limit, the decode budget.
    unsearched: Short = ""
    # Its body decodes into nothing readable (high entropy: encrypted or random).
    opaque: bool = False
    # A DNS query under a parent domain that has seen many distinct high-entropy labels.
    dns_tunnel: bool = False
    # Caught on its way (route "direct"): the name the run's resolver gave the address it
    # went to ('' when the client chose the address itself, whatever its SNI or Host say).
    addressed: Short = ""


class DecoyEvent(_Strict):
    id: EvidenceId
    phase: Phase
    path: Text
    # "list": a folder that holds only decoys was listed (``watch/sandbox_probing.py``).
    event: Literal["open", "read", "write", "delete", "list"]
    pid: int | None = None
    exe: Text | None = None
    # When, what command line, and which parents ("pid executable", nearest first).
    ts: float | None = None
    cmdline: Text | None = None
    parents: list[Short] = Field(default_factory=list, max_length=8)
    origin: Short = ""  # what started that process (an npm script, a build, the tests)


class DecoyReader(_Strict):
    """A process that opened or read a decoy file: kept for every reader, for correlation."""

    pid: int
    phase: Phase
    path: Short
    ts: float | None = None
    parents: list[int] = Field(default_factory=list, max_length=8)  # nearest first


class Observation(_Strict):
    id: EvidenceId
    kind: Short
    detail: Text
    path: Text | None = None
    line: int | None = None
    # The phase it was seen in, where it matters to a rule (a flood, a decoy printed).
    phase: Phase | None = None


class Cut(_Strict):
    """A limit reached (``limits.py``): which one, how much was dropped, and whether the
    dropped part could have hidden danger (then the check is unproven)."""

    id: EvidenceId  # <check>:cut:<n>
    limit: LimitId
    phase: Phase | None = None
    kept: int = Field(0, ge=0)
    dropped: int = Field(0, ge=0)
    detail: Text = ""
    hides_danger: bool = True


class Report(_Strict):
    schema_: Literal["cujo.report/1"] = Field(REPORT_SCHEMA, alias="schema")
    run_id: Short
    check: CheckName
    head_sha: Sha
    base_sha: Sha
    status: Status
    summary: Text = ""
    started_at: datetime
    finished_at: datetime
    isolation: Isolation
    evidence_complete: bool
    # How the check's commands were limited ("cgroup v1: 1024 processes, memory 4096 MiB"),
    # and the uid they ran as on the host (None: the harness's own, when it is not root).
    limits: Short = ""
    uid: int | None = None
    commands: list[CommandResult] = Field(default_factory=list, max_length=MAX_COMMANDS)
    egress: list[Egress] = Field(default_factory=list, max_length=MAX_EGRESS)
    decoy_events: list[DecoyEvent] = Field(default_factory=list, max_length=MAX_DECOY_EVENTS)
    observations: list[Observation] = Field(default_factory=list, max_length=MAX_OBSERVATIONS)
    # Every process that read a decoy (the events above keep the first ones in full).
    decoy_readers: list[DecoyReader] = Field(default_factory=list, max_length=MAX_DECOY_READERS)
    # Every limit reached while this check's evidence was gathered. evidence_complete is
    # false when one of them could have hidden danger (``Cut.hides_danger``), or when
    # evidence was lost some other way (a harness process died).
    cuts: list[Cut] = Field(default_factory=list, max_length=MAX_CUTS)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def dump(self) -> str:
        """Return the report as JSON, with ``schema`` spelled as on the wire."""
        return self.model_dump_json(by_alias=True, indent=2)


class ReportError(ValueError):
    """A report that fails validation or is not bound to the run that asked for it."""


FAILURE_SCHEMA: Final = "cujo.failure/1"


class Failure(_Strict):
    """Why a sandbox run could not produce reports (the run is then ``error``)."""

    schema_: Literal["cujo.failure/1"] = Field(FAILURE_SCHEMA, alias="schema")
    run_id: Short
    stage: Literal["prepare", "policy", "arm", "checks", "bundle"]
    reason: Text
    head_sha: Sha | None = None
    base_sha: Sha | None = None
    # For a policy error: where in .cujo.yml, so the check summary can point at it.
    path: Short | None = None
    line: int | None = None
    key: Short | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

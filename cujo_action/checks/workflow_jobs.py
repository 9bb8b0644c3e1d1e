"""Choose the changed jobs that run after the merge, and say how a runner would run each step.

Pure: the CI files' texts at base and at the merge in, and out a ``JobRun`` per job to
run (the trigger it runs on after the merge, why it was chosen) and, given the job's
contexts (``JobContext``), its steps as a runner would take them (``StepPlan``): a
``run:`` step's script with every ``${{ }}`` evaluated (``workflow_expr``), its shell, its
``env:`` (workflow, job, step), its working directory; a common action emulated
(checkout, setup-python, setup-node, cache, upload-artifact) or any other named as not run.
The smoke check runs them (``workflow_runner``).

A job runs after the merge when its workflow has one of ``AFTER_MERGE`` triggers: a
``push`` whose branch (and path) filters take the base branch (and the changed files),
or a trigger that does not wait for a pull request's code to run (a schedule, a dispatch,
a release) or holds secrets while a pull request decides what it reads (the privileged
triggers). A job is chosen when its workflow is new, when it or its workflow's own keys
changed, or when one of its ``run:`` steps names a changed file.
https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-syntax
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from cujo_action.checks.ci_files import is_workflow_path
from cujo_action.checks.workflow_expr import (
    ExprError,
    Scope,
    Status,
    condition,
    interpolate,
)
from cujo_action.watch.filecommands import parse_env
from cujo_action.workflow.contexts import PRIVILEGED_TRIGGERS

AFTER_MERGE = ("push", "schedule", "workflow_dispatch", "release", *PRIVILEGED_TRIGGERS)
# Actions emulated: what each does here instead (the job's checkout is already there).
EMULATED = {
    "actions/checkout": "the merge tree is already checked out in the workspace",
    "actions/setup-python": "no-op: the host's Python (and the install's venv) is used",
    "actions/setup-node": "no-op: the host's Node is used",
    "actions/cache": "no-op: nothing is restored or saved",
    "actions/cache/restore": "no-op: nothing is restored",
    "actions/cache/save": "no-op: nothing is saved",
    "actions/upload-artifact": "no-op: nothing is uploaded",
}
# How a runner runs a script, by ``shell:`` (``{0}`` is the script's path).
# https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-syntax#jobsjob_idstepsshell
SHELLS = {
    "": "bash -e {0}",
    "bash": "bash --noprofile --norc -eo pipefail {0}",
    "sh": "sh -e {0}",
    "python": "python {0}",
}
_NOT_HERE = ("pwsh", "powershell", "cmd")
_DEPTH = 30


# --------------------------------------------------------------------------- reading YAML


def plain(text: str) -> dict[str, Any] | None:
    """Return a workflow's YAML as plain values (every scalar a string), or None.

    Composed, never constructed: ``on`` stays ``on`` and no tag is resolved.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    value = _plain(root, 0)
    return value if isinstance(value, dict) else None


def _plain(node: yaml.Node | None, depth: int) -> Any:
    if node is None or depth > _DEPTH:
        return None
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    if isinstance(node, yaml.SequenceNode):
        return [_plain(n, depth + 1) for n in node.value]
    if isinstance(node, yaml.MappingNode):
        return {
            str(k.value): _plain(v, depth + 1)
            for k, v in node.value
            if isinstance(k, yaml.ScalarNode)
        }
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [] if value is None or value == "" else [value]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# --------------------------------------------------------------------------- triggers


def _glob(pattern: str) -> re.Pattern[str]:
    """Return GitHub's filter pattern as a regex (``*`` within a segment, ``**`` across)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] in "?+":
            out, i = out + pattern[i], i + 1
        elif pattern[i] == "[":
            end = pattern.find("]", i)
            if end < 0:
                out, i = out + re.escape(pattern[i:]), len(pattern)
            else:
                out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    try:
        return re.compile(out)
    except re.error:
        return re.compile(re.escape(pattern))


def _filtered(value: str, include: list[Any], ignore: list[Any]) -> bool:
    """Return whether a filter takes ``value`` (``!`` patterns exclude, in order)."""
    if ignore:
        return not any(_glob(_text(p)).fullmatch(value) for p in ignore)
    taken = False
    for pattern in include:
        text = _text(pattern)
        if text.startswith("!"):
            taken = taken and not _glob(text[1:]).fullmatch(value)
        elif _glob(text).fullmatch(value):
            taken = True
    return taken


def after_merge(on: Any, branch: str, changed: Sequence[str]) -> list[str]:
    """Return the triggers of ``on`` that start the workflow after the merge, in order."""
    if isinstance(on, str):
        events: dict[str, Any] = {on: None}
    elif isinstance(on, list):
        events = {_text(e): None for e in on}
    else:
        events = _dict(on)
    found = []
    for event, config in events.items():
        if event not in AFTER_MERGE:
            continue
        if event == "push" and not _push_takes(_dict(config), branch, changed):
            continue
        found.append(event)
    return found


def _push_takes(config: dict[str, Any], branch: str, changed: Sequence[str]) -> bool:
    branches, skip = _list(config.get("branches")), _list(config.get("branches-ignore"))
    tags = _list(config.get("tags")) + _list(config.get("tags-ignore"))
    if not branches and not skip and tags:
        return False  # a workflow for tags only
    if (branches or skip) and not _filtered(branch, branches, skip):
        return False
    paths, paths_skip = _list(config.get("paths")), _list(config.get("paths-ignore"))
    if paths or paths_skip:
        return any(_filtered(p, paths, paths_skip) for p in changed)
    return True


# --------------------------------------------------------------------------- choosing jobs


@dataclass(frozen=True)
class JobRun:
    """A job chosen to run: its workflow, its id, the trigger it runs on, and why."""

    path: str
    job_id: str
    event: str
    why: str
    workflow: dict[str, Any] = field(repr=False, hash=False, compare=False)

    @property
    def job(self) -> dict[str, Any]:
        """Return the job's keys as plain values."""
        return _dict(_dict(self.workflow.get("jobs")).get(self.job_id))


@dataclass(frozen=True)
class Passed:
    """A changed workflow (or job) left alone, and why: said in the report."""

    path: str
    why: str


_TOP_KEYS = ("on", "env", "defaults", "permissions", "concurrency")


def choose(
    base: Mapping[str, str],
    merged: Mapping[str, str],
    changed: Sequence[str],
    branch: str,
) -> tuple[list[JobRun], list[Passed]]:
    """Return the jobs of changed workflows that run after the merge, and what was passed.

    ``base``/``merged``: CI file path → text at the base and at the merge.
    """
    changed_set = set(changed)
    scripts = [p for p in changed if not p.startswith(".github/")]
    runs: list[JobRun] = []
    passed: list[Passed] = []
    for path in sorted(p for p in merged if is_workflow_path(p)):
        now = plain(merged[path])
        was = plain(base[path]) if path in base else None
        if now is None:
            if path in changed_set:
                passed.append(Passed(path, "not a mapping of YAML: GitHub would not run it"))
            continue
        jobs, old_jobs = _dict(now.get("jobs")), _dict(_dict(was).get("jobs"))
        top_changed = was is None or any(now.get(k) != was.get(k) for k in _TOP_KEYS)
        chosen = []
        for job_id, job in jobs.items():
            why = ""
            if was is None:
                why = "its workflow is added"
            elif path in changed_set and (top_changed or job != old_jobs.get(job_id)):
                why = "added" if job_id not in old_jobs else "changed"
                why = f"the job is {why}" if not top_changed else "its workflow's keys changed"
            else:
                named = _names_script(_dict(job), scripts)
                if named:
                    why = f"a run: step names the changed file {named}"
            if why:
                chosen.append((job_id, why))
        if not chosen:
            continue
        triggers = after_merge(now.get("on"), branch, changed)
        if not triggers:
            passed.append(Passed(path, "none of its triggers runs it after the merge"))
            continue
        # The push of the merge itself first: the event the job's context is made from.
        event = "push" if "push" in triggers else triggers[0]
        runs += [JobRun(path, job_id, event, why, now) for job_id, why in needs_order(jobs, chosen)]
    return runs, passed


def needs_order(
    jobs: Mapping[str, Any], chosen: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Return the chosen jobs in an order their ``needs:`` allow, file order otherwise.

    A job runs after the chosen jobs it needs; a need on a job not chosen (or not there)
    is no wait. Jobs caught in a cycle of needs, which GitHub refuses to run, keep their
    file order at the end.
    """
    names = [job_id for job_id, _ in chosen]
    waits = {
        job_id: {
            str(need)
            for need in _list(_dict(jobs.get(job_id)).get("needs"))
            if str(need) in names and str(need) != job_id
        }
        for job_id in names
    }
    ordered: list[str] = []
    while len(ordered) < len(names):
        ready = next((n for n in names if n not in ordered and waits[n] <= set(ordered)), None)
        if ready is None:
            ordered += [n for n in names if n not in ordered]
            break
        ordered.append(ready)
    why = dict(chosen)
    return [(job_id, why[job_id]) for job_id in ordered]


def _names_script(job: dict[str, Any], scripts: Sequence[str]) -> str:
    for step in _list(job.get("steps")):
        run = _text(_dict(step).get("run"))
        for script in scripts:
            if re.search(rf"(?<![\w/.-])(?:\./)?{re.escape(script)}(?![\w/.-])", run):
                return script
    return ""


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class JobContext:
    """What a job's expressions read, as the sandbox has it.

    ``github``: the ``github`` context (from the step's variables and the event file),
    ``token`` and ``event_name`` set by ``contexts``; ``secret``: the decoy a secret's
    name stands for; ``workspace``, ``temp``: paths as the commands see them.
    """

    github: Mapping[str, Any]
    runner: Mapping[str, Any]
    secret: Callable[[str], str]
    workspace: str
    temp: str


StepKind = Literal["run", "emulated", "not-run", "skipped"]


@dataclass
class StepPlan:
    """One step as the runner takes it: run, emulated, not run (why), or skipped by ``if:``."""

    index: int
    label: str  # `name` or what it runs/uses, for people
    kind: StepKind
    note: str = ""
    script: str = ""  # the evaluated script (holds decoys: never put in a report)
    template: str = ""  # the script as written
    shell: str = ""  # the command, ``{0}`` the script's path
    suffix: str = ".sh"
    env: dict[str, str] = field(default_factory=dict)  # holds decoys too
    working_directory: str = ""  # relative to the workspace, as written ('' for it)
    continue_on_error: bool = False
    unevaluated: list[str] = field(default_factory=list)  # expressions not evaluated
    uses: str = ""


@dataclass
class JobPlan:
    """A job's contexts and what each step needs; steps are planned one at a time
    (``step``), since an ``if:`` reads the status the steps before it left."""

    run: JobRun
    matrix: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    skipped: str = ""  # why the whole job does not run ('' when it does)
    status: Status = field(default_factory=Status)
    secrets_read: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    unevaluated: list[str] = field(default_factory=list)
    # What the job's steps so far set through GITHUB_ENV and GITHUB_PATH, for the later
    # steps (``carry``): over the job's env, under a step's own.
    github_env: dict[str, str] = field(default_factory=dict)
    github_path: list[str] = field(default_factory=list)

    def carry(self, env_before: str, env_now: str, path_before: str, path_now: str) -> None:
        """Take what GITHUB_ENV and GITHUB_PATH gained since the job began, as the runner
        sets it for every later step (the file's text at the job's start and now)."""
        old = len(parse_env(env_before).entries)
        self.github_env = dict(parse_env(env_now).entries[old:])
        added = path_now.splitlines()[len(path_before.splitlines()) :]
        self.github_path = [p.strip() for p in reversed(added) if p.strip()]

    # The ``steps`` context: each step with an ``id`` so far, its outputs (what it wrote
    # to GITHUB_OUTPUT) and how it ended.
    steps_ctx: dict[str, Any] = field(default_factory=dict)

    def record(self, index: int, outputs_before: str, outputs_now: str, outcome: str) -> None:
        """Record step ``index``'s outputs (what GITHUB_OUTPUT gained during it) and its
        outcome (``success``, ``failure``, ``skipped``) for the later steps' ``steps.*``."""
        step_id = _text(_dict(self.steps[index]).get("id")) if index < len(self.steps) else ""
        if not step_id:
            return
        old = len(parse_env(outputs_before).entries)
        outputs = dict(parse_env(outputs_now).entries[old:])
        self.steps_ctx[step_id] = {"outputs": outputs, "outcome": outcome, "conclusion": outcome}

    @property
    def steps(self) -> list[Any]:
        """Return the job's steps as written."""
        return _list(self.run.job.get("steps"))


def first_matrix(strategy: Any) -> tuple[dict[str, Any], str]:
    """Return the first combination of a job's matrix, and a note ('' when nothing to say)."""
    matrix = _dict(strategy).get("matrix")
    if matrix is None:
        return {}, ""
    if isinstance(matrix, str):
        return {}, f"the matrix `{matrix}` is an expression: not evaluated, matrix.* are null"
    combo: dict[str, Any] = {}
    for key, values in _dict(matrix).items():
        if key in ("include", "exclude"):
            continue
        listed = _list(values)
        if listed:
            combo[key] = listed[0]
    includes = [_dict(i) for i in _list(_dict(matrix).get("include"))]
    if not combo and includes:
        combo = dict(includes[0])
    elif includes:
        for include in includes:
            if all(combo.get(k, v) == v for k, v in include.items() if k in combo):
                combo.update({k: v for k, v in include.items() if k not in combo})
    note = "the first combination of its matrix: " + json.dumps(combo) if combo else ""
    return combo, note


def _inputs(on: Any) -> dict[str, Any]:
    """Return the defaults of ``workflow_dispatch``'s (and ``workflow_call``'s) inputs."""
    found: dict[str, Any] = {}
    for event in ("workflow_dispatch", "workflow_call"):
        config = _dict(_dict(on).get(event)) if isinstance(on, dict) else {}
        for name, spec in _dict(config.get("inputs")).items():
            default = _dict(spec).get("default")
            kind = _text(_dict(spec).get("type"))
            if kind == "boolean" and isinstance(default, str):
                found.setdefault(name, default.lower() == "true")
            else:
                found.setdefault(name, default if default is not None else "")
    return found


class _Evaluator:
    """Evaluate a job's text, recording what could not be and the secrets read."""

    def __init__(self, plan: JobPlan, ctx: JobContext, env: Mapping[str, str]) -> None:
        self.plan, self.ctx = plan, ctx
        contexts = {
            "github": dict(ctx.github),
            "env": dict(env),
            "matrix": plan.matrix,
            "strategy": {"fail-fast": True, "job-index": 0, "job-total": 1, "max-parallel": 1},
            "inputs": _inputs(plan.run.workflow.get("on")),
            "runner": dict(ctx.runner),
            "job": {"status": "failure" if plan.status.failed else "success"},
            "steps": plan.steps_ctx,
        }
        self.scope = Scope(
            contexts, ctx.secret, plan.status, unfollowed=frozenset({"needs", "vars", "jobs"})
        )
        self.failed: list[str] = []

    def text(self, value: str) -> str:
        """Return ``value`` with its expressions evaluated; one that cannot be is ''."""

        def one(match: re.Match[str]) -> str:
            try:
                return interpolate(match.group(0), self.scope)
            except ExprError as exc:
                self.failed.append(f"`${{{{{match.group(1)}}}}}`: {exc}")
                return ""

        return re.sub(r"\$\{\{(.*?)\}\}", one, value, flags=re.DOTALL)

    def holds(self, when: str) -> bool | None:
        """Return whether an ``if:`` holds; None when it cannot be evaluated (said)."""
        try:
            return condition(when, self.scope)
        except ExprError as exc:
            self.failed.append(f"if `{when}`: {exc}")
            return None

    def done(self) -> None:
        """Hand what was read and not evaluated to the job."""
        for name in self.scope.secrets_read:
            if name not in self.plan.secrets_read:
                self.plan.secrets_read.append(name)
        for context in self.scope.notes:
            said = f"`{context}.*` is not followed by Cujo: read as null"
            if said not in self.plan.notes:
                self.plan.notes.append(said)
        self.plan.unevaluated += [f for f in self.failed if f not in self.plan.unevaluated]


def _env(values: Any, evaluator: _Evaluator) -> dict[str, str]:
    return {k: evaluator.text(_text(v)) for k, v in _dict(values).items() if isinstance(v, str)}


def plan_job(run: JobRun, ctx: JobContext) -> JobPlan:
    """Return the job's plan: its matrix, its env, and whether its ``if:`` lets it run."""
    job = run.job
    matrix, note = first_matrix(job.get("strategy"))
    plan = JobPlan(run, matrix)
    if isinstance(_dict(job.get("strategy")).get("matrix"), str):
        plan.unevaluated.append(note)  # a gate on matrix.* could hide a step: a cut
    elif note:
        plan.notes.append(note)
    if _text(job.get("uses")):
        plan.skipped = f"it calls the reusable workflow `{job['uses']}`: not run"
        return plan
    for key in ("container", "services"):
        if job.get(key):
            plan.notes.append(f"its `{key}:` is not started: the steps run on the host")
    if _text(job.get("runs-on")) and re.search(r"windows|macos", job["runs-on"], re.I):
        plan.notes.append(f"it runs on `{job['runs-on']}`: its steps run on Linux here")
    evaluator = _Evaluator(plan, ctx, {})
    workflow_env = _env(plan.run.workflow.get("env"), evaluator)
    evaluator.done()
    evaluator = _Evaluator(plan, ctx, workflow_env)
    plan.env = {**workflow_env, **_env(job.get("env"), evaluator)}
    when = _text(job.get("if"))
    if when:
        holds = _Evaluator(plan, ctx, plan.env)
        ok = holds.holds(when)
        holds.done()
        if ok is False:
            plan.skipped = f"its `if: {when}` is false after the merge"
    evaluator.done()
    return plan


def _defaults(run: JobRun) -> dict[str, Any]:
    workflow = _dict(_dict(run.workflow.get("defaults")).get("run"))
    job = _dict(_dict(run.job.get("defaults")).get("run"))
    return {**workflow, **job}


def _label(step: dict[str, Any], index: int) -> str:
    name = _text(step.get("name")) or _text(step.get("id"))
    if name:
        return name
    if _text(step.get("uses")):
        return f"uses {step['uses']}"
    first = _text(step.get("run")).strip().split("\n", 1)[0][:80]
    return f"run {first}" if first else f"#{index + 1}"


def plan_step(plan: JobPlan, index: int, ctx: JobContext) -> StepPlan:
    """Return step ``index`` of the job as the runner would take it now."""
    step = _dict(plan.steps[index]) if index < len(plan.steps) else {}
    label = _label(step, index)
    evaluator = _Evaluator(plan, ctx, {**plan.env, **plan.github_env})
    env = {**plan.env, **plan.github_env, **_env(step.get("env"), evaluator)}
    evaluator.done()
    evaluator = _Evaluator(plan, ctx, env)  # a step's if: reads its own env too
    when = _text(step.get("if"))
    holds = evaluator.holds(when)
    if holds is None:
        holds = not plan.status.failed  # as success() reads it; the failure is said
    if not holds:
        evaluator.done()
        return StepPlan(index, label, "skipped", note=f"`if: {when or 'success()'}` is false")
    uses = _text(step.get("uses")).strip()
    continue_on_error = _text(step.get("continue-on-error")).strip().lower() == "true"
    if uses:
        out = _uses(index, label, uses, _dict(step.get("with")), evaluator)
        evaluator.done()
        return out
    template = _text(step.get("run"))
    if not template:
        evaluator.done()
        return StepPlan(index, label, "not-run", note="neither `run:` nor `uses:`")
    defaults = _defaults(plan.run)
    shell = _text(step.get("shell")) or _text(defaults.get("shell"))
    command, suffix, why = shell_command(shell)
    folder = evaluator.text(
        _text(step.get("working-directory")) or _text(defaults.get("working-directory"))
    )
    if why:
        evaluator.done()
        return StepPlan(index, label, "not-run", note=why, template=template)
    script = evaluator.text(template)
    failed = list(evaluator.failed)
    evaluator.done()
    return StepPlan(
        index, label, "run", script=script, template=template, shell=command, suffix=suffix,
        env=env, working_directory=folder, continue_on_error=continue_on_error,
        unevaluated=failed,
    )  # fmt: skip


def shell_command(shell: str) -> tuple[str, str, str]:
    """Return the command a runner runs a script with (``{0}`` its path), the script's
    suffix, and why it is not run here ('' when it is)."""
    name = shell.strip()
    if name in SHELLS:
        return SHELLS[name], ".py" if name == "python" else ".sh", ""
    if name.split(" ", 1)[0] in _NOT_HERE:
        return "", "", f"its shell `{name}` is not on this runner: not run"
    if "{0}" in name:
        return name, ".sh", ""
    return "", "", f"its shell `{name}` is neither a known one nor a command with {{0}}: not run"


def _uses(
    index: int, label: str, uses: str, with_: dict[str, Any], evaluator: _Evaluator
) -> StepPlan:
    action = uses.partition("@")[0]
    if action in EMULATED:
        note = EMULATED[action]
        if action == "actions/upload-artifact":
            note += f" (its path: `{evaluator.text(_text(with_.get('path')))[:300]}`)"
        elif action == "actions/checkout":
            other = {k: _text(with_.get(k)) for k in ("repository", "ref") if with_.get(k)}
            if other:
                shown = ", ".join(f"{k}: {v}" for k, v in other.items())
                note += f" ({shown} asked for: the merge tree stands in its place)"
        return StepPlan(index, label, "emulated", note=note, uses=uses)
    if uses.startswith("./"):
        why = "a local action: not run (its action.yml is read by the audit)"
    elif uses.startswith("docker://"):
        why = "a container image: not run"
    else:
        why = "an action Cujo does not emulate: not run"
    return StepPlan(index, label, "not-run", note=why, uses=uses)


# --------------------------------------------------------------------------- the contexts

# Which of the run's decoys a secret stands for, by the words of its name (first match);
# any other secret is the OAuth token decoy (a personal token, the commonest kind).
_SECRET_DECOYS = (
    (("GITHUB_TOKEN", "GH_TOKEN"), "GITHUB_TOKEN"),
    (("NPM",), "NPM_TOKEN"),
    (("PYPI",), "PYPI_TOKEN"),
    (("AWS_SECRET", "SECRET_ACCESS"), "AWS_SECRET_ACCESS_KEY"),
    (("AWS",), "AWS_ACCESS_KEY_ID"),
    (("SSH", "PRIVATE_KEY", "DEPLOY_KEY"), "SSH_PRIVATE_KEY"),
    (("DOCKER", "REGISTRY", "GHCR"), "DOCKER_LOGIN_TOKEN"),
)
OTHER_SECRET = "GH_OAUTH_TOKEN"  # noqa: S105 (a decoy's name)


def secret_decoy(name: str) -> str:
    """Return the name of the run's decoy that the secret ``name`` stands for."""
    upper = name.upper()
    for words, decoy in _SECRET_DECOYS:
        if any(word in upper for word in words):
            return decoy
    return OTHER_SECRET


def github_context(
    env: Mapping[str, str], event: Any, token: str, event_name: str
) -> dict[str, Any]:
    """Return the ``github`` context a step reads: its ``GITHUB_*`` variables by name,
    the event, the job's token, and the trigger the job runs on."""
    context: dict[str, Any] = {
        name.removeprefix("GITHUB_").lower(): value
        for name, value in env.items()
        if name.startswith("GITHUB_")
    }
    context.update(event=event, token=token, event_name=event_name)
    return context

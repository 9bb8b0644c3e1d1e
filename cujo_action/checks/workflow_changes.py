"""Say what a pull request changes about what runs in CI, file by file, for a maintainer.

Pure: the text of a file at base and at head (None where it does not exist) in, the line
of its first change and a short account out: for a workflow or an action, which triggers,
permissions, jobs and steps were added, removed or changed, and each action whose ref
moved (``actions/checkout@<old> → @<new>``); for any other file, that it changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cujo_action.limits import WORKFLOW_CHANGE_PHRASES
from cujo_action.workflow.parse import Step, Workflow, parse


@dataclass(frozen=True)
class Change:
    """One changed file that decides what runs in CI: where it first differs, and how."""

    path: str
    line: int
    detail: str
    unsaid: int = 0  # phrases past WORKFLOW_CHANGE_PHRASES, counted in the detail


def first_changed_line(before: str, after: str) -> int:
    """Return the 1-based line of ``after`` where it first differs from ``before``."""
    old, new = before.splitlines(), after.splitlines()
    for n, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            return n
    return min(len(old), len(new)) + 1 if len(old) != len(new) else 1


def _steps(workflow: Workflow) -> dict[tuple[str, str], Step]:
    return {(step.job, step.ident): step for step in workflow.steps()}


def _ref(uses: str) -> str:
    return uses.partition("@")[2]


def _listed(words: list[str]) -> str:
    more = f" and {len(words) - 6} more" if len(words) > 6 else ""
    return ", ".join(f"`{w}`" for w in words[:6]) + more


def _inputs(step: Step) -> tuple[dict[str, str], dict[str, str]]:
    return (
        {n: t.value for n, t in step.with_.items()},
        {n: t.value for n, t in step.env.items()},
    )


def _workflow_phrases(before: Workflow, after: Workflow) -> list[str]:
    phrases = []
    added = [t for t in after.triggers if t not in before.triggers]
    removed = [t for t in before.triggers if t not in after.triggers]
    if added:
        phrases.append(f"triggers added: {_listed(added)}")
    if removed:
        phrases.append(f"triggers removed: {_listed(removed)}")
    if before.permissions != after.permissions:
        phrases.append(
            f"permissions `{before.permissions or '(default)'}` → "
            f"`{after.permissions or '(default)'}`"
        )
    jobs_before = {j.id for j in before.jobs}
    jobs_after = {j.id for j in after.jobs}
    if new_jobs := sorted(jobs_after - jobs_before):
        phrases.append(f"jobs added: {_listed(new_jobs)}")
    if gone := sorted(jobs_before - jobs_after):
        phrases.append(f"jobs removed: {_listed(gone)}")
    old, new = _steps(before), _steps(after)
    moved = []
    for key, step in new.items():
        was = old.get(key)
        if was is not None and was.uses and step.uses and was.uses != step.uses:
            action = step.uses.partition("@")[0]
            if action == was.uses.partition("@")[0]:
                moved.append(f"`{action}@{_ref(was.uses)}` → `@{_ref(step.uses)}`")
            else:
                moved.append(f"`{was.uses}` → `{step.uses}`")
    phrases += [f"action moved: {m}" for m in moved]
    common = [k for k in new if k[0] in jobs_before]
    if added_steps := [k[1] for k in common if k not in old]:
        phrases.append(f"steps added: {_listed(added_steps)}")
    if removed_steps := [k[1] for k in old if k[0] in jobs_after and k not in new]:
        phrases.append(f"steps removed: {_listed(removed_steps)}")
    scripts = [k[1] for k in common if k in old and _run(old[k]) != _run(new[k])]
    if scripts:
        phrases.append(f"run: scripts changed: {_listed(scripts)}")
    inputs = [k[1] for k in common if k in old and _inputs(old[k]) != _inputs(new[k])]
    if inputs:
        phrases.append(f"`with:` or `env:` changed: {_listed(inputs)}")
    return phrases


def _run(step: Step) -> str:
    return step.run.value if step.run is not None else ""


def _summary(workflow: Workflow) -> str:
    if workflow.error:
        return f"GitHub would not read it: {workflow.error}"
    uses = list(dict.fromkeys(s.uses for s in workflow.steps() if s.uses))
    parts = []
    if workflow.triggers:
        parts.append(f"on {_listed(list(workflow.triggers))}")
    if workflow.jobs:
        parts.append(f"jobs {_listed([j.id for j in workflow.jobs])}")
    runs = sum(1 for s in workflow.steps() if s.run is not None)
    if runs:
        parts.append(f"{runs} run: step{'s' if runs != 1 else ''}")
    if uses:
        parts.append(f"uses {_listed(uses)}")
    return "; ".join(parts)


def describe(path: str, before: str | None, after: str | None, *, yaml: bool) -> Change:
    """Return what changed in ``path`` from ``before`` to ``after`` (None: absent there).

    ``yaml``: the file is a workflow or an action, read as one.
    """
    if after is None:
        return Change(path, 1, f"{path} deleted")
    if before is None:
        said = f"{path} added"
        if yaml:
            said += f": {_summary(parse(path, after))}"
        return Change(path, 1, said)
    line = first_changed_line(before, after)
    if not yaml:
        return Change(path, line, f"{path} changed (first at line {line})")
    old, new = parse(path, before), parse(path, after)
    if new.error:
        return Change(path, line, f"{path} changed: GitHub would not read it: {new.error}")
    phrases = _workflow_phrases(old, new) if not old.error else ["it did not read as YAML before"]
    if not phrases:
        phrases = ["other keys, names, comments or layout (read the diff)"]
    shown = phrases[:WORKFLOW_CHANGE_PHRASES]
    unsaid = len(phrases) - len(shown)
    more = f"; and {unsaid} more" if unsaid else ""
    return Change(path, line, f"{path} changed: {'; '.join(shown)}{more}", unsaid)

"""Read a GitHub Actions workflow or action file into what the workflows check judges.

Pure: text in, a ``Workflow`` out, every value with the line it is on. The YAML is
composed, never constructed: ``on`` stays the string it is (YAML 1.1 would read it as
``true``), no tag is resolved, and an alias is read where it stands without being
expanded. A file GitHub would refuse to run (not YAML, not a mapping) is a ``Workflow``
with ``error`` saying why, and nothing else.

Each ``${{ }}`` expression of a kept value is found with its own line, counted in the
file's text (a folded or quoted scalar loses its line breaks in the value).
https://docs.github.com/en/actions/writing-workflows/workflow-syntax-for-github-actions
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import yaml

# ${{ expression }}: the expression is everything up to the first closing braces.
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_OPENING = "${{"


@dataclass(frozen=True)
class Text:
    """A scalar as written: its value, its first line, and its expressions with theirs."""

    value: str
    line: int
    block: bool = False  # a literal or folded block: the value starts on the next line
    # Each ``${{ }}`` of the value: the expression (stripped), its line, and its offset in
    # the value (where its ``${{`` is).
    expressions: tuple[tuple[str, int, int], ...] = ()

    def line_at(self, offset: int) -> int:
        """Return the file's line of the character at ``offset`` in the value."""
        first = self.line + 1 if self.block else self.line
        return first + self.value.count("\n", 0, max(offset, 0))


@dataclass(frozen=True)
class Step:
    """One step of a job (or of a composite action)."""

    job: str
    index: int
    # The step as base and head are compared, whatever the lines: its id, else its name,
    # else what it uses or the first line it runs (a second alike is counted: "…#2").
    ident: str
    line: int
    name: str = ""
    uses: str = ""
    run: Text | None = None
    shell: str = ""
    working_directory: str = ""
    if_: str = ""
    with_: dict[str, Text] = field(default_factory=dict)
    env: dict[str, Text] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """One job: its environment, its steps, or the reusable workflow it calls."""

    id: str
    line: int
    env: dict[str, Text] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    uses: str = ""  # a reusable workflow
    if_: str = ""
    with_: dict[str, Text] = field(default_factory=dict)
    secrets: dict[str, Text] = field(default_factory=dict)  # or {"inherit": ...}


@dataclass(frozen=True)
class Workflow:
    """A workflow (or a composite action, as one job named ``(action)``) as read."""

    path: str
    kind: Literal["workflow", "action"]
    triggers: dict[str, int] = field(default_factory=dict)  # event → line
    env: dict[str, Text] = field(default_factory=dict)
    jobs: tuple[Job, ...] = ()
    permissions: str = ""  # as written, for the change listing
    error: str = ""  # why GitHub would not run it ('' when it reads)

    def steps(self) -> list[Step]:
        """Return every step of every job, in order."""
        return [step for job in self.jobs for step in job.steps]

    def job(self, job_id: str) -> Job | None:
        """Return the job named ``job_id``, or None."""
        return next((j for j in self.jobs if j.id == job_id), None)


ACTION_JOB = "(action)"


def is_action_file(path: str) -> bool:
    """Return whether ``path`` names an action's metadata file (``action.yml``/``.yaml``)."""
    return path.rsplit("/", 1)[-1] in ("action.yml", "action.yaml")


def parse(path: str, text: str) -> Workflow:
    """Return the workflow (or action) in ``text``; its ``error`` says why when it has none."""
    kind: Literal["workflow", "action"] = "action" if is_action_file(path) else "workflow"
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return Workflow(path, kind, error=f"not valid YAML{where} ({exc.problem})")
    except yaml.YAMLError as exc:
        return Workflow(path, kind, error=f"not valid YAML ({exc})")
    if not isinstance(root, yaml.MappingNode):
        return Workflow(path, kind, error="not a mapping of keys such as `on:` and `jobs:`")
    reader = _Reader(text)
    top = _mapping(root)
    if kind == "action":
        runs = _mapping(top.get("runs"))
        steps = reader.steps(ACTION_JOB, runs.get("steps"))
        job = Job(ACTION_JOB, _line(root), steps=steps)
        return Workflow(path, kind, jobs=(job,))
    jobs = tuple(
        reader.job(name, node)
        for name, node in _pairs(top.get("jobs"))
        if isinstance(node, yaml.MappingNode)
    )
    return Workflow(
        path,
        kind,
        triggers=_triggers(top.get("on")),
        env=reader.texts(top.get("env")),
        jobs=jobs,
        permissions=_flat(top.get("permissions")),
    )


# --------------------------------------------------------------------------- reading nodes


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _pairs(node: yaml.Node | None) -> list[tuple[str, yaml.Node]]:
    """Return a mapping's (key, value) pairs with string keys, in order (later wins later)."""
    if not isinstance(node, yaml.MappingNode):
        return []
    return [(k.value, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)]


def _mapping(node: yaml.Node | None) -> dict[str, yaml.Node]:
    return dict(_pairs(node))


def _scalar(node: yaml.Node | None) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else ""


def _flat(node: yaml.Node | None, depth: int = 0) -> str:
    """Return a small node as one line of text (for listing what changed), capped."""
    if node is None or depth > 3:
        return ""
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    if isinstance(node, yaml.SequenceNode):
        return "[" + ", ".join(_flat(n, depth + 1) for n in node.value[:20]) + "]"
    if isinstance(node, yaml.MappingNode):
        inner = ", ".join(f"{k}: {_flat(v, depth + 1)}" for k, v in _pairs(node)[:20])
        return "{" + inner + "}"
    return ""


def _triggers(node: yaml.Node | None) -> dict[str, int]:
    """Return the events of ``on:`` (a name, a list of names or a mapping) with lines."""
    if isinstance(node, yaml.ScalarNode) and node.value:
        return {node.value: _line(node)}
    if isinstance(node, yaml.SequenceNode):
        return {n.value: _line(n) for n in node.value if isinstance(n, yaml.ScalarNode)}
    if isinstance(node, yaml.MappingNode):
        return {k.value: _line(k) for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return {}


class _Reader:
    """Read scalars with their lines and expressions, against the file's own lines."""

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines()

    def text(self, node: yaml.Node | None) -> Text | None:
        if not isinstance(node, yaml.ScalarNode):
            return None
        block = node.style in ("|", ">")
        found = [(m.group(1).strip(), m.start()) for m in _EXPRESSION.finditer(node.value)]
        return Text(node.value, _line(node), block, self._placed(node, found))

    def texts(self, node: yaml.Node | None) -> dict[str, Text]:
        out: dict[str, Text] = {}
        for key, value in _pairs(node):
            text = self.text(value)
            if text is not None:
                out[key] = text
        return out

    def _placed(
        self, node: yaml.Node, found: list[tuple[str, int]]
    ) -> tuple[tuple[str, int, int], ...]:
        """Give each expression the line its opening ``${{`` is on in the file.

        The n-th opening in the node's lines is the n-th expression of its value; where
        the counts disagree (an escape in a quoted scalar), each takes the node's line.
        """
        if not found:
            return ()
        first, end = node.start_mark.line, node.end_mark
        # A block ends at the start of the line after it: that line is not the node's.
        last = end.line if end.column > 0 else end.line - 1
        openings = [
            n + 1
            for n in range(first, min(last + 1, len(self._lines)))
            for _ in range(self._lines[n].count(_OPENING))
        ]
        if len(openings) != len(found):
            openings = [_line(node)] * len(found)
        return tuple(
            (expr, line, offset) for (expr, offset), line in zip(found, openings, strict=True)
        )

    def steps(self, job: str, node: yaml.Node | None) -> tuple[Step, ...]:
        if not isinstance(node, yaml.SequenceNode):
            return ()
        steps = []
        seen: dict[str, int] = {}
        for index, item in enumerate(node.value):
            keys = _mapping(item)
            name, step_id = _scalar(keys.get("name")), _scalar(keys.get("id"))
            run = _scalar(keys.get("run")).strip().split("\n", 1)[0][:80]
            uses = _scalar(keys.get("uses")).strip().split("@", 1)[0]
            ident = step_id or name or (uses and f"uses {uses}") or (run and f"run {run}")
            ident = ident or f"#{index + 1}"
            seen[ident] = seen.get(ident, 0) + 1
            steps.append(
                Step(
                    job=job,
                    index=index,
                    ident=ident if seen[ident] == 1 else f"{ident}#{seen[ident]}",
                    line=_line(item),
                    name=name,
                    uses=_scalar(keys.get("uses")).strip(),
                    run=self.text(keys.get("run")),
                    shell=_scalar(keys.get("shell")),
                    working_directory=_scalar(keys.get("working-directory")),
                    if_=_scalar(keys.get("if")),
                    with_=self.texts(keys.get("with")),
                    env=self.texts(keys.get("env")),
                )
            )
        return tuple(steps)

    def job(self, name: str, node: yaml.Node) -> Job:
        keys = _mapping(node)
        secrets = keys.get("secrets")
        return Job(
            id=name,
            line=_line(node),
            env=self.texts(keys.get("env")),
            steps=self.steps(name, keys.get("steps")),
            uses=_scalar(keys.get("uses")).strip(),
            if_=_scalar(keys.get("if")),
            with_=self.texts(keys.get("with")),
            secrets=(
                {"inherit": Text("inherit", _line(secrets))}
                if isinstance(secrets, yaml.ScalarNode) and secrets.value == "inherit"
                else self.texts(secrets)
            ),
        )

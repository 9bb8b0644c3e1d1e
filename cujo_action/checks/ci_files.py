"""Read the files that decide what runs in CI at a commit, from git objects alone.

What runs in CI (docs/design.md section 4): anything under ``.github/``, an ``action.yml`` (or
``action.yaml``) anywhere, and a script a workflow's ``run:`` calls by path. They are read
from the clone's objects (``git ls-tree``, ``git cat-file``), never from a checkout: a
link in the pull request is named, never followed, and nothing a pull request can write
is on the way. Capped (``limits.py``: ``workflow-files``, ``workflow-file-size``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cujo_action import limits
from cujo_action.prepare.git import Git
from cujo_action.workflow.parse import Workflow, is_action_file

CI_FOLDER = ".github/"
WORKFLOW_FOLDER = ".github/workflows"
_REGULAR = (b"100644", b"100755")
# A path a run: line names as a program or an interpreter's script.
_SCRIPT = re.compile(
    r"(?<![\w$/.{-])(?:\./)?[\w.-]+(?:/[\w.-]+)*\.(?:sh|bash|zsh|py|js|mjs|cjs|ts|rb|pl|ps1)\b"
    r"|(?<![\w$/.{-])\./[\w.-]+(?:/[\w.-]+)*"
)


def is_ci_path(path: str) -> bool:
    """Return whether ``path`` decides what runs in CI by where it is (not a script)."""
    return path.startswith(CI_FOLDER) or is_action_file(path)


def is_workflow_path(path: str) -> bool:
    """Return whether GitHub runs ``path`` as a workflow (directly in .github/workflows)."""
    folder, _, name = path.rpartition("/")
    return folder == WORKFLOW_FOLDER and name.endswith((".yml", ".yaml"))


def _order(path: str) -> tuple[int, str]:
    return (0 if is_workflow_path(path) else 1 if is_action_file(path) else 2, path)


@dataclass
class CiTree:
    """The CI files of one commit: path → text, and what could not be read, by name."""

    sha: str
    texts: dict[str, str] = field(default_factory=dict)
    tracked: dict[str, str] = field(default_factory=dict)  # every regular file → its blob
    links: list[str] = field(default_factory=list)  # CI paths that are links or submodules
    unread: list[str] = field(default_factory=list)  # past the file cap
    too_large: list[str] = field(default_factory=list)

    def read(self, git: Git, clone: Path, path: str) -> str | None:
        """Return the text of a tracked file (capped), or None when it is not one."""
        blob = self.tracked.get(path)
        if blob is None:
            return None
        size = git.run("cat-file", "-s", blob, cwd=clone)
        if size.code != 0 or int(size.out.decode().strip() or 0) > limits.WORKFLOW_FILE_SIZE:
            self.too_large.append(path)
            return None
        got = git.run("cat-file", "blob", blob, cwd=clone)
        return got.out.decode("utf-8", "replace") if got.code == 0 else None


def read_ci(git: Git, clone: Path, sha: str) -> CiTree:
    """Return the CI files of commit ``sha`` of ``clone`` (workflows first), capped."""
    tree = CiTree(sha)
    out = git.check("ls-tree", "-r", "-z", "--full-tree", sha, cwd=clone, what=f"list {sha}")
    ci: list[str] = []
    for entry in out.split(b"\0"):
        meta, _, raw = entry.partition(b"\t")
        parts = meta.split()
        if len(parts) != 3:
            continue
        path = raw.decode("utf-8", "replace")
        if parts[0] in _REGULAR:
            tree.tracked[path] = parts[2].decode()
            if is_ci_path(path):
                ci.append(path)
        elif is_ci_path(path):
            tree.links.append(path)
    ci.sort(key=_order)
    tree.unread = ci[limits.WORKFLOW_FILES :]
    for path in ci[: limits.WORKFLOW_FILES]:
        text = tree.read(git, clone, path)
        if text is not None:
            tree.texts[path] = text
    return tree


def scripts_run(workflows: Iterable[Workflow], tracked: Mapping[str, str]) -> dict[str, list[str]]:
    """Return the tracked files that workflows' ``run:`` steps call by path, with where."""
    found: dict[str, list[str]] = {}
    for workflow in workflows:
        for step in workflow.steps():
            if step.run is None:
                continue
            folder = step.working_directory.strip()
            for match in _SCRIPT.finditer(step.run.value):
                token = match.group(0)
                for base in (folder, ""):
                    path = posixpath.normpath(posixpath.join(base, token)) if base else token
                    path = posixpath.normpath(path)
                    if path in tracked and not is_ci_path(path):
                        said = f"{workflow.path}, step `{step.ident}` of job `{step.job}`"
                        if said not in found.setdefault(path, []):
                            found[path].append(said)
                        break
    return found

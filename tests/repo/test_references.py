"""Every module, file and design section that a comment or a page names exists.

A comment that sends a reader to ``runstate.py`` or to "section 8" of a document the
clone does not hold costs more than no comment. This reads the comments and docstrings of
the Python code and the whole text of the pages, workflows and scripts, and resolves
against the tree as it stands when the test runs (modules move; a reference follows
them or fails):

* a dotted name ``cujo_action.x.y`` / ``app_relay.x.y`` / ``bench.x``: a module, a
  package, or a name defined at the top of an existing module;
* a path that starts with a top-level folder of the repository (``cujo_action/net/``,
  ``docs/limits.md``): a file or a folder, up to its first wildcard or placeholder;
* a module named by its tail (``words/hold.py``) or its file name (``runstate.py``): a
  file of the repository ends so, or it is one of the files of the projects Cujo reviews;
* a document by name (``limits.md``, ``DESIGN.md``) and a Markdown link: it exists;
* ``docs/design.md`` section N or invariant N: that heading or that invariant exists.

Product code (``cujo_action/``, ``app_relay/``, ``tools/``, ``action.yml``, the
workflows) says why, not which ticket: "issue 23" fails there. Each rule is also fed a
planted violation, so a rule that can no longer fail is itself a failure.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from repo_paths import TOP

# What is read: the code's comments and docstrings, the pages, the workflows, the scripts.
SCANNED = ("cujo_action", "app_relay", "tools", "bench", "docs", "README.md", "action.yml")
SCANNED_HIDDEN = (".github",)
TEXT_SUFFIXES = frozenset({".md", ".yml", ".yaml", ".sh", ".toml", ".json", ".txt", ".in"})
# Where a ticket number is no reason: the code that ships.
PRODUCT = ("cujo_action", "app_relay", "tools", "action.yml", ".github/workflows")
# Folders at the top that are the tools' own, never the repository's.
PACKAGES = ("cujo_action", "app_relay", "bench")

# Files of the repositories Cujo reviews (and of Python itself), which the pages and the
# comments name as such: never this repository's.
FOREIGN_FILES = frozenset(
    {
        # build and test files of a reviewed project
        "setup.py", "conftest.py", "noxfile.py", "manage.py", "__init__.py", "__main__.py",
        # what Python runs at start-up: the persistence rules name them
        "sitecustomize.py", "usercustomize.py", "site.py",
        # the standards files a diff review reads at base
        "AGENTS.md", "CLAUDE.md", "CONTRIBUTING.md", "copilot-instructions.md",
        # the hosted runner image's own description, in actions/runner-images
        "Ubuntu2404-Readme.md",
        # a script in an example of what a pull request runs
        "t.py",
    }
)  # fmt: skip
# Paths of a repository Cujo reviews that look like ours: where the user's workflow goes,
# and the attacked projects the pages and docstrings take as examples.
FOREIGN_PATHS = frozenset(
    {
        ".github/workflows/cujo.yml", ".github/copilot-instructions.md",
        ".github/workflows/preview.yml", ".github/workflows/greet.yml",
        ".github/workflows/security.yml", ".github/workflows/docs.yml",
        "tests/a.py", "tests/b.py", "tests/test_env.py", "tests/test_core.py",
        "tools/deploy.py",
    }
)  # fmt: skip
# Made when a tool runs, never committed.
RUNTIME_PATHS = frozenset({"bench/.cache"})

DOTTED = re.compile(r"(?<![\w./-])(?:cujo_action|app_relay|bench)(?:\.[A-Za-z_]\w*)+")
# A path: a run of path characters with a slash; which ones are ours is decided later.
PATH = re.compile(r"(?<![\w./~:@$-])\.?[A-Za-z_][\w.-]*/[\w./*<>{}…-]*")
# A module or document by file name alone (``runstate.py``, ``limits.md``).
FILE_NAME = re.compile(r"(?<![\w./~:@$-])[A-Za-z_][\w-]*\.(?:py|md)\b(?![\w/-])")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
DESIGN_SECTION = re.compile(
    r"design\.md[`)\]]?,?\s+(section|invariant)s?\s+(\d+(?:\.\d+)*)", re.IGNORECASE
)
DESIGN_SECTION_AFTER = re.compile(r"\bsection\s+(\d+(?:\.\d+)*)\s+of\s+`?(?:docs/)?design\.md")
SELF_SECTION = re.compile(r"\bsections?\s+(\d+(?:\.\d+)*)")
# The design notes that live outside the repository, by any spelling.
OUTSIDE_DOCS = re.compile(r"\b(?:DESIGN|THREATS|ACTIONS|STYLE)(?:\.md)?\b(?![_-])")
TICKET = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
WILDCARD = re.compile(r"[*<>{}…]|\bOWNER\b|\bNAME\b")


@dataclass(frozen=True)
class Text:
    """A piece of text to check, and where it starts."""

    path: str  # relative to the top, with slashes
    line: int
    body: str


@cache
def repository_files(top: Path) -> tuple[str, ...]:
    """Return every file of the repository, relative, with slashes: what git tracks or
    would (not what it ignores: a demo's data, a build, a venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=top, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    return tuple(sorted(f for f in listed.split("\0") if f and (top / f).is_file()))


@cache
def top_folders(top: Path) -> frozenset[str]:
    """Return the folders at the top of the repository."""
    return frozenset(f.split("/", 1)[0] for f in repository_files(top) if "/" in f)


@cache
def _files(top: Path) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
    files = repository_files(top)
    names = frozenset(f.rsplit("/", 1)[-1] for f in files)
    return frozenset(files), names, tuple(files)


def python_texts(relative: str, source: str) -> Iterator[Text]:
    """Yield the comments and docstrings of a Python module."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield Text(relative, token.start[0], token.string)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                value = first.value.value
                if isinstance(value, str):
                    yield Text(relative, first.lineno, value)


def texts(top: Path) -> Iterator[Text]:
    """Yield every comment, docstring and page the test reads."""
    roots = [top / name for name in (*SCANNED, *SCANNED_HIDDEN)]
    for root in roots:
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(top).as_posix()
            if path.suffix == ".py":
                yield from python_texts(relative, path.read_text())
            elif path.suffix in TEXT_SUFFIXES:
                yield Text(relative, 1, path.read_text())


@cache
def defined_names(module: Path) -> frozenset[str]:
    """Return the names a module defines or imports at its top (``if`` blocks included)."""
    names: set[str] = set()
    todo = list(ast.parse(module.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            todo += [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                todo += handler.body
    return frozenset(names)


def dotted_exists(top: Path, dotted: str) -> bool:
    """Say whether ``a.b.c`` is a module, a package, or a name defined in an existing one."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = top.joinpath(*parts[:n])
        module = base.with_suffix(".py")
        if module.is_file():
            found = module
        elif base.is_dir():
            found = base / "__init__.py"
            if n == len(parts):
                return True
        else:
            continue
        if n == len(parts):
            return True
        return found.is_file() and parts[n] in defined_names(found)
    return False


def path_exists(top: Path, path: str) -> bool:
    """Say whether a path of the repository exists, up to its first wildcard.

    A module may be named by its path without ``.py`` (``bench/__main__``).
    """
    if path in FOREIGN_PATHS or path in RUNTIME_PATHS:
        return True
    cut = WILDCARD.search(path)
    if cut:
        path = path[: cut.start()].rsplit("/", 1)[0]
    return (top / path).exists() or (top / f"{path}.py").is_file()


@cache
def design_numbers(top: Path) -> tuple[frozenset[str], frozenset[str]]:
    """Return docs/design.md's section numbers and invariant numbers."""
    doc = top / "docs" / "design.md"
    if not doc.is_file():
        return frozenset(), frozenset()
    sections, invariants, in_invariants = set(), set(), False
    for line in doc.read_text().splitlines():
        heading = re.match(r"#{2,4} (\d+(?:\.\d+)*)\.? ", line)
        if heading:
            sections.add(heading[1])
            in_invariants = "Invariants" in line
        elif in_invariants and (item := re.match(r"(\d+)\. ", line)):
            invariants.add(item[1])
    return frozenset(sections), frozenset(invariants)


def tail_module(path: str) -> bool:
    """Say whether ``path`` names a module by its tail (``words/hold.py``), not a foreign file."""
    return (
        path.endswith(".py")
        and not WILDCARD.search(path)
        and "." not in path.split("/", 1)[0]
        and path.rsplit("/", 1)[-1] not in FOREIGN_FILES
    )


def _clean(found: str) -> str:
    return found.rstrip(".,:;'\"`)")


def problems(top: Path, text: Text) -> list[str]:
    """Return what ``text`` names that does not exist, each with where it is."""
    _, names, all_files = _files(top)
    folders = top_folders(top)
    sections, invariants = design_numbers(top)
    wrong: list[str] = []

    def say(at: int, what: str) -> None:
        line = text.line + text.body.count("\n", 0, at)
        wrong.append(f"{text.path}:{line}: {what}")

    body = text.body
    for m in DOTTED.finditer(body):
        name = _clean(m[0])
        cut = WILDCARD.search(name)  # ``cujo_action.checks.NAME``: up to the placeholder
        name = name[: cut.start()].rstrip(".") if cut else name
        if not dotted_exists(top, name):
            say(m.start(), f"names {name}, which is no module, package or name of one")
    for m in PATH.finditer(body):
        path = _clean(m[0])
        head = path.split("/", 1)[0]
        if head in folders:
            if not path_exists(top, path):
                say(m.start(), f"names the path {path}, which does not exist")
        elif tail_module(path) and not any(f.endswith("/" + path) for f in all_files):
            # A module by its tail (``words/hold.py``): some file of ours ends so.
            say(m.start(), f"names the module {path}, which no file of the tree ends with")
    for m in FILE_NAME.finditer(body):
        name = m[0]
        if name not in names and name not in FOREIGN_FILES and not OUTSIDE_DOCS.match(name):
            say(m.start(), f"names {name}, which no file of the repository is called")
    for m in OUTSIDE_DOCS.finditer(body):
        say(m.start(), f"points at {m[0]}, a note outside the repository: use docs/design.md")
    for m in DESIGN_SECTION.finditer(body):
        kind, number = m[1].lower(), m[2]
        known = sections if kind == "section" else invariants
        if number not in known:
            say(m.start(), f"names docs/design.md {kind} {number}, which does not exist")
    for m in DESIGN_SECTION_AFTER.finditer(body):
        if m[1] not in sections:
            say(m.start(), f"names docs/design.md section {m[1]}, which does not exist")
    if text.path == "docs/design.md":
        for m in SELF_SECTION.finditer(body):
            if m[1] not in sections:
                say(m.start(), f"names its own section {m[1]}, which does not exist")
    if text.path.endswith(".md"):
        here = (top / text.path).parent
        for m in MD_LINK.finditer(body):
            target = m[1].split("#", 1)[0]
            local = target and "://" not in target and not target.startswith("mailto:")
            if local and not (here / target).exists():
                say(m.start(), f"links to {target}, which does not exist")
    if any(text.path == p or text.path.startswith(p + "/") for p in PRODUCT):
        for m in TICKET.finditer(body):
            say(m.start(), f"says {m[0]!r}: say the reason, not the ticket")
    return wrong


def all_problems(top: Path) -> list[str]:
    return [p for text in texts(top) for p in problems(top, text)]


def test_every_reference_in_comments_and_pages_exists() -> None:
    found = all_problems(TOP)
    assert found == [], "\n" + "\n".join(found)


def test_the_design_has_numbered_sections_and_invariants() -> None:
    sections, invariants = design_numbers(TOP)
    assert {"1", "2", "3", "11"} <= sections
    assert len(invariants) >= 10


# ---- each rule fails on a planted violation, and lets the harmless look-alikes be.


def check(path: str, body: str) -> list[str]:
    return problems(TOP, Text(path, 1, body))


@pytest.mark.parametrize(
    ("path", "planted"),
    [
        ("app_relay/x.py", "# see cujo_action.net.nosuchmodule for why"),
        ("app_relay/x.py", "# ``app_relay.runs.state.no_such_name`` decides"),
        ("docs/x.md", "the reader (`cujo_action/evidence/nosuch.py`)"),
        ("docs/x.md", "run `tools/nosuch/start.sh`"),
        ("app_relay/x.py", "# runstate.py says which moves exist"),
        ("app_relay/x.py", "# the words (``words/nosuch.py``)"),
        ("docs/x.md", "the contracts are in `DESIGN.md` section 2"),
        ("app_relay/x.py", "# (DESIGN section 12)"),
        ("app_relay/x.py", '# the threat (THREATS "soften the verdict")'),
        ("app_relay/x.py", "# docs/design.md section 99 says so"),
        ("app_relay/x.py", "# docs/design.md invariant 42"),
        ("app_relay/x.py", "# section 77 of docs/design.md"),
        ("README.md", "read [the guide](docs/nosuch.md)"),
        ("app_relay/x.py", "# caps (issue 23): at most four"),
        ("cujo_action/x.json", '{"from": "issue #22\'s table"}'),
        (".github/workflows/x.yml", "# see ISSUE 14"),
    ],
)
def test_a_planted_stale_reference_is_found(path: str, planted: str) -> None:
    assert check(path, planted), planted


@pytest.mark.parametrize(
    ("path", "harmless"),
    [
        ("app_relay/x.py", "# https://docs.github.com/en/rest/checks/runs#create-a-check-run"),
        ("docs/x.md", "uses: cujo-dev/cujo/.github/workflows/sandbox.yml@abc # main"),
        ("docs/x.md", "a file such as /tmp/x or ~/work/app/app"),
        ("docs/x.md", "`.github/workflows/*.yml` and `tests/app_relay/decide/test_rule_<id>.py`"),
        ("docs/x.md", "copy it to `.github/workflows/cujo.yml` in your repository"),
        ("docs/x.md", "a `setup.py` or `conftest.py` of the project, its `AGENTS.md`"),
        ("app_relay/x.py", "# cujo_action.schema.Report and app_relay.store.Store"),
        ("app_relay/x.py", "# ``cujo_action/sandbox/boundary.py`` and ``sandbox/jail.py``"),
        ("app_relay/x.py", "# docs/design.md section 3 and docs/design.md invariant 5"),
        ("bench/x.py", "# before issue 20 (bench is not product code)"),
        ("app_relay/x.py", "# GITHUB_ACTIONS and ACTIONS_RUNTIME_TOKEN are set"),
        ("docs/x.md", "read [the limits](limits.md#every-cap-on-evidence)"),
    ],
)
def test_a_harmless_look_alike_is_left_alone(path: str, harmless: str) -> None:
    assert check(path, harmless) == []

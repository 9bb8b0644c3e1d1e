"""Read a unified diff into files and hunks, and say what kind of file each path is.

docs/design.md section 5. Pure. The kind (manifest, CI file, script, code, config, docs; lock,
generated, vendored, binary) is what ``diffcompress`` orders hunks by; it is read from a
path's name and, for a new file, from the first line it adds.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal[
    "manifest", "ci", "script", "code", "config", "docs", "lock", "generated", "vendored",
    "binary",
]  # fmt: skip

# --------------------------------------------------------------------------- what a path is

_LOCKS = frozenset({
    "poetry.lock", "uv.lock", "pdm.lock", "pipfile.lock", "package-lock.json",
    "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb", "go.sum", "cargo.lock",
    "gemfile.lock", "composer.lock", "packages.lock.json", "flake.lock", "mix.lock",
    "pubspec.lock", "podfile.lock",
})  # fmt: skip
_MANIFESTS = frozenset({
    "pyproject.toml", "setup.py", "setup.cfg", "pipfile", "package.json", "go.mod",
    "cargo.toml", "gemfile", "build.gradle", "build.gradle.kts", "settings.gradle", "pom.xml",
    "composer.json", "manifest.in", "environment.yml", "environment.yaml", "meson.build",
    "cmakelists.txt", "build.rs", "binding.gyp", ".npmrc", ".yarnrc", ".yarnrc.yml",
    "pip.conf", ".cujo.yml",
})  # fmt: skip
_MANIFEST_GLOBS = ("requirements*.txt", "requirements*.in", "constraints*.txt", "*.gemspec")
_CI_GLOBS = (
    ".github/workflows/*", ".github/actions/*", "action.yml", "action.yaml", ".gitlab-ci.yml",
    ".gitlab/*", ".circleci/*", ".travis.yml", "azure-pipelines.yml", "jenkinsfile",
    ".buildkite/*", ".drone.yml", "appveyor.yml", ".pre-commit-config.yaml",
    ".github/dependabot.yml", "bitbucket-pipelines.yml", "cloudbuild.yaml",
)  # fmt: skip
_SCRIPT_NAMES = frozenset({
    "makefile", "gnumakefile", "dockerfile", "containerfile", "conftest.py", "noxfile.py",
    "tox.ini", "justfile", "rakefile", "taskfile.yml", "procfile", ".envrc", "vagrantfile",
})  # fmt: skip
_SCRIPT_EXTS = frozenset({".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".cmd", ".mk"})
_SCRIPT_DIRS = ("bin/", "scripts/", "script/", ".husky/", ".githooks/")
_CODE_EXTS = frozenset({
    ".py", ".pyx", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".go", ".rs", ".rb",
    ".java", ".kt", ".kts", ".scala", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".php",
    ".swift", ".m", ".lua", ".pl", ".pm", ".r", ".ex", ".exs", ".erl", ".hs", ".clj", ".dart",
    ".vue", ".svelte", ".sql", ".nix", ".zig", ".jl", ".groovy", ".tf",
})  # fmt: skip
_DOC_EXTS = frozenset({".md", ".rst", ".txt", ".adoc", ".rdoc"})
_BINARY_EXTS = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp", ".pdf", ".zip", ".gz", ".tgz",
    ".bz2", ".xz", ".7z", ".tar", ".whl", ".egg", ".jar", ".war", ".so", ".dylib", ".dll",
    ".exe", ".bin", ".o", ".a", ".pyc", ".class", ".woff", ".woff2", ".ttf", ".otf", ".eot",
    ".mp3", ".mp4", ".mov", ".wav", ".ogg", ".sqlite", ".db", ".parquet", ".npy", ".pkl",
})  # fmt: skip
_VENDOR_PARTS = frozenset({"vendor", "vendored", "third_party", "third-party", "node_modules",
                           "_vendor", "bower_components"})  # fmt: skip
_GENERATED_GLOBS = (
    "*.min.js", "*.min.css", "*.map", "*_pb2.py", "*_pb2_grpc.py", "*.pb.go", "*.generated.*",
    "*.g.dart", "dist/*", "build/*", "*.lock.json", "*.snap",
)  # fmt: skip
_GENERATED_MARK = re.compile(r"@generated|code generated .* do not edit|do not edit", re.I)


def kind_of(path: str, *, first_added: str = "") -> Kind:
    """Return what a path is, from its name (and the first line a new file adds)."""
    low = path.lower()
    name = posixpath.basename(low)
    parts = low.split("/")
    ext = posixpath.splitext(name)[1]
    if ext in _BINARY_EXTS:
        return "binary"
    if name in _LOCKS:
        return "lock"
    if any(part in _VENDOR_PARTS for part in parts[:-1]):
        return "vendored"
    if any(fnmatch.fnmatch(low, g) or fnmatch.fnmatch(name, g) for g in _GENERATED_GLOBS):
        return "generated"
    if _GENERATED_MARK.search(first_added):
        return "generated"
    if name in _MANIFESTS or any(fnmatch.fnmatch(name, g) for g in _MANIFEST_GLOBS):
        return "manifest"
    if any(fnmatch.fnmatch(low, g) for g in _CI_GLOBS):
        return "ci"
    if (
        name in _SCRIPT_NAMES
        or ext in _SCRIPT_EXTS
        or first_added.startswith("#!")
        or any(low.startswith(d) or f"/{d}" in low for d in _SCRIPT_DIRS)
    ):
        return "script"
    if ext in _CODE_EXTS:
        return "code"
    if ext in _DOC_EXTS or parts[0] in ("docs", "doc"):
        return "docs"
    return "config"


# --------------------------------------------------------------------------- parsing

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_GIT_HEADER = re.compile(r'^diff --git "?a/(.*?)"? "?b/(.*?)"?$')
FileStatus = Literal["added", "deleted", "modified", "renamed"]


@dataclass(frozen=True)
class Hunk:
    """One hunk: its header line and its body lines, each with its ``+ - space`` mark."""

    header: str
    lines: tuple[str, ...]
    start: int  # the first line in the new file (in the old one for a deletion)
    added: int
    removed: int


@dataclass(frozen=True)
class FileDiff:
    """One file's change: where it is, how it changed, and its hunks."""

    path: str
    old_path: str | None
    status: FileStatus
    binary: bool
    hunks: tuple[Hunk, ...]
    mode_change: str = ""

    @property
    def added(self) -> int:
        """Return the lines it adds."""
        return sum(h.added for h in self.hunks)

    @property
    def removed(self) -> int:
        """Return the lines it removes."""
        return sum(h.removed for h in self.hunks)


@dataclass
class _Building:
    path: str = ""
    old_path: str | None = None
    status: FileStatus = "modified"
    binary: bool = False
    old_mode: str = ""
    new_mode: str = ""
    hunks: list[Hunk] = field(default_factory=list)

    def done(self) -> FileDiff | None:
        if not self.path:
            return None
        moved = self.old_path if self.old_path and self.old_path != self.path else None
        status: FileStatus = "renamed" if moved and self.status == "modified" else self.status
        mode = f"{self.old_mode} → {self.new_mode}" if self.old_mode and self.new_mode else ""
        return FileDiff(self.path, moved, status, self.binary, tuple(self.hunks), mode)


def _strip_prefix(path: str) -> str:
    path = path.strip().strip('"').split("\t")[0]
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_diff(text: str) -> list[FileDiff]:
    """Return the files of a unified diff (git's format, or plain ``diff -u``).

    Hunk bodies are read by the counts in their headers, so a removed line that starts
    with ``--`` is never taken for a file header. Lines it does not understand are skipped.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    files: list[FileDiff] = []
    current = _Building()
    n = 0

    def finish() -> None:
        if (made := current.done()) is not None:
            files.append(made)

    while n < len(lines):
        line = lines[n]
        n += 1
        if line.startswith("diff "):
            finish()
            current = _Building()
            if found := _GIT_HEADER.match(line):
                current.old_path, current.path = found.group(1), found.group(2)
        elif line.startswith("--- ") and n < len(lines) and lines[n].startswith("+++ "):
            old, new = line[4:], lines[n][4:]
            n += 1
            if current.hunks:  # a plain `diff -u` of several files has no `diff` lines
                finish()
                current = _Building()
            if old.strip() == "/dev/null":
                current.status = "added"
            else:
                current.old_path = _strip_prefix(old)
            if new.strip() == "/dev/null":
                current.status = "deleted"
                current.path = current.old_path or current.path
            else:
                current.path = _strip_prefix(new)
        elif line.startswith("new file mode"):
            current.status = "added"
        elif line.startswith("deleted file mode"):
            current.status = "deleted"
        elif line.startswith("old mode "):
            current.old_mode = line[9:].strip()
        elif line.startswith("new mode "):
            current.new_mode = line[9:].strip()
        elif line.startswith("rename from "):
            current.old_path = line[12:]
        elif line.startswith("rename to "):
            current.path = line[10:]
        elif line.startswith(("Binary files ", "GIT binary patch")):
            current.binary = True
        elif found := _HUNK.match(line):
            old_left = int(found.group(2)) if found.group(2) is not None else 1
            new_left = int(found.group(4)) if found.group(4) is not None else 1
            start = int(found.group(3)) if new_left else int(found.group(1))
            body: list[str] = []
            added = removed = 0
            while n < len(lines) and (old_left > 0 or new_left > 0 or lines[n][:1] == "\\"):
                mark = lines[n][:1]
                if mark == "+":
                    new_left, added = new_left - 1, added + 1
                elif mark == "-":
                    old_left, removed = old_left - 1, removed + 1
                elif mark in (" ", ""):  # some tools strip a context line's lone space
                    old_left, new_left = old_left - 1, new_left - 1
                elif mark != "\\":  # `\ No newline at end of file` counts for neither
                    break
                body.append(lines[n] or " ")
                n += 1
            current.hunks.append(Hunk(line, tuple(body), start, added, removed))
    finish()
    return files

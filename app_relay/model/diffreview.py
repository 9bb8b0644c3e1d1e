"""The diff review: compress a pull request's diff into a token budget, ask the cheap model.

DESIGN section 5. The compression is pure (``parse_diff``, ``compress_diff``,
``diff_prompt``): manifests, CI files, scripts and code go in first; deletion-only hunks,
deleted files, and generated, vendored, lock and binary files are reduced to their names;
what does not fit is listed by name, and the prompt says so. ``read_standards`` reads the
standards files at base through a file reader the caller hands in. ``review_diff`` asks
the model through the port with one tool, ``post_advisory_review``, whose severity is
``info | warn``; the answer is clamped again here, so a diff review can never block: its
verdict is ``clean`` (or ``error`` when the model gave no usable answer), and its summary
says "diff review". Tokens are estimated with ``untrusted.estimate_tokens``.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from app_relay.decide.judge import with_model_words
from app_relay.decide.verdict import Finding, ModelUse, Severity, Verdict
from app_relay.model.port import ModelPort
from app_relay.model.tools import ADVISORY, ToolName, ask_for_review, review_tool
from app_relay.words.untrusted import ASCII_CHARS_PER_TOKEN, Fence, estimate_tokens, sanitise
from cujo_action.schema import Policy

Kind = Literal[
    "manifest", "ci", "script", "code", "config", "docs", "lock", "generated", "vendored",
    "binary",
]  # fmt: skip
# The order hunks are let in, most telling first; the other kinds are reduced to names.
PRIORITY: Final[tuple[Kind, ...]] = ("manifest", "ci", "script", "code", "config", "docs")
NAMED_ONLY: Final[frozenset[Kind]] = frozenset({"lock", "generated", "vendored", "binary"})
DIFF_RULE: Final = "diff-review"
DIFF_SEVERITIES: Final[tuple[Severity, ...]] = ("info", "warn")
# A hunk longer than this is cut into parts, so a long new file can be shown in part.
MAX_PIECE_LINES: Final = 120

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


# --------------------------------------------------------------------------- compression


@dataclass(frozen=True)
class Piece:
    """A hunk, or a part of a long one, as it may be shown: its id is what findings cite."""

    id: str
    path: str
    kind: Kind
    text: str
    tokens: int
    hunk: int  # which hunk of the diff (0-based), whatever part this is
    header: str  # the hunk's header, and which part this is


@dataclass(frozen=True)
class CompressedDiff:
    """The diff as the model will see it, and the account of what it does not show."""

    budget_tokens: int
    text: str  # the hunks shown, file by file, each headed by its id
    listing: str  # the files reduced to names and what was left out, one line each
    tokens: int  # estimate_tokens(text) + estimate_tokens(listing) <= budget_tokens
    shown: tuple[str, ...]  # ids of the pieces shown
    where: dict[str, str]  # each shown id: its file and hunk header, for the review body
    # Per kind: (hunks shown in full, hunks in all), for the kinds whose hunks can be shown.
    kept: dict[str, tuple[int, int]]
    named: tuple[tuple[str, str], ...]  # (path, why it is only named)
    left_out: tuple[tuple[str, int, int], ...]  # (path, hunks left out, hunks in all)
    files: int
    changed_lines: int

    def share_kept(self, kinds: Sequence[str]) -> float:
        """Return the share of the hunks of ``kinds`` shown in full (1.0 when there are none)."""
        shown = sum(self.kept.get(k, (0, 0))[0] for k in kinds)
        total = sum(self.kept.get(k, (0, 0))[1] for k in kinds)
        return shown / total if total else 1.0


def _why_named(diff: FileDiff, kind: Kind) -> str:
    if diff.binary or kind == "binary":
        return "binary"
    if kind in NAMED_ONLY:
        return kind
    if diff.status == "deleted":
        return f"deleted ({diff.removed} lines)"
    if not diff.hunks:
        moved = f"renamed from {diff.old_path}" if diff.old_path else ""
        mode = f"mode {diff.mode_change}" if diff.mode_change else ""
        return "; ".join(p for p in (moved, mode) if p) or "no content change"
    return ""


def _file_heading(diff: FileDiff, kind: Kind) -> str:
    extra: list[str] = [diff.status]
    if diff.old_path:
        extra.append(f"from {diff.old_path}")
    if diff.mode_change:
        extra.append(f"mode {diff.mode_change}")
    return _shown(f"### {diff.path} ({kind}; {', '.join(extra)}; +{diff.added} -{diff.removed})")


def _pieces(diff: FileDiff, kind: Kind, first: int, counter: list[int]) -> list[Piece]:
    pieces: list[Piece] = []
    for offset, hunk in enumerate(diff.hunks):
        if hunk.added == 0:
            continue  # deletion-only: named in the listing, never shown
        lines = [_shown(line) for line in hunk.lines]
        parts = [lines[i : i + MAX_PIECE_LINES] for i in range(0, len(lines), MAX_PIECE_LINES)]
        for n, part in enumerate(parts, start=1):
            counter[0] += 1
            pid = f"diff:hunk:{counter[0]}"
            of = f" (part {n} of {len(parts)})" if len(parts) > 1 else ""
            head = _shown(hunk.header)
            text = "\n".join([f"[{pid}]{of} {head}", *part])
            tokens = estimate_tokens(text) + 1
            piece = Piece(pid, diff.path, kind, text, tokens, first + offset, f"{head}{of}")
            pieces.append(piece)
    return pieces


def compress_diff(diff: str | Sequence[FileDiff], budget_tokens: int) -> CompressedDiff:
    """Return the diff cut to ``budget_tokens``: the most telling hunks, the rest named.

    Hunks of manifests, then CI files, scripts, code, other files and docs are let in,
    in that order, while they fit; a long hunk goes in by parts. The listing names every
    file reduced to its name and every file with hunks left out; when the listing itself
    would not fit, its tail is counted instead of named.
    """
    files = parse_diff(diff) if isinstance(diff, str) else list(diff)
    counter = [0]
    hunk_base = 0
    named: list[tuple[str, str]] = []
    pieces: list[Piece] = []
    headings: dict[str, str] = {}
    totals: dict[str, list[int]] = {}
    deletions: list[tuple[str, str]] = []
    for diff_file in files:
        first_added = next((h.lines[0][1:] for h in diff_file.hunks if h.lines
                            and h.lines[0].startswith("+") and h.start == 1), "")  # fmt: skip
        kind = kind_of(diff_file.path, first_added=first_added)
        why = _why_named(diff_file, kind)
        if why:
            named.append((diff_file.path, why))
        else:
            headings[diff_file.path] = _file_heading(diff_file, kind)
            mine = _pieces(diff_file, kind, hunk_base, counter)
            pieces.extend(mine)
            hunks = {p.hunk for p in mine}
            totals.setdefault(kind, [0, 0])[1] += len(hunks)
            gone = [h for h in diff_file.hunks if h.added == 0]
            if gone:
                removed = sum(h.removed for h in gone)
                deletions.append(
                    (diff_file.path, f"{len(gone)} deletion-only hunk(s) (-{removed} lines)")
                )
        hunk_base += len(diff_file.hunks)
    # The listing names each file at most once: keep room for that (at most a fifth).
    worst = _listing_lines(named, deletions, [(p, 999, 999) for p in headings])
    reserve = min(sum(estimate_tokens(line) + 1 for line in worst) + 60, budget_tokens // 5)
    room = budget_tokens - reserve
    chosen: set[str] = set()
    headed: set[str] = set()
    cut: set[int] = set()  # hunks a part of which did not fit: their later parts stay out
    for piece in sorted(pieces, key=lambda p: PRIORITY.index(p.kind)):
        heading = 0 if piece.path in headed else estimate_tokens(headings[piece.path]) + 1
        if piece.hunk not in cut and piece.tokens + heading <= room:
            chosen.add(piece.id)
            headed.add(piece.path)
            room -= piece.tokens + heading
        else:
            cut.add(piece.hunk)
    shown = [p for p in pieces if p.id in chosen]
    text_lines: list[str] = []
    last = ""
    for piece in shown:
        if piece.path != last:
            text_lines.append(headings[piece.path])
            last = piece.path
        text_lines.append(piece.text)
    text = "\n".join(text_lines)
    # A hunk counts as kept when every part of it is shown.
    by_hunk: dict[int, list[Piece]] = {}
    for piece in pieces:
        by_hunk.setdefault(piece.hunk, []).append(piece)
    kept_hunks = {h for h, parts in by_hunk.items() if all(p.id in chosen for p in parts)}
    for hunk, parts in by_hunk.items():
        if hunk in kept_hunks:
            totals[parts[0].kind][0] += 1
    left_out: list[tuple[str, int, int]] = []
    for path in headings:
        hunks_of = {p.hunk for p in pieces if p.path == path}
        missing = len(hunks_of - kept_hunks)
        if missing:
            left_out.append((path, missing, len(hunks_of)))
    listing = _listing(named, deletions, left_out, budget_tokens - estimate_tokens(text))
    return CompressedDiff(
        budget_tokens=budget_tokens,
        text=text,
        listing=listing,
        tokens=estimate_tokens(text) + estimate_tokens(listing),
        shown=tuple(p.id for p in shown),
        where={p.id: f"{_shown(p.path)} {p.header}" for p in shown},
        kept={k: (v[0], v[1]) for k, v in totals.items()},
        named=tuple(named),
        left_out=tuple(left_out),
        files=len(files),
        changed_lines=sum(f.added + f.removed for f in files),
    )


def _listing_lines(
    named: Sequence[tuple[str, str]],
    deletions: Sequence[tuple[str, str]],
    left_out: Sequence[tuple[str, int, int]],
) -> list[str]:
    lines = [f"- {_shown(p)}: reduced to its name ({_shown(why)})" for p, why in named]
    lines += [f"- {_shown(p)}: {why} reduced to a count" for p, why in deletions]
    lines += [
        f"- {_shown(p)}: {gone} of {total} hunk(s) left out (did not fit)"
        for p, gone, total in left_out
    ]
    return lines


def _shown(text: str) -> str:
    """Return diff text as the model sees it: hidden characters shown, not kept."""
    return sanitise(text, show_invisible=True)


def _listing(
    named: Sequence[tuple[str, str]],
    deletions: Sequence[tuple[str, str]],
    left_out: Sequence[tuple[str, int, int]],
    room: int,
) -> str:
    """Return one line per file not shown in full, as many as fit ``room``; count the rest."""
    lines = _listing_lines(named, deletions, left_out)
    kept: list[str] = []
    room -= 20  # the closing count below
    for n, line in enumerate(lines):
        cost = estimate_tokens(line) + 1
        if cost > room:
            kept.append(f"- and {len(lines) - n} more file(s) not shown in full")
            break
        kept.append(line)
        room -= cost
    return "\n".join(kept)


# --------------------------------------------------------------------------- standards

STANDARDS_FILES: Final = (
    "AGENTS.md",
    "CLAUDE.md",
    "CONTRIBUTING.md",
    ".github/copilot-instructions.md",
)
STANDARDS_CAP: Final = 6_000  # characters of each standards file shown


@dataclass(frozen=True)
class StandardsFile:
    """A standards file as read at base: its path, its text (capped) and its full size."""

    path: str
    text: str
    chars: int
    sha: str

    @property
    def cut(self) -> bool:
        """Return whether the text was cut to the cap."""
        return self.chars > len(self.text)


FileReader = Callable[[str, str], str | None]


def read_standards(
    read_file: FileReader, base_sha: str, *, cap: int = STANDARDS_CAP
) -> list[StandardsFile]:
    """Return the standards files that exist at ``base_sha``, each cut to ``cap`` characters.

    ``read_file(path, ref)`` returns a file's text at a ref, or None when it is not there
    (``functools.partial(gateway.file_at, repo)``). Never head: the pull request must not
    write the standards it is reviewed by (DESIGN section 11, invariant 3).
    """
    found = []
    for path in STANDARDS_FILES:
        text = read_file(path, base_sha)
        if text is not None:
            found.append(StandardsFile(path, text[:cap], len(text), base_sha))
    return found


# --------------------------------------------------------------------------- the prompt

DIFF_SYSTEM: Final = """You review a pull request's diff for Cujo before it is merged.
Say what a maintainer should know: risky or surprising changes (new dependencies,
install or build scripts, CI changes, network calls, credential handling, obfuscated or
encoded code, code that runs at import or install time), bugs, and departures from the
project's standards. You cannot block: call post_advisory_review once, with findings of
severity warn (look at this before merging) or info (worth knowing). Each finding cites
the ids of the hunks that show it, exactly as given ([diff:hunk:N]); never cite a hunk
that is not shown. The summary is two or three plain sentences. Parts of the diff may be
left out to fit; the prompt lists them, and you must not guess what they hold."""
_TOOL_DESCRIPTION: Final = (
    "Post the diff review as an advisory comment (it never holds the merge). Findings are "
    "info or warn and cite the hunk ids that show them."
)
MAX_TITLE_CHARS: Final = 300
MAX_BODY_CHARS: Final = 3_000
# The API's own system prompt for tool use with tool_choice `any` (313 tokens for Claude 4
# models, https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/overview#pricing),
# rounded up: it is billed as input, so it counts against the budget.
TOOL_USE_OVERHEAD: Final = 350
# The diff's headings and fence markers, and the line that says what was shown.
_FRAMING: Final = 200


@dataclass(frozen=True)
class DiffPrompt:
    """The system text and prompt of a diff review, and what they hold."""

    system: str
    prompt: str
    tools: tuple[dict[str, object], ...]
    compressed: CompressedDiff
    tokens: int  # estimate of system, prompt and tools together


def diff_tool() -> dict[str, object]:
    """Return the diff review's one tool: ``post_advisory_review``, severity info | warn."""
    return dict(review_tool(ADVISORY, DIFF_SEVERITIES, _TOOL_DESCRIPTION))


def diff_prompt(
    diff: str | Sequence[FileDiff],
    *,
    standards: Sequence[StandardsFile],
    budget_tokens: int,
    fence: Fence,
    title: str = "",
    body: str = "",
) -> DiffPrompt:
    """Return the prompt of a diff review, within ``budget_tokens`` all told.

    The pull request's title and body and the diff are fenced as data; the standards
    files, read at base, are the project's own words, each with its cap stated.
    """
    tools = (diff_tool(),)
    system = f"{DIFF_SYSTEM}\n\n{fence.rule()}"
    fixed = estimate_tokens(system) + estimate_tokens(json.dumps(tools)) + TOOL_USE_OVERHEAD
    # What is left after the fixed parts and the headings: a tenth at most for the pull
    # request's own words, a third at most for the standards, the rest for the diff.
    avail = max(budget_tokens - fixed - _FRAMING, 0)
    words = f"{sanitise(title)[:MAX_TITLE_CHARS]}\n\n{sanitise(body)[:MAX_BODY_CHARS]}".strip()
    said = [
        "Pull request title and description:",
        fence.wrap("pull request", head_within(words, avail // 10) or "(empty)"),
    ]
    share = avail // 3 // max(len(standards), 1)
    for std in standards:
        shown = head_within(sanitise(std.text, show_invisible=True), share)
        cap = f"capped at {STANDARDS_CAP:,} characters" + (
            f", cut to {len(shown):,} to fit the budget" if len(shown) < len(std.text) else ""
        )
        said += [
            "",
            f"=== {std.path}, read at base {std.sha[:12]} ({std.chars:,} characters; {cap}) ===",
            shown,
            f"=== end of {std.path} ===",
        ]
    if not standards:
        said += ["", f"No standards file ({', '.join(STANDARDS_FILES)}) exists at base."]
    head = "\n".join(said)
    room = budget_tokens - fixed - estimate_tokens(head) - _FRAMING
    compressed = compress_diff(diff, max(room, 0))
    parts = [
        head,
        "",
        f"The diff ({compressed.files} files, {compressed.changed_lines:,} changed lines), "
        f"compressed to fit {budget_tokens:,} tokens: {len(compressed.shown)} hunk(s) shown.",
        fence.wrap("diff", compressed.text or "(no hunk could be shown)"),
    ]
    if compressed.listing:
        parts += [
            "Not shown in full (reduced to names, deletion-only, or left out to fit):",
            fence.wrap("not shown", compressed.listing),
        ]
    prompt = "\n".join(parts)
    tokens = fixed + estimate_tokens(prompt)
    return DiffPrompt(system, prompt, tools, compressed, tokens)


def head_within(text: str, tokens: int) -> str:
    """Return the longest start of ``text`` that ``estimate_tokens`` puts within ``tokens``."""
    if estimate_tokens(text) <= tokens:
        return text
    if text.isascii():
        return text[: max(tokens, 0) * ASCII_CHARS_PER_TOKEN]
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


# --------------------------------------------------------------------------- the review


@dataclass(frozen=True)
class DiffReview:
    """A diff review's verdict and what it read."""

    verdict: Verdict
    prompt: DiffPrompt

    def evidence(self) -> dict[str, str]:
        """Return where each hunk the model could cite is, for the review body."""
        return dict(self.prompt.compressed.where)

    def ran(self) -> list[str]:
        """Return what ran, one line each, for the review body."""
        c = self.prompt.compressed
        use = self.verdict.model_use
        return [
            f"diff review by {use.model if use else 'the model'} of {c.files} files "
            f"({c.changed_lines:,} changed lines): {len(c.shown)} hunk(s) shown, "
            f"{len(c.named)} file(s) reduced to names, {len(c.left_out)} with hunks left "
            f"out to fit {c.budget_tokens:,} tokens"
        ]


def review_diff(
    port: ModelPort,
    *,
    diff: str,
    standards: Sequence[StandardsFile],
    policy: Policy,
    title: str = "",
    body: str = "",
    asks: int = 2,
) -> DiffReview:
    """Ask the diff model for an advisory review of ``diff``; return the verdict.

    The verdict is ``clean`` (advisory, findings at most ``warn``) or, when the model gave
    no usable answer, ``error``; never ``blocked``.
    """
    built = diff_prompt(
        diff,
        standards=standards,
        budget_tokens=policy.model.budget_tokens,
        fence=Fence.new(),
        title=title,
        body=body,
    )
    offered: dict[ToolName, Sequence[Severity]] = {ADVISORY: DIFF_SEVERITIES}
    asked = ask_for_review(
        port,
        model=policy.model.diff,
        system=built.system,
        prompt=built.prompt,
        offered=offered,
        descriptions={ADVISORY: _TOOL_DESCRIPTION},
        known=built.compressed.shown,
        asks=asks,
        deadline=port.deadline(),
    )
    c = built.compressed
    account = (
        f"{len(c.shown)} hunk(s) of {c.files} file(s) read"
        + (f", {len(c.named)} file(s) reduced to names" if c.named else "")
        + (f", {len(c.left_out)} file(s) with hunks left out to fit" if c.left_out else "")
    )
    if asked.accepted is None:
        use = asked.use or ModelUse(model=policy.model.diff, outcome="error", detail=asked.why_not)
        why = asked.why_not.strip().rstrip(".") or "no reason was given"
        verdict = Verdict(
            state="error",
            summary=(
                f"Cujo could not finish this diff review: the model gave no usable answer "
                f"({why}). This says nothing about the pull request itself."
            ),
            judge="model",
            model_use=use,
        )
        return DiffReview(verdict, built)
    assert asked.use is not None
    findings = [
        Finding(
            id=f"F{n}",
            rule=DIFF_RULE,
            # The tool offers info and warn; ``read_reply`` lowered anything higher.
            severity="warn" if p.severity != "info" else "info",
            check="diff",
            title=p.title,
            evidence=list(dict.fromkeys(p.evidence)),
        )
        for n, p in enumerate(asked.accepted.call.findings, start=1)
    ]
    warn = sum(1 for f in findings if f.severity == "warn")
    lead = (
        f"Diff review by {asked.use.model} (advisory; a diff review never blocks): "
        f"{warn} warning(s), {len(findings) - warn} note(s); {account}."
    )
    verdict = Verdict(
        state="clean",
        summary=with_model_words(lead, "The model said:", asked.accepted.call.summary),
        findings=findings,
        judge="model",
        model_use=asked.use,
    )
    return DiffReview(verdict, built)

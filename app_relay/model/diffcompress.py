"""Compress a parsed diff into a token budget: the most telling hunks in, the rest named.

docs/design.md section 5. Pure. Manifests, CI files, scripts and executable code go in first;
deletion-only hunks, deleted files, and generated, vendored, lock and binary files are
reduced to their names; what does not fit is listed by name, so the prompt can say what
was left out. Tokens are estimated with ``untrusted.estimate_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from app_relay.model.diffparse import FileDiff, Kind, kind_of, parse_diff
from app_relay.words.untrusted import estimate_tokens, sanitise

# The order hunks are let in, most telling first; the other kinds are reduced to names.
PRIORITY: Final[tuple[Kind, ...]] = ("manifest", "ci", "script", "code", "config", "docs")
NAMED_ONLY: Final[frozenset[Kind]] = frozenset({"lock", "generated", "vendored", "binary"})
# A hunk longer than this is cut into parts, so a long new file can be shown in part.
MAX_PIECE_LINES: Final = 120


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

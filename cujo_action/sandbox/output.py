"""Capture what a pull-request command prints: keep its tail, search all of it for decoys.

A project's CI log is public, so printing a secret is exfiltration without a network:
tj-actions/changed-files (2025) printed the runner's secrets, base64 twice, into the
log. Everything a command writes, up to ``limits.OUTPUT_FLOOD`` (past which it is
killed), is searched with the decoys' own matcher (``find/matcher.DecoyMatcher``: every
encoding ``unwrap`` undoes), as it arrives, in windows of ``WINDOW`` bytes; the report
keeps only the last ``limits.OUTPUT_TAIL`` characters of each stream.

Windows overlap by ``OVERLAP`` bytes, and each cut is put where it splits nothing that
could be decoded: after a byte outside every encoding's alphabet (a space, a quote, a
newline) or, inside one long run of such an alphabet (``base64 -w0``), at a multiple
of ``ALIGN`` from the run's start, so each window decodes the run as its encoder
aligned it, nested layers included. Anything up to ``OVERLAP`` long lies whole in one
window. Each byte is searched at most twice: the search is linear in the output.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from cujo_action.limits import OUTPUT_FLOOD, OUTPUT_TAIL

# A command's two streams, or a file it wrote that the runner reads (``filecommands.py``).
Stream = Literal["stdout", "stderr", "file"]

WINDOW: Final = 1 << 20
OVERLAP: Final = 64 << 10
# How far back from a nominal cut a separator is looked for.
SLACK: Final = 16 << 10
# 4096 = 2^12: a multiple of base64's 4 and base32's 8 (and hex's 2) at every depth
# unwrap peels (4096 → 3072 → 2304 → 1728 → 1296 for base64, → 2560 → 1600 → 1000 for
# base32), so a window starting there decodes each nested layer at its own alignment.
ALIGN: Final = 4096
_READ: Final = 65536
# Bytes a run of base64, base32 or hex (wrapped by a literal ``\n`` or not) may hold; a
# cut after any other byte splits no run.
_RUN_BYTES: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-\\"
_SEPARATOR: Final = bytes(0 if b in _RUN_BYTES else 1 for b in range(256))


class Matcher(Protocol):
    """What the search needs of ``find/matcher.DecoyMatcher``."""

    @property
    def exhausted(self) -> bool:
        """Return whether the last search ran out of budget."""
        ...

    def find(self, data: bytes, *, fold_case: bool = False) -> list[tuple[str, str]]:
        """Return (decoy name, encoding) for each decoy found in ``data``."""
        ...


@dataclass(frozen=True)
class Printed:
    """A decoy found in what a command printed: which, how encoded, on which stream."""

    name: str
    encoding: str
    stream: Stream


def _last_separator(data: bytes | bytearray, start: int, end: int) -> int:
    """Return the index of the last separator in ``data[start:end]``, or -1."""
    found = bytes(data[start:end]).translate(_SEPARATOR).rfind(b"\x01")
    return -1 if found < 0 else start + found


class OutputSearch:
    """Search one stream for decoys as it arrives, window by window, in linear time.

    ``lock`` serialises searches that share one matcher (its ``exhausted`` is per call).
    """

    def __init__(
        self,
        matcher: Matcher,
        stream: Stream,
        lock: threading.Lock,
        *,
        window: int = WINDOW,
        overlap: int = OVERLAP,
    ) -> None:
        """Prepare to search ``stream`` with ``matcher`` in windows of ``window`` bytes."""
        if not 2 * SLACK <= overlap <= window // 2:
            raise ValueError(f"overlap {overlap} must be within [{2 * SLACK}, {window // 2}]")
        self._matcher, self.stream, self._lock = matcher, stream, lock
        self._window, self._overlap = window, overlap
        self._buf = bytearray()
        self._base = 0  # the stream offset of _buf[0]
        self._searched_to = 0  # stream offset up to which every byte was searched
        # Where the run of encoded bytes that reaches _buf[0] began (stream offset).
        self._origin = 0
        self.found: dict[tuple[str, str], None] = {}
        self.unsearched = 0  # bytes in windows whose decoding ran out of budget
        self.searched = 0  # bytes in the stream searched

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream; search every window they complete."""
        self._buf += chunk
        while len(self._buf) >= self._window + SLACK:
            cut = self._cut(self._window)
            self._search(cut)
            start = self._cut(cut - self._overlap)
            self._advance(start)

    def close(self) -> None:
        """Search what is left of the stream."""
        if self._base + len(self._buf) > self._searched_to:
            self._search(len(self._buf))
        self._advance(len(self._buf))

    def _run_start(self, at: int) -> int:
        """Return where the run of encoded bytes reaching ``at`` starts (a buffer index)."""
        sep = _last_separator(self._buf, 0, at)
        return sep + 1 if sep >= 0 else self._origin - self._base

    def _cut(self, nominal: int) -> int:
        """Return a buffer index near ``nominal`` (never after it) that splits no run
        of encoded bytes, or, inside a long run, one aligned to the run's start."""
        sep = _last_separator(self._buf, max(nominal - SLACK, 0), nominal)
        if sep >= 0:
            return sep + 1
        run = self._run_start(nominal)
        return run + (nominal - run) // ALIGN * ALIGN

    def _search(self, end: int) -> None:
        window = bytes(self._buf[:end])
        with self._lock:
            hits = self._matcher.find(window)
            exhausted = self._matcher.exhausted
        for hit in hits:
            self.found.setdefault(hit, None)
        fresh = self._base + end - max(self._searched_to, self._base)
        if exhausted:
            self.unsearched += fresh
        self.searched += fresh
        self._searched_to = max(self._searched_to, self._base + end)

    def _advance(self, start: int) -> None:
        """Drop the buffer before ``start``, remembering where a run through it began."""
        if start <= 0:
            return
        self._origin = self._base + self._run_start(start)
        del self._buf[:start]
        self._base += start

    def printed(self) -> list[Printed]:
        """Return the decoys found so far, in the order first found."""
        return [Printed(name, encoding, self.stream) for name, encoding in list(self.found)]


def search_whole(matcher: Matcher, data: bytes) -> tuple[list[tuple[str, str]], int]:
    """Search ``data`` (a whole file) as output is searched: return (decoy name, encoding)
    for each decoy found, in order, and how many bytes decoding left unsearched."""
    search = OutputSearch(matcher, "file", threading.Lock())
    search.feed(data)
    search.close()
    return list(search.found), search.unsearched


_ANSI: Final = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")


class LineKeeper:
    """Keep the lines of a stream that match ``pattern``, from all of it as it arrives
    (not only the tail): a test runner names each failing test on a line of its own, and
    a thousand failures outrun any tail. At most ``limit`` lines of at most ``width``
    bytes are kept; ``dropped`` counts the matching lines past the limit.

    ``pattern`` matches a line with the newline before it (``\\n…[^\\n]*``): a pattern
    that starts with a literal is searched for at C speed (five times faster than a
    ``^`` in multiline mode, which is tried at every byte); every line is given one."""

    def __init__(self, pattern: re.Pattern[bytes], limit: int = 400, width: int = 400) -> None:
        self._pattern = pattern
        self._limit = limit
        self._width = width
        self._carry = b""
        self.lines: list[str] = []
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        data = self._carry + chunk
        cut = data.rfind(b"\n") + 1
        # A line longer than the width keeps its start: the runners' marks are there.
        self._carry = data[cut:][: self._width]
        self._take(data[:cut])

    def close(self) -> None:
        self._take(self._carry)
        self._carry = b""

    def _take(self, whole: bytes) -> None:
        if not whole:
            return
        text = _ANSI.sub(b"", whole) if b"\x1b" in whole else whole
        for match in self._pattern.finditer(b"\n" + text):
            if len(self.lines) >= self._limit:
                self.dropped += 1
                continue
            line = match.group(0).lstrip(b"\n")[: self._width]
            self.lines.append(line.decode("utf-8", "replace").rstrip())


class Capture:
    """Drain a pipe in a thread: keep its tail, count it, search it (when asked), keep
    the lines a ``LineKeeper`` asks for."""

    def __init__(
        self,
        pipe: object,
        on_flood: threading.Event,
        search: OutputSearch | None = None,
        keep: LineKeeper | None = None,
    ) -> None:
        """Start draining ``pipe``; set ``on_flood`` past ``limits.OUTPUT_FLOOD`` bytes."""
        self._pipe = pipe
        self._on_flood = on_flood
        self.search = search
        self.keep = keep
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        read = self._pipe.read1  # type: ignore[attr-defined]
        try:
            while chunk := read(_READ):
                self.total += len(chunk)
                self.tail += chunk
                if len(self.tail) > 2 * OUTPUT_TAIL:
                    del self.tail[: len(self.tail) - OUTPUT_TAIL]
                if self.search is not None:
                    self.search.feed(chunk)
                if self.keep is not None:
                    self.keep.feed(chunk)
                if self.total > OUTPUT_FLOOD:
                    # Stop reading: the writer blocks (or dies of SIGPIPE) until it is killed.
                    self._on_flood.set()
                    break
        finally:
            self._pipe.close()  # type: ignore[attr-defined]
            if self.search is not None:
                self.search.close()
            if self.keep is not None:
                self.keep.close()

    def text(self) -> str:
        """Return the tail, as text."""
        return bytes(self.tail[-OUTPUT_TAIL:]).decode("utf-8", "replace")[-OUTPUT_TAIL:]

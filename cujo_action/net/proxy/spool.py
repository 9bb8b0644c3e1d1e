"""Spool a request body to the proxy's own disk as it arrives, then search it in windows.

The proxy never holds a request body in memory: mitmproxy streams it (``proxyaddon``) to a
``Spool``, a file in a directory only the proxy's user can open (made 0700 inside its
confdir, which the sandbox never sees). Past ``limits.BODY_SIZE`` nothing more is stored:
the rest is counted and the body is named unsearched.

``search_spool`` reads the file back. A body up to ``WINDOW`` is read whole and searched
as any part of a request is (``request.scan``). A larger one is searched window by window,
each overlapping the next by more than any decoy's longest encoding, and what a window
cannot show whole is taken from the file as a whole:

* ``Content-Encoding`` is undone streaming from the file (capped at ``INFLATE_SIZE``) and
  the decoded body is what is windowed;
* an encoded run (base64, hex, base32) reaching a window's end starts the next window, so
  a run up to half a window is always decoded whole; a longer one is searched in pieces,
  and the body is named unsearched (a compressed stream inside it would be lost);
* a compressed stream that starts in a window and runs past it is inflated from the file
  at its offset (capped) and its output searched in windows too.

Each window is one input to the matcher, with the whole decode budget
(``limits.DECODE_BUDGET``): its decodings are dropped before the next window is read, so
the proxy holds one window and its decodings at a time.
"""

from __future__ import annotations

import bz2
import contextlib
import lzma
import os
import re
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cujo_action.find.inflate import MAX_STREAMS, STREAM_START, decode_content, magic, starts_stream
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.limits import BODY_SIZE, INFLATE_SIZE, MiB

# What is searched at once: a body up to it whole (as any part), a larger one in windows.
WINDOW = 16 * MiB
# Bytes read from the file at a time.
READ = 1 * MiB
# Output pieces of a streaming decompressor, and input fed to one that has no output cap.
_PIECE = 1 * MiB
_UNCAPPED_INPUT = 8
# What may continue an encoded run across a window's end (wrapped lines included).
_RUN_BYTE = re.compile(rb"[A-Za-z0-9+/=_\\\r\n-]")
_RUN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-\\\r\n")
OVER_LIMIT_REASON = f"body over the proxy's limit of {BODY_SIZE // MiB} MiB"


class Spool:
    """One request body written to a file of the proxy's own as it arrives."""

    def __init__(self, directory: Path, cap: int = BODY_SIZE) -> None:
        """Open a new file in ``directory`` (the proxy's, 0700); store up to ``cap`` bytes."""
        fd, name = tempfile.mkstemp(dir=directory, prefix="body-")
        self.path = Path(name)
        self._fd = fd
        self.cap = cap
        self.stored = 0  # bytes in the file
        self.received = 0  # bytes the client sent, stored or not
        self.streamed = False  # mitmproxy streamed the body here (its hook was called)

    @property
    def over(self) -> bool:
        """Return whether the client sent more than was stored."""
        return self.received > self.stored

    def feed(self, chunk: bytes) -> None:
        """Store a chunk (what fits under the cap) and count it all."""
        self.received += len(chunk)
        room = self.cap - self.stored
        if room > 0 and chunk and self._fd >= 0:
            kept = chunk[:room]
            os.write(self._fd, kept)
            self.stored += len(kept)

    def close(self) -> None:
        """Close the file, keeping it to be searched."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)


def spool_dir(confdir: Path) -> Path:
    """Return the proxy's directory for spooled bodies, made 0700 inside its confdir."""
    path = Path(confdir) / "spool"
    # The confdir is the proxy's own (root's, made before any pull-request code ran);
    # still, what stands at the name must be a folder of this process's, never a link.
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{path} is not a folder of the proxy's own")
    os.chmod(path, 0o700)
    return path


@dataclass
class BodySearch:
    """What the search of one spooled body found, and what it could not search."""

    seen: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)  # "body:<encoding>"
    unsearched: str = ""
    opaque: bool = False
    whole: bytes | None = None  # the body as read (decoded), when it was read whole

    def add(self, found: list[tuple[str, str]], prefix: str = "") -> None:
        for name, encoding in found:
            if name not in self.seen:
                self.seen.append(name)
            place = f"body:{prefix}{encoding}" if not prefix or encoding != "plain" else ""
            place = place or f"body:{prefix.rstrip('+')}"
            if place not in self.where:
                self.where.append(place)

    def cut(self, reason: str) -> None:
        if not self.unsearched:
            self.unsearched = f"body: {reason}"


def file_chunks(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """Yield a file's bytes from ``start`` to ``end`` a read at a time."""
    with path.open("rb") as fh:
        fh.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = fh.read(READ if left is None else min(READ, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk


class _Inflater:
    """A streaming decompressor whose output comes in bounded pieces."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.eof = False
        self._obj: Any = None
        if kind in ("gzip", "zlib", "deflate"):
            self._obj = zlib.decompressobj({"gzip": 31, "zlib": 15, "deflate": -15}[kind])
        elif kind == "bzip2":
            self._obj = bz2.BZ2Decompressor()
        elif kind == "xz":
            self._obj = lzma.LZMADecompressor()
        elif kind == "zstd":
            import zstandard  # noqa: PLC0415 (the proxy's own dependency, through mitmproxy)

            self._obj = zstandard.ZstdDecompressor().decompressobj()
        elif kind == "brotli":
            import brotli  # noqa: PLC0415

            self._obj = brotli.Decompressor()
        else:
            raise ValueError(kind)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Yield what ``data`` inflates to; raise ValueError if it is not this kind."""
        try:
            yield from self._feed(data)
        except (zlib.error, OSError, EOFError, lzma.LZMAError) as exc:
            raise ValueError(str(exc)) from exc
        except Exception as exc:  # zstandard's and brotli's errors
            raise ValueError(str(exc)) from exc

    def _feed(self, data: bytes) -> Iterator[bytes]:
        obj = self._obj
        if self.kind in ("gzip", "zlib", "deflate"):
            while data and not self.eof:
                out = obj.decompress(data, _PIECE)
                data = obj.unconsumed_tail
                if obj.eof:
                    rest = obj.unused_data
                    # gzip allows members one after another.
                    if self.kind == "gzip" and rest[:2] == b"\x1f\x8b":
                        self._obj = obj = zlib.decompressobj(31)
                        data = rest
                    else:
                        self.eof = True
                if out:
                    yield out
        elif self.kind in ("bzip2", "xz"):
            out = obj.decompress(data, _PIECE)
            if out:
                yield out
            while not obj.eof and not obj.needs_input:
                out = obj.decompress(b"", _PIECE)
                if not out:
                    break
                yield out
            self.eof = obj.eof
        else:
            # No output cap in these: fed a few bytes at a time, so one call's output
            # stays small whatever the stream says.
            step = _UNCAPPED_INPUT if self.kind == "brotli" else 64
            for at in range(0, len(data), step):
                piece = data[at : at + step]
                out = obj.process(piece) if self.kind == "brotli" else obj.decompress(piece)
                if out:
                    yield out
            self.eof = obj.is_finished() if self.kind == "brotli" else bool(obj.eof)


def inflating(
    chunks: Iterator[bytes], kind: str, cap: int, cut: Callable[[str], None]
) -> Iterator[bytes]:
    """Yield up to ``cap`` bytes of ``chunks`` inflated as ``kind`` (ValueError: not one)."""
    inflater = _Inflater(kind)
    out = 0
    for chunk in chunks:
        for piece in inflater.feed(chunk):
            if out + len(piece) >= cap:
                yield piece[: cap - out]
                cut(f"a {kind} stream inflating past {cap // MiB} MiB")
                return
            out += len(piece)
            yield piece
        if inflater.eof:
            return


_CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "zlib", "br": "brotli", "zstd": "zstd"}


def _content_decoded(path: Path, coding: str, cut: Callable[[str], None]) -> Iterator[bytes] | None:
    """Return a body's bytes with its Content-Encoding undone, streaming; None if it cannot."""
    kinds = [t.strip().lower() for t in coding.split(",") if t.strip()]
    kinds = [k for k in kinds if k != "identity"]
    if not kinds or any(k not in _CODINGS for k in kinds):
        return None
    # Each coding must start a stream: tried on the file's head (undone in order).
    source: Iterator[bytes] = file_chunks(path)
    for coding_name in reversed(kinds):
        kind = _CODINGS[coding_name]
        source = inflating(source, kind, INFLATE_SIZE, cut)
    try:
        first = next(source, b"")
    except ValueError:
        if kinds[-1] == "deflate" and len(kinds) == 1:  # deflate sent raw
            raw = inflating(file_chunks(path), "deflate", INFLATE_SIZE, cut)
            try:
                first = next(raw, b"")
            except ValueError:
                return None
            return _prepend(first, raw)
        return None
    return _prepend(first, source)


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    with contextlib.suppress(ValueError):  # a stream cut short: what came out is kept
        yield from rest


def _run_start(window: bytes | bytearray, end: int, limit: int) -> int:
    """Return where the encoded run that reaches ``end`` starts (``end``: no run), looking
    back at most ``limit`` bytes (``end - limit``: it starts further back)."""
    at = end
    stop = max(end - limit, 0)
    while at > stop and window[at - 1] in _RUN_BYTES:
        at -= 1
    return at


def _stream_ends_within(kind: str, data: memoryview) -> bool:
    """Return whether the compressed stream at the start of ``data`` ends inside it (or
    inflates past the cap there, which the window's own search names)."""
    inflater = _Inflater(kind)
    out = 0
    try:
        for at in range(0, len(data), READ):
            for piece in inflater.feed(bytes(data[at : at + READ])):
                out += len(piece)
                if out >= INFLATE_SIZE:
                    return True
            if inflater.eof:
                return True
    except ValueError:
        return True  # not a stream past its head: nothing runs on
    return False


@dataclass
class _Walk:
    """One body's windowed search: its matcher, results, and the streams taken whole."""

    matcher: DecoyMatcher
    judge: bool
    overlap: int
    window: int = WINDOW
    result: BodySearch = field(default_factory=BodySearch)
    opaque_all: bool = True
    windows: int = 0
    streams: int = 0

    def search(
        self,
        chunks: Iterator[bytes],
        prefix: str = "",
        path: Path | None = None,
        depth: int = 0,
    ) -> None:
        """Search ``chunks`` window by window (``path``: the file they are, when raw)."""
        buf = bytearray()
        base = 0  # offset of buf[0] in the source
        done = False
        source = iter(chunks)
        while not done:
            while len(buf) < self.window:
                try:
                    chunk = next(source)
                except StopIteration:
                    done = True
                    break
                except ValueError:  # a decoded source cut short
                    done = True
                    break
                buf += chunk
            if not buf:
                return
            window = bytes(buf[: self.window]) if len(buf) > self.window else bytes(buf)
            self._search_window(window, prefix)
            if path is not None and depth == 0:
                self._whole_streams(window, base, path, prefix)
            elif depth > 0 or path is None:
                self._note_crossing_streams(window, done and len(buf) <= self.window)
            if done and len(buf) <= self.window:
                return
            # The next window starts a decoy's length back, or where an encoded run that
            # reaches this one's end starts, if that is within half a window.
            end = len(window)
            carry = end - self.overlap
            run = _run_start(window, end, self.window // 2)
            if run < end and window[end - 1 : end] != b"" and _RUN_BYTE.match(window[end - 1 :]):
                if run > end - self.window // 2:
                    carry = min(carry, run)
                else:
                    self.result.cut(
                        f"an encoded run over {self.window // 2:,} bytes was searched in pieces"
                    )
            del buf[:carry]
            base += carry

    def _search_window(self, window: bytes, prefix: str) -> None:
        self.windows += 1
        found = self.matcher.find(window, judge_opacity=self.judge and not prefix)
        self.result.add(found, prefix)
        if self.matcher.unsearched:
            self.result.cut(self.matcher.unsearched)
        if self.judge and not prefix:
            self.opaque_all = self.opaque_all and self.matcher.opaque

    def _stream_starts(self, window: bytes) -> Iterator[tuple[int, str]]:
        view = memoryview(window)
        offsets = [0] if magic(window[:16]) is not None else []
        offsets += [m.start() for m in STREAM_START.finditer(window, 1)]
        for offset in offsets:
            kind = magic(bytes(view[offset : offset + 16]))
            if kind is not None and starts_stream(kind, view[offset : offset + 512]):
                yield offset, kind

    def _whole_streams(self, window: bytes, base: int, path: Path, prefix: str) -> None:
        """Inflate from the file each stream that starts here and runs past the window."""
        view = memoryview(window)
        for offset, kind in self._stream_starts(window):
            if offset >= len(window) - self.overlap and len(window) == self.window:
                continue  # starts in the overlap: the next window holds its start
            if _stream_ends_within(kind, view[offset:]):
                continue  # the window's own search inflated it whole
            if self.streams == MAX_STREAMS:
                self.result.cut(f"more than {MAX_STREAMS} compressed streams past a window")
                return
            self.streams += 1
            inner = inflating(file_chunks(path, base + offset), kind, INFLATE_SIZE, self.result.cut)
            self.search(_prepend(b"", inner), prefix=f"{prefix}{kind}+", depth=1)

    def _note_crossing_streams(self, window: bytes, last: bool) -> None:
        """Name a compressed stream that runs past a window of decoded bytes (not re-read)."""
        if last:
            return
        view = memoryview(window)
        for offset, kind in self._stream_starts(window):
            if not _stream_ends_within(kind, view[offset:]):
                self.result.cut(f"a {kind} stream inside decoded bytes runs past a window")
                return


def search_spool(
    matcher: DecoyMatcher,
    spool: Spool,
    coding: str | None,
    *,
    judge: bool,
    overlap: int,
    scan_whole: Callable[[bytes], tuple[list[str], list[str], str, bool]],
    window: int = WINDOW,
) -> BodySearch:
    """Search a spooled body (``coding``: its Content-Encoding); ``scan_whole`` searches a
    body read whole, as any part of a request is searched; larger bodies are searched in
    windows of ``window`` bytes."""
    result: BodySearch
    if spool.stored <= window:
        raw = spool.path.read_bytes()
        decoded = decode_content(raw, coding) if coding else None
        data = raw if decoded is None else decoded
        if len(data) <= window:
            seen, where, unsearched, opaque = scan_whole(data)
            result = BodySearch(seen, where, unsearched, opaque, data)
            if spool.over:
                result.unsearched = OVER_LIMIT_REASON
            return result
        del raw, decoded, data
    walk = _Walk(matcher, judge, overlap, window=window)
    decoded_source = _content_decoded(spool.path, coding, walk.result.cut) if coding else None
    if decoded_source is not None:
        walk.search(decoded_source)
    else:
        walk.search(file_chunks(spool.path), path=spool.path)
    walk.result.opaque = judge and walk.windows > 0 and walk.opaque_all
    if spool.over:
        walk.result.unsearched = OVER_LIMIT_REASON
    return walk.result

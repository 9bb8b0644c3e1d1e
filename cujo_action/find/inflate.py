"""Inflate compressed streams within a cap: found by their magic, guessed, or as sent.

gzip, zlib, bzip2, xz and zstd are found at any offset of a layer by their magic; raw
deflate and brotli, which have none, are tried on binary bytes; a body's
``Content-Encoding`` is undone by name. Every decompression stops at ``INFLATE_CAP`` bytes
out (``limits.INFLATE_SIZE``) and says whether the stream ended before it.
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from collections.abc import Callable, Iterator

from cujo_action.limits import INFLATE_SIZE

INFLATE_CAP = INFLATE_SIZE
# Compressed streams found by their magic inside one layer, inflated each (a magic that
# does not start a valid stream costs one short trial and is not counted).
MAX_STREAMS = 64
_TRIAL = 512  # input bytes a magic's stream must decompress without error to count
_BROTLI_STEP = 8  # input bytes per call: brotli has no output cap, so feed it slowly
PRINTABLE_BYTES = bytes([9, 10, 13, *range(0x20, 0x7F)])


def magic(data: bytes) -> str | None:
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if data[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if _BZIP2.match(data):
        return "bzip2"
    # RFC 1950: deflate (CM 8), a window of at most 32 KiB (CINFO <= 7), FCHECK.
    if (
        len(data) >= 2
        and data[0] & 0x0F == 8
        and data[0] >> 4 <= 7
        and (data[0] << 8 | data[1]) % 31 == 0
    ):
        return "zlib"
    return None


# Where a compressed stream may start inside a layer. zlib's two header bytes are looked
# for in the forms its levels write (78 01/5e/9c/da); at offset 0 any valid header counts.
STREAM_START = re.compile(
    rb"\x1f\x8b\x08|\x28\xb5\x2f\xfd|\xfd7zXZ\x00|BZh[1-9](?:1AY&SY|\x17rE8P\x90)|\x78[\x01\x5e\x9c\xda]"
)
_BZIP2 = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")


def streams(
    data: bytes, cap: int = INFLATE_CAP, cut: Callable[[str], None] | None = None
) -> Iterator[tuple[str, bytes, bool]]:
    """Yield (kind, what it inflates to, whether it ended) for each stream found by magic.

    At any offset: text or another stream before it hides nothing. A magic whose bytes do
    not start a stream costs a short trial; past ``MAX_STREAMS`` real ones, ``cut`` hears.
    """
    view = memoryview(data)
    found = 0
    offsets = [0] if magic(data) is not None else []
    offsets += [m.start() for m in STREAM_START.finditer(data, 1)]
    for offset in offsets:
        kind = magic(bytes(view[offset : offset + 16]))
        if kind is None or not starts_stream(kind, view[offset : offset + _TRIAL]):
            continue
        if found == MAX_STREAMS:
            if cut is not None:
                cut(f"more than {MAX_STREAMS} compressed streams in one layer")
            return
        found += 1
        result = _decompress(kind, view[offset:], cap, whole=False)
        if result is not None and result[0]:
            yield kind, result[0], result[1]


def starts_stream(kind: str, head: memoryview) -> bool:
    """Return whether ``head`` decompresses as ``kind`` without an error, as far as it goes."""
    try:
        if kind in ("gzip", "zlib"):
            zlib.decompressobj(31 if kind == "gzip" else 15).decompress(head, 1 << 16)
        elif kind == "bzip2":
            bz2.BZ2Decompressor().decompress(head, 1 << 16)
        elif kind == "xz":
            lzma.LZMADecompressor().decompress(head, 1 << 16)
        return True
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
        return False


def guesses(data: bytes, cap: int) -> list[tuple[str, bytes]]:
    """Return (kind, inflated) for each stream without a magic a binary layer reads as
    (raw deflate and brotli both: one reading by chance must not hide the other)."""
    if len(data) < 16 or not is_binary(data):
        return []
    found = []
    for tried in ("deflate", "brotli"):
        result = _decompress(tried, data, cap, whole=True)
        if result is not None and result[0]:
            found.append((tried, result[0]))
    return found


def guess(data: bytes, cap: int) -> tuple[str, bytes] | None:
    """Return the first stream without a magic a binary layer reads as, if any."""
    return next(iter(guesses(data, cap)), None)


def is_binary(data: bytes) -> bool:
    sample = data[:512]
    return bool(sample) and len(sample.translate(None, PRINTABLE_BYTES)) > 0.15 * len(sample)


def inflate(
    data: bytes, cap: int = INFLATE_CAP, hint: str | None = None
) -> tuple[str, bytes] | None:
    """Return (kind, what it inflates to, capped) if ``data`` is a compressed stream."""
    kind = hint or magic(data)
    if kind is None:
        return guess(data, cap)
    result = _decompress(kind, data, cap, whole=False)
    return (kind, result[0]) if result is not None and result[0] else None


def _decompress(
    kind: str, data: bytes | memoryview, cap: int, *, whole: bool
) -> tuple[bytes, bool] | None:
    """Return (up to ``cap`` bytes of ``data`` decompressed as ``kind``, whether the
    stream ended before the cap), or None if it is not one.

    ``whole``: the stream must end cleanly (a guess without a magic is kept only then).
    """
    try:
        if kind in ("gzip", "zlib", "deflate"):
            return _zlib(kind, data, cap, whole)
        if kind == "zstd":
            return _zstd(data, cap)
        if kind == "brotli":
            return _brotli(data, cap, whole)
        if kind in ("bzip2", "xz"):
            return _stdlib(kind, data, cap)
    except Exception:
        return None
    return None


def _zlib(kind: str, data: bytes | memoryview, cap: int, whole: bool) -> tuple[bytes, bool] | None:
    wbits = {"gzip": 31, "zlib": 15, "deflate": -15}[kind]
    out = bytearray()
    rest: bytes | memoryview = data
    while rest and len(out) < cap:
        stream = zlib.decompressobj(wbits)
        out += stream.decompress(rest, cap - len(out))
        if not stream.eof:
            # Cut short (the cap, or a truncated stream): keep what came out.
            if whole and len(out) < cap:
                return None
            return bytes(out), len(out) < cap
        # gzip allows members one after another; anything else after the end is not ours.
        rest = (
            stream.unused_data if kind == "gzip" and stream.unused_data[:2] == b"\x1f\x8b" else b""
        )
    return bytes(out), not rest


def _stdlib(kind: str, data: bytes | memoryview, cap: int) -> tuple[bytes, bool] | None:
    stream: bz2.BZ2Decompressor | lzma.LZMADecompressor = (
        bz2.BZ2Decompressor() if kind == "bzip2" else lzma.LZMADecompressor()
    )
    out = stream.decompress(data, cap)
    return out, stream.eof or len(out) < cap


def _zstd(data: bytes | memoryview, cap: int) -> tuple[bytes, bool] | None:
    import io  # noqa: PLC0415

    import zstandard  # noqa: PLC0415 (the proxy's own dependency, through mitmproxy)

    # One frame: what follows it (text, another stream) is not this stream's.
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)))
    out = bytearray()
    ended = False
    while len(out) < cap:
        try:
            chunk = reader.read(min(1 << 20, cap - len(out)))
        except zstandard.ZstdError:
            break  # a cut or corrupt frame: keep what came out
        if not chunk:
            ended = True
            break
        out += chunk
    if not out:
        return None
    return bytes(out), ended


def _brotli(data: bytes | memoryview, cap: int, whole: bool) -> tuple[bytes, bool] | None:
    import brotli  # noqa: PLC0415 (the proxy's own dependency, through mitmproxy)

    view = memoryview(data)
    stream = brotli.Decompressor()
    out = bytearray()
    # No output limit in this brotli: a few input bytes can stand for 16 MiB out, so feed
    # a few at a time and stop at the cap.
    for start in range(0, len(view), _BROTLI_STEP):
        try:
            out += stream.process(bytes(view[start : start + _BROTLI_STEP]))
        except brotli.error:
            # The stream may have ended inside this step, with other bytes after it
            # (text an encoder put after the stream): feed it again up to there, a byte
            # at a time over the last step, and keep what the stream held.
            return _brotli_ended(view, start, cap)
        if len(out) >= cap:
            return bytes(out[:cap]), False
        if stream.is_finished():
            return bytes(out), True
    if whole and not stream.is_finished():
        return None
    return bytes(out), True


def _brotli_ended(view: memoryview, last: int, cap: int) -> tuple[bytes, bool] | None:
    """Return what a brotli stream that ends inside ``view[last:last + step]`` holds."""
    import brotli  # noqa: PLC0415

    stream = brotli.Decompressor()
    out = bytearray()
    for start in range(0, last, _BROTLI_STEP):
        out += stream.process(bytes(view[start : start + _BROTLI_STEP]))
    try:
        for at in range(last, min(last + _BROTLI_STEP, len(view))):
            out += stream.process(bytes(view[at : at + 1]))
            if stream.is_finished():
                return bytes(out[:cap]), True
    except brotli.error:
        return None  # not a stream that ended there: corrupt, or not brotli at all
    return None


def decode_content(body: bytes, content_encoding: str, cap: int = INFLATE_CAP) -> bytes | None:
    """Return a body with its ``Content-Encoding`` undone (capped), or None if it fails."""
    names = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "zlib", "br": "brotli",
             "zstd": "zstd"}  # fmt: skip
    data = body
    for coding in reversed([t.strip().lower() for t in content_encoding.split(",") if t.strip()]):
        if coding == "identity":
            continue
        kind = names.get(coding)
        if kind is None:
            return None
        result = _decompress(kind, data, cap, whole=False)
        if result is None and kind == "zlib":
            result = _decompress("deflate", data, cap, whole=False)  # deflate sent raw
        if result is None:
            return None
        data = result[0]
    return data

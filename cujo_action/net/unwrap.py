"""Undo what an exfiltration does to bytes, layer by layer, within a budget.

Stolen secrets rarely leave as they were read: ``base64 -w0 | base64 -w0`` (tj-actions),
gzip then base64 (npm publish's tarball in JSON), hex or base32 in DNS labels, percent-
encoding in a URL, ``\\u00..`` escapes in JSON, a MIME part in quoted-printable. ``layers``
yields the bytes as sent and every layer it can peel off, breadth first, each with the
path of encodings undone to reach it (outermost first), so a search for decoys runs over
plain text at every depth.

What is peeled, from each layer:

* the whole layer: percent-encoding (``url``), JSON string escapes (``json``),
  quoted-printable (``qp``), and compression recognised by its magic (gzip, zlib, zstd)
  or, for binary layers, tried (raw deflate, brotli: neither has a magic);
* runs inside it: base64 in both alphabets with or without padding, wrapped or not
  (``base64``), hex (``hex``), base32 in both alphabets, any case (``base32``). A run is
  decoded at every alignment its start could have (a prefix the alphabet shares, a label
  split); the alignment that reads best is peeled further, the others are only searched.

Compressed streams are found at any offset of a layer by their magic (gzip, zlib, bzip2,
xz, zstd), so text before a stream cannot hide it; each run that reads as text or starts
a stream is a layer of its own, so joining runs cannot move a stream off its start.

Cost is bounded and linear in the input: at most ``MAX_DEPTH`` encodings deep, each
decompression capped at ``INFLATE_CAP`` bytes out, and every layer but the first counted
against ``budget`` bytes (the caps are ``limits.py``'s). What a cap keeps from being
searched is never skipped silently: ``Unwrap.unsearched`` names the first cap reached (a
layer with more to peel at the depth, the budget spent, a stream inflating past the cap).
"""

from __future__ import annotations

import binascii
import bz2
import hashlib
import lzma
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from cujo_action.limits import DECODE_BUDGET, DECODE_DEPTH, INFLATE_SIZE, MiB

MAX_DEPTH = DECODE_DEPTH
BUDGET = DECODE_BUDGET
INFLATE_CAP = INFLATE_SIZE
# Compressed streams found by their magic inside one layer, inflated each (a magic that
# does not start a valid stream costs one short trial and is not counted).
MAX_STREAMS = 64
_TRIAL = 512  # input bytes a magic's stream must decompress without error to count
# Decoded runs that read as text, each a layer of its own per encoding (the rest joined).
MAX_RUN_LAYERS = 64
# Printable runs of a binary layer searched for escapes (URL, JSON, quoted-printable).
_TEXT_IN_BINARY = re.compile(rb"[\t\n\r\x20-\x7e]{16,}")
# Shorter runs carry less than a decoy's slice (base64 of 12 bytes, hex of 12 bytes).
MIN_BASE64 = 16
MIN_HEX = 24
MIN_BASE32 = 16
# Runs up to these lengths are decoded at every alignment; longer ones at the start and
# where the end says (its padding), which is where an encoder puts them.
ALL_ALIGNMENTS_UP_TO = 64 << 10
_BROTLI_STEP = 8  # input bytes per call: brotli has no output cap, so feed it slowly

# Every run of the widest alphabet (base64's, either kind, wrapped or not); the others'
# pieces are looked for inside it.
_RUN = re.compile(rb"[A-Za-z0-9+/_-]{%d,}(?:(?:\r?\n|\\n)[A-Za-z0-9+/_-]+)*=*" % MIN_BASE64)
_HEX_PIECE = re.compile(rb"[0-9A-Fa-f]{%d,}" % MIN_HEX)
_BASE32_PIECE = re.compile(rb"[A-Za-z2-7]{%d,}=*" % MIN_BASE32)
_BASE32HEX_PIECE = re.compile(rb"[0-9A-Va-v]{%d,}=*" % MIN_BASE32)
# A boundary line (RFC 2046: up to 70 of its characters), the first line of a part.
_BOUNDARY = re.compile(rb"(?m)^--([0-9A-Za-z'()+_,./:=?-]{1,70})\r?$")
MAX_PARTS = 64
_REQUEST = re.compile(rb"[A-Z][A-Z0-9_-]{0,20} \S+ HTTP/\d(?:\.\d)?\r\n")
# Runs longer than this are looked into for hex and base32 only when of one case.
_PIECES_UP_TO = 4096
_READS_AS_TEXT = 0.95
# Binary decodes peeled further one by one, per encoding and layer (the rest are searched).
_ALONE = 16
_PURE_HEX = re.compile(rb"[0-9A-Fa-f]+")
_QP = re.compile(rb"=[0-9A-F]{2}|=\r?\n")
# Runs of at least MIN_ESCAPES percent-escapes, each decoded as a layer of its own.
MIN_ESCAPES = 16
_ESCAPED_RUN = re.compile(rb"(?:%%[0-9A-Fa-f]{2}){%d,}" % MIN_ESCAPES)
_JSON_ESCAPE = re.compile(rb'\\(u[0-9A-Fa-f]{4}|["\\/bfnrt])')
_WRAP = re.compile(rb"\r?\n|\\n")
_URLSAFE = bytes.maketrans(b"-_", b"+/")
_B32HEX_TO_B32 = bytes.maketrans(
    b"0123456789ABCDEFGHIJKLMNOPQRSTUV", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
)
_B32_TO_B32HEX = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789ABCDEFGHIJKLMNOPQRSTUV"
)
_PRINTABLE_BYTES = bytes([9, 10, 13, *range(0x20, 0x7F)])
_SIMPLE_ESCAPES = {
    b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r",
    b"t": b"\t",
}  # fmt: skip


@dataclass(frozen=True)
class Layer:
    """Bytes to search, and the encodings undone to reach them (outermost first)."""

    data: bytes
    path: tuple[str, ...] = ()
    # Whole-layer transforms (url, json, qp) keep what their parent held: a hit there
    # counts only if the parent did not have it.
    whole: bool = False
    # Only searched, never peeled further (an alignment that did not read best).
    leaf: bool = False

    @property
    def encoding(self) -> str:
        """Return the path as one word: ``plain``, ``base64``, ``gzip+base64``…"""
        return "+".join(self.path) or "plain"


class Unwrap:
    """Walk the layers of one input; ``unsearched`` names the cap that cut the walk, if any."""

    def __init__(
        self,
        data: bytes,
        *,
        budget: int = BUDGET,
        max_depth: int = MAX_DEPTH,
        inflate_cap: int = INFLATE_CAP,
    ) -> None:
        """Prepare the walk over ``data``."""
        self.data, self.budget, self.max_depth = data, budget, max_depth
        self.inflate_cap = inflate_cap
        self.spent = 0
        self.unsearched = ""

    @property
    def exhausted(self) -> bool:
        """Return whether a cap kept part of the input from being searched."""
        return bool(self.unsearched)

    def _cut(self, reason: str) -> None:
        # The first cap reached names the part not searched; later ones add nothing.
        if not self.unsearched:
            self.unsearched = reason

    def __iter__(self) -> Iterator[tuple[Layer, Layer | None]]:
        """Yield (layer, its parent) breadth first, the input itself first."""
        seen: set[bytes] = set()
        queue: deque[tuple[Layer, Layer | None]] = deque([(Layer(self.data), None)])
        while queue:
            layer, parent = queue.popleft()
            yield layer, parent
            if layer.leaf:
                continue
            deepest = len(layer.path) >= self.max_depth
            for child in children(layer, self.inflate_cap, self._cut):
                if not child.data:
                    continue
                key = _key(child.data)
                if key in seen:
                    continue
                if deepest:
                    if _more_to_peel(child):
                        # More to peel than the depth allows: what is inside was not seen.
                        self._cut(f"encodings nested deeper than {self.max_depth}")
                        break
                    continue
                if self.spent + len(child.data) > self.budget:
                    self._cut(f"decoding past the budget of {self.budget // MiB} MiB")
                    return
                seen.add(key)
                self.spent += len(child.data)
                queue.append((child, layer))


_COMPRESSED = frozenset({"gzip", "zlib", "deflate", "zstd", "brotli", "bzip2", "xz"})


def _more_to_peel(child: Layer) -> bool:
    """Return whether a layer below the depth would be more than a chance decoding.

    Any run of letters decodes as base64 to noise; what counts is an escape undone, a
    stream inflated, or a decoding that reads as text or as a stream without a magic.
    """
    if child.leaf:
        return False
    if child.whole or child.path[-1] in _COMPRESSED:
        return True
    return _score(child.data) >= _READS_AS_TEXT or _guess(child.data, 1 << 16) is not None


def _key(data: bytes) -> bytes:
    return data if len(data) <= 64 else hashlib.blake2b(data, digest_size=16).digest()


# --------------------------------------------------------------------------- peeling


def children(
    layer: Layer, inflate_cap: int = INFLATE_CAP, cut: Callable[[str], None] | None = None
) -> Iterator[Layer]:
    """Yield the layers one step below ``layer`` (``cut`` hears of a cap reached)."""
    data, path = layer.data, layer.path
    note = cut or (lambda _reason: None)
    # Escapes belong to text: in binary bytes they are chance, and peeling them would
    # only copy the layer; the printable runs of a binary layer are peeled on their own.
    text = data if not _binary(data) else b"\n".join(_TEXT_IN_BINARY.findall(data))
    if b"%" in text:
        unquoted = unquote_to_bytes(text)
        if unquoted != text:
            yield Layer(unquoted, (*path, "url"), whole=True)
        # Each long run of escapes on its own too: what it encodes then starts its layer
        # (a stream without a magic, brotli, is only tried there).
        for run in _ESCAPED_RUN.findall(text)[:_ALONE]:
            if len(run) != len(text):
                yield Layer(unquote_to_bytes(run), (*path, "url"))
    if b"\\" in text and _JSON_ESCAPE.search(text):
        yield Layer(json_unescape(text), (*path, "json"), whole=True)
    if b"=" in text and _has_qp(text):
        decoded = binascii.a2b_qp(text)
        if decoded != text:
            yield Layer(decoded, (*path, "qp"), whole=True)
    # A request carried raw (a tunnel's bytes), and each part of a multipart body, on its
    # own: a compressed one then starts with its magic.
    if _REQUEST.match(data):
        _, sep, body = data.partition(b"\r\n\r\n")
        if sep and body:
            yield Layer(body, (*path, "http"), whole=True)
    for part in multipart_bodies(data):
        yield Layer(part, (*path, "multipart"), whole=True)
    for kind, out, complete in streams(data, inflate_cap, note):
        if not complete:
            note(f"a {kind} stream inflating past {inflate_cap // MiB} MiB")
        yield Layer(out, (*path, kind))
    # Tried even where a magic was found: in random-looking bytes a magic turns up by
    # chance, and must not stand in for the stream that has none.
    for kind, out in _guesses(data, inflate_cap):
        yield Layer(out, (*path, kind))
    yield from _runs(data, path)


def _has_qp(text: bytes) -> bool:
    """Return whether ``text`` holds two quoted-printable escapes, anywhere."""
    escapes = _QP.finditer(text)
    return next(escapes, None) is not None and next(escapes, None) is not None


def multipart_bodies(data: bytes) -> list[bytes]:
    """Return the bodies of a MIME multipart message's parts (RFC 2046), at most MAX_PARTS."""
    found = _BOUNDARY.search(data[:4096])
    if found is None:
        return []
    delimiter = b"--" + found.group(1)
    bodies = []
    for chunk in data.split(delimiter)[1 : MAX_PARTS + 1]:
        if chunk.startswith(b"--"):
            break  # the close delimiter
        _, sep, body = chunk.partition(b"\r\n\r\n")
        if not sep:
            _, sep, body = chunk.partition(b"\n\n")
        if sep and body:
            bodies.append(body.removesuffix(b"\r\n").removesuffix(b"\n"))
    return bodies


def json_unescape(data: bytes) -> bytes:
    """Return ``data`` with JSON string escapes undone (``\\u0041``, ``\\/``, ``\\n``…)."""

    def one(match: re.Match[bytes]) -> bytes:
        code = match.group(1)
        if code[:1] == b"u":
            return chr(int(code[1:], 16)).encode("utf-8", "surrogatepass")
        return _SIMPLE_ESCAPES[code]

    return _JSON_ESCAPE.sub(one, data)


def _score(data: bytes) -> float:
    """Return how much ``data`` reads like more to peel: text, or a compressed stream."""
    if not data:
        return -1.0
    if _magic(data) is not None:
        return 2.0
    sample = data[:4096]
    return 1 - len(sample.translate(None, _PRINTABLE_BYTES)) / len(sample)


def _runs(data: bytes, path: tuple[str, ...]) -> Iterator[Layer]:
    """Yield, per encoding, the best-reading decodes of its runs and (as leaves) the rest."""
    found: dict[str, list[tuple[bytes, bool]]] = {"hex": [], "base64": [], "base32": []}
    for match in _RUN.finditer(data):
        run = match.group()
        # A run that is plainly hex is decoded as hex only, not again as base64.
        if not _plainly_hex(run):
            found["base64"].append((run, True))
        if len(run) > _PIECES_UP_TO and not _one_case(_WRAP.sub(b"", run)):
            continue  # a long mixed-case run is base64: no hex or base32 hides in it
        flat = _WRAP.sub(b"", run)
        for piece, whole in _pieces(_HEX_PIECE, flat):
            found["hex"].append((piece, whole))
        # Base32 is one case (upper by the RFC, lower once a DNS name lost its case).
        for piece, whole in _pieces(_BASE32_PIECE, flat):
            if _one_case(piece):
                found["base32"].append((piece.upper(), whole))
        for piece, whole in _pieces(_BASE32HEX_PIECE, flat):
            if _one_case(piece) and not _plainly_hex(piece.rstrip(b"=")):
                found["base32"].append((piece.upper().translate(_B32HEX_TO_B32), whole))
    for name, decode in (("hex", _hex_decodes), ("base64", _base64_decodes),
                         ("base32", _base32_decodes)):  # fmt: skip
        best: list[bytes] = []
        alone: list[bytes] = []
        rest: list[bytes] = []
        for run, whole in found[name]:
            # A piece cut from a longer run starts where the other alphabet stopped: only
            # a whole run can start mid-group (a prefix the alphabet shares).
            decodes = [d for d in decode(run, every=whole) if d]
            if not decodes:
                continue
            decodes.sort(key=_score, reverse=True)
            if _score(decodes[0]) >= _READS_AS_TEXT:
                best.append(decodes[0])
                # Two header bytes can happen by chance: an alignment that looks like a
                # stream's start never pushes out the one that reads as text.
                text = next((d for d in decodes[1:] if _magic(d) is None), None)
                if _magic(decodes[0]) is not None and text and _score(text) >= _READS_AS_TEXT:
                    best.append(text)
                rest.extend(d for d in decodes[1:] if d is not text or text not in best)
            elif len(alone) < _ALONE:
                # None reads as text (compressed without a magic, or encrypted): any may
                # be the one, and a stream must start its layer to be inflated.
                alone.extend(decodes)
            else:
                rest.extend(decodes)
        # Each run its own layer, so a stream it holds starts its layer; past the count,
        # joined (a stream in the joined layer is still found by its magic).
        for decoded in best[:MAX_RUN_LAYERS]:
            yield Layer(decoded, (*path, name))
        if len(best) > MAX_RUN_LAYERS:
            yield Layer(b"\n".join(best[MAX_RUN_LAYERS:]), (*path, name))
        for decoded in alone:
            yield Layer(decoded, (*path, name))
        if rest:
            yield Layer(b"\n".join(rest), (*path, name), leaf=True)


def _pieces(pattern: re.Pattern[bytes], run: bytes) -> Iterator[tuple[bytes, bool]]:
    """Yield the pieces of ``run`` in one alphabet, and whether each is the whole run."""
    for match in pattern.finditer(run):
        piece = match.group()
        yield piece, len(piece) == len(run)


def _one_case(run: bytes) -> bool:
    return run.upper() == run or run.lower() == run


def _plainly_hex(run: bytes) -> bool:
    """Return whether a run is nothing but hex digits, as long as a hex run."""
    return len(run) >= MIN_HEX and _PURE_HEX.fullmatch(run) is not None


def _alignments(length: int, group: int, tail: int, every: bool) -> list[int]:
    if every and length <= ALL_ALIGNMENTS_UP_TO:
        return list(range(min(group, max(length - 1, 1))))
    return sorted({0, tail % group})


def _hex_decodes(run: bytes, *, every: bool = True) -> list[bytes]:
    out = []
    for start in _alignments(len(run), 2, len(run), every):
        body = run[start:]
        body = body[: len(body) // 2 * 2]
        out.append(binascii.unhexlify(body))
    return out


def _base64_decodes(run: bytes, *, every: bool = True) -> list[bytes]:
    text = _WRAP.sub(b"", run).translate(_URLSAFE)
    stripped = text.rstrip(b"=")
    padded = len(text) != len(stripped)
    out = []
    # With padding, the encoding's start is where the length from the end says.
    for start in _alignments(len(stripped), 4, len(text) if padded else 0, every):
        body = stripped[start:]
        body = body[: len(body) - (len(body) % 4 == 1)]
        body += b"=" * (-len(body) % 4)
        try:
            out.append(binascii.a2b_base64(body))
        except binascii.Error:
            continue
    return out


def _base32_decodes(run: bytes, *, every: bool = True) -> list[bytes]:
    text = run.upper()
    stripped = text.rstrip(b"=")
    out = []
    padded = len(text) != len(stripped)
    for start in _alignments(len(stripped), 8, len(text) if padded else 0, every):
        body = stripped[start:]
        # A base32 group holds 8 characters; 1, 3 and 6 left over cannot end an encoding.
        while len(body) % 8 in (1, 3, 6):
            body = body[:-1]
        if body:
            out.append(_b32decode(body))
    return out


def _b32decode(body: bytes) -> bytes:
    """Decode unpadded standard base32 (upper case) fast: as one base-32 integer."""
    # int(_, 32) reads the digits 0-9A-V, base32hex's alphabet, in linear time.
    bits = len(body) * 5
    value = int(body.translate(_B32_TO_B32HEX), 32) >> (bits % 8)
    return value.to_bytes(bits // 8, "big")


# --------------------------------------------------------------------------- compression


def _magic(data: bytes) -> str | None:
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
_STREAM_START = re.compile(
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
    offsets = [0] if _magic(data) is not None else []
    offsets += [m.start() for m in _STREAM_START.finditer(data, 1)]
    for offset in offsets:
        kind = _magic(bytes(view[offset : offset + 16]))
        if kind is None or not _starts_stream(kind, view[offset : offset + _TRIAL]):
            continue
        if found == MAX_STREAMS:
            if cut is not None:
                cut(f"more than {MAX_STREAMS} compressed streams in one layer")
            return
        found += 1
        result = _decompress(kind, view[offset:], cap, whole=False)
        if result is not None and result[0]:
            yield kind, result[0], result[1]


def _starts_stream(kind: str, head: memoryview) -> bool:
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


def _guesses(data: bytes, cap: int) -> list[tuple[str, bytes]]:
    """Return (kind, inflated) for each stream without a magic a binary layer reads as
    (raw deflate and brotli both: one reading by chance must not hide the other)."""
    if len(data) < 16 or not _binary(data):
        return []
    found = []
    for tried in ("deflate", "brotli"):
        result = _decompress(tried, data, cap, whole=True)
        if result is not None and result[0]:
            found.append((tried, result[0]))
    return found


def _guess(data: bytes, cap: int) -> tuple[str, bytes] | None:
    """Return the first stream without a magic a binary layer reads as, if any."""
    return next(iter(_guesses(data, cap)), None)


def _binary(data: bytes) -> bool:
    sample = data[:512]
    return bool(sample) and len(sample.translate(None, _PRINTABLE_BYTES)) > 0.15 * len(sample)


def inflate(
    data: bytes, cap: int = INFLATE_CAP, hint: str | None = None
) -> tuple[str, bytes] | None:
    """Return (kind, what it inflates to, capped) if ``data`` is a compressed stream."""
    kind = hint or _magic(data)
    if kind is None:
        return _guess(data, cap)
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

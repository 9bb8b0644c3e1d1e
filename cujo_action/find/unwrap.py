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

The decoders are ``textcodecs.py`` (runs, escapes, MIME parts) and ``inflate.py``
(compressed streams); this module is the walk: what is peeled from a layer, and within
which budget.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from cujo_action.find.inflate import (
    INFLATE_CAP,
    PRINTABLE_BYTES,
    guess,
    guesses,
    is_binary,
    magic,
    streams,
)
from cujo_action.find.textcodecs import (
    B32HEX_TO_B32,
    BASE32_PIECE,
    BASE32HEX_PIECE,
    HEX_PIECE,
    JSON_ESCAPE,
    RUN,
    WRAP,
    base32_decodes,
    base64_decodes,
    has_qp,
    hex_decodes,
    json_unescape,
    multipart_bodies,
    one_case,
    pieces,
    plainly_hex,
)
from cujo_action.limits import DECODE_BUDGET, DECODE_DEPTH, MiB

MAX_DEPTH = DECODE_DEPTH
BUDGET = DECODE_BUDGET
# Decoded runs that read as text, each a layer of its own per encoding (the rest joined).
MAX_RUN_LAYERS = 64
# Printable runs of a binary layer searched for escapes (URL, JSON, quoted-printable).
_TEXT_IN_BINARY = re.compile(rb"[\t\n\r\x20-\x7e]{16,}")
_REQUEST = re.compile(rb"[A-Z][A-Z0-9_-]{0,20} \S+ HTTP/\d(?:\.\d)?\r\n")
# Runs longer than this are looked into for hex and base32 only when of one case.
_PIECES_UP_TO = 4096
_READS_AS_TEXT = 0.95
# Binary decodes peeled further one by one, per encoding and layer (the rest are searched).
_ALONE = 16
# Runs of at least MIN_ESCAPES percent-escapes, each decoded as a layer of its own.
MIN_ESCAPES = 16
_ESCAPED_RUN = re.compile(rb"(?:%%[0-9A-Fa-f]{2}){%d,}" % MIN_ESCAPES)


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
    return _score(child.data) >= _READS_AS_TEXT or guess(child.data, 1 << 16) is not None


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
    text = data if not is_binary(data) else b"\n".join(_TEXT_IN_BINARY.findall(data))
    if b"%" in text:
        unquoted = unquote_to_bytes(text)
        if unquoted != text:
            yield Layer(unquoted, (*path, "url"), whole=True)
        # Each long run of escapes on its own too: what it encodes then starts its layer
        # (a stream without a magic, brotli, is only tried there).
        for run in _ESCAPED_RUN.findall(text)[:_ALONE]:
            if len(run) != len(text):
                yield Layer(unquote_to_bytes(run), (*path, "url"))
    if b"\\" in text and JSON_ESCAPE.search(text):
        yield Layer(json_unescape(text), (*path, "json"), whole=True)
    if b"=" in text and has_qp(text):
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
    for kind, out in guesses(data, inflate_cap):
        yield Layer(out, (*path, kind))
    yield from _runs(data, path)


def _score(data: bytes) -> float:
    """Return how much ``data`` reads like more to peel: text, or a compressed stream."""
    if not data:
        return -1.0
    if magic(data) is not None:
        return 2.0
    sample = data[:4096]
    return 1 - len(sample.translate(None, PRINTABLE_BYTES)) / len(sample)


def _runs(data: bytes, path: tuple[str, ...]) -> Iterator[Layer]:
    """Yield, per encoding, the best-reading decodes of its runs and (as leaves) the rest."""
    found: dict[str, list[tuple[bytes, bool]]] = {"hex": [], "base64": [], "base32": []}
    for match in RUN.finditer(data):
        run = match.group()
        # A run that is plainly hex is decoded as hex only, not again as base64.
        if not plainly_hex(run):
            found["base64"].append((run, True))
        if len(run) > _PIECES_UP_TO and not one_case(WRAP.sub(b"", run)):
            continue  # a long mixed-case run is base64: no hex or base32 hides in it
        flat = WRAP.sub(b"", run)
        for piece, whole in pieces(HEX_PIECE, flat):
            found["hex"].append((piece, whole))
        # Base32 is one case (upper by the RFC, lower once a DNS name lost its case).
        for piece, whole in pieces(BASE32_PIECE, flat):
            if one_case(piece):
                found["base32"].append((piece.upper(), whole))
        for piece, whole in pieces(BASE32HEX_PIECE, flat):
            if one_case(piece) and not plainly_hex(piece.rstrip(b"=")):
                found["base32"].append((piece.upper().translate(B32HEX_TO_B32), whole))
    for name, decode in (("hex", hex_decodes), ("base64", base64_decodes),
                         ("base32", base32_decodes)):  # fmt: skip
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
                text = next((d for d in decodes[1:] if magic(d) is None), None)
                if magic(decodes[0]) is not None and text and _score(text) >= _READS_AS_TEXT:
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

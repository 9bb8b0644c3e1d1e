"""Decode what text carries: base64, base32 and hex runs at every alignment, escapes, MIME.

The decoders ``unwrap.py`` peels a layer with: runs of an encoding's alphabet (``RUN``, and
the hex and base32 pieces inside it) decoded at each alignment their start could have,
JSON string escapes, quoted-printable, and the parts of a MIME multipart body. Pure.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator

# Shorter runs carry less than a decoy's slice (base64 of 12 bytes, hex of 12 bytes).
MIN_BASE64 = 16
MIN_HEX = 24
MIN_BASE32 = 16
# Runs up to these lengths are decoded at every alignment; longer ones at the start and
# where the end says (its padding), which is where an encoder puts them.
ALL_ALIGNMENTS_UP_TO = 64 << 10

# Every run of the widest alphabet (base64's, either kind, wrapped or not); the others'
# pieces are looked for inside it.
RUN = re.compile(rb"[A-Za-z0-9+/_-]{%d,}(?:(?:\r?\n|\\n)[A-Za-z0-9+/_-]+)*=*" % MIN_BASE64)
HEX_PIECE = re.compile(rb"[0-9A-Fa-f]{%d,}" % MIN_HEX)
BASE32_PIECE = re.compile(rb"[A-Za-z2-7]{%d,}=*" % MIN_BASE32)
BASE32HEX_PIECE = re.compile(rb"[0-9A-Va-v]{%d,}=*" % MIN_BASE32)
# A boundary line (RFC 2046: up to 70 of its characters), the first line of a part.
_BOUNDARY = re.compile(rb"(?m)^--([0-9A-Za-z'()+_,./:=?-]{1,70})\r?$")
MAX_PARTS = 64
_PURE_HEX = re.compile(rb"[0-9A-Fa-f]+")
_QP = re.compile(rb"=[0-9A-F]{2}|=\r?\n")
JSON_ESCAPE = re.compile(rb'\\(u[0-9A-Fa-f]{4}|["\\/bfnrt])')
WRAP = re.compile(rb"\r?\n|\\n")
_URLSAFE = bytes.maketrans(b"-_", b"+/")
B32HEX_TO_B32 = bytes.maketrans(
    b"0123456789ABCDEFGHIJKLMNOPQRSTUV", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
)
_B32_TO_B32HEX = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789ABCDEFGHIJKLMNOPQRSTUV"
)
_SIMPLE_ESCAPES = {
    b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r",
    b"t": b"\t",
}  # fmt: skip


def has_qp(text: bytes) -> bool:
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

    return JSON_ESCAPE.sub(one, data)


def pieces(pattern: re.Pattern[bytes], run: bytes) -> Iterator[tuple[bytes, bool]]:
    """Yield the pieces of ``run`` in one alphabet, and whether each is the whole run."""
    for match in pattern.finditer(run):
        piece = match.group()
        yield piece, len(piece) == len(run)


def one_case(run: bytes) -> bool:
    return run.upper() == run or run.lower() == run


def plainly_hex(run: bytes) -> bool:
    """Return whether a run is nothing but hex digits, as long as a hex run."""
    return len(run) >= MIN_HEX and _PURE_HEX.fullmatch(run) is not None


def _alignments(length: int, group: int, tail: int, every: bool) -> list[int]:
    if every and length <= ALL_ALIGNMENTS_UP_TO:
        return list(range(min(group, max(length - 1, 1))))
    return sorted({0, tail % group})


def hex_decodes(run: bytes, *, every: bool = True) -> list[bytes]:
    out = []
    for start in _alignments(len(run), 2, len(run), every):
        body = run[start:]
        body = body[: len(body) // 2 * 2]
        out.append(binascii.unhexlify(body))
    return out


def base64_decodes(run: bytes, *, every: bool = True) -> list[bytes]:
    text = WRAP.sub(b"", run).translate(_URLSAFE)
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


def base32_decodes(run: bytes, *, every: bool = True) -> list[bytes]:
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

"""Decoys are found through what an exfiltration does to them, at bounded cost.

The encoded forms come from the encoders real payloads use (the standard library's
base64, binascii, gzip, zlib, json, email, and the brotli and zstandard libraries), not
from the code under test.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import gzip
import io
import json
import lzma
import os
import random
import struct
import tarfile
import time
import zlib
from collections.abc import Callable
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from urllib.parse import quote

import brotli
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from cujo_action.find.decoys import make_decoys
from cujo_action.find.inflate import INFLATE_CAP, decode_content, inflate, magic
from cujo_action.find.matcher import SLICE, WINDOW, DecoyMatcher
from cujo_action.find.opacity import (
    MIN_BYTES,
    RANDOM_ENTROPY,
    entropy,
    looks_random,
    opaque,
    random_entropy,
    reads_as_text,
)
from cujo_action.find.textcodecs import json_unescape
from cujo_action.find.unwrap import MAX_DEPTH, Unwrap
from cujo_action.net.proxy.request import scan

DECOYS = make_decoys()
MATCHER = DecoyMatcher(DECOYS)
TOKEN = next(d for d in DECOYS if d.name == "GITHUB_TOKEN")
AWS = next(d for d in DECOYS if d.name == "AWS_SECRET_ACCESS_KEY")
RUNTIME = next(d for d in DECOYS if d.name == "ACTIONS_RUNTIME_TOKEN")


def env_dump() -> bytes:
    """What a stealer sends: the environment as JSON."""
    return json.dumps({d.env: d.value for d in DECOYS if d.env}).encode()


def b64(data: bytes) -> bytes:
    return base64.b64encode(data)


def tar_gz(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


WRAPS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    # tj-actions/changed-files printed `base64 -w0 | base64 -w0` of what it found.
    "base64 twice": (lambda d: b64(b64(d)), "base64+base64"),
    "base64, wrapped at 76 as `base64` does": (
        lambda d: b"\n".join(b64(d)[i : i + 76] for i in range(0, len(b64(d)), 76)),
        "base64",
    ),
    "urlsafe base64 without padding": (
        lambda d: base64.urlsafe_b64encode(d).rstrip(b"="),
        "base64",
    ),
    "hex of base64": (lambda d: b64(d).hex().encode(), "hex+base64"),
    "base32": (base64.b32encode, "base32"),
    "base32, lower case, no padding": (
        lambda d: base64.b32encode(d).rstrip(b"=").lower(),
        "base32",
    ),
    "base32hex": (base64.b32hexencode, "base32"),
    "gzip then base64 (npm publish's tarball)": (
        lambda d: json.dumps(
            {"_attachments": {"p.tgz": {"data": b64(tar_gz("e", d)).decode()}}}
        ).encode(),
        "base64+gzip",
    ),
    "zlib": (zlib.compress, "zlib"),
    "raw deflate then base64": (lambda d: b64(_deflate(d)), "base64+deflate"),
    "brotli then base64": (lambda d: b64(brotli.compress(d)), "base64+brotli"),
    "zstd": (lambda d: zstandard.ZstdCompressor().compress(d), "zstd"),
    "url-encoded base64": (
        lambda d: b"q=" + quote(b64(d + b"??"), safe="").encode(),
        "url+base64",
    ),
    "JSON with every character escaped": (
        lambda d: b'{"v":"' + "".join(f"\\u{c:04x}" for c in d).encode() + b'"}',
        "json",
    ),
}


def _deflate(data: bytes) -> bytes:
    stream = zlib.compressobj(9, zlib.DEFLATED, -15)
    return stream.compress(data) + stream.flush()


@pytest.mark.parametrize("how", list(WRAPS))
def test_a_decoy_is_found_through_every_wrapping(how: str) -> None:
    wrap, encoding = WRAPS[how]
    hits = MATCHER.find(wrap(env_dump()))
    assert (TOKEN.name, encoding) in hits, hits
    assert not MATCHER.exhausted


def test_a_request_carried_raw_over_tcp_is_searched_in_its_body() -> None:
    body = gzip.compress(env_dump())
    data = b"POST /c HTTP/1.1\r\nHost: x.test\r\nContent-Encoding: gzip\r\n\r\n" + body
    # Found through the body's gzip: as the http layer's, or by its magic where it starts.
    found = MATCHER.find(data)
    assert {(TOKEN.name, "http+gzip"), (TOKEN.name, "gzip")} & set(found)


def test_a_multipart_upload_is_searched_part_by_part() -> None:
    # Each part as a MIME library writes it: base64 wrapped at 76, quoted-printable with
    # its soft line breaks, and a gzip file.
    form = MIMEMultipart("form-data")
    form.attach(MIMEText(f"token={TOKEN.value}\n" * 3, "plain", "utf-8"))  # base64
    qp = MIMEText("", "plain")
    del qp["Content-Transfer-Encoding"]
    qp["Content-Transfer-Encoding"] = "quoted-printable"
    # A long line is soft-broken at 76 columns: the secret is cut in two.
    qp.set_payload(binascii.b2a_qp(("x" * 60 + AWS.value + "\n").encode()).decode())
    form.attach(qp)
    form.attach(MIMEApplication(gzip.compress(env_dump()), "gzip"))
    body = form.as_bytes()
    assert TOKEN.value.encode() not in body
    assert AWS.value.encode() not in body
    hits = MATCHER.find(body)
    assert (TOKEN.name, "base64") in hits, hits
    assert (AWS.name, "qp") in hits, hits
    # The gzip file's part, reached through its MIME base64 (as a part, or as a run).
    assert any(n == TOKEN.name and e.endswith("base64+gzip") for n, e in hits), hits


@pytest.mark.parametrize("start", [0, 1, 7, 13])
def test_a_long_enough_slice_of_a_decoy_counts_and_a_short_one_does_not(start: int) -> None:
    value = RUNTIME.value.encode()
    # From the JWT's signature: its claims are mostly the format every such token has.
    part = value[-300 + start : -300 + start + SLICE]
    # Hex in a DNS-sized label, base64 in a header, plain in a body: each carries a slice.
    for data, encoding in ((part.hex().encode(), "hex"), (b64(b"k=" + part), "base64"),
                           (b"!" + part + b"!", "plain")):  # fmt: skip
        assert MATCHER.find(data) == [(RUNTIME.name, encoding)], (data, encoding)
    short = value[-300 + start : -300 + start + SLICE - 1]
    # (Its neighbours are no base64url characters: they cannot lengthen it by chance.)
    assert MATCHER.find(b"!" + short + b"!") == []
    assert MATCHER.find(short.hex().encode()) == []


def test_the_format_every_decoy_of_a_kind_shares_is_not_a_slice_of_it() -> None:
    # Another run's decoys share the JWT header, "ghs_", "AKIA", the key's header:
    # nothing of them is ours.
    other = make_decoys()
    texts = b"\n".join(d.value.encode() for d in other)
    assert MATCHER.find(texts) == []
    assert MATCHER.find(b64(texts)) == []
    assert MATCHER.find(gzip.compress(texts)) == []


def test_json_escapes_are_undone_as_json_does() -> None:
    value = 'a/b\\c"d\u00e9\u2603\t\n'
    escaped = json.dumps(value, ensure_ascii=True).replace("/", "\\/").encode()
    assert json_unescape(escaped) == json.dumps(value, ensure_ascii=False).encode().replace(
        b"\\\\", b"\\"
    ).replace(b'\\"', b'"').replace(b"\\t", b"\t").replace(b"\\n", b"\n")


def test_content_encodings_are_undone_in_order_and_capped() -> None:
    data = env_dump()
    assert decode_content(gzip.compress(data), "gzip") == data
    assert decode_content(zlib.compress(data), "deflate") == data
    assert decode_content(_deflate(data), "deflate") == data  # deflate sent raw
    assert decode_content(brotli.compress(data), "br") == data
    assert decode_content(zstandard.ZstdCompressor().compress(data), "zstd") == data
    assert decode_content(brotli.compress(gzip.compress(data)), "gzip, br") == data
    assert decode_content(data, "identity") == data
    assert decode_content(data, "compress") is None  # unknown: left to the raw search
    assert decode_content(b"not gzip", "gzip") is None


@pytest.mark.parametrize(
    ("name", "bomb"),
    [
        ("gzip", gzip.compress),
        ("zlib", lambda z: zlib.compress(z, 9)),
        ("zstd", lambda z: zstandard.ZstdCompressor().compress(z)),
        ("brotli", lambda z: brotli.compress(z, quality=5)),
    ],
)
def test_a_decompression_bomb_stops_at_the_cap(name: str, bomb: Callable[[bytes], bytes]) -> None:
    zeros = bytes(64 << 20)
    packed = bomb(zeros)
    assert len(packed) < 1 << 20
    start = time.perf_counter()
    out = inflate(packed) if name != "brotli" else (name, decode_content(packed, "br") or b"")
    assert out is not None
    assert len(out[1]) <= INFLATE_CAP
    assert time.perf_counter() - start < 5


def test_the_walk_is_bounded_and_says_when_it_stopped() -> None:
    # Nested base64, each level of it: the walk stops at its budget and says so.
    data = os.urandom(200_000)
    for _ in range(6):
        data = b64(data)
    walk = Unwrap(data, budget=1 << 20)
    layers = list(walk)
    assert walk.exhausted
    assert sum(len(layer.data) for layer, _ in layers[1:]) <= 1 << 20
    # A fixed token: a random one is itself a run of letters, which now and then decodes
    # by chance to bytes that look like a stream's header (more to peel).
    token = b"ghs_Q7w3Lk9ZpR2xVb8NcT5mYe1HdJ4sFa6GuK0o"
    nested = token
    for _ in range(MAX_DEPTH):
        nested = b64(nested)
    deep = Unwrap(nested)
    layers = list(deep)
    assert max(len(layer.path) for layer, _ in layers) == MAX_DEPTH
    assert token in {layer.data for layer, _ in layers}
    assert deep.unsearched == ""  # the decoy is the last layer: nothing more to peel
    deeper = Unwrap(b64(nested))
    assert token not in {layer.data for layer, _ in deeper}
    assert deeper.unsearched == f"encodings nested deeper than {MAX_DEPTH}"


def test_a_megabyte_of_each_kind_is_searched_in_bounded_time() -> None:
    bodies = {
        "random": os.urandom(1 << 20),
        "base64": base64.urlsafe_b64encode(os.urandom(786_432)),
        "hex": os.urandom(1 << 19).hex().encode(),
        "base32": base64.b32encode(os.urandom(655_360)),
        "gzip": gzip.compress(os.urandom(1 << 20)),
        "json": json.dumps([b64(os.urandom(700)).decode() for _ in range(1100)]).encode(),
    }
    for name, body in bodies.items():
        # The search's own CPU time, which a loaded machine does not stretch as it does
        # the clock's: ~0.02-0.2 s here; a quadratic walk takes minutes.
        start = time.thread_time()
        assert MATCHER.find(body) == [], name
        assert time.thread_time() - start < 3, name


def test_a_part_whose_search_ran_out_of_budget_says_so() -> None:
    small = DecoyMatcher(DECOYS, budget=64 << 10)
    deep = os.urandom(100_000)
    for _ in range(3):
        deep = b64(deep)
    found = scan(small, [("url", b"/c?x=1"), ("body", deep + b"\n" + b64(env_dump()))])
    assert found.unsearched == "body: decoding past the budget of 0 MiB", found
    assert not any(w.endswith("unsearched") for w in found.where)
    found = scan(MATCHER, [("body", deep)])
    assert found == ([], [], "", False)


# --------------------------------------------------------------------------- issue 20


def test_a_slice_straddling_a_search_window_is_found() -> None:
    # The decoy cut by every window boundary a layer this size has, at a few positions.
    for cut in (1, len(TOKEN.value) - 1):
        start = WINDOW - cut
        body = b"." * start + TOKEN.value.encode() + b"." * (WINDOW + 1000)
        assert (TOKEN.name, "plain") in MATCHER.find(body), cut
        second = WINDOW * 2 - cut
        body = b"." * second + TOKEN.value.encode() + b"." * 100
        assert (TOKEN.name, "plain") in MATCHER.find(body), ("second", cut)


@pytest.mark.parametrize(
    ("kind", "pack"),
    [
        ("gzip", gzip.compress),
        ("zlib", zlib.compress),
        ("bzip2", bz2.compress),
        ("xz", lzma.compress),
        ("zstd", lambda z: zstandard.ZstdCompressor().compress(z)),
    ],
)
@pytest.mark.parametrize("before", [b"", b"build log: ok\n", os.urandom(777)])
def test_a_compressed_stream_is_found_at_any_offset(
    kind: str, pack: Callable[[bytes], bytes], before: bytes
) -> None:
    body = before + pack(env_dump()) + b"trailing bytes"
    assert (TOKEN.name, kind) in MATCHER.find(body)


def test_joined_runs_cannot_move_a_stream_off_its_start() -> None:
    # The attack that ended clean: readable text in base64, then base64(gzip(decoy)).
    body = b64(b"build 12 passed on linux, all green") + b" " + b64(gzip.compress(env_dump()))
    assert (TOKEN.name, "base64+gzip") in MATCHER.find(body)
    # Many runs: past the count each gets a layer, the rest are joined, still found.
    many = b" ".join(b64(b"line %d of a readable log" % i) for i in range(200))
    assert (TOKEN.name, "base64+gzip") in MATCHER.find(many + b" " + b64(gzip.compress(env_dump())))


def test_a_decoy_behind_padding_past_the_old_budget_is_found_and_nothing_cut() -> None:
    for pad in (b"x",):
        body = b64(TOKEN.value.encode()) + pad * (25 << 20) + b"%" + pad * 64
        found = scan(MATCHER, [("body", body)])
        assert TOKEN.name in found.seen, pad
        assert found.unsearched == "", pad


def test_a_stream_inflating_past_its_cap_is_unsearched() -> None:
    walk = Unwrap(b"x" * 20 + gzip.compress(bytes(3 << 20)), inflate_cap=1 << 20)
    list(walk)
    assert walk.unsearched == "a gzip stream inflating past 1 MiB"
    walk = Unwrap(gzip.compress(bytes(3 << 20)))
    list(walk)
    assert walk.unsearched == ""


def test_escapes_in_the_text_of_a_binary_layer_are_undone() -> None:
    hidden = "".join(f"%{b:02X}" for b in TOKEN.value.encode()).encode()
    body = os.urandom(4096) + b" token=" + hidden + b" " + os.urandom(4096)
    assert (TOKEN.name, "url") in MATCHER.find(body)


# Opacity: what reads as nothing, and what reads once decoded.


def test_opacity_edges() -> None:
    aws = AWS.value.encode()[:40]
    xored = bytes(a ^ b for a, b in zip(aws, os.urandom(40), strict=True))
    assert opaque([xored])
    assert not opaque([os.urandom(MIN_BYTES - 1)])  # too short to tell
    assert looks_random(os.urandom(MIN_BYTES))
    assert looks_random(os.urandom(1 << 20))
    # Structured binary: repeated fields, small numbers, zeros.
    structured = b"".join(struct.pack("<IHH", i, i % 7, 0) for i in range(200))
    assert not looks_random(structured)
    assert not looks_random(bytes(4096))
    document = json.dumps({"tests": 12, "passed": True, "names": ["a", "b"] * 50}).encode()
    assert reads_as_text(document)
    assert not opaque([document])
    blob = os.urandom(300)
    assert not reads_as_text(b64(blob))  # an encoding's run: its decoding is judged
    assert opaque([b64(blob), blob])
    assert not opaque([gzip.compress(document), document])  # readable once inflated
    assert entropy(b"") == 0.0
    assert entropy(bytes(range(256))) == 8.0
    assert random_entropy(40) == pytest.approx(4.32, abs=0.01)
    assert random_entropy(1 << 20) == RANDOM_ENTROPY


def test_random_bytes_look_random_at_every_size() -> None:
    # Seeded, so the same bytes every run: at 300 bytes a fixed 7.2-bit threshold let
    # one random body in thirty pass for readable, and the test above flaked on it.
    for n in range(MIN_BYTES, 2048 + 1, 8):
        rng = random.Random(n)
        quiet = [i for i in range(50) if not looks_random(rng.randbytes(n))]
        assert quiet == [], (n, random_entropy(n))


def test_the_matcher_judges_opacity_through_the_layers() -> None:
    aws = AWS.value.encode()
    xored = bytes(a ^ b for a, b in zip(aws, os.urandom(len(aws)), strict=True))
    for body, dark in (
        (xored, True),
        (b64(xored), True),
        (json.dumps({"blob": b64(os.urandom(500)).decode()}).encode(), True),
        (gzip.compress(b"a readable log line\n" * 100), False),
        (b"id,name\n" + b"1,a\n" * 1000, False),
    ):
        MATCHER.find(body, judge_opacity=True)
        assert MATCHER.opaque is dark, body[:40]


# Random compositions of encodings around a decoy, with text between that does not
# continue an encoding's alphabet: the decoy is found, whatever the order.

_TEXT = st.text(alphabet=" ,.:;!?()[]{}<>\n#&*@^~|", max_size=24).map(str.encode)
_TEXTUAL = {
    "base64": base64.b64encode,
    "base64url": lambda d: base64.urlsafe_b64encode(d).rstrip(b"="),
    "hex": lambda d: d.hex().encode(),
    "base32": base64.b32encode,
    "url": lambda d: "".join(f"%{b:02X}" for b in d).encode(),
    "json": lambda d: "".join(f"\\u{b:04x}" for b in d).encode(),
}
_BINARY = {
    "gzip": gzip.compress,
    "zlib": zlib.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
    "brotli": lambda d: brotli.compress(d, quality=5),
}


@settings(max_examples=80, deadline=None)
@given(
    names=st.lists(st.sampled_from([*_TEXTUAL, *_BINARY]), min_size=1, max_size=4),
    texts=st.lists(st.tuples(_TEXT, _TEXT), min_size=4, max_size=4),
)
def test_any_composition_of_encodings_around_a_decoy_is_found(
    names: list[str], texts: list[tuple[bytes, bytes]]
) -> None:
    data = env_dump()
    for name, (before, after) in zip(names, texts, strict=False):
        if name in _TEXTUAL:
            if name == "json" and not data.isascii():
                continue  # JSON escapes text, not bytes
            data = before + _TEXTUAL[name](data) + after
        else:
            # A stream without a magic (brotli) is only guessed where its layer starts.
            data = _BINARY[name](data) + (b"" if name == "brotli" else after)
    found = scan(MATCHER, [("body", data)])
    assert TOKEN.name in found.seen, (names, found)


def test_an_alignment_that_looks_like_a_stream_does_not_hide_the_one_that_reads() -> None:
    # Found by the property test above: base64 three times with text before the second
    # layer; one alignment of the outer run decoded to two bytes that pass zlib's header
    # check by chance (0xe8 0x80: CINFO 14, which RFC 1950 forbids), and it was peeled
    # instead of the alignment that reads as text.
    data = env_dump()
    for before in (b"", b"::: :", b""):
        data = before + base64.b64encode(data)
    assert TOKEN.name in scan(MATCHER, [("body", data)]).seen
    assert magic(b"\xe8\x80" + bytes(30)) is None
    assert magic(zlib.compress(b"x" * 100)) == "zlib"


def test_a_brotli_stream_with_bytes_after_it_is_still_inflated() -> None:
    # Found by the property test: brotli, then URL-encoded with a ':' after it; brotli has
    # no magic, so it is only tried where its layer starts, and the ':' broke it.
    data = env_dump()
    data = "".join(f"%{b:02X}" for b in brotli.compress(data, quality=5)).encode() + b":"
    assert TOKEN.name in scan(MATCHER, [("body", data)]).seen


def test_a_run_of_escapes_is_a_layer_of_its_own() -> None:
    # Found by the property test: a brotli stream URL-encoded after a ':'. Unquoting the
    # whole keeps the ':' in front, and brotli (no magic) is only tried where a layer
    # starts; each run of escapes decoded on its own starts with the stream.
    stream = brotli.compress(env_dump(), quality=5)
    encoded = b":" + "".join(f"%{b:02X}" for b in stream).encode()
    assert TOKEN.name in scan(MATCHER, [("body", encoded)]).seen

"""Tell a body nothing can read (encrypted, random) from one that reads once decoded.

A sender that encrypts what it stole (a decoy XORed with a key, AES) defeats every
decoder: no layer shows the decoy. What it cannot hide is that nothing it sent reads as
anything. A body is *opaque* when no layer of it (``unwrap.py``: the body as sent and
every decoding of it) reads as text and at least one layer looks random:

* a layer *reads as text* when at least ``TEXT_SHARE`` of its bytes are printable ASCII
  or whitespace and less than ``ENCODED_SHARE`` of them are runs of an encoding's
  alphabet (base64, hex, base32): a JSON document does, a base64 blob does not (its
  decodings are judged instead), gzip'd text does once inflated;
* a layer *looks random* when it has at least ``MIN_BYTES`` bytes and its Shannon
  entropy per byte reaches ``random_entropy(n)``: ``RANDOM_ENTROPY`` (7.2 bits) for a
  layer of 512 bytes or more, and below that ``log2(n) - 1`` (n bytes can show at most
  log2(n) bits each) or what n random bytes are expected to show less ``RANDOM_MARGIN``,
  whichever is lower (40 random bytes show about 5.2, threshold 4.3; 300 show about
  7.29, threshold 6.99; 40 bytes of structured binary, repeated fields and zeros, show
  far less).

A maintainer's legitimate binary upload that is itself compressed without a magic we
know (a zip's members, an image) can be opaque: the rule it feeds is a warning unless
the sender read a decoy first. Entropy is measured over at most ``SAMPLES`` windows of
``SAMPLE`` bytes spread over the layer, so the cost per layer is bounded.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

MIN_BYTES = 32
RANDOM_ENTROPY = 7.2
# How far under the entropy random bytes are expected to show (``random_entropy``) a
# layer may fall and still look random: five spreads and more at every size.
RANDOM_MARGIN = 0.4
TEXT_SHARE = 0.85
ENCODED_SHARE = 0.5
SAMPLE = 64 * 1024
SAMPLES = 3
_PRINTABLE = bytes([9, 10, 13, *range(0x20, 0x7F)])
# Runs of an encoding's alphabet long enough to carry a secret (unwrap.py decodes them).
_ENCODED_RUN = re.compile(rb"[A-Za-z0-9+/_=-]{16,}")


def _samples(data: bytes) -> list[bytes]:
    """Return up to SAMPLES windows of SAMPLE bytes: head, middle and tail."""
    if len(data) <= SAMPLE * SAMPLES:
        return [data]
    middle = (len(data) - SAMPLE) // 2
    return [data[:SAMPLE], data[middle : middle + SAMPLE], data[-SAMPLE:]]


def entropy(data: bytes) -> float:
    """Return the Shannon entropy of ``data`` in bits per byte (0 for no bytes)."""
    if not data:
        return 0.0
    counts = Counter(data)
    total = len(data)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def random_entropy(n: int) -> float:
    """Return the entropy per byte from which ``n`` bytes look random.

    Below what ``n`` random bytes show by a margin that holds at every size: for a few
    hundred bytes, the count's own shortfall (Miller-Madow: ``255 / (2 n ln 2)`` bits
    under 8) brings random bytes near RANDOM_ENTROPY, and 300 of them fell under it one
    time in thirty.
    """
    n = max(n, 2)
    below = min(RANDOM_ENTROPY, math.log2(n) - 1.0)
    if n < 128:  # the shortfall's estimate holds from half the byte alphabet's size on
        return below
    return min(below, 8.0 - 255 / (2 * n * math.log(2)) - RANDOM_MARGIN)


def looks_random(data: bytes) -> bool:
    """Return whether ``data`` has MIN_BYTES or more and the entropy of random bytes."""
    if len(data) < MIN_BYTES:
        return False
    return all(entropy(s) >= random_entropy(len(s)) for s in _samples(data))


def reads_as_text(data: bytes) -> bool:
    """Return whether ``data`` is printable text that is not mostly an encoding's runs."""
    if not data:
        return False
    samples = _samples(data)
    size = sum(len(s) for s in samples)
    printable = size - sum(len(s.translate(None, _PRINTABLE)) for s in samples)
    if printable < TEXT_SHARE * size:
        return False
    encoded = sum(len(m.group()) for s in samples for m in _ENCODED_RUN.finditer(s))
    return encoded < ENCODED_SHARE * size


class Opacity:
    """Judge a body from its layers, fed one by one: ``opaque`` once all are in."""

    def __init__(self) -> None:
        """Start with nothing seen."""
        self.readable = False
        self.random = False

    def add(self, data: bytes) -> None:
        """Take one layer into account."""
        if self.readable:
            return
        if reads_as_text(data):
            self.readable = True
        elif not self.random and looks_random(data):
            self.random = True

    @property
    def opaque(self) -> bool:
        """Return whether no layer read as text and one looked random."""
        return self.random and not self.readable


def opaque(layers: Iterable[bytes]) -> bool:
    """Return whether a body whose layers are ``layers`` is opaque."""
    judge = Opacity()
    for layer in layers:
        judge.add(layer)
    return judge.opaque

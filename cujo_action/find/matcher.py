"""Find decoy values in bytes, or long enough slices of them, through every encoding."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.find.opacity import Opacity
from cujo_action.find.unwrap import BUDGET, Layer, Unwrap

MIN_NEEDLE = 12
"""Needles shorter than this are too short to mean anything and are skipped."""

# How a decoy was found, first layer undone first (unwrap.py names them).
ENCODINGS: tuple[str, ...] = (
    "plain", "url", "json", "qp", "hex", "base64", "base32",
    "gzip", "zlib", "deflate", "zstd", "brotli",
)  # fmt: skip

# A decoy counts as found when this many consecutive characters of it are (the whole decoy
# when it is shorter), of which at least SECRET_MIN are its own and not its format's (the
# "AKIA", "ghs_", the key header or a JWT's fixed claims every decoy of its kind shares).
SLICE = 20
SECRET_MIN = 16
# Slices are found through GRAM-long pieces looked up every STEP bytes: any SLICE-long
# slice holds one such piece, so the scan costs one dictionary lookup per STEP bytes.
GRAM = 12
# A layer larger than this is searched in windows of it (the folded copy stays small).
WINDOW = 4 << 20
STEP = SLICE - GRAM + 1
_DRAWS = 2  # other draws compared with, to tell a kind's format from a decoy's own bytes


@dataclass(frozen=True)
class _Text:
    """One decoy's value as searched: exact, folded, and how much of each prefix is secret."""

    name: str
    exact: bytes
    folded: bytes
    secret_before: tuple[int, ...]  # secret characters in value[:i], for i in 0..len

    def secret_in(self, start: int, end: int) -> int:
        return self.secret_before[end] - self.secret_before[start]


def _secret_mask(decoy: Decoy, others: Sequence[tuple[Decoy, ...]]) -> list[bool]:
    """Return, per character, whether it is the decoy's own (not its kind's format)."""
    value = decoy.value
    same = [o.value for draw in others for o in draw if o.name == decoy.name]
    same = [v for v in same if len(v) == len(value)]
    if not same:
        return [True] * len(value)
    return [any(v[i] != c for v in same) for i, c in enumerate(value)]


class DecoyMatcher:
    """Find decoy values in bytes, or long enough slices of them, through every encoding.

    Each input is unwrapped (``unwrap.py``: URL, JSON and MIME escapes, base64, base32,
    hex, compression, nested) and every layer is searched for a slice of SLICE characters
    of a decoy (the whole decoy if shorter). Found as ``(decoy name, encoding)``, the
    encoding being the path of layers undone (``plain``, ``base64``, ``gzip+base64``…).
    """

    def __init__(self, decoys: Iterable[Decoy], *, budget: int = BUDGET) -> None:
        """Build every lookup table for ``decoys`` up front (``budget``: see ``unwrap``)."""
        self.decoys: tuple[Decoy, ...] = tuple(decoys)
        self.budget = budget
        others = [make_decoys() for _ in range(_DRAWS)]
        self._texts: list[_Text] = []
        self._grams: dict[bytes, list[tuple[int, int]]] = {}
        self._folded: dict[bytes, list[tuple[int, int]]] = {}
        self._short: list[tuple[int, bytes, bytes]] = []
        for decoy in self.decoys:
            exact = decoy.value.encode()
            if len(exact) < MIN_NEEDLE:
                continue
            mask = _secret_mask(decoy, others)
            before = [0]
            for own in mask:
                before.append(before[-1] + own)
            idx = len(self._texts)
            self._texts.append(_Text(decoy.name, exact, exact.lower(), tuple(before)))
            if len(exact) < SLICE:
                self._short.append((idx, exact, exact.lower()))
                continue
            for i in range(len(exact) - GRAM + 1):
                if before[i + GRAM] - before[i]:  # a piece of format alone proves nothing
                    self._grams.setdefault(exact[i : i + GRAM], []).append((idx, i))
                    self._folded.setdefault(exact[i : i + GRAM].lower(), []).append((idx, i))
        # The last search: why part of it was not searched ("" if all was), and whether
        # nothing in it read as anything (``opacity.py``; judged when asked for).
        self.unsearched = ""
        self.opaque = False
        self._longest = max((len(t.exact) for t in self._texts), default=SLICE)

    @property
    def exhausted(self) -> bool:
        """Return whether a cap kept part of the last input from being searched."""
        return bool(self.unsearched)

    def _span(self, hay: bytes, at: int, idx: int, offset: int, folded: bool) -> tuple[int, int]:
        """Return (where it ends in ``hay``, its length) if the piece at ``at`` grows into a
        counting slice of decoy ``idx``, else (0, 0)."""
        text = self._texts[idx]
        value = text.folded if folded else text.exact
        left = 0
        while min(at, offset) > left and hay[at - left - 1] == value[offset - left - 1]:
            left += 1
        right = GRAM
        while (
            at + right < len(hay)
            and offset + right < len(value)
            and hay[at + right] == value[offset + right]
        ):
            right += 1
        start, end = offset - left, offset + right
        whole = len(value)
        counts = end - start >= min(SLICE, whole) and text.secret_in(start, end) >= min(
            SECRET_MIN, text.secret_in(0, whole)
        )
        return (at + right, end - start) if counts else (0, 0)

    def _scan(self, data: bytes, folded: bool) -> dict[int, int]:
        """Return, per decoy (by index) a slice of which is in ``data``, its longest slice.

        A large layer is searched window by window, each overlapping the next by a whole
        decoy, so a slice straddling two windows is in one of them whole.
        """
        if len(data) <= WINDOW:
            return self._scan_window(data, folded)
        found: dict[int, int] = {}
        overlap = self._longest + GRAM
        for start in range(0, len(data), WINDOW):
            window = data[start : start + WINDOW + overlap]
            for idx, length in self._scan_window(window, folded).items():
                found[idx] = max(found.get(idx, 0), length)
            if start + WINDOW + overlap >= len(data):
                break
        return found

    def _scan_window(self, data: bytes, folded: bool) -> dict[int, int]:
        hay = data.lower() if folded else data
        grams = self._folded if folded else self._grams
        found: dict[int, int] = {}
        past: dict[int, int] = {}  # where the last slice of each decoy ended in hay
        get = grams.get
        for at in range(0, len(hay) - GRAM + 1, STEP):
            entries = get(hay[at : at + GRAM])
            if entries:
                for idx, offset in entries:
                    if at < past.get(idx, 0):
                        continue  # inside a slice already measured
                    end, length = self._span(hay, at, idx, offset, folded)
                    if length:
                        past[idx] = end
                        found[idx] = max(found.get(idx, 0), length)
        for idx, exact, lower in self._short:
            if (lower if folded else exact) in hay:
                found[idx] = len(exact)
        return found

    def find(
        self, data: bytes, *, fold_case: bool = False, judge_opacity: bool = False
    ) -> list[tuple[str, str]]:
        """Return (decoy name, encoding) for each decoy found in ``data``, in decoy order.

        ``fold_case``: the bytes may have lost their case on the way (a DNS name). A layer
        undone as a whole (URL or JSON escapes) holds what its parent held: there, the
        layer that shows the longest slice of a decoy names the encoding. Afterwards
        ``unsearched`` says why part was not searched, and (``judge_opacity``) ``opaque``
        whether nothing in it read as anything.
        """
        walk = Unwrap(data, budget=self.budget)
        judge = Opacity() if judge_opacity else None
        layers: list[Layer] = []  # kept alive: their ids name their groups
        group_of: dict[int, int] = {}
        best: dict[tuple[int, int], tuple[int, int, str]] = {}
        for layer, parent in walk:
            layers.append(layer)
            whole_of = layer.whole and parent is not None
            group = group_of[id(parent)] if whole_of and parent is not None else id(layer)
            group_of[id(layer)] = group
            if judge is not None and not layer.leaf:
                judge.add(layer.data)
            for idx, length in self._scan(layer.data, fold_case and parent is None).items():
                held = best.get((idx, group))
                if held is None or length > held[0]:
                    best[(idx, group)] = (length, len(layer.path), layer.encoding)
        self.unsearched = walk.unsearched
        self.opaque = judge is not None and judge.opaque
        ranked = sorted(
            {(idx, depth, enc) for (idx, _), (_, depth, enc) in best.items()},
            key=lambda h: (h[0], h[1], _encoding_rank(h[2]), h[2]),
        )
        return list(dict.fromkeys((self._texts[idx].name, enc) for idx, _, enc in ranked))


def _encoding_rank(encoding: str) -> int:
    first = encoding.split("+", 1)[0]
    return ENCODINGS.index(first) if first in ENCODINGS else len(ENCODINGS)


@functools.lru_cache(maxsize=8)
def _matcher(decoys: tuple[Decoy, ...]) -> DecoyMatcher:
    return DecoyMatcher(decoys)


def find_decoys(data: bytes, decoys: Sequence[Decoy]) -> list[tuple[str, str]]:
    """Return (decoy name, encoding) for each decoy found in ``data``."""
    return _matcher(tuple(decoys)).find(data)

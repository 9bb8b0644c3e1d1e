"""The search of what a command prints (output.py): whole streams, in windows, linear.

A decoy printed anywhere in a stream, in any encoding the matcher undoes, is found
however the stream was cut into reads and windows: across a window's edge, inside one
long run of base64 (where a cut in the wrong place would misalign every nested layer),
in pieces a byte at a time. Windows are small here so that the edges are many.
"""

from __future__ import annotations

import base64
import os
import random
import threading

import pytest

from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.sandbox import output
from cujo_action.sandbox.output import OutputSearch, Printed

DECOYS = make_decoys()
MATCHER = DecoyMatcher(DECOYS)
TOKEN = next(d for d in DECOYS if d.name == "GITHUB_TOKEN").value.encode()
KEY_ID = next(d for d in DECOYS if d.name == "AWS_ACCESS_KEY_ID").value.encode()
KEY = next(d for d in DECOYS if d.name == "SSH_PRIVATE_KEY").value.encode()
WINDOW = 128 << 10
OVERLAP = 32 << 10


def b64(data: bytes, times: int = 1) -> bytes:
    for _ in range(times):
        data = base64.b64encode(data)
    return data


def search(data: bytes, chunk: int = 4093, matcher: object = MATCHER) -> OutputSearch:
    found = OutputSearch(
        matcher,  # type: ignore[arg-type]
        "stdout",
        threading.Lock(),
        window=WINDOW,
        overlap=OVERLAP,
    )
    for at in range(0, len(data), chunk):
        found.feed(data[at : at + chunk])
    found.close()
    return found


def names(found: OutputSearch) -> set[str]:
    return {p.name for p in found.printed()}


@pytest.mark.parametrize("shift", range(-300, 120, 23))
def test_a_decoy_across_a_window_edge_is_found(shift: int) -> None:
    # Lines of ordinary output, then the decoy base64 twice on a line that straddles
    # where the first window would end (and the next ones, as the shift moves it).
    line = b"PASSED tests/test_calc.py::test_add " + b"." * 34 + b"\n"
    lead = line * ((WINDOW + shift) // len(line))
    data = lead + b"summary: " + b64(TOKEN, 2) + b"\n" + line * 5000
    assert search(data).printed() == [Printed("GITHUB_TOKEN", "base64+base64", "stdout")]


@pytest.mark.parametrize("shift", range(-70, 10, 7))
def test_a_decoy_full_of_separators_across_a_window_edge_is_found(shift: int) -> None:
    # Percent-encoded byte by byte, the decoy has a separator every three bytes: a cut
    # can fall inside it, and only the windows' overlap keeps it whole in one of them.
    # The key id is one slice long: any cut through it leaves too little on either side.
    quoted = "".join(f"%{b:02X}" for b in KEY_ID).encode()
    data = b"x" * (WINDOW + shift) + b" " + quoted + b"\n" + b"y\n" * 40000
    assert search(data).printed() == [Printed("AWS_ACCESS_KEY_ID", "url", "stdout")]


@pytest.mark.parametrize("pad", [0, 1, 2, 5, 7, 1001, 4093])
def test_a_decoy_inside_one_long_base64_run_is_found_at_its_alignment(pad: int) -> None:
    # One line of base64 twice, several windows long, no separator anywhere: the decoy
    # sits past the first window's edge, so only a window cut at the run's alignment
    # decodes both layers where it is.
    inner = os.urandom(3 * (WINDOW // 2) + pad) + b" " + TOKEN + b" " + os.urandom(WINDOW)
    found = search(b"out: " + b64(inner, 2) + b"\n")
    assert found.printed() == [Printed("GITHUB_TOKEN", "base64+base64", "stdout")]
    assert found.unsearched == 0


def test_a_decoy_fed_a_byte_at_a_time_is_found() -> None:
    data = b"x" * (WINDOW - 40) + b"k=" + b64(KEY) + b"\n" + b"y\n" * 60000
    assert names(search(data, chunk=1)) == {"SSH_PRIVATE_KEY"}


def test_every_decoy_is_found_once_per_encoding_however_often_printed() -> None:
    data = (TOKEN + b"\n" + b"z" * 999 + b"\n") * 500
    assert search(data).printed() == [Printed("GITHUB_TOKEN", "plain", "stdout")]


def test_noise_of_the_same_shape_holds_no_decoy() -> None:
    rng = random.Random(20)
    lines = [b64(rng.randbytes(57)) + b"\n" for _ in range(12000)]
    found = search(b"".join(lines) + b64(b64(rng.randbytes(3000))) + b"\n")
    assert found.printed() == []
    assert found.unsearched == 0


class Recorder:
    """A matcher that finds nothing and records the windows it was given."""

    def __init__(self, exhausted: bool = False) -> None:
        self.windows: list[int] = []
        self.exhausted = exhausted

    def find(self, data: bytes, *, fold_case: bool = False) -> list[tuple[str, str]]:
        self.windows.append(len(data))
        return []


@pytest.mark.parametrize(
    "data",
    [
        b"y\n" * 600_000,
        b64(os.urandom(900_000)),
        # Each random byte mapped onto one of six (a table, not a loop: collected per worker).
        random.Random(3).randbytes(700_000).translate(bytes(b"ab +=\n"[i % 6] for i in range(256))),
    ],
    ids=["lines", "one-run", "mixed"],
)
def test_every_byte_is_searched_and_none_more_than_twice(data: bytes) -> None:
    recorder = Recorder()
    found = search(data, matcher=recorder)
    assert found.searched == len(data)
    assert sum(recorder.windows) <= 2 * len(data)
    assert max(recorder.windows) <= WINDOW


def test_a_window_whose_decoding_ran_out_of_budget_is_counted_unsearched() -> None:
    data = b"y\n" * 200_000
    found = search(data, matcher=Recorder(exhausted=True))
    assert found.unsearched == len(data)


def test_windows_too_small_for_the_overlap_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        OutputSearch(MATCHER, "stdout", threading.Lock(), window=64 << 10, overlap=48 << 10)


def test_the_default_windows_leave_room_for_the_longest_nested_decoy() -> None:
    # A decoy base64 four times is about 3.2 times as long; its every slice must fit in
    # the overlap to be whole in one window.
    longest = max(len(d.value) for d in DECOYS)
    assert len(b64(b"x" * longest, 4)) < output.OVERLAP

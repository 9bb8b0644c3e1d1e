"""A request body spooled to disk and searched in windows: nothing a window cuts is lost."""

from __future__ import annotations

import base64
import gzip
import os
import stat
import zlib
from pathlib import Path

import pytest

from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.limits import MiB
from cujo_action.net.proxy.request import scan
from cujo_action.net.proxy.spool import (
    OVER_LIMIT_REASON,
    BodySearch,
    Spool,
    search_spool,
    spool_dir,
)

DECOYS = make_decoys()
MATCHER = DecoyMatcher(DECOYS)
AWS = next(d for d in DECOYS if d.name == "AWS_SECRET_ACCESS_KEY").value.encode()
OVERLAP = 8 * max(len(d.value) for d in DECOYS) + 64
# The proxy searches in windows of proxy.spool.WINDOW (16 MiB); the same walk on 1 MiB
# windows crosses as many edges in a sixteenth of the bytes.
WINDOW = 1 * MiB


def spooled(tmp_path: Path, body: bytes, cap: int | None = None) -> Spool:
    spool = Spool(spool_dir(tmp_path), **({"cap": cap} if cap else {}))
    for at in range(0, len(body), 1 << 16):
        spool.feed(body[at : at + (1 << 16)])
    spool.close()
    return spool


def search(spool: Spool, coding: str | None = None, *, judge: bool = True) -> BodySearch:
    def whole(data: bytes) -> tuple[list[str], list[str], str, bool]:
        got = scan(MATCHER, [("body", data)], judge=("body",) if judge else ())
        return got.seen, got.where, got.unsearched, got.opaque

    return search_spool(
        MATCHER, spool, coding, judge=judge, overlap=OVERLAP, scan_whole=whole, window=WINDOW
    )


# Random bytes read as short words: text with no decoy, no encoded run, and some entropy.
_WORDS = bytes.maketrans(bytes(range(256)), b"abcdefghijklmnopqrstuvwxyz .,;:!" * 8)


def noise(size: int) -> bytes:
    """Return readable text that holds no decoy and compresses poorly."""
    return os.urandom(size).translate(_WORDS)


def test_the_spool_is_the_proxys_own_and_stores_up_to_its_cap(tmp_path: Path) -> None:
    spool = spooled(tmp_path, b"x" * 1000, cap=600)
    assert stat.S_IMODE(spool.path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(spool.path.stat().st_mode) == 0o600
    assert (spool.stored, spool.received, spool.over) == (600, 1000, True)
    assert spool.path.read_bytes() == b"x" * 600
    spool.remove()
    assert not spool.path.exists()


def test_a_decoy_at_a_window_edge_and_at_the_very_end_is_found(tmp_path: Path) -> None:
    head = noise(WINDOW - len(AWS) // 2)
    body = head + AWS + noise(WINDOW // 2) + base64.b64encode(AWS)
    found = search(spooled(tmp_path, body))
    assert found.seen == ["AWS_SECRET_ACCESS_KEY"]
    assert set(found.where) == {"body:plain", "body:base64"}
    assert found.unsearched == ""
    assert not found.opaque


def test_a_gzip_stream_running_past_a_window_is_inflated_from_the_file(tmp_path: Path) -> None:
    """A tar.gz-like upload over the window: the decoy deep in it is still found."""
    stream = gzip.compress(noise(WINDOW + WINDOW // 2 + 2 * MiB) + AWS, compresslevel=1)
    assert len(stream) > WINDOW
    found = search(spooled(tmp_path, b"--form\r\n" + stream))
    assert found.seen == ["AWS_SECRET_ACCESS_KEY"]
    assert found.where == ["body:gzip"]
    assert found.unsearched == ""


def test_a_gzip_content_encoding_over_the_window_is_undone_streaming(tmp_path: Path) -> None:
    body = gzip.compress(noise(WINDOW + MiB) + AWS + noise(MiB), compresslevel=1)
    found = search(spooled(tmp_path, body), "gzip")
    assert found.seen == ["AWS_SECRET_ACCESS_KEY"]
    assert found.where == ["body:plain"]
    assert found.unsearched == ""


def test_an_encoded_run_reaching_a_window_edge_is_decoded_whole(tmp_path: Path) -> None:
    run = base64.b64encode(zlib.compress(noise(MiB) + AWS))
    body = b"x=" + noise(WINDOW - len(run) // 2) + b"&file=" + run + b"&end=" + noise(MiB)
    found = search(spooled(tmp_path, body))
    assert found.seen == ["AWS_SECRET_ACCESS_KEY"]
    assert found.where == ["body:base64+zlib"]
    assert found.unsearched == ""


def test_an_encoded_run_longer_than_half_a_window_is_named_unsearched(tmp_path: Path) -> None:
    run = base64.b64encode(os.urandom(WINDOW))
    found = search(spooled(tmp_path, b"file=" + run))
    assert "encoded run over" in found.unsearched


def test_a_body_past_the_cap_is_unsearched_and_what_was_kept_searched(tmp_path: Path) -> None:
    body = AWS + noise(2 * MiB)
    found = search(spooled(tmp_path, body, cap=MiB))
    assert found.seen == ["AWS_SECRET_ACCESS_KEY"]
    assert found.unsearched == OVER_LIMIT_REASON


@pytest.mark.parametrize("size", [WINDOW // 2, 2 * WINDOW + 12345])
def test_a_benign_body_finds_nothing_and_is_all_searched(tmp_path: Path, size: int) -> None:
    found = search(spooled(tmp_path, noise(size)))
    assert (found.seen, found.unsearched, found.opaque) == ([], "", False)
    found = search(spooled(tmp_path, os.urandom(size)))
    assert (found.seen, found.unsearched, found.opaque) == ([], "", True)


def test_the_spool_folder_is_never_a_link_or_anothers(tmp_path: Path) -> None:
    # Attack test for the one root-side mkdir: a link (or a folder of another user)
    # planted at the spool's name is refused, never followed or used.
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    before = target.stat().st_mode
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "spool").symlink_to(target)
    with pytest.raises(OSError, match="not a folder of the proxy's own"):
        spool_dir(linked)
    assert target.stat().st_mode == before  # not chmodded through the link
    foreign = tmp_path / "foreign"
    (foreign / "spool").mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(foreign / "spool", 65534, 65534)
        with pytest.raises(OSError, match="not a folder of the proxy's own"):
            spool_dir(foreign)
    (tmp_path / "fresh").mkdir()
    assert stat.S_IMODE(spool_dir(tmp_path / "fresh").stat().st_mode) == 0o700

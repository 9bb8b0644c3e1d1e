"""A bundle's zip is untrusted: every way it can be wrong is an error saying why.

What the unpacked folder holds is read by the bundle reader
(tests/cujo_action/evidence/test_reader.py).
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest
from zipfactory import raw_zip, set_declared_size, set_flag_bits, with_mode

from app_relay.runs.bundle_intake import unpack_bundle
from cujo_action.evidence.reader import BundleError


def unpack(tmp_path: Path, archive: bytes, **caps: int) -> Path:
    src = tmp_path / "a.zip"
    src.write_bytes(archive)
    return unpack_bundle(src, tmp_path / "out", **caps)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("/etc/passwd", "is an absolute path"),
        ("a/../../x", "climbs out"),
        ("..", "climbs out"),
        ("C:/x.json", "drive letter"),
        ("c:x.json", "drive letter"),
        ("..\\evil", "backslash"),
        ("a\\b.json", "backslash"),
        ("a//b.json", "empty or '.' path segment"),
        ("./a.json", "empty or '.' path segment"),
        ("a\nb.json", "control character"),
    ],
)
def test_unsafe_names_are_refused(tmp_path: Path, name: str, why: str) -> None:
    with pytest.raises(BundleError, match=why) as caught:
        unpack(tmp_path, raw_zip([("ok.json", b"{}"), (name, b"x")]))
    assert caught.value.entry == name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"'tests.json': is a duplicate name"):
        unpack(tmp_path, raw_zip([("tests.json", b"{}"), ("tests.json", b"{ }")]))


def test_a_file_that_is_also_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="lies inside 'a', which is a file"):
        unpack(tmp_path, raw_zip([("a", b"1"), ("a/b", b"2")]))


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        (stat.S_IFLNK | 0o777, "is a symbolic link"),
        (stat.S_IFIFO | 0o644, "is not a regular file"),
        (stat.S_IFCHR | 0o644, "is not a regular file"),
        (stat.S_IFSOCK | 0o644, "is not a regular file"),
        (stat.S_IFDIR | 0o755, "is a directory without a trailing"),
    ],
)
def test_non_regular_entries_are_refused(tmp_path: Path, mode: int, why: str) -> None:
    with pytest.raises(BundleError, match=why):
        unpack(tmp_path, raw_zip([(with_mode("x.json", mode), b"x")]))


def test_a_link_marked_as_made_elsewhere_is_still_a_link(tmp_path: Path) -> None:
    info = with_mode("x.json", stat.S_IFLNK | 0o777)
    info.create_system = 0  # MS-DOS, yet the Unix bits say link
    with pytest.raises(BundleError, match="is a symbolic link"):
        unpack(tmp_path, raw_zip([(info, b"/etc/passwd")]))


def test_an_encrypted_entry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"'x.json': is encrypted"):
        unpack(tmp_path, set_flag_bits(raw_zip([("x.json", b"{}")]), 0x1))


def test_too_many_entries_are_refused(tmp_path: Path) -> None:
    entries: list[tuple[zipfile.ZipInfo | str, bytes]] = [(f"{i}.json", b"") for i in range(5)]
    with pytest.raises(BundleError, match="holds 5 entries, over the cap of 4"):
        unpack(tmp_path, raw_zip(entries), max_files=4)
    with pytest.raises(BundleError, match="holds 65 entries, over the cap of 64"):
        unpack(tmp_path, raw_zip([(f"{i}.json", b"") for i in range(65)]))


def test_file_and_total_caps_hold(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="'b': declares 101 bytes, over the cap of 100"):
        unpack(tmp_path, raw_zip([("a", b"x" * 100), ("b", b"x" * 101)]), max_file=100)
    with pytest.raises(BundleError, match="'c': takes the declared total over the cap of 250"):
        unpack(tmp_path, raw_zip([(n, b"x" * 100) for n in "abc"]), max_file=100, max_total=250)


def test_an_archive_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="is not a readable zip archive"):
        unpack(tmp_path, b"PK\x03\x04 not really")


def test_a_truncated_entry_is_refused(tmp_path: Path) -> None:
    archive = raw_zip([("x.json", os.urandom(4096))])
    with pytest.raises(
        BundleError, match=r"'x\.json': inflates to 4096 bytes, not the declared 8000"
    ):
        unpack(tmp_path, set_declared_size(archive, 8000))


def test_a_non_empty_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.json").write_text("{}")
    with pytest.raises(BundleError, match="is not an empty folder"):
        unpack(tmp_path, raw_zip([("x.json", b"{}")]))


def test_a_good_archive_holds_exactly_its_files(tmp_path: Path) -> None:
    dest = unpack(
        tmp_path,
        raw_zip(
            [
                ("plan.json", b"{}"),
                (with_mode("evidence/", stat.S_IFDIR | 0o755), b""),
                (with_mode("evidence/egress.jsonl", stat.S_IFREG | 0o644), b"{}\n"),
            ]
        ),
    )
    found = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    assert found == ["evidence", "evidence/egress.jsonl", "plan.json"]
    assert (dest / "evidence" / "egress.jsonl").read_bytes() == b"{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip", "out"]

"""A bundle is untrusted: every way its zip or its files can be wrong is an error saying why."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest
from bundlefactory import make_plan, make_report
from zipfactory import raw_zip, set_declared_size, set_flag_bits, with_mode

from app_relay.runs.bundle_intake import unpack_bundle
from cujo_action.evidence.bundle import write_failure, write_manifest
from cujo_action.evidence.reader import BundleError, read_bundle
from cujo_action.schema import CHECK_NAMES, Failure, Plan, Report

BASE, HEAD, RUN = "a" * 40, "b" * 40, "run-1"


def plan(**over: object) -> Plan:
    ids = {"run_id": RUN, "base_sha": BASE, "head_sha": HEAD, "policy_from": BASE}
    return make_plan(**{**ids, **over})


def report(check: str, **over: object) -> Report:
    ids = {"run_id": RUN, "base_sha": BASE, "head_sha": HEAD}
    return make_report(check, **{**ids, **over})


def make_bundle(folder: Path, *, the_plan: Plan | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text((the_plan or plan()).model_dump_json(by_alias=True))
    for check in CHECK_NAMES:
        (folder / f"{check}.json").write_text(report(check).dump())
    write_manifest(folder, RUN, HEAD, BASE)
    return folder


def test_a_good_bundle_is_read(tmp_path: Path) -> None:
    bundle = read_bundle(make_bundle(tmp_path / "b"), run_id=RUN, head_sha=HEAD, base_sha=BASE)
    assert bundle.plan is not None
    assert [r.check for r in bundle.reports] == list(CHECK_NAMES)
    assert bundle.failure is None


def test_wrong_run_id(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not 'other'"):
        read_bundle(make_bundle(tmp_path / "b"), run_id="other")


def test_wrong_head_sha(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not bound to this run"):
        read_bundle(make_bundle(tmp_path / "b"), run_id=RUN, head_sha="c" * 40)


def test_tampered_report_fails_its_hash(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    data = json.loads((folder / "tests.json").read_text())
    data["status"] = "ok"
    data["summary"] = "all good, trust me"
    (folder / "tests.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"tests\.json does not match its sha256"):
        read_bundle(folder, run_id=RUN)


def test_file_not_in_manifest(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    (folder / "extra.json").write_text("{}")
    with pytest.raises(BundleError, match=r"not in the manifest: extra\.json"):
        read_bundle(folder, run_id=RUN)


def test_symlink_is_refused(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    (folder / "tests.json").unlink()
    os.symlink("/etc/passwd", folder / "tests.json")
    with pytest.raises(BundleError, match="not a regular file"):
        read_bundle(folder, run_id=RUN)


def test_report_for_another_run_is_refused_even_with_a_matching_hash(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    (folder / "tests.json").write_text(report("tests", run_id="run-2").dump())
    write_manifest(folder, RUN, HEAD, BASE)  # a forger can rewrite the manifest too
    with pytest.raises(BundleError, match="bound to run_id='run-2'"):
        read_bundle(folder, run_id=RUN)


def test_a_report_over_a_field_cap_is_read_clipped_and_says_so(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    data = json.loads((folder / "tests.json").read_text())
    data["summary"] = "x" * 5000
    (folder / "tests.json").write_text(json.dumps(data))
    write_manifest(folder, RUN, HEAD, BASE)
    tests = {r.check: r for r in read_bundle(folder, run_id=RUN).reports}["tests"]
    assert tests.summary.startswith("x" * 1900)
    assert len(tests.summary) <= 2000
    assert [(c.limit, c.dropped, c.hides_danger) for c in tests.cuts] == [
        ("report-field", 1, False)
    ]


def test_a_report_past_its_list_caps_keeps_the_head_and_is_unproven(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    data = json.loads((folder / "tests.json").read_text())
    obs = {"kind": "note", "detail": "d"}
    data["observations"] = [{**obs, "id": f"tests:obs:{n}"} for n in range(1, 601)]
    (folder / "tests.json").write_text(json.dumps(data))
    write_manifest(folder, RUN, HEAD, BASE)
    tests = {r.check: r for r in read_bundle(folder, run_id=RUN).reports}["tests"]
    assert [o.id for o in tests.observations] == [f"tests:obs:{n}" for n in range(1, 501)]
    assert not tests.evidence_complete
    (cut,) = tests.cuts
    assert (cut.limit, cut.dropped, cut.hides_danger) == ("report-bytes", 100, True)


def test_a_report_over_its_byte_budget_is_read_whole(tmp_path: Path) -> None:
    # 450 commands' worth of output would have been refused; every item is within its caps.
    folder = make_bundle(tmp_path / "b")
    data = json.loads((folder / "tests.json").read_text())
    tail = "\x01" * 700
    data["commands"] = [
        {"cmd": "c", "phase": "test", "exit_code": 0, "duration_s": 1,
         "stdout_tail": tail * 1, "stderr_tail": tail}
    ] * 50  # fmt: skip
    data["decoy_readers"] = [
        {"pid": n, "phase": "test", "path": "\x01" * 250, "parents": [1]} for n in range(4000)
    ]
    raw = json.dumps(data, indent=2).encode()
    assert len(raw) > 4 * 1024 * 1024
    (folder / "tests.json").write_bytes(raw)
    write_manifest(folder, RUN, HEAD, BASE)
    tests = {r.check: r for r in read_bundle(folder, run_id=RUN).reports}["tests"]
    assert len(tests.decoy_readers) == 4000
    assert len(tests.commands) == 50
    assert not tests.evidence_complete
    (cut,) = tests.cuts
    assert (cut.limit, cut.kept, cut.dropped) == ("report-bytes", len(raw), 0)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not JSON"),
        ('{"schema": "cujo.report/2"}', "fails validation at schema"),
        ("[]", "fails validation"),
    ],
)
def test_a_report_that_cannot_be_trusted_is_still_refused(
    tmp_path: Path, text: str, why: str
) -> None:
    folder = make_bundle(tmp_path / "b")
    (folder / "tests.json").write_text(text)
    write_manifest(folder, RUN, HEAD, BASE)
    with pytest.raises(BundleError, match=why):
        read_bundle(folder, run_id=RUN)


def test_policy_not_from_base_is_refused(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b", the_plan=plan(policy_from=HEAD))
    with pytest.raises(BundleError, match="other than base"):
        read_bundle(folder, run_id=RUN)


def test_missing_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(BundleError, match=r"manifest\.json is missing"):
        read_bundle(folder, run_id=RUN)


def test_malformed_manifest(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    (folder / "manifest.json").write_text('{"schema": "cujo.manifest/1", "files": "nope"}')
    with pytest.raises(BundleError, match=r"manifest\.json fails validation"):
        read_bundle(folder, run_id=RUN)


def test_unsafe_name_in_manifest(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][0]["name"] = "../outside.json"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="unsafe path"):
        read_bundle(folder, run_id=RUN)


def test_failure_bundle(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    write_failure(
        folder,
        Failure(
            run_id=RUN,
            stage="policy",
            reason=".cujo.yml:3: mode: bad",
            path=".cujo.yml",
            line=3,
            key="mode",
        ),
    )
    bundle = read_bundle(folder, run_id=RUN)
    assert bundle.failure is not None
    assert bundle.failure.line == 3
    assert bundle.reports == ()


# ---- unpack_bundle on its own --------------------------------------------------------


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

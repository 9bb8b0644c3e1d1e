"""A bundle folder is untrusted: every way its files can be wrong is an error saying why.

The folder as the relay's intake hands it over (app_relay/runs/bundle_intake.py unpacks
the zip; tests/app_relay/runs/test_bundle_intake.py) or as the review reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from bundlefactory import make_plan, make_report

from cujo_action.evidence.bundle import write_failure, write_manifest
from cujo_action.evidence.reader import (
    EGRESS_COPY,
    MAX_SMALL_FILE,
    BundleError,
    EgressCopy,
    EvidenceSeal,
    held_lines,
    read_bundle,
    read_egress_copy,
    read_manifest,
)
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


# ---- what the tamper reconciliation reads (app_relay/runs/tamper.py) ----------------


def test_the_egress_copy_and_its_seal_are_read_from_the_bundle(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    assert read_egress_copy(folder) == EgressCopy(None, None)
    log = b'{"a": 1}\n{"b": 2}\n'
    (folder / "evidence").mkdir()
    (folder / EGRESS_COPY).write_bytes(log)
    seal = EvidenceSeal(
        name="evidence/egress.jsonl", sha256=hashlib.sha256(log).hexdigest(), bytes=99
    )
    write_manifest(folder, RUN, HEAD, BASE, [seal])
    copy = read_egress_copy(folder)
    assert copy == EgressCopy(log, 99)
    assert not copy.capped
    assert held_lines(copy) == {
        hashlib.sha256(line).hexdigest()[:32] for line in (b'{"a": 1}\n', b'{"b": 2}\n')
    }


def test_the_seal_is_read_within_the_manifest_s_cap(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    (folder / "evidence").mkdir()
    (folder / EGRESS_COPY).write_bytes(b"{}\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["evidence"] = [
        {"name": "evidence/egress.jsonl", "sha256": "0" * 64, "bytes": 3, "writers": []}
    ]
    text = json.dumps(manifest)
    (folder / "manifest.json").write_text(text + " " * (MAX_SMALL_FILE - len(text) + 1))
    with pytest.raises(BundleError, match="over the cap"):
        read_manifest(folder)
    assert read_egress_copy(folder) == EgressCopy(b"{}\n", None)


def test_a_copy_at_its_cap_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cujo_action.evidence.reader.MAX_EVIDENCE_LOG", 4)
    assert EgressCopy(b"1234", None).capped
    assert not EgressCopy(b"123", None).capped
    assert not EgressCopy(None, None).capped

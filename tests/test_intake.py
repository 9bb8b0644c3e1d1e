"""A bundle is untrusted: every way it can be wrong is an error that says why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bundlefactory import make_plan, make_report

from app_relay.intake import BundleError, read_bundle
from cujo_action.bundle import write_failure, write_manifest
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


def test_report_over_its_caps_is_refused(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b")
    data = json.loads((folder / "tests.json").read_text())
    data["summary"] = "x" * 5000
    (folder / "tests.json").write_text(json.dumps(data))
    write_manifest(folder, RUN, HEAD, BASE)
    with pytest.raises(BundleError, match="fails validation at summary"):
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

"""Listing and downloading a run's artifacts, capped and without credentials.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import requests
from fakegithub import Dispatch, zip_bytes
from githubworld import REPO, World

from app_relay.github.answers import GitHubError

# ---- artifacts -----------------------------------------------------------------------


def _run_with_reports(world: World, files: dict[str, bytes | str]) -> tuple[int, int]:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    run = world.fake.state.add_run(REPO, "cujo.yml", status="completed", conclusion="success")
    art = world.fake.state.add_artifact(REPO, run["id"], "cujo-reports", files=files)
    return run["id"], art["id"]


def test_an_artifact_is_listed_and_downloaded_without_credentials(
    world: World, tmp_path: Path
) -> None:
    run_id, art_id = _run_with_reports(world, {"manifest.json": "{}", "detonation.json": "{}"})
    arts = world.gw.run_artifacts(REPO, run_id)
    assert [(a.id, a.name, a.expired) for a in arts] == [(art_id, "cujo-reports", False)]
    dest = world.gw.download_artifact(REPO, art_id, tmp_path / "reports.zip", max_bytes=1 << 20)
    with zipfile.ZipFile(dest) as zf:
        assert sorted(zf.namelist()) == ["detonation.json", "manifest.json"]
    (blob,) = world.fake.state.calls(path="^/blob/")
    assert blob.host == "blob"
    assert blob.auth == "none"  # the fake would also have refused a leaked header
    assert "authorization" not in blob.headers


def test_the_archive_host_refuses_credentials(world: World) -> None:
    location = world.fake.state.blob_for(b"zip")
    answer = requests.get(location, headers={"Authorization": "token ghs_x"}, timeout=5)
    assert answer.status_code == 599
    assert [u.reason for u in world.fake.state.unknown_requests] == [
        "an Authorization header reached the archive host"
    ]
    world.fake.state.unknown_requests.clear()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "streamed"])
def test_an_artifact_over_the_cap_is_refused_and_nothing_is_kept(
    world: World, tmp_path: Path, declared: bool
) -> None:
    _, art_id = _run_with_reports(world, {"big.bin": os.urandom(200_000)})
    world.fake.state.blob_declares_length = declared
    dest = tmp_path / "reports.zip"
    with pytest.raises(GitHubError, match="over the cap of 100000" if declared else "over the cap"):
        world.gw.download_artifact(REPO, art_id, dest, max_bytes=100_000)
    assert list(tmp_path.iterdir()) == []
    world.fake.state.blob_declares_length = True
    world.gw.download_artifact(REPO, art_id, dest, max_bytes=300_000)
    assert dest.stat().st_size > 200_000


def test_an_expired_artifact_fails_closed(world: World, tmp_path: Path) -> None:
    world.fake.state.add_workflow(REPO, "cujo.yml")
    run = world.fake.state.add_run(REPO, "cujo.yml", status="completed", conclusion="success")
    art = world.fake.state.add_artifact(REPO, run["id"], archive=zip_bytes({}), expired=True)
    zip_path = rf"^/repos/{REPO}/actions/artifacts/{art['id']}/zip$"
    with pytest.raises(GitHubError, match="HTTP 410") as raised:
        world.gw.download_artifact(REPO, art["id"], tmp_path / "a.zip", max_bytes=1 << 20)

    # What the client does with a gone artifact: it names the call and keeps GitHub's
    # status for its caller, asks once (a 410 is final, not retried), and leaves nothing
    # at the destination, neither the file nor a part of it.
    error = raised.value
    assert error.call == f"GET /repos/{REPO}/actions/artifacts/{art['id']}/zip"
    assert error.status == 410
    assert len(world.fake.state.calls("GET", zip_path)) == 1
    assert list(tmp_path.iterdir()) == []


def test_actions_behaviour_can_upload_the_bundle_in_the_background(
    world: World, tmp_path: Path
) -> None:
    state = world.fake.state
    state.add_workflow(REPO, "cujo.yml")

    def actions(d: Dispatch) -> None:
        state.set_run(d.repo, d.run_id, status="in_progress")
        state.add_artifact(d.repo, d.run_id, files={"manifest.json": d.inputs["run-id"]})
        state.set_run(d.repo, d.run_id, status="completed", conclusion="success")

    state.on_dispatch(actions)
    result = world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {"run-id": "r-9"})
    assert result.workflow_run_id is not None
    state.wait_for_actions(timeout_s=10)
    assert world.gw.workflow_run(REPO, result.workflow_run_id).conclusion == "success"
    (art,) = world.gw.run_artifacts(REPO, result.workflow_run_id)
    path = world.gw.download_artifact(REPO, art.id, tmp_path / "r.zip", max_bytes=4096)
    with zipfile.ZipFile(path) as zf:
        assert zf.read("manifest.json") == b"r-9"

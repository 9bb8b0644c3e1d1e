"""ActionsRunner through the real gateway against the fake GitHub.

The fake's "Actions" runs the real sandbox on a real git repository and uploads its
bundle; every other test builds the bundle (or a hostile archive) itself, and each asserts
the error names what was wrong. Nothing sleeps: correlation polls with an injected clock.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from bundlefactory import make_plan, make_report
from fakegithub import Dispatch, FakeGitHub
from gitrepo import GitRepo
from repo_paths import SAMPLES
from zipfactory import raw_zip, set_declared_size, with_mode

from app_relay.github.app_auth import GitHubApp
from app_relay.github.client import GitHubGateway
from app_relay.runs.localrun import LocalRunner
from app_relay.runs.runners import (
    FETCH_ERRORS,
    ActionsRunner,
    Dispatched,
    RunnerError,
    RunProgress,
    Unfolded,
    fold_event,
    read_progress,
)
from cujo_action.evidence.bundle import write_manifest
from cujo_action.evidence.reader import BundleError
from cujo_action.schema import CHECK_NAMES, Plan, Report

REPO = "octo/widgets"
DEFAULT = "trunk"  # not "main", so a dispatch on the wrong branch shows
RUN = "run-1"
BASE, HEAD = "b" * 40, "a" * 40
WEBHOOKS = SAMPLES / "webhooks"


@dataclass
class Clock:
    """A clock that only the injected sleep moves."""

    now: float = field(default_factory=time.time)
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class World:
    fake: FakeGitHub
    gw: GitHubGateway
    clock: Clock
    runner: ActionsRunner

    @property
    def state(self) -> Any:
        return self.fake.state

    def runner_with(self, **kw: Any) -> ActionsRunner:
        settings: dict[str, Any] = {"clock": self.clock, "sleep": self.clock.sleep}
        settings.update(kw)
        return ActionsRunner(lambda repo: self.gw, **settings)


@pytest.fixture
def world(fake_github: FakeGitHub) -> Iterator[World]:
    fake_github.add_repo(REPO, default_branch=DEFAULT)
    fake_github.state.add_workflow(
        REPO, "cujo.yml", run_name=lambda inputs: f"cujo {inputs.get('run-id', '')}"
    )
    app = GitHubApp(
        app_id=fake_github.app_id,
        private_key=fake_github.private_key_pem,
        base_url=fake_github.url,
        timeout_s=5,
        backoff_s=0.0,
        seconds_between_requests=None,
        seconds_between_writes=None,
        sleep=lambda s: None,
    )
    gw = app.gateway(fake_github.installation_id)
    clock = Clock()
    runner = ActionsRunner(
        lambda repo: gw, clock=clock, sleep=clock.sleep, correlate_polls=4, correlate_every_s=2.0
    )
    yield World(fake_github, gw, clock, runner)
    gw.close()
    app.close()


# ---- bundles and archives ------------------------------------------------------------


def plan(**over: object) -> Plan:
    ids = {"run_id": RUN, "base_sha": BASE, "head_sha": HEAD, "policy_from": BASE}
    return make_plan(**{**ids, **over})


def report(check: str, **over: object) -> Report:
    ids = {"run_id": RUN, "base_sha": BASE, "head_sha": HEAD}
    return make_report(check, **{**ids, **over})


def bundle_files(folder: Path, **reports: Report) -> dict[str, bytes]:
    """Write a bundle as the sandbox would (manifest last) and return its files."""
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(plan().model_dump_json(by_alias=True))
    for check in CHECK_NAMES:
        (folder / f"{check}.json").write_text(reports.get(check, report(check)).dump())
    write_manifest(folder, RUN, HEAD, BASE)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def finished_run(world: World, *, title: str = f"cujo {RUN}", **kw: Any) -> int:
    settings: dict[str, Any] = {"status": "completed", "conclusion": "success"}
    settings.update(kw)
    run = world.state.add_run(REPO, "cujo.yml", display_title=title, **settings)
    return int(run["id"])


def fetch(world: World, run_id: int, dest: Path, runner: ActionsRunner | None = None) -> Any:
    return (runner or world.runner).fetch_bundle(
        REPO, run_id, run_id=RUN, head_sha=HEAD, base_sha=BASE, dest=dest
    )


# ---- end to end: the real sandbox behind the fake's Actions ----------------------------


def test_a_dispatched_sandbox_run_comes_back_as_reports_bound_to_the_run(
    world: World, tmp_path: Path
) -> None:
    project = GitRepo(tmp_path / "project")
    base = project.write(
        {
            ".cujo.yml": 'install: "true"\ntest: "true"\nsmoke: "true"\n',
            "requirements.txt": "",
            "calc.py": "def add(a, b):\n    return a + b\n",
        }
    ).commit("base")
    head = project.write({"calc.py": "def add(a, b):\n    return b + a\n"}).commit("pr")
    state = world.state
    exits: list[int] = []

    def actions(d: Dispatch) -> None:
        # What the workflow does on a runner: run the sandbox, upload the out folder.
        state.set_run(d.repo, d.run_id, status="in_progress")
        out = tmp_path / f"out-{d.run_id}"
        exits.append(
            LocalRunner(deadline_s=600)
            .start(
                repo=str(project.path),
                base=d.inputs["base-sha"],
                head=d.inputs["head-sha"],
                run_id=d.inputs["run-id"],
                out=out,
            )
            .wait()
        )
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(out.rglob("*")):  # with folder entries, as `zip -r` writes
                zf.write(path, path.relative_to(out).as_posix())
        state.add_artifact(d.repo, d.run_id, archive=buf.getvalue())
        state.set_run(d.repo, d.run_id, status="completed", conclusion="success")

    state.on_dispatch(actions)
    dispatched = world.runner.dispatch(
        REPO, DEFAULT, run_id=RUN, base_sha=base, head_sha=head, pull_request=7
    )
    assert dispatched.html_url is not None
    assert not dispatched.correlated
    (sent,) = state.calls("POST", "/actions/workflows/cujo.yml/dispatches$")
    assert sent.body == {
        "ref": DEFAULT,
        "inputs": {"run-id": RUN, "base-sha": base, "head-sha": head, "pull-request": "7"},
        "return_run_details": True,
    }
    state.wait_for_actions(timeout_s=600)
    assert exits == [0]
    # The workflow run's commit is the default branch's, not the pull request's head.
    assert world.gw.workflow_run(REPO, dispatched.workflow_run_id).head_sha not in (base, head)

    dest = tmp_path / "bundle"
    bundle = world.runner.fetch_bundle(
        REPO, dispatched.workflow_run_id, run_id=RUN, head_sha=head, base_sha=base, dest=dest
    )
    assert bundle.failure is None
    assert bundle.plan is not None
    assert (bundle.plan.run_id, bundle.plan.head_sha, bundle.plan.policy_from) == (RUN, head, base)
    assert (bundle.plan.install, bundle.plan.test, bundle.plan.smoke) == ("true", "true", "true")
    # The head's checks, and the base's run beside them.
    assert {r.check for r in bundle.reports} == {*CHECK_NAMES, "base"}
    assert all((r.run_id, r.head_sha, r.base_sha) == (RUN, head, base) for r in bundle.reports)
    assert (dest / "manifest.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers


# ---- dispatch and correlation --------------------------------------------------------


def test_dispatch_without_run_details_is_correlated_by_its_run_name(world: World) -> None:
    state = world.state
    state.dispatch_returns_details = False
    older = state.add_run(REPO, "cujo.yml", display_title="cujo run-0")
    # The first look finds nothing yet (GitHub lists new runs with a delay).
    state.answer_next("GET", "/workflows/cujo.yml/runs$", '{"total_count":0,"workflow_runs":[]}')
    dispatched = world.runner.dispatch(
        REPO, DEFAULT, run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7
    )
    (run,) = [r for r in state.repos[REPO].runs.values() if r["display_title"] == f"cujo {RUN}"]
    assert dispatched == Dispatched(run["id"], None, correlated=True)
    assert dispatched.workflow_run_id != older["id"]
    assert world.clock.sleeps == [2.0]
    looks = state.calls("GET", "/workflows/cujo.yml/runs$")
    assert len(looks) == 2
    # Only runs created since just before the dispatch are listed.
    assert looks[0].query["created"][0].startswith(">=")


def test_a_dispatch_whose_run_never_appears_is_an_error_after_bounded_looks(
    world: World,
) -> None:
    world.state.dispatch_returns_details = False
    world.state.add_workflow(REPO, "cujo.yml", run_name=lambda inputs: "something else")
    with pytest.raises(RunnerError, match=r"no workflow run named 'cujo run-1' appeared after 4"):
        world.runner.dispatch(
            REPO, DEFAULT, run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7
        )
    assert len(world.state.calls("GET", "/workflows/cujo.yml/runs$")) == 4
    assert world.clock.sleeps == [2.0, 2.0, 2.0]


def test_correlation_stops_at_its_deadline(world: World) -> None:
    world.state.dispatch_returns_details = False
    world.state.add_workflow(REPO, "cujo.yml", run_name=lambda inputs: "something else")
    runner = world.runner_with(correlate_polls=100, correlate_every_s=10.0, correlate_deadline_s=25)
    with pytest.raises(RunnerError, match="after 4 look"):
        runner.dispatch(REPO, DEFAULT, run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7)
    assert world.clock.sleeps == [10.0, 10.0, 5.0]


def test_two_runs_with_the_run_name_are_refused(world: World) -> None:
    world.state.dispatch_returns_details = False
    world.state.add_run(REPO, "cujo.yml", display_title=f"cujo {RUN}")
    with pytest.raises(RunnerError, match="2 workflow runs are named 'cujo run-1'"):
        world.runner.dispatch(
            REPO, DEFAULT, run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7
        )


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"run_id": "run 1; rm -rf /"}, "run id"),
        ({"head_sha": "HEAD"}, "head 'HEAD' is not a 40-hex"),
        ({"base_sha": "b" * 39}, "base"),
        ({"pull_request": 0}, "pull request 0"),
    ],
)
def test_dispatch_arguments_are_checked_before_anything_is_sent(
    world: World, over: dict[str, Any], why: str
) -> None:
    args: dict[str, Any] = {
        "run_id": RUN,
        "base_sha": BASE,
        "head_sha": HEAD,
        "pull_request": 7,
    }
    args.update(over)
    with pytest.raises(RunnerError, match=why):
        world.runner.dispatch(REPO, DEFAULT, **args)
    assert world.state.calls("POST") == []


def test_a_failed_dispatch_is_a_runner_error(world: World) -> None:
    with pytest.raises(RunnerError, match=r"dispatching cujo.yml on nope: .*HTTP 422"):
        world.runner.dispatch(
            REPO, "nope", run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7
        )


def test_cancel_ends_a_waiting_run_and_reports_a_finished_one(world: World) -> None:
    run = world.state.add_run(REPO, "cujo.yml", display_title=f"cujo {RUN}", status="waiting")
    assert world.runner.cancel(REPO, run["id"]) is True
    assert world.state.repos[REPO].runs[run["id"]]["conclusion"] == "cancelled"
    assert world.runner.cancel(REPO, run["id"]) is False
    with pytest.raises(RunnerError, match=r"cancelling workflow run 999999: .*HTTP 404"):
        world.runner.cancel(REPO, 999999)


# ---- fetching: what is refused, and why ----------------------------------------------


def test_a_good_bundle_is_fetched(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world)
    world.state.add_artifact(REPO, run_id, files=bundle_files(tmp_path / "src"))
    bundle = fetch(world, run_id, tmp_path / "dest")
    assert [r.check for r in bundle.reports] == list(CHECK_NAMES)
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == sorted(
        ["manifest.json", "plan.json", *(f"{c}.json" for c in CHECK_NAMES)]
    )


def test_a_forged_report_for_another_run_is_refused(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world)
    files = bundle_files(tmp_path / "src", tests=report("tests", run_id="run-2"))
    world.state.add_artifact(REPO, run_id, files=files)  # the manifest was rewritten to fit
    with pytest.raises(BundleError, match=r"tests\.json: .*bound to run_id='run-2'"):
        fetch(world, run_id, tmp_path / "dest")


def test_a_zip_slip_entry_is_refused_and_nothing_lands_outside(
    world: World, tmp_path: Path
) -> None:
    run_id = finished_run(world)
    files: dict[str, bytes | str] = {"manifest.json": "{}", "../evil": "owned"}
    world.state.add_artifact(REPO, run_id, files=files)
    with pytest.raises(BundleError, match=r"'\.\./evil': climbs out of the folder"):
        fetch(world, run_id, tmp_path / "work" / "dest")
    assert not (tmp_path / "work" / "evil").exists()
    assert list((tmp_path / "work").iterdir()) == []  # no archive, no staging folder


def test_a_symlink_entry_is_refused(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world)
    link = with_mode("tests.json", stat.S_IFLNK | 0o777)
    world.state.add_artifact(REPO, run_id, archive=raw_zip([(link, b"/etc/passwd")]))
    with pytest.raises(BundleError, match=r"'tests.json': is a symbolic link"):
        fetch(world, run_id, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_zip_bomb_is_refused_without_filling_the_disk(world: World, tmp_path: Path) -> None:
    # 16 MiB of zeros deflate to a few KiB; the headers claim 1 KiB.
    archive = set_declared_size(raw_zip([("tests.json", bytes(16 * 1024 * 1024))]), 1024)
    assert len(archive) < 64 * 1024
    run_id = finished_run(world)
    world.state.add_artifact(REPO, run_id, archive=archive)
    with pytest.raises(BundleError, match=r"'tests.json': cannot be inflated to its declared 1024"):
        fetch(world, run_id, tmp_path / "dest")
    assert list(tmp_path.iterdir()) == []


def test_a_huge_declared_size_is_refused_before_inflating(world: World, tmp_path: Path) -> None:
    archive = set_declared_size(raw_zip([("tests.json", b"{}")]), 4_000_000_000)
    run_id = finished_run(world)
    world.state.add_artifact(REPO, run_id, archive=archive)
    with pytest.raises(BundleError, match="declares 4000000000 bytes, over the cap of 8388608"):
        fetch(world, run_id, tmp_path / "dest")


def test_an_oversized_artifact_is_refused_before_download(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world)
    world.state.add_artifact(REPO, run_id, files={"big.bin": os.urandom(50_000)})
    runner = world.runner_with(max_artifact_bytes=10_000)
    with pytest.raises(RunnerError, match=r"is 5\d{4} bytes, over the cap of 10000"):
        fetch(world, run_id, tmp_path / "dest", runner)
    assert world.state.calls(path="/zip$") == []


def test_an_artifact_that_lies_about_its_size_is_cut_off_while_downloading(
    world: World, tmp_path: Path
) -> None:
    run_id = finished_run(world)
    art = world.state.add_artifact(REPO, run_id, files={"big.bin": os.urandom(50_000)})
    art["size_in_bytes"] = 100
    runner = world.runner_with(max_artifact_bytes=10_000)
    with pytest.raises(
        RunnerError, match=r"downloading the 'cujo-reports' .*over the cap of 10000"
    ):
        fetch(world, run_id, tmp_path / "dest", runner)
    assert list(tmp_path.iterdir()) == []


def test_two_artifacts_named_cujo_reports_are_refused(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world)
    files = bundle_files(tmp_path / "src")
    world.state.add_artifact(REPO, run_id, files=files)
    world.state.add_artifact(REPO, run_id, files=files)
    with pytest.raises(RunnerError, match="has 2 artifacts named 'cujo-reports'; refusing"):
        fetch(world, run_id, tmp_path / "dest")


def test_a_missing_or_expired_artifact_is_refused(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world)
    world.state.add_artifact(REPO, run_id, "other", files={"a": "b"})
    with pytest.raises(RunnerError, match="has no artifact named 'cujo-reports'"):
        fetch(world, run_id, tmp_path / "dest")
    expired = finished_run(world)
    world.state.add_artifact(REPO, expired, files=bundle_files(tmp_path / "src"), expired=True)
    with pytest.raises(RunnerError, match=r"artifact of workflow run \d+ has expired"):
        fetch(world, expired, tmp_path / "dest")


def test_an_artifact_gone_by_the_download_is_refused_and_nothing_is_kept(
    world: World, tmp_path: Path
) -> None:
    run_id = finished_run(world)
    world.state.add_artifact(REPO, run_id, files=bundle_files(tmp_path / "src"))
    # Listed as live a moment ago; by the download, GitHub has let it expire.
    gone = '{"message": "Artifact has expired"}'
    world.state.answer_next("GET", r"/actions/artifacts/\d+/zip$", gone, status=410)
    dest = tmp_path / "dest"

    with pytest.raises(RunnerError) as raised:
        fetch(world, run_id, dest)

    # What the relay says (the run's error): what it was doing, and GitHub's answer.
    said = str(raised.value)
    assert said.startswith(f"downloading the 'cujo-reports' artifact of workflow run {run_id}: ")
    assert "HTTP 410: Artifact has expired" in said
    # Nothing of the bundle is kept: no destination, no download folder left beside it.
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


@pytest.mark.parametrize(
    ("status", "conclusion", "why"),
    [
        ("completed", "failure", "concluded 'failure', not 'success'"),
        ("completed", "cancelled", "concluded 'cancelled'"),
        ("in_progress", None, "is in_progress, not completed"),
        ("waiting", None, "is waiting, not completed"),
    ],
)
def test_only_a_successful_run_is_trusted(
    world: World, tmp_path: Path, status: str, conclusion: str | None, why: str
) -> None:
    run_id = finished_run(world, status=status, conclusion=conclusion)
    world.state.add_artifact(REPO, run_id, files=bundle_files(tmp_path / "src"))
    with pytest.raises(RunnerError, match=why):
        fetch(world, run_id, tmp_path / "dest")
    assert world.state.calls(path="/artifacts") == []


def test_a_run_named_for_another_run_id_is_refused(world: World, tmp_path: Path) -> None:
    run_id = finished_run(world, title="cujo run-2")
    world.state.add_artifact(REPO, run_id, files=bundle_files(tmp_path / "src"))
    with pytest.raises(RunnerError, match="named 'cujo run-2', not 'cujo run-1'"):
        fetch(world, run_id, tmp_path / "dest")


def test_an_unreadable_workflow_run_is_a_runner_error(world: World, tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match=r"reading workflow run 424242: .*HTTP 404"):
        fetch(world, 424242, tmp_path / "dest")
    run_id = finished_run(world)
    world.state.answer_next("GET", f"/actions/runs/{run_id}$", '{"id": "x"}')
    with pytest.raises(RunnerError, match="'id'"):
        fetch(world, run_id, tmp_path / "dest")


def test_every_fetch_error_is_one_of_the_declared_kinds() -> None:
    assert (RunnerError, BundleError) == FETCH_ERRORS


# ---- fold_event on webhook bodies ----------------------------------------------------


def sample(name: str) -> dict[str, Any]:
    data = json.loads((WEBHOOKS / f"{name}.json").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("name", "status", "conclusion", "waiting"),
    [
        ("workflow_job.queued", "queued", None, False),
        ("workflow_job.in_progress", "in_progress", None, False),
        ("workflow_job.waiting", "waiting", None, True),
        ("workflow_job.queued.with-deployment", "waiting", None, True),
        ("workflow_job.completed.success.with-organization", "completed", "success", False),
        ("workflow_job.completed.failure.with-organization", "completed", "failure", False),
    ],
)
def test_workflow_job_webhooks_fold_into_progress(
    name: str, status: str, conclusion: str | None, waiting: bool
) -> None:
    payload = sample(name)
    progress = fold_event("workflow_job", payload)
    assert isinstance(progress, RunProgress)
    job = payload["workflow_job"]
    assert progress.event == "workflow_job"
    assert progress.action == payload["action"]
    assert progress.workflow_run_id == job["run_id"] != job["id"]
    assert (progress.status, progress.conclusion, progress.waiting) == (status, conclusion, waiting)
    assert progress.head_sha == job["head_sha"]
    assert progress.repo == payload["repository"]["full_name"]
    assert progress.job_name == job["name"]
    assert progress.display_title is None
    assert progress.cujo_run_id is None


def test_a_job_waiting_on_an_environment_names_it() -> None:
    progress = fold_event("workflow_job", sample("workflow_job.queued.with-deployment"))
    assert progress is not None
    assert progress.environment == "Test"
    plain = fold_event("workflow_job", sample("workflow_job.waiting"))
    assert plain is not None
    assert plain.environment is None


@pytest.mark.parametrize(
    ("name", "status", "conclusion"),
    [
        ("workflow_run.requested", "queued", None),
        ("workflow_run.requested.with-conclusion", "completed", "action_required"),
        ("workflow_run.completed", "completed", "success"),
    ],
)
def test_workflow_run_webhooks_fold_into_progress(
    name: str, status: str, conclusion: str | None
) -> None:
    payload = sample(name)
    progress = ActionsRunner.fold_event("workflow_run", payload)
    assert isinstance(progress, RunProgress)
    run = payload["workflow_run"]
    assert (progress.workflow_run_id, progress.status, progress.conclusion) == (
        run["id"],
        status,
        conclusion,
    )
    assert progress.display_title == run["display_title"]
    assert progress.head_sha == run["head_sha"]
    assert progress.workflow_path == ".github/workflows/test.yml"
    assert progress.cujo_run_id is None  # not one of Cujo's runs
    assert progress.waiting is False


def test_a_cujo_run_name_gives_the_run_id() -> None:
    payload = sample("workflow_run.requested")
    payload["workflow_run"]["display_title"] = "cujo run-42"
    payload["action"] = "in_progress"
    payload["workflow_run"]["status"] = "in_progress"
    progress = fold_event("workflow_run", payload)
    assert progress is not None
    assert (progress.action, progress.status, progress.cujo_run_id) == (
        "in_progress",
        "in_progress",
        "run-42",
    )


def _broken(name: str, change: Callable[[dict[str, Any]], object]) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        payload = sample(name)
        change(payload)
        return payload

    return build


JOB, RUN_SAMPLE = "workflow_job.in_progress", "workflow_run.completed"


@pytest.mark.parametrize(
    ("event", "build", "why"),
    [
        ("workflow_job", _broken(JOB, lambda p: p.pop("workflow_job")), "workflow_job is missing"),
        (
            "workflow_job",
            _broken(JOB, lambda p: p["workflow_job"].update(run_id="12")),
            "run_id is not a positive integer",
        ),
        (
            "workflow_job",
            _broken(JOB, lambda p: p["workflow_job"].update(run_id=True)),
            "run_id is not a positive integer",
        ),
        (
            "workflow_job",
            _broken(JOB, lambda p: p["workflow_job"].update(head_sha="main")),
            "head_sha is malformed",
        ),
        (
            "workflow_job",
            _broken(JOB, lambda p: p["workflow_job"].update(status="exploded")),
            "status is not one of",
        ),
        ("workflow_job", _broken(JOB, lambda p: p.update(action="deleted")), "action is not one"),
        (
            "workflow_job",
            _broken(JOB, lambda p: p.update(workflow_job=[1, 2])),
            "workflow_job is not an object",
        ),
        (
            "workflow_job",
            _broken(JOB, lambda p: p["repository"].pop("full_name")),
            "full_name is missing",
        ),
        (
            "workflow_run",
            _broken(RUN_SAMPLE, lambda p: p["workflow_run"].update(conclusion=None)),
            "'completed' without a completed status and a conclusion",
        ),
        (
            "workflow_run",
            _broken(RUN_SAMPLE, lambda p: p["workflow_run"].update(display_title=None)),
            "display_title is not a non-empty string",
        ),
        (
            "workflow_run",
            _broken(RUN_SAMPLE, lambda p: p["workflow_run"].update(run_attempt=0)),
            "run_attempt is not a positive integer",
        ),
        ("workflow_run", lambda: [], "payload is not a JSON object"),
        ("check_run", lambda: sample(RUN_SAMPLE), "is not workflow_job or workflow_run"),
    ],
)
def test_a_malformed_webhook_folds_to_none_with_a_reason(
    event: str, build: Callable[[], object], why: str
) -> None:
    payload = build()
    assert fold_event(event, payload) is None
    folded = read_progress(event, payload)
    assert isinstance(folded, Unfolded)
    assert why in folded.reason, folded.reason


def test_fold_event_never_raises_on_junk() -> None:
    junk: list[object] = [None, 1, "x", {}, {"action": None}, {"action": "completed"}]
    junk += [{"action": "completed", "workflow_run": {"id": 1, "status": {}}}]
    for payload in junk:
        for event in ("workflow_job", "workflow_run"):
            assert fold_event(event, payload) is None


def test_samples_are_copied_unchanged_from_the_corpus() -> None:
    corpus = Path("/work/shared/corpus/octokit-webhooks")
    if not corpus.exists():
        pytest.skip("the shared corpus is not on this machine")
    for path in WEBHOOKS.glob("workflow_*.json"):
        event, action_variant = path.name.split(".", 1)
        original = corpus / event / action_variant.replace(".json", ".payload.json")
        assert path.read_bytes() == original.read_bytes(), path.name


def test_local_runner_still_reports_the_sandbox_exit_code(tmp_path: Path) -> None:
    # A bad base SHA: the sandbox writes failure.json and exits 3, quickly.
    project = GitRepo(tmp_path / "p")
    head = project.write({"a.txt": "a"}).commit("a")
    code = (
        LocalRunner(python=sys.executable, deadline_s=120)
        .start(repo=str(project.path), base="0" * 40, head=head, run_id="r-x", out=tmp_path / "out")
        .wait()
    )
    assert code == 3
    assert (tmp_path / "out" / "failure.json").is_file()


def test_local_runner_keeps_the_record_and_the_stages_and_shows_the_rest(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The real sandbox entry stands on a script printing as it does, to standard error."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'cujo: run r-1: preparing' >&2\n"
        "echo 'cujo-stage prepare began' >&2\n"
        "echo 'cujo-evidence r-1 begin " + "a" * 40 + " " + "b" * 40 + "' >&2\n"
        "echo 'cujo-stage prepare ended ok' >&2\n"
        "echo 'cujo-stage tests skipped the install failed' >&2\n"
        "echo 'cujo-stage install ended exit 1' >&2\n"
        "echo 'cujo: done' >&2\n"
        "exit 3\n"
    )
    fake.chmod(0o755)
    record: list[str] = []
    steps: list[str] = []

    code = LocalRunner(python=str(fake), deadline_s=60).start(
        repo="r", base="main", head="pr", run_id="r-1", out=tmp_path / "out", record=record,
    ).wait(steps.append)  # fmt: skip

    assert code == 3
    assert record == ["cujo-evidence r-1 begin " + "a" * 40 + " " + "b" * 40]
    assert steps == [
        "prepare: in_progress",
        "prepare: completed (success)",
        "tests: completed (skipped)",
        "install: completed (failure)",
    ]
    shown = capfd.readouterr().err
    assert shown == "cujo: run r-1: preparing\ncujo: done\n"


def test_stages_the_sandbox_marks_before_anyone_waits_are_held_and_told_in_order(
    tmp_path: Path,
) -> None:
    """`cujo review` starts the sandbox before its record is open: the stage marks printed
    meanwhile are held, then told first, in order, once it waits."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'cujo-stage prepare began' >&2\n"
        "echo 'cujo-stage prepare ended ok' >&2\n"
        "echo 'cujo-stage arm began' >&2\n"
        "exit 0\n"
    )
    fake.chmod(0o755)
    record: list[str] = []
    started = LocalRunner(python=str(fake), deadline_s=60).start(
        repo="r", base="main", head="pr", run_id="r-1", out=tmp_path / "out", record=record
    )
    started.proc.wait()  # all of it printed (and read, or being read) before anyone waits
    steps: list[str] = []
    assert started.wait(steps.append) == 0
    assert steps == ["prepare: in_progress", "prepare: completed (success)", "arm: in_progress"]


def test_the_cujo_command_starts_without_the_record_or_the_verdict_loaded() -> None:
    """What `cujo review` imports before it starts the sandbox: no SQLAlchemy, no
    pydantic models of the verdict, no GitHub client (they load while it runs)."""
    probe = (
        "import sys, app_relay.cli.main, app_relay.runs.localrun\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'alembic', 'github', 'anthropic', 'fastapi', 'pydantic'))\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_the_record_prefix_is_the_ledger_s() -> None:
    from app_relay.runs.localrun import RECORD_PREFIX
    from cujo_action.evidence.ledger import PREFIX

    assert RECORD_PREFIX == PREFIX + " "


# ---- GitHub Enterprise Server: no run details ----------------------------------------


@pytest.mark.parametrize("status", [400, 422])
def test_a_dispatch_refused_for_run_details_is_sent_once_more_without_and_correlated(
    world: World, status: int
) -> None:
    world.state.dispatch_refuses_run_details = status
    dispatched = world.runner.dispatch(
        REPO, DEFAULT, run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7
    )
    posts = world.state.calls("POST", "/workflows/cujo.yml/dispatches$")
    assert [p.body.get("return_run_details") for p in posts] == [True, None]
    assert posts[1].body["inputs"] == posts[0].body["inputs"]
    (run,) = world.state.repos[REPO].runs.values()
    assert run["display_title"] == f"cujo {RUN}"
    assert dispatched == Dispatched(run["id"], None, correlated=True)


def test_another_refusal_of_a_dispatch_is_not_retried(world: World) -> None:
    # A workflow without a workflow_dispatch trigger, say: asking again changes nothing.
    world.state.answer_next(
        "POST",
        "/workflows/cujo.yml/dispatches$",
        '{"message": "Workflow does not have \'workflow_dispatch\' trigger"}',
        status=422,
    )
    with pytest.raises(RunnerError, match="workflow_dispatch"):
        world.runner.dispatch(
            REPO, DEFAULT, run_id=RUN, base_sha=BASE, head_sha=HEAD, pull_request=7
        )
    assert len(world.state.calls("POST", "/workflows/cujo.yml/dispatches$")) == 1
    assert world.state.repos[REPO].runs == {}

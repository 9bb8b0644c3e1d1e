"""The sandbox looks like an Actions job: variables, checkout, event file and runner worker."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import pytest
from gitrepo import GitRepo
from jobs import job_for
from repo_paths import SAMPLES

from cujo_action.arm.actionsjob import (
    FILE_COMMANDS,
    IMAGE_ENV,
    IMAGE_PATH,
    JobIdentity,
    checkout_config,
    etc_group,
    etc_passwd,
    identity_of,
    job_env,
    job_message,
    worker_env,
    worker_source,
)
from cujo_action.arm.context import CheckArea
from cujo_action.arm.fingerprint import load_profile
from cujo_action.arm.host import tool_path
from cujo_action.arm.staging import RECEIVERS, stage
from cujo_action.find.decoys import make_decoys
from cujo_action.prepare.plan import prepare
from cujo_action.sandbox.boundary import BoundaryError, write_below
from cujo_action.sandbox.cgroups import make_limits
from cujo_action.sandbox.jail import INSIDE_HOME, INSIDE_UID
from cujo_action.schema import ALL_CHECKS, Plan

DECOYS = make_decoys()
VALUES = {d.name: d.value for d in DECOYS}
# The pattern the tj-actions/changed-files payload grepped Runner.Worker's memory with.
MEMDUMP = re.compile(rb'"[^"]+":\{"value":"[^"]*","isSecret":true\}')
TRACES = re.compile("cujo|sandbox|decoy", re.IGNORECASE)


def plan_for(repo: GitRepo, work: Path) -> Plan:
    return prepare(str(repo.path), "main", "main", "run-1", work)


def test_a_step_sees_the_variables_of_a_hosted_runner_and_decoys_where_secrets_are(
    tmp_path: Path,
) -> None:
    repo = GitRepo(tmp_path / "octo" / "app")
    repo.write({"a.py": "x = 1\n"}).commit("one")
    plan = plan_for(repo, tmp_path / "work")
    job = identity_of(plan)
    env = job_env(job, job.push, DECOYS, home="/home/runner", temp="/home/runner/work/_temp")
    assert (env["CI"], env["GITHUB_ACTIONS"], env["RUNNER_OS"]) == ("true", "true", "Linux")
    # Named by its author (author@example.invalid) and its folder, never those above it.
    assert env["GITHUB_REPOSITORY"] == "author/app"
    assert env["GITHUB_WORKSPACE"] == "/home/runner/work/app/app"
    assert env["RUNNER_TEMP"] == "/home/runner/work/_temp"
    # The push of what the checks run on to the base branch.
    assert env["GITHUB_SHA"] == plan.head_sha
    assert (env["GITHUB_EVENT_NAME"], env["GITHUB_REF"]) == ("push", "refs/heads/main")
    assert env["GITHUB_EVENT_PATH"] == "/home/runner/work/_temp/_github_workflow/event.json"
    for var, kind in FILE_COMMANDS:
        assert (
            env[var] == f"/home/runner/work/_temp/_runner_file_commands/{kind}_{job.file_commands}"
        )
    # Where a job keeps secrets, decoys: the token, and what JavaScript actions are handed.
    for name in ("GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        assert env[name] == VALUES[name]
    assert env["ACTIONS_ID_TOKEN_REQUEST_URL"].startswith(env["ACTIONS_RUNTIME_URL"])
    # The same for every command of the run: nothing changes between two steps.
    again = job_env(job, job.push, DECOYS, home="/home/runner", temp="/home/runner/work/_temp")
    assert again == env
    assert not [text for item in env.items() for text in item if TRACES.search(text)]


def test_a_step_has_the_images_documented_variables_and_no_trace_of_cujo() -> None:
    job = job_for("octo/app")
    env = job_env(job, job.push, DECOYS, home="/home/runner", temp="/home/runner/work/_temp")
    wanted = load_profile()["fields"]["env.names"]["includes"]
    assert not [name for name in wanted if name not in env]
    assert (env["ImageOS"], env["ACCEPT_EULA"]) == ("ubuntu24", "Y")
    assert env["XDG_CONFIG_HOME"] == "/home/runner/.config"
    assert env["JAVA_HOME_17_X64"] == "/usr/lib/jvm/temurin-17-jdk-amd64"
    assert env["ANDROID_NDK"].startswith(env["ANDROID_HOME"] + "/ndk/")
    assert all(env[name] == value for name, value in IMAGE_ENV)
    assert not [text for item in env.items() for text in item if TRACES.search(text)]


def test_path_finds_the_same_tools_first_then_the_images_folders_in_order() -> None:
    # The folders Cujo's commands always resolved their tools from, in the same order.
    before: list[str] = []
    for tool in ("node", "npm", "git"):
        if (found := shutil.which(tool)) and str(Path(found).parent) not in before:
            before.append(str(Path(found).parent))
    before += [d for d in ("/usr/local/bin", "/usr/bin", "/bin") if d not in before]
    entries = tool_path().split(":")
    assert entries[: len(before)] == before
    assert entries[len(before) :] == [d for d in IMAGE_PATH if d not in before]
    assert len(entries) >= load_profile()["fields"]["env.path_entries"]["at_least"]
    assert not [d for d in entries if TRACES.search(d)]


def test_the_accounts_are_a_runners_and_the_check_user_keeps_its_ids() -> None:
    users = [line.split(":") for line in etc_passwd().splitlines()]
    groups = [line.split(":") for line in etc_group().splitlines()]
    assert all(len(u) == 7 for u in users)
    assert all(len(g) == 4 for g in groups)
    fields = load_profile()["fields"]
    assert len(users) >= fields["passwd.lines"]["at_least"]
    assert set(fields["passwd.users"]["includes"]) <= {u[0] for u in users}
    # The check's user is the line the sandbox always had: uid, gid, name and HOME.
    runner = [u for u in users if u[0] == "runner"]
    assert runner == [["runner", "x", str(INSIDE_UID), str(INSIDE_UID), "runner", INSIDE_HOME,
                       "/bin/bash"]]  # fmt: skip
    assert [u[0] for u in users if u[2] == str(INSIDE_UID)] == ["runner"]
    assert [g[0] for g in groups if g[2] == str(INSIDE_UID)] == ["runner"]
    assert users[0][:4] == ["root", "x", "0", "0"]
    assert ["nobody", "x", "65534", "65534"] in [u[:4] for u in users]
    member = sorted(g[0] for g in groups if "runner" in g[3].split(","))
    assert member == ["adm", "docker", "systemd-journal", "users"]
    for rows in (users, groups):
        assert len({r[0] for r in rows}) == len(rows)
        assert len({r[2] for r in rows}) == len(rows)
    assert {u[3] for u in users} <= {g[2] for g in groups}
    assert not TRACES.search(etc_passwd() + etc_group())


def test_the_checkout_keeps_a_decoy_token_as_actions_checkout_does(tmp_path: Path) -> None:
    job = job_for("octo/app")
    config = tmp_path / "config"
    config.write_text(checkout_config(job, DECOYS))

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "config", "-f", str(config), *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert git("--get", "remote.origin.url") == "https://github.com/octo/app"
    header = git("--get", "http.https://github.com/.extraheader")
    scheme, _, value = header.partition(": ")
    assert scheme == "AUTHORIZATION"
    kind, _, blob = value.partition(" ")
    assert kind == "basic"
    assert base64.b64decode(blob).decode() == f"x-access-token:{VALUES['CHECKOUT_TOKEN']}"


def test_the_worker_keeps_decoys_in_the_runners_own_format() -> None:
    job = job_for("octo/app")
    message = job_message(job, job.push, DECOYS)
    found = sorted(set(MEMDUMP.findall(message)))
    values = {json.loads(b"{" + hit + b"}").popitem()[1]["value"] for hit in found}
    assert len(found) == 3  # system.github.token, github_token, a repository secret
    assert values == {VALUES["RUNNER_WORKER_GITHUB_TOKEN"], VALUES["RUNNER_WORKER_NPM_TOKEN"]}
    endpoint = json.loads(message)["resources"]["endpoints"][0]
    assert endpoint["name"] == "SystemVssConnection"
    assert (
        endpoint["authorization"]["parameters"]["AccessToken"]
        == (VALUES["RUNNER_WORKER_RUNTIME_TOKEN"])
    )
    env = worker_env(job)
    assert env["HOME"] == "/home/runner"
    assert not set(env.values()) & set(VALUES.values())  # no secret in its environment


def _strings(code: types.CodeType) -> set[str]:
    found = {*code.co_names, *code.co_varnames, code.co_name}
    for const in code.co_consts:
        if isinstance(const, str):
            found.add(const)
        elif isinstance(const, bytes):
            found.add(const.decode("latin-1"))
        elif isinstance(const, types.CodeType):
            found |= _strings(const)
    return found


def test_nothing_the_worker_keeps_in_memory_names_what_it_is() -> None:
    # Comments are gone once compiled; names and strings stay in the process's memory.
    source = worker_source()
    code = compile(source, "spawnclient", "exec")
    assert not [s for s in _strings(code) if TRACES.search(s)]


# --------------------------------------------------------------------------- staging


def staged(plan: Plan, job: JobIdentity, run_dir: Path) -> dict[str, CheckArea]:
    """Stage every check's area for ``plan`` as root's harness does (no uids), whole."""
    run_dir.mkdir()
    limits = {c: make_limits(f"cujo-test-{c}-{job.plan_id[:8]}", 64) for c in ALL_CHECKS}
    try:
        areas, finish = stage(
            plan, run_dir, DECOYS, dict.fromkeys(ALL_CHECKS, (None, None)), limits, job
        )
        finish()
    finally:
        for made in limits.values():
            made.remove()
    return areas


def test_each_check_gets_a_hosted_runners_layout(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "octo" / "app")
    canary = tmp_path / "canary"
    canary.write_text("root's\n")
    # The base's tree holds a link to a root file: copied as a link, never followed.
    (repo.path / "leak").symlink_to(canary)
    repo.write({"app.py": "x = 1\n"}).commit("one")
    repo.branch("pr").checkout("pr")
    repo.write({"app.py": "x = 2\n", "new.py": ""}).commit("two")
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    assert plan.push is not None
    assert plan.push.merged
    job = identity_of(plan)
    areas = staged(plan, job, tmp_path / "run")
    # Every check that runs here has an area; the privileged check runs nothing here (the
    # base has no workflow that runs the head) and has none.
    assert set(areas) == set(ALL_CHECKS) - {"privileged"}
    for check in areas:
        home = Path(areas[check].home)
        assert (home / "runners").is_dir()
        # Each job is the push of what it checks out: the base's, or the merge's.
        pushed = plan.base_sha if check == "base" else plan.push.after
        event = json.loads((home / "work/_temp/_github_workflow/event.json").read_text())
        assert (event["ref"], event["after"]) == ("refs/heads/main", pushed)
        for _, kind in FILE_COMMANDS:
            assert (home / f"work/_temp/_runner_file_commands/{kind}_{job.file_commands}").exists()
        checkout = home / "work" / "app" / "app"
        assert checkout.exists() == (check in ("install", "detonation", "base")), check
        if checkout.exists():
            assert (checkout / "leak").is_symlink(), check
            assert os.readlink(checkout / "leak") == str(canary)
            assert canary.read_text() == "root's\n"
            assert (checkout / "app.py").read_text() == (
                "x = 1\n" if check == "base" else "x = 2\n"
            )
            # The origin is on GitHub and the token is where actions/checkout puts it; the
            # harness's own folders (the base worktree, the clone's reflog) are not there.
            config = (checkout / ".git" / "config").read_text()
            assert f"url = https://github.com/{job.repository}" in config
            assert "extraheader = AUTHORIZATION: basic " in config
            assert not (checkout / ".git" / "worktrees").exists()
            assert not (checkout / ".git" / "logs").exists()
            head = subprocess.run(
                ["git", "-C", str(checkout), "rev-parse", "HEAD", "origin/main",
                 "--abbrev-ref", "HEAD"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            # On the base branch, as a push's checkout is: the base's own copy at the base
            # commit, with its own index; the others at the merge.
            assert head.stdout.split() == [pushed, pushed, "main"], check
            status = subprocess.run(
                ["git", "-C", str(checkout), "status", "--porcelain"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            assert status.stdout == "", (check, status.stdout)


# A pull_request_target workflow that checks out the head by its SHA (a pwn request).
PWN = (SAMPLES / "workflows" / "pwn-request.yml").read_text()


def test_the_privileged_job_checks_out_the_head_by_its_sha_and_follows_no_link(
    tmp_path: Path,
) -> None:
    """Attack test: root copies the head's own tree for the privileged check; the head's
    links (one to a root file, one named like a folder root writes into) stay links."""
    repo = GitRepo(tmp_path / "octo" / "app")
    canary = tmp_path / "canary"
    canary.write_text("root's\n")
    repo.write({"app.py": "x = 1\n", ".github/workflows/preview.yml": PWN}).commit("one")
    repo.branch("pr").checkout("pr")
    (repo.path / "leak").symlink_to(canary)
    (repo.path / "work").symlink_to(tmp_path)
    repo.write({"app.py": "x = 2\n"}).commit("two")
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    assert plan.privileged is not None
    job = identity_of(plan)
    areas = staged(plan, job, tmp_path / "run")
    home = Path(areas["privileged"].home)
    event = json.loads((home / "work/_temp/_github_workflow/event.json").read_text())
    assert (event["action"], event["pull_request"]["head"]["sha"]) == ("opened", plan.head_sha)
    assert event["pull_request"]["base"]["sha"] == plan.base_sha
    checkout = home / "work" / "app" / "app"
    assert os.readlink(checkout / "leak") == str(canary)
    assert os.readlink(checkout / "work") == str(tmp_path)
    assert canary.read_text() == "root's\n"
    assert (checkout / "app.py").read_text() == "x = 2\n"
    config = (checkout / ".git" / "config").read_text()
    assert "extraheader = AUTHORIZATION: basic " in config
    # Detached at the head, as actions/checkout leaves a checkout of a SHA; nothing changed.
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD", "--abbrev-ref", "HEAD"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert head.stdout.split() == [plan.head_sha, "HEAD"]
    status = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert status.stdout == ""
    # Every other check's job is still the push of what it checks out.
    install = json.loads(
        (Path(areas["install"].home) / "work/_temp/_github_workflow/event.json").read_text()
    )
    assert plan.push is not None
    assert install["after"] == plan.push.after


@pytest.mark.skipif(os.geteuid() != 0, reason="handing areas to uids needs root")
def test_the_receivers_areas_are_out_of_reach_until_staged_and_handed_over(
    tmp_path: Path,
) -> None:
    """Attack test: the receivers' areas (tests, probes, smoke) are finished while the
    install runs; meanwhile the install's uid can neither enter, fill nor swap them."""
    repo = GitRepo(tmp_path / "octo" / "app")
    repo.write({"app.py": "x = 1\n"}).commit("one")
    plan = prepare(str(repo.path), "main", "main", "run-1", tmp_path / "work")
    job = identity_of(plan)
    top = Path(tempfile.mkdtemp(prefix="cujo-areas-", dir="/tmp"))  # others may pass through
    top.chmod(0o711)
    owners = {c: (64300 + i, 64300 + i) for i, c in enumerate(ALL_CHECKS)}
    limits = {c: make_limits(f"cujo-test-{c}-{job.plan_id[:8]}", 64) for c in ALL_CHECKS}
    try:
        (top / "run").mkdir(mode=0o711)
        areas, finish = stage(plan, top / "run", DECOYS, owners, limits, job)
        install_uid = owners["install"][0]
        assert Path(areas["install"].home).stat().st_uid == install_uid  # handed over now
        for check in RECEIVERS:
            home = Path(areas[check].home)
            st = home.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700), check
            assert home.parent.stat().st_uid == 0
            attempts = (
                f"ls {home}; touch {home}/planted; mv {home} {home}.gone; "
                f"ln -s /etc {home.parent}/swapped; true"
            )
            done = subprocess.run(
                ["setpriv", f"--reuid={install_uid}", f"--regid={install_uid}",
                 "--clear-groups", "--", "sh", "-c", attempts],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            assert done.stderr.count("Permission denied") == 4, done.stderr
            assert sorted(p.name for p in home.parent.iterdir()) == ["home"]
        finish()
        for check in RECEIVERS:
            assert Path(areas[check].home).stat().st_uid == owners[check][0]
    finally:
        for made in limits.values():
            made.remove()
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("owner", ["root", "harness"])
def test_receivers_get_a_venv_only_where_it_is_laid_out_as_links(
    tmp_path: Path, owner: str
) -> None:
    """A receiver keeps only the template files the install's venv still shares: with
    root's template its venv is links, laid out before the install; with the harness's
    own (no root: every file a copy, none shared) a copy would only be deleted when the
    install's venv comes whole through the spool, so none is laid out. The checks that
    install get theirs either way."""
    repo = GitRepo(tmp_path / "octo" / "app")
    repo.write({"app.py": "x = 1\n", "requirements.txt": ""}).commit("one")
    plan = prepare(str(repo.path), "main", "main", "run-1", tmp_path / "work")
    job = identity_of(plan)
    template = tmp_path / "template" / "venv"
    site = template / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (template / "bin").mkdir()
    (template / "pyvenv.cfg").write_text(f"home = /usr/bin\nmade-at = {template}\n")
    (site / "pip.py").write_text("x = 1\n")
    for path in [template.parent, *template.rglob("*"), template]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    if owner == "harness":  # a template root did not make: copied, file by file
        subprocess.run(["chown", "-R", "64299:64299", str(template.parent)], check=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    limits = {c: make_limits(f"cujo-test-{c}-{job.plan_id[:8]}", 64) for c in ALL_CHECKS}
    try:
        areas, finish = stage(
            plan, run_dir, DECOYS, dict.fromkeys(ALL_CHECKS, (None, None)), limits, job,
            venv_template=str(template),
        )  # fmt: skip
        finish()
    finally:
        for made in limits.values():
            made.remove()
    laid = {c for c, area in areas.items() if (Path(area.home) / "work" / "venv").exists()}
    assert laid == {c for c, area in areas.items() if area.venv_staged}
    installers = {"install", "detonation", "base"} & set(areas)
    assert installers
    assert installers <= laid
    receivers = set(RECEIVERS) & set(areas)
    assert receivers, areas
    if owner == "root":
        assert receivers <= laid
        shared = Path(areas["tests"].home) / "work/venv/lib/python3.11/site-packages/pip.py"
        assert shared.stat().st_ino == (site / "pip.py").stat().st_ino  # a link
    else:
        assert not receivers & laid
        copy = Path(areas["install"].home) / "work/venv/lib/python3.11/site-packages/pip.py"
        assert copy.stat().st_ino != (site / "pip.py").stat().st_ino


def test_writing_below_a_tree_follows_no_planted_link(tmp_path: Path) -> None:
    # Root writes the checkout's git config only in a copy it made itself, before any
    # pull-request code ran; even so a link on the way is refused, never followed.
    canary = tmp_path / "canary"
    canary.write_text("root's\n")
    (tmp_path / "outside").mkdir()
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    (tree / ".git" / "config").symlink_to(canary)
    with pytest.raises(BoundaryError):
        write_below(tree, ".git/config", "planted\n", 0o644)
    (tree / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(BoundaryError):
        write_below(tree, "link/config", "planted\n", 0o644)
    with pytest.raises(BoundaryError):
        write_below(tree / "link", "config", "planted\n", 0o644)
    with pytest.raises(ValueError, match="relative"):
        write_below(tree, "../canary", "planted\n", 0o644)
    assert canary.read_text() == "root's\n"
    assert list((tmp_path / "outside").iterdir()) == []
    write_below(tree, ".git/fresh", "made\n", 0o600)
    assert (tree / ".git" / "fresh").read_text() == "made\n"
    assert (tree / ".git" / "fresh").stat().st_mode & 0o777 == 0o600

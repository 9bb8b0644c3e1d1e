"""The value types have one home (``schema``): the shell's check is ``check-id``, and agrees.

One table of good and bad values per kind. ``schema``'s compiled pattern and its
pydantic type accept exactly the good ones; so does ``tools/sandbox/start.sh`` (run
here as the workflow runs it, calling ``python -m cujo_action check-id``); and so did
the bash patterns the scripts spelled before the value types had one home: a value a
reader accepted before is accepted now, and no other.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError
from repo_paths import TOP

from cujo_action.__main__ import (
    PULL_NUMBER_REFUSED,
    REPO_NAME_REFUSED,
    RUN_ID_REFUSED,
    SHA_REFUSED,
    main,
)
from cujo_action.schema import (
    BRANCH,
    PULL_NUMBER,
    REPO_NAME,
    RUN_ID,
    SHA,
    Branch,
    PullNumber,
    RepoName,
    RunId,
    Sha,
)

SHA_OK = "0123456789abcdef" * 2 + "01234567"
GOOD, BAD = True, False
TABLE: dict[str, list[tuple[str, bool]]] = {
    "sha": [
        (SHA_OK, GOOD),
        ("f" * 40, GOOD),
        ("", BAD),
        ("main", BAD),
        ("A" * 40, BAD),
        ("a" * 39, BAD),
        ("a" * 41, BAD),
        ("g" * 40, BAD),
        ("a" * 40 + "\n", BAD),
        (" " + "a" * 39, BAD),
        ("\uff41" * 40, BAD),  # fullwidth letters
    ],
    "pull-request": [
        ("1", GOOD),
        ("7", GOOD),
        ("9999999999", GOOD),
        ("", BAD),
        ("0", BAD),
        ("07", BAD),
        ("-1", BAD),
        ("+7", BAD),
        (" 7", BAD),
        ("7\n8", BAD),
        ("7; curl x.test", BAD),
        ("12345678901", BAD),
        ("٣", BAD),  # an Arabic-Indic digit
    ],
    "run-id": [
        ("run-7", GOOD),
        ("A.b_c-1", GOOD),
        ("..", GOOD),
        ("x" * 64, GOOD),
        ("", BAD),
        ("x" * 65, BAD),
        ("run 7", BAD),
        ("run/7", BAD),
        ("../../etc", BAD),
        ("run-7\n::add-mask::x", BAD),
        ("--help", GOOD),  # a run id, not an option: given as --run-id=VALUE
        ("é", BAD),
    ],
    "repo": [
        ("cujo-dev/cujo", GOOD),
        ("a/b", GOOD),
        ("A1-b/c.d_e-f", GOOD),
        ("a" * 39 + "/" + "x" * 100, GOOD),
        ("", BAD),
        ("a", BAD),
        ("-a/b", BAD),
        ("a_b/c", BAD),
        ("a/b/c", BAD),
        ("a" * 40 + "/b", BAD),
        ("a/" + "x" * 101, BAD),
        ("a/b\n", BAD),
    ],
}
CASES = [(kind, value, good) for kind, rows in TABLE.items() for value, good in rows]
PATTERNS = {"sha": SHA, "pull-request": PULL_NUMBER, "run-id": RUN_ID, "repo": REPO_NAME}
TYPES = {"sha": Sha, "run-id": RunId, "repo": RepoName}
REFUSED = {
    "sha": SHA_REFUSED,
    "pull-request": PULL_NUMBER_REFUSED,
    "run-id": RUN_ID_REFUSED,
    "repo": REPO_NAME_REFUSED,
}
# What the scripts accepted before (tools/sandbox/start.sh's bash patterns), and the
# relay's readers (github/vocab.py REPO_NAME, runners.py _RUN_ID): the oracle.
BEFORE = {
    "sha": "^[0-9a-f]{40}$",
    "pull-request": "^[1-9][0-9]{0,9}$",
    "run-id": "^[A-Za-z0-9._-]{1,64}$",
    "repo": "^[A-Za-z0-9]([A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$",
}


def ids(case: tuple[str, str, bool]) -> str:
    kind, value, good = case
    return f"{kind}-{'good' if good else 'bad'}-{value[:12]!r}"


def bash_accepts(value: str, pattern: str) -> bool:
    done = subprocess.run(
        ["bash", "-c", '[[ "$1" =~ $2 ]]', "_", value, pattern],
        env={"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"},
        check=False,
    )
    assert done.returncode in (0, 1)
    return done.returncode == 0


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_schema_accepts_the_good_values_and_no_other(case: tuple[str, str, bool]) -> None:
    kind, value, good = case
    assert bool(PATTERNS[kind].fullmatch(value)) is good
    if kind in TYPES:
        try:
            TypeAdapter(TYPES[kind]).validate_python(value)
        except ValidationError:
            accepted = False
        else:
            accepted = True
        assert accepted is good
    elif good:
        assert TypeAdapter(PullNumber).validate_python(int(value)) == int(value)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_what_bash_accepted_before_is_what_schema_accepts(case: tuple[str, str, bool]) -> None:
    kind, value, good = case
    assert bash_accepts(value, BEFORE[kind]) is good


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_check_id_refuses_the_bad_values_without_echoing_them(
    case: tuple[str, str, bool], capsys: pytest.CaptureFixture[str]
) -> None:
    kind, value, good = case
    code = main(["check-id", f"--{kind}={value}"])
    out = capsys.readouterr().out
    if good:
        assert (code, out) == (0, "")
    else:
        assert (code, out) == (2, REFUSED[kind] + "\n")


def test_check_id_says_the_first_refusal_in_the_shell_s_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-id", "--run-id=a b", "--pull-request=0", "--sha=x", "--repo=a"]) == 2
    assert capsys.readouterr().out == SHA_REFUSED + "\n"
    assert main(["check-id", f"--sha={SHA_OK}", "--sha=main", "--pull-request=7"]) == 2
    assert capsys.readouterr().out == SHA_REFUSED + "\n"
    assert main(["check-id", f"--sha={SHA_OK}", "--run-id=a b", "--pull-request=0"]) == 2
    assert capsys.readouterr().out == PULL_NUMBER_REFUSED + "\n"
    assert main(["check-id", "--run-id=r", "--repo=a"]) == 2
    assert capsys.readouterr().out == REPO_NAME_REFUSED + "\n"
    assert main(["check-id"]) == 0


@pytest.fixture(scope="module")
def runner_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A $RUNNER_TEMP whose harness python is this test's (start.sh calls it with -I)."""
    temp = tmp_path_factory.mktemp("runner")
    python = temp / "cujo-harness" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return temp


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "repo"], ids=ids)
def test_start_sh_accepts_what_schema_accepts(
    case: tuple[str, str, bool], runner_temp: Path
) -> None:
    kind, value, good = case
    env = {
        "PATH": os.environ["PATH"],
        "RUNNER_TEMP": str(runner_temp),
        "INPUT_BASE_SHA": SHA_OK,
        "INPUT_HEAD_SHA": SHA_OK,
        "INPUT_PULL_REQUEST": "7",
        "INPUT_RUN_ID": "run-7",
        "INPUT_TOKEN": "",  # past the checks, the script stops here: nothing is started
    }
    env[
        {"sha": "INPUT_HEAD_SHA", "pull-request": "INPUT_PULL_REQUEST"}.get(kind, "INPUT_RUN_ID")
    ] = value
    done = subprocess.run(
        ["bash", str(TOP / "tools" / "sandbox" / "start.sh")],
        env=env,
        cwd=runner_temp,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    said = "::error::no token for the clone (the token input is empty)" if good else REFUSED[kind]
    assert done.stdout == said + "\n", done.stderr
    if value and not good:
        assert value not in done.stdout + done.stderr


def test_the_workflow_checks_cujo_s_own_sha_with_schema_s_pattern() -> None:
    """The reusable workflow checks job.workflow_sha in bash (Cujo is not checked out
    yet): its pattern is schema's, and its repository pattern takes every name."""
    spec = yaml.safe_load((TOP / ".github" / "workflows" / "sandbox.yml").read_text())
    (step,) = [s for s in spec["jobs"]["sandbox"]["steps"] if s.get("name") == "Find Cujo's commit"]
    patterns = dict(re.findall(r'"\$(CUJO_\w+)" =~ (\S+) ', step["run"]))
    assert patterns["CUJO_SHA"] == SHA.pattern
    for value, good in TABLE["sha"]:
        assert bash_accepts(value, patterns["CUJO_SHA"]) is good
    for value, good in TABLE["repo"]:
        if good:
            assert bash_accepts(value, patterns["CUJO_REPOSITORY"])


BRANCHES = {
    "main": GOOD,
    "release/2.x": GOOD,
    "feature+1_a-b": GOOD,
    "": BAD,
    "-main": BAD,
    ".hidden": BAD,
    "a/.b": BAD,
    "a..b": BAD,
    "a//b": BAD,
    "a/": BAD,
    "a.": BAD,
    "a.lock": BAD,
    "a.lock/b": BAD,
    "a b": BAD,
    "a~1": BAD,
    "a:b": BAD,
    "$(curl x.test)": BAD,
    "é": BAD,  # git takes it; the sandbox names only what no reader mistakes
    "x" * 256: BAD,
}


@pytest.mark.parametrize(("name", "good"), BRANCHES.items(), ids=lambda v: repr(v)[:14])
def test_a_branch_the_sandbox_names_is_one_git_accepts(name: str, good: bool) -> None:
    assert bool(BRANCH.fullmatch(name)) is good
    try:
        TypeAdapter(Branch).validate_python(name)
    except ValidationError:
        accepted = False
    else:
        accepted = True
    assert accepted is good
    if good:  # the oracle: git itself
        done = subprocess.run(["git", "check-ref-format", "--branch", name], check=False)
        assert done.returncode == 0


@pytest.mark.parametrize(("flag", "value"), [("--upstream", "../etc"), ("--base-branch", "a..b")])
def test_run_refuses_an_upstream_or_branch_it_would_not_name(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--repo", str(tmp_path), "--base", "main", "--head", "pr", "--run-id", "r"]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--out", str(tmp_path / "out"), flag, value])
    assert stopped.value.code == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything ran

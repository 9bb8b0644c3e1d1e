"""Tests run the way the project runs them: the test environment it declares, and where from."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

from gitrepo import GitRepo

from cujo_action.prepare import testenv
from cujo_action.prepare.plan import prepare
from cujo_action.prepare.settle import PYTEST, settle
from cujo_action.schema import Policy


def every_tool(_: str) -> str:
    return "/usr/bin/tool"


def installs(command: str) -> list[str]:
    return shlex.split(command)[4:]  # after `python -m pip install`


# Shaped like pallets/itsdangerous since 2025: the tests' dependencies only in PEP 735
# groups, one including another, and the test group naming the project itself.
PALLETS = """\
[project]
name = "ItsDangerous"
version = "2.3.0"
[project.optional-dependencies]
crypto = ["cryptography"]
[build-system]
requires = ["flit_core<4"]
build-backend = "flit_core.buildapi"
[dependency-groups]
dev = ["ruff", {include-group = "tests"}, {include-group = "typing"}]
tests = ["pytest", "freezegun", "itsdangerous[crypto]"]
typing = ["mypy"]
docs = ["sphinx"]
[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def test_dependency_groups_are_resolved_as_pep_735_says() -> None:
    found = testenv.dependency_groups(tomllib.loads(PALLETS))
    assert found.args == ["ruff", "pytest", "freezegun", "mypy"]
    assert found.extras == ["crypto"]
    assert found.sources == [
        "dependency group dev (pyproject.toml)",
        "dependency group tests (pyproject.toml)",
    ]


def test_a_cycle_of_included_groups_ends() -> None:
    data = {"dependency-groups": {"test": [{"include-group": "dev"}, "a"], "dev": [
        {"include-group": "test"}, "b"]}}  # fmt: skip
    found = testenv.dependency_groups(data)
    assert set(found.args) == {"a", "b"}


def test_a_pallets_project_installs_its_groups_and_itself_with_the_extras_they_name() -> None:
    settled = settle({"pyproject.toml": PALLETS, "tests/test_x.py": ""}, Policy(), which=every_tool)
    assert installs(settled.install) == ["-e", ".[crypto]", "ruff", "pytest", "freezegun", "mypy"]
    assert settled.test == PYTEST
    assert settled.test_sources == (
        "dependency group dev (pyproject.toml)",
        "dependency group tests (pyproject.toml)",
    )
    assert any("dependency group tests" in note for note in settled.notes)


TOX = """\
[tox]
envlist = py3{11,12}, lint
[testenv]
deps =
    -r {toxinidir}/requirements/ci.txt
    freezegun>=1.0
extras = crypto
commands = pytest -v --cov=src -n auto tests {posargs}
[testenv:lint]
deps = ruff
commands = ruff check .
"""


def test_tox_says_what_to_install_when_the_metadata_does_not() -> None:
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tox.ini": TOX}
    settled = settle(files, Policy(), which=every_tool)
    assert installs(settled.install) == [
        "-e", ".[crypto]", "-r", "requirements/ci.txt", "freezegun>=1.0", "pytest",
    ]  # fmt: skip
    # pytest as tox runs it, without the plugins' own arguments (coverage, xdist).
    assert settled.test == f"{PYTEST} -v tests"
    assert settled.test_sources == ("tox environment [testenv] (tox.ini)",)


NOX = """
import nox

@nox.session(python=["3.11", "3.12"])
def tests(session):
    session.install("-e", ".")
    session.install("-r", "requirements-test.in", "hypothesis")
    session.run("pytest", "-x", *session.posargs)

@nox.session
def docs(session):
    session.install("sphinx")
"""


def test_a_noxfile_is_read_never_run() -> None:
    found = testenv.nox(NOX)
    assert found.args == ["-r", "requirements-test.in", "hypothesis"]
    assert found.pytest_args == ["-x"]
    assert found.sources == ["nox session tests (noxfile.py)"]
    assert testenv.nox("import os\nos.system('x')\ndef (:\n") == testenv.Found()


CI = """\
name: CI
on: [push, pull_request]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: python -m pip install --upgrade pip
      - run: |
          pip install -e . freezegun "pytest>=8"
          pip install ${{ matrix.extra }}
      - run: python -m pytest -q tests/unit && echo done
"""


def test_the_ci_workflow_at_base_is_the_last_word() -> None:
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tests/test_a.py": ""}
    settled = settle(files, Policy(), which=every_tool, ci={".github/workflows/ci.yml": CI})
    assert installs(settled.install) == ["-e", ".", "freezegun", "pytest>=8"]
    assert settled.test == f"{PYTEST} -q tests/unit"
    assert settled.test_sources == ("CI workflow .github/workflows/ci.yml at base",)
    # The project's own declarations win over its CI's.
    pyproject = '[project]\nname = "p"\nversion = "1"\n[dependency-groups]\ntest = ["pytest"]\n'
    declared = settle({**files, "pyproject.toml": pyproject}, Policy(), which=every_tool,
                      ci={".github/workflows/ci.yml": CI})  # fmt: skip
    assert "freezegun" not in declared.install
    assert declared.test == f"{PYTEST} -q tests/unit"  # how it runs them still counts


def test_workflows_are_read_at_base_never_at_head(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "octo" / "lib")
    base_ci = CI.replace("freezegun", "freezegun-from-base")
    repo.write({"setup.py": "from setuptools import setup\nsetup()\n",
                ".github/workflows/ci.yml": base_ci}).commit("base")  # fmt: skip
    repo.branch("pr").checkout("pr")
    repo.write({".github/workflows/ci.yml": CI.replace("freezegun", "evil-from-head")})
    repo.commit("pr")
    plan = prepare(str(repo.path), "main", "pr", "run-1", tmp_path / "work")
    assert "freezegun-from-base" in plan.install
    assert "evil-from-head" not in plan.install
    assert plan.test_sources == ["CI workflow .github/workflows/ci.yml at base"]
    assert json.loads(plan.model_dump_json(by_alias=True))["test_sources"] == plan.test_sources

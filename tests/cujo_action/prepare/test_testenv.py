"""Tests run the way the project runs them: the test environment it declares, and where from."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
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
    # The tests group, not dev beside it (its linters, type checkers, docs tools).
    found = testenv.dependency_groups(tomllib.loads(PALLETS))
    assert found.args == ["pytest", "freezegun"]
    assert found.extras == ["crypto"]
    assert found.sources == ["dependency group tests (pyproject.toml)"]
    # With no group named for tests, the development group is the test environment.
    alone = PALLETS.replace("tests = [", "unit = [").replace('"tests"}', '"unit"}')
    found = testenv.dependency_groups(tomllib.loads(alone))
    assert found.args == ["ruff", "pytest", "freezegun", "mypy"]
    assert found.sources == ["dependency group dev (pyproject.toml)"]


def test_a_cycle_of_included_groups_ends() -> None:
    data = {"dependency-groups": {"test": [{"include-group": "dev"}, "a"], "dev": [
        {"include-group": "test"}, "b"]}}  # fmt: skip
    found = testenv.dependency_groups(data)
    assert set(found.args) == {"a", "b"}


def test_a_pallets_project_installs_its_groups_and_itself_with_the_extras_they_name() -> None:
    settled = settle({"pyproject.toml": PALLETS, "tests/test_x.py": ""}, Policy(), which=every_tool)
    assert installs(settled.install) == ["-e", ".[crypto]", "pytest", "freezegun"]
    assert settled.test == PYTEST
    assert settled.test_sources == ("dependency group tests (pyproject.toml)",)
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
    assert settled.test_sources == ("tox environment py311 (tox.ini)",)


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


# Shaped like python-poetry/tomlkit: the tests' dependencies only in a Poetry group, in
# Poetry's own constraint syntax, and CI running pytest through `poetry run`.
POETRY = """\
[tool.poetry]
name = "tomlkit"
version = "0.15.0"
[tool.poetry.dependencies]
python = ">=3.9"
[tool.poetry.group.dev.dependencies]
pytest = "^7.2.0"
pytest-cov = "~4.0"
PyYAML = {version = "^0.6", extras = ["libyaml"], python = ">=3.9"}
local-helper = {path = "helpers/local", develop = true}
outside = {path = "../sibling"}
tomlkit = {version = "*", extras = ["fast"]}
[tool.poetry.group.docs.dependencies]
sphinx = "^4"
[tool.poetry.dev-dependencies]
freezegun = "*"
[build-system]
requires = ["poetry-core>=1.0.0"]
build-backend = "poetry.core.masonry.api"
"""
POETRY_CI = """\
on: [pull_request]
jobs:
  tests:
    runs-on: ubuntu-latest
    steps:
      - run: poetry install
      - run: poetry run pytest -q tests
"""


def test_poetry_groups_are_read_with_poetrys_own_constraints() -> None:
    found = testenv.poetry_groups(tomllib.loads(POETRY))
    assert found.args == [
        "pytest (>=7.2.0,<8.0.0)",
        "pytest-cov (>=4.0,<4.1)",
        'PyYAML[libyaml] (>=0.6,<0.7) ; python_version >= "3.9"',
        "./helpers/local",
        "freezegun",
    ]
    assert found.extras == ["fast"]  # the project naming itself: its own extras
    assert found.sources == [
        "Poetry group dev (pyproject.toml)",
        "Poetry dev-dependencies (pyproject.toml)",
    ]
    files = {"pyproject.toml": POETRY, "tests/test_a.py": ""}
    settled = settle(files, Policy(), which=every_tool, ci={"w.yml": POETRY_CI})
    assert installs(settled.install)[:3] == ["-e", ".[fast]", "pytest (>=7.2.0,<8.0.0)"]
    assert "sphinx" not in settled.install
    assert settled.test == f"{PYTEST} -q tests"  # `poetry run` is how, pytest is what


def test_pdm_and_uv_development_dependencies_are_the_projects_test_environment() -> None:
    pdm = """\
[project]
name = "marko"
version = "2"
[tool.pdm.dev-dependencies]
dev = ["pytest", "pytest-cov", "-e file:///${PROJECT_ROOT}/sub", "marko[toc]"]
benchmark = ["commonmark"]
"""
    found = testenv.declared(tomllib.loads(pdm))
    assert found.args == ["pytest", "pytest-cov"]
    assert found.extras == ["toc"]
    assert found.sources == ["PDM dev-dependencies group dev (pyproject.toml)"]
    uv = '[project]\nname = "p"\nversion = "1"\n[tool.uv]\n'
    uv += 'dev-dependencies = ["pytest>=8", "hypothesis"]\n'
    found = testenv.declared(tomllib.loads(uv))
    assert found.args == ["pytest>=8", "hypothesis"]
    assert found.sources == ["uv dev-dependencies (pyproject.toml)"]


def test_hatchs_test_environment_and_its_test_script_say_how_pytest_runs() -> None:
    hatch = """\
[project]
name = "p"
version = "1"
[project.optional-dependencies]
redis = ["redis"]
[tool.hatch.envs.default]
dependencies = ["coverage"]
[tool.hatch.envs.default.scripts]
test = "pytest {args:tests} -p no:randomly"
[tool.hatch.envs.docs]
dependencies = ["sphinx"]
[tool.hatch.envs.tests]
features = ["redis"]
extra-dependencies = ["pytest", "pytest-asyncio"]
"""
    found = testenv.hatch_env(tomllib.loads(hatch))
    assert found.args == ["coverage", "pytest", "pytest-asyncio"]  # default's, then its own
    assert found.extras == ["redis"]
    assert found.pytest_args == ["tests", "-p", "no:randomly"]
    assert found.sources == ["Hatch environment tests (pyproject.toml)"]
    settled = settle({"pyproject.toml": hatch, "tests/test_a.py": ""}, Policy(), which=every_tool)
    assert settled.test == f"{PYTEST} tests -p no:randomly"
    assert "sphinx" not in settled.install
    # Hatch's built-in `hatch test` environment brings its own pytest and plugins.
    builtin = testenv.hatch_env({"tool": {"hatch": {"envs": {"hatch-test": {}}}}})
    assert "pytest-xdist[psutil]" in builtin.args
    assert testenv.hatch_env({"tool": {"hatch": {"envs": {"docs": {}}}}}) == testenv.Found()


def test_project_runners_run_the_command_they_are_given() -> None:
    assert testenv.pytest_words(["pdm", "run", "-v", "pytest", "tests"]) == ["tests"]
    assert testenv.pytest_words(["uv", "run", "--frozen", "pytest", "-x"]) == ["-x"]
    assert testenv.pytest_words(["hatch", "run", "test:pytest", "-q"]) == ["-q"]
    assert testenv.pytest_words(["poetry", "run", "python", "-m", "pytest"]) == []
    assert testenv.pytest_words(["poetry", "run", "mypy", "."]) is None
    assert testenv.pytest_words(["poetry", "install"]) is None


# A workflow with three jobs: the project's tests (with the environment its suite needs),
# a job testing other packages against sibling checkouts, and (below) a release.
JOBS_CI = """\
name: CI
on:
  pull_request:
  push:
    branches: [main]
env:
  NO_COLOR: "1"
  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}
jobs:
  tests:
    runs-on: ubuntu-latest
    env:
      FORCE_COLOR: 0
      PATH: /evil
    steps:
      - run: pip install -e . freezegun
      - run: pytest -q tests
        env:
          LANG: C.UTF-8
          MULTI: "a\\nb"
  downstream:
    runs-on: ubuntu-latest
    steps:
      - run: pip install 'plugin-a @ ../plugin-a-latest' pytest-timeout
      - run: pytest ../plugin-a-latest
"""
RELEASE = """\
on:
  push:
    tags: ["*"]
jobs:
  release:
    steps:
      - run: pip install dist/*.whl twine
      - run: python -m pytest --smoke
"""
BUILD_CHECK = """\
on: [pull_request]
jobs:
  wheel:
    steps:
      - run: pip install build check-wheel-contents
      - run: python -m build
"""


def test_only_ci_jobs_that_test_this_project_feed_its_install_with_their_environment() -> None:
    found = testenv.workflows({"a.yml": JOBS_CI, "b.yml": RELEASE, "c.yml": BUILD_CHECK})
    assert found.args == ["freezegun"]
    assert found.pytest_args == ["-q", "tests"]
    assert found.env == {"NO_COLOR": "1", "FORCE_COLOR": "0", "LANG": "C.UTF-8"}
    assert found.sources == ["CI workflow a.yml at base"]
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tests/test_a.py": ""}
    settled = settle(files, Policy(), which=every_tool, ci={"a.yml": JOBS_CI, "b.yml": RELEASE})
    assert settled.test == f"export FORCE_COLOR=0 LANG=C.UTF-8 NO_COLOR=1 && {PYTEST} -q tests"
    assert "twine" not in settled.install
    assert "plugin-a" not in settled.install
    assert any("CI job's environment" in note for note in settled.notes)
    # The policy's own test command is taken as it is written.
    own = settle(files, Policy(test="make check"), which=every_tool, ci={"a.yml": JOBS_CI})
    assert own.test == "make check"


SETUP = {"setup.py": "from setuptools import setup\nsetup()\n", "tests/test_a.py": ""}


def test_the_projects_own_runner_runs_its_tests_as_its_ci_runs_them() -> None:
    trial_ci = """\
on: [push]
jobs:
  tests:
    steps:
      - run: pip install -e .
      - run: coverage run -m twisted.trial --jobs 2 incremental
"""
    settled = settle(SETUP, Policy(), which=every_tool, ci={"ci.yml": trial_ci})
    assert settled.test == "python -m twisted.trial --jobs 2 incremental"
    assert installs(settled.install) == ["-e", ".", "twisted"]  # the runner's distribution
    virtue_nox = """\
import nox

@nox.session
def tests(session):
    session.install("-r", "test-requirements.txt")
    session.run("virtue", "jsonschema")
"""
    settled = settle({**SETUP, "noxfile.py": virtue_nox}, Policy(), which=every_tool)
    assert settled.test == "python -m virtue jsonschema"
    assert "virtue" in installs(settled.install)
    tox = "[tox]\nenvlist = py\n[testenv]\ncommands = {envpython} -m unittest discover -s tests\n"
    settled = settle({**SETUP, "tox.ini": tox}, Policy(), which=every_tool)
    assert settled.test == "python -m unittest discover -s tests"
    # pytest, when the project runs it, stays pytest.
    tox = "[tox]\nenvlist = py\n[testenv]\ncommands = pytest -x\n"
    assert settle({**SETUP, "tox.ini": tox}, Policy(), which=every_tool).test == f"{PYTEST} -x"


@pytest.mark.parametrize(
    ("words", "command"),
    [
        (["trial", "pkg"], ["python", "-m", "twisted.trial", "pkg"]),
        (["python3", "-m", "unittest", "-v"], ["python", "-m", "unittest", "-v"]),
        (["poetry", "run", "nose2"], ["python", "-m", "nose2"]),
        (["pytest"], None),
        (["python", "-m", "http.server"], None),
    ],
)
def test_runner_words(words: list[str], command: list[str] | None) -> None:
    assert testenv.runner_words(words) == command

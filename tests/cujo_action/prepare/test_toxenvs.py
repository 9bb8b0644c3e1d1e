"""The tox environment that runs the tests, chosen and read as tox 4 reads it."""

from __future__ import annotations

import configparser

import pytest

from cujo_action.prepare import testenv, toxenvs
from cujo_action.prepare.settle import PYTEST, settle
from cujo_action.schema import Policy


def parsed(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(text)
    return parser


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("py3{11,12}-{a,b}", ["py311-a", "py311-b", "py312-a", "py312-b"]),
        ("3.1{0-3}-tests", ["3.10-tests", "3.11-tests", "3.12-tests", "3.13-tests"]),
        ("lint", ["lint"]),
        ("", []),
    ],
)
def test_generative_names_expand_in_toxs_order(pattern: str, names: list[str]) -> None:
    assert toxenvs.expand(pattern) == names


def test_a_huge_generative_name_is_cut() -> None:
    assert len(toxenvs.expand("e{0-9999}-{0-9999}")) == toxenvs.MAX_NAMES


def test_a_cut_generative_name_is_said_in_the_plan() -> None:
    tox_ini = "[tox]\nenv_list = lint, e{0-9999}-{a,b}\n[testenv]\ncommands = pytest\n"
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tox.ini": tox_ini}
    settled = settle(files, Policy(), which=lambda _: "/x")
    said = [n for n in settled.notes if f"more than {toxenvs.MAX_NAMES} environments" in n]
    assert said, settled.notes
    # Under the cap nothing is said.
    small = tox_ini.replace("{0-9999}", "{0-3}")
    settled = settle({**files, "tox.ini": small}, Policy(), which=lambda _: "/x")
    assert not any("environments in one generative" in n for n in settled.notes)


def test_factor_conditions_keep_the_lines_an_environment_meets() -> None:
    text = "tests: pytest\nmypy: mypy src\npy311,py312: a\nx-tests: both\n!x: not-x\nalways"
    assert toxenvs.keep_lines(text, "py311-tests").splitlines() == [
        "pytest", "a", "not-x", "always",
    ]  # fmt: skip
    assert toxenvs.keep_lines(text, "x-tests").splitlines() == ["pytest", "both", "always"]
    # A URL or a substitution's default is not a condition.
    assert toxenvs.keep_lines("https://x.test/a\n{posargs:-n auto}", "py") == (
        "https://x.test/a\n{posargs:-n auto}"
    )


# Shaped like python-attrs/attrs: lint first in the list, factor-conditional commands in
# [testenv], generative sections, and the coverage run as its CI runs it.
ATTRS = """\
[tox]
env_list =
    lint-{ruff,interrogate},
    3.1{0-3}-tests,
    3.1{0-3}-mypy,
    docs-{doctests,build},
[testenv]
deps = hypothesis
commands =
    tests: pytest {posargs:-n auto}
    mypy: mypy src
[testenv:3.1{0,3}-tests]
deps = coverage
commands = coverage run -m pytest {posargs:-x}
[testenv:docs-doctests]
commands = sphinx-build -b doctest docs out
"""

# Notebooks first: the suite is the second environment.
NOTEBOOKS = """\
[tox]
envlist = notebooks, py
[testenv:notebooks]
deps = nbval
commands = pytest --nbval examples/
[testenv]
deps = pytest-asyncio
commands = pytest --asyncio-mode=auto tests
"""


def test_the_first_test_environment_is_chosen_never_docs_lint_or_notebooks() -> None:
    found = testenv.tox(ATTRS)
    assert found.sources == ["tox environment 3.10-tests (tox.ini)"]
    assert found.args == ["coverage"]  # its own section's, not [testenv]'s
    assert found.pytest_args == ["-x"]
    found = testenv.tox(NOTEBOOKS)
    assert found.sources == ["tox environment py (tox.ini)"]
    assert found.args == ["pytest-asyncio"]
    assert found.pytest_args == ["--asyncio-mode=auto", "tests"]


def test_the_environment_ci_runs_is_chosen_when_it_runs_tests() -> None:
    assert testenv.tox(ATTRS, ["docs-doctests"]).sources == [
        "tox environment 3.10-tests (tox.ini)"  # a docs environment never is
    ]
    found = testenv.tox(ATTRS, ["3.12-tests"])
    assert found.sources == ["tox environment 3.12-tests (tox.ini)"]
    assert found.args == ["hypothesis"]  # [testenv]'s, as the section does not match
    assert found.pytest_args == ["-n", "auto"]


def test_ci_says_which_tox_environment_runs_and_the_settled_test_is_it() -> None:
    ci = """\
on: [push, pull_request]
jobs:
  test:
    steps:
      - run: uvx --with tox-uv tox run -e 3.12-tests
"""
    assert testenv.workflows({"ci.yml": ci}).tox_envs == ["3.12-tests"]
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tox.ini": ATTRS}
    settled = settle(files, Policy(), which=lambda _: "/usr/bin/x", ci={"ci.yml": ci})
    # pytest-xdist is named nowhere: its option leaves, said in a note.
    assert settled.test == PYTEST
    assert any("-n auto" in note for note in settled.notes), settled.notes
    assert settled.test_sources == ("tox environment 3.12-tests (tox.ini)",)
    # The same configuration in pyproject.toml's legacy_tox_ini is read the same way.
    legacy = '[tool.tox]\nlegacy_tox_ini = """\n' + ATTRS + '"""\n'
    settled = settle({**files, "pyproject.toml": legacy}, Policy(), which=lambda _: "/x")
    assert settled.test_sources == ("tox environment 3.10-tests (tox.ini)",)


@pytest.mark.parametrize(
    ("words", "envs"),
    [
        (["tox", "-e", "py311,lint"], ["py311", "lint"]),
        (["tox", "run", "-epy312"], ["py312"]),
        (["python", "-m", "tox", "--env=a"], ["a"]),
        (["uvx", "--with=tox-uv", "tox", "r", "-e", "b"], ["b"]),
        (["tox"], []),
        (["pytest", "-e", "x"], []),
    ],
)
def test_tox_envs_read_from_a_command(words: list[str], envs: list[str]) -> None:
    assert testenv.tox_envs(words) == envs


def test_plugins_follow_their_options_into_the_install_or_leave_with_a_note() -> None:
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tox.ini": NOTEBOOKS}
    settled = settle(files, Policy(), which=lambda _: "/x")
    assert settled.test == f"{PYTEST} --asyncio-mode=auto tests"
    assert "pytest-asyncio" in settled.install
    assert "nbval" not in settled.install
    # Named nowhere: the option and its value leave, and a note says so.
    bare = NOTEBOOKS.replace("deps = pytest-asyncio", "deps = pytest")
    settled = settle({**files, "tox.ini": bare}, Policy(), which=lambda _: "/x")
    assert settled.test == f"{PYTEST} tests"
    assert any("--asyncio-mode=auto" in note for note in settled.notes), settled.notes


# Shaped like tkem/cachetools: the suite's environment last, its command full of tox's
# substitutions, and deps lines with markers (one requirement each, spaces and all).
CACHETOOLS = """\
[tox]
envlist = check-manifest,docs,doctest,flake8,py
[testenv]
deps =
    pytest
    pytest-cov
commands =
    py.test --basetemp={envtmpdir} --cov=cachetools {posargs}
[testenv:check-manifest]
deps =
    check-manifest==0.44; python_version < "3.8"
    check-manifest; python_version >= "3.8"
commands = check-manifest
[testenv:docs]
deps = sphinx
commands = sphinx-build -W -b html docs {envtmpdir}/html
[testenv:doctest]
commands = sphinx-build -W -b doctest docs {envtmpdir}/doctest
[testenv:flake8]
commands = flake8
"""


def test_the_suites_environment_is_found_past_manifest_docs_and_lint_ones() -> None:
    found = testenv.tox(CACHETOOLS)
    assert found.sources == ["tox environment py (tox.ini)"]
    assert found.args == ["pytest", "pytest-cov"]
    assert found.pytest_args == ["--basetemp=\ue000envtmpdir\ue001", "--cov=cachetools"]
    manifest = testenv.tox(CACHETOOLS, ["check-manifest"])  # CI runs it: still not the tests
    assert manifest.sources == ["tox environment py (tox.ini)"]
    alone = CACHETOOLS.replace("envlist = check-manifest,docs,doctest,flake8,py", "envlist = m")
    marked = testenv.tox(alone.replace("[testenv:check-manifest]", "[testenv:m]"))
    assert marked.args == ['check-manifest==0.44; python_version < "3.8"',
                           'check-manifest; python_version >= "3.8"']  # fmt: skip

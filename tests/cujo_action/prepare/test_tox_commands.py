"""pytest runs with the arguments the project's tox gives it, whole, as tox would run it."""

from __future__ import annotations

import configparser
import shlex
import subprocess
from pathlib import Path

from cujo_action.prepare import pytestargs, toxcommands
from cujo_action.prepare.settle import PYTEST, settle
from cujo_action.schema import Policy

COV = "pytest-cov"


def every_tool(_: str) -> str:
    return "/usr/bin/tool"


def commands(ini: str, section: str = "testenv") -> list[list[str] | None]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(ini)
    return toxcommands.commands(parser, section)


def args_of(command: str) -> list[str]:
    """Return the words pytest is given after PYTEST."""
    assert command.startswith(PYTEST), command
    return shlex.split(command.removeprefix(PYTEST))


# --------------------------------------------------------------------------- values


def test_an_options_value_goes_with_it_in_both_forms() -> None:
    given = ["--cov", "src", "--cov-report", "term-missing", "--cov-report=xml", "tests"]
    kept = pytestargs.pytest_command(PYTEST, given, [COV])
    assert args_of(kept.command) == given
    assert kept.dropped == ()
    # Without the plugin, each option leaves with its value; the test folder stays.
    dropped = pytestargs.pytest_command(PYTEST, given, [])
    assert args_of(dropped.command) == ["tests"]
    assert dropped.dropped == tuple(given[:-1])


def test_an_optional_value_is_taken_only_when_it_is_not_an_option() -> None:
    given = ["--cov", "-x", "--cov=pkg", "-q"]
    assert args_of(pytestargs.pytest_command(PYTEST, given).command) == ["-x", "-q"]


def test_short_options_with_their_value_attached_or_not() -> None:
    given = ["-n", "auto", "-nauto", "-n4", "-v", "--dist", "loadfile", "tests"]
    assert args_of(pytestargs.pytest_command(PYTEST, given).command) == ["-v", "tests"]
    assert pytestargs.plugins_used(given) == ["pytest-xdist"]
    kept = pytestargs.pytest_command(PYTEST, given, ["pytest-xdist"])
    assert args_of(kept.command) == given


def test_p_and_its_plugin_are_kept_together() -> None:
    given = ["-p", "no:randomly", "-p", "xdist", "-k", "not slow and not net", "tests"]
    command = pytestargs.pytest_command(PYTEST, given).command
    assert args_of(command) == given
    assert "-k 'not slow and not net'" in command


def test_after_a_double_dash_nothing_is_an_option() -> None:
    given = ["-q", "--", "--cov"]
    assert args_of(pytestargs.pytest_command(PYTEST, given).command) == given


# --------------------------------------------------------------------------- tox's commands


CACHETOOLS = """\
[tox]
envlist = check-manifest,docs,doctest,flake8,py

[testenv]
deps =
    pytest
    pytest-cov
commands =
    py.test --basetemp={envtmpdir} --cov=cachetools --cov-report term-missing {posargs}

[testenv:flake8]
deps = flake8
commands = flake8
"""
SETUP = "from setuptools import setup\nsetup()\n"


def test_the_cachetools_command_is_kept_whole_with_its_plugin_installed() -> None:
    files = {"setup.py": SETUP, "tox.ini": CACHETOOLS, "tests/test_x.py": ""}
    settled = settle(files, Policy(), which=every_tool)
    assert shlex.split(settled.install)[4:] == ["-e", ".", "pytest", "pytest-cov"]
    assert settled.test == (
        'mkdir -p "${TMPDIR:-/tmp}/envtmp" && ' + PYTEST
        + ' --basetemp="${TMPDIR:-/tmp}/envtmp" --cov=cachetools --cov-report term-missing'
    )  # fmt: skip
    assert not any("left out" in note for note in settled.notes), settled.notes


def test_the_plugin_tox_installs_beside_the_command_is_installed_too() -> None:
    # The project's metadata says what the tests need, but not the plugin tox's command uses.
    pyproject = (
        '[project]\nname = "c"\nversion = "1"\n[project.optional-dependencies]\ntest = ["pytest"]\n'
    )
    files = {"pyproject.toml": pyproject, "tox.ini": CACHETOOLS, "tests/test_x.py": ""}
    settled = settle(files, Policy(), which=every_tool)
    assert shlex.split(settled.install)[4:] == ["-e", ".[test]", "pytest-cov"]
    assert "--cov-report term-missing" in settled.test
    # Where tox does not install it either, its options leave with their values, said.
    bare = {**files, "tox.ini": CACHETOOLS.replace("    pytest-cov\n", "")}
    settled = settle(bare, Policy(), which=every_tool)
    assert "pytest-cov" not in settled.install
    assert "--cov" not in settled.test
    assert "term-missing" not in settled.test
    assert any(
        note.endswith("left out: --cov=cachetools --cov-report term-missing")
        for note in settled.notes
    ), settled.notes


def test_a_plugin_named_in_a_requirement_file_the_install_reads_is_installed() -> None:
    ini = "[testenv]\ncommands = pytest -n auto --cov pkg tests\n"
    files = {"requirements-dev.txt": "pytest\npytest-xdist>=3  # parallel\n", "tox.ini": ini}
    settled = settle(files, Policy(), which=every_tool)
    assert shlex.split(settled.install)[4:] == ["-r", "requirements-dev.txt", "pytest"]
    assert args_of(settled.test) == ["-n", "auto", "tests"]
    assert any(note.endswith("left out: --cov pkg") for note in settled.notes), settled.notes


def test_the_envtmpdir_is_a_folder_of_the_commands_own_temporary_folder(tmp_path: Path) -> None:
    (words,) = commands("[testenv]\ncommands = pytest --basetemp={envtmpdir} -k 'a b'\n")
    assert words is not None
    command = pytestargs.pytest_command("printf '%s\\n'", words[1:]).command
    said = subprocess.run(
        ["bash", "-c", command], env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert said == [f"--basetemp={tmp_path}/envtmp", "-k", "a b"]
    assert (tmp_path / "envtmp").is_dir()  # made before the command, as tox makes it


def test_posargs_are_empty_or_their_default() -> None:
    ini = """\
[testenv]
commands =
    pytest {posargs}
    pytest {posargs:-x tests/unit}
    pytest {posargs:{env:SUITE:tests}}
"""
    assert commands(ini) == [["pytest"], ["pytest", "-x", "tests/unit"], ["pytest", "tests"]]


def test_a_command_over_several_lines_is_one() -> None:
    ini = """\
[testenv]
commands =
    - python -m pip list
    {envpython} -m pytest \\
        --rootdir={toxinidir} \\
        {toxinidir}/tests {posargs}
    coverage report
"""
    assert commands(ini) == [
        ["python", "-m", "pip", "list"],
        ["python", "-m", "pytest", "--rootdir=.", "./tests"],
        ["coverage", "report"],
    ]


def test_substitutions_from_other_sections_and_the_ones_tox_alone_knows() -> None:
    ini = """\
[base]
args = -q --strict-markers
[testenv]
commands =
    pytest {[base]args} {envname}
    pytest {unknown} tests
    pytest "unclosed
"""
    assert commands(ini) == [["pytest", "-q", "--strict-markers", "py"], None, None]


def test_a_tox_env_read_as_tox_runs_it_through_coverage() -> None:
    ini = "[testenv]\ndeps = pytest\ncommands = coverage run --source=pkg -m pytest -x tests\n"
    settled = settle({"setup.py": SETUP, "tox.ini": ini}, Policy(), which=every_tool)
    assert args_of(settled.test) == ["-x", "tests"]


def test_the_folders_markers_cannot_be_written_in_tox_ini() -> None:
    marker = "\ue000homedir\ue001"
    (words,) = commands(f"[testenv]\ncommands = pytest --x={marker}\n")
    assert words == ["pytest", "--x=homedir"]

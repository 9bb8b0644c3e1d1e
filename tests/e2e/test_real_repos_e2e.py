"""Real repositories reviewed end to end: tkem/cachetools from one release to the next.

Two released trees of cachetools (5.4.0 → 5.5.0, sdists from PyPI: its own tests,
tox.ini and setup.cfg) make the pull request. Its tox command carries options with
values (``py.test --basetemp={envtmpdir} --cov=cachetools {posargs}``) and names
pytest-cov in ``deps``: the tests check must run that command as tox would (the
substitutions filled, the option kept with its value, the plugin installed) and its
suite must pass at base and head, so the review is clean because the tests said so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cujorun import Cujo, Review
from e2ecases import ISOLATION, Case, CaseReviews, assert_whole
from gitrepo import GitRepo
from realrepos import release_pair

pytestmark = ISOLATION

PROJECT, BASE, HEAD = "cachetools", "5.4.0", "5.5.0"


@pytest.fixture(scope="module")
def cachetools(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """Return cachetools' pull request from one release to the next."""
    return release_pair(PROJECT, BASE, HEAD, tmp_path_factory.mktemp("sdists"))


@pytest.fixture(scope="module")
def reviews(
    cachetools: Case,
    cujo: Cujo,
    pr_repo: Callable[..., GitRepo],
    tmp_path_factory: pytest.TempPathFactory,
    installed_cujo: Path,
) -> CaseReviews:
    """Review the pull request once for every test of this module."""
    return CaseReviews(
        {"cachetools": cachetools}, "real", cujo, pr_repo, tmp_path_factory.mktemp,
        installed_cujo,
    )  # fmt: skip


def test_cachetools_is_tested_as_its_tox_runs_it_and_is_clean(reviews: CaseReviews) -> None:
    review: Review = reviews.get("cachetools")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert review.verdict["isolation"] == "full", str(review)
    plan = review.verdict["plan"]
    # The declared command whole: its option with its value, tox's substitutions filled.
    assert "--cov=cachetools" in plan["test"], plan
    assert not re.search(r"\{(envtmpdir|posargs|toxinidir)", plan["test"]), plan
    assert "--basetemp=" in plan["test"], plan
    assert "pytest-cov" in plan["install"], plan
    for check in ("tests", "base"):
        report = review.report(check)
        assert report["status"] == "ok", report
        command = report["commands"][-1]
        out = command["stdout_tail"]
        assert command["exit_code"] == 0, command
        assert " passed" in out, out
        assert " failed" not in out, out
        assert "TOTAL" in out, out  # pytest-cov ran: the coverage table
    detonation = review.report("detonation")
    assert detonation["summary"] == "installed and imported 1/1 modules", detonation
    assert_whole(review)

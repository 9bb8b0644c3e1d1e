"""A `cujo_action/` or `app_relay/` in the working folder is never the code Cujo starts.

`cujo review` and `cujo doctor --local` are run inside clones, also of a pull request's
branch (`gh pr checkout 7 && cujo review --pr 7`), and `python -m X` searches the working
folder first: a pull request that adds `cujo_action/__main__.py` would have been the
harness that ran, as the user (or root), outside every sandbox. Each process Cujo starts
by module name is started with ``-P``; here each one is started from a folder holding
planted packages that leave a mark if imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo

from app_relay.cli import doctor_local
from app_relay.cli.children import Children
from app_relay.runs.localrun import LocalRunner

PLANTED = "from pathlib import Path\nPath({mark!r}).write_text('planted code ran')\n"


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in a clone whose `cujo_action/` and `app_relay/` mark a file when imported."""
    clone, mark = tmp_path / "clone", tmp_path / "mark"
    for package in ("cujo_action", "app_relay"):
        (clone / package).mkdir(parents=True)
        for module in ("__init__.py", "__main__.py"):
            (clone / package / module).write_text(PLANTED.format(mark=str(mark)))
    monkeypatch.chdir(clone)
    return mark


def test_the_local_sandbox_is_the_installed_harness_not_the_clones(
    planted: Path, tmp_path: Path
) -> None:
    project = GitRepo(tmp_path / "project")
    head = project.write({"a.txt": "a"}).commit("a")
    # A base that does not exist: the real harness says so in failure.json and exits 3.
    code = (
        LocalRunner(python=sys.executable, deadline_s=120)
        .start(repo=str(project.path), base="0" * 40, head=head, run_id="r-p", out=tmp_path / "out")
        .wait()
    )
    assert not planted.exists()
    assert code == 3
    assert (tmp_path / "out" / "failure.json").is_file()


def test_cujo_doctor_local_asks_the_installed_harness(
    planted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doctor_local.doctor_local()
    said = capsys.readouterr().out
    assert not planted.exists()
    assert "could not be asked" not in said, said
    assert "isolation" in said


def test_the_relays_worker_processes_are_the_relays_own(planted: Path) -> None:
    # No relay settings here: the real `cujo relay work` refuses to start, saying why.
    children = Children(1, 1)
    (worker,) = children._procs
    assert worker.stdin is not None
    worker.stdin.close()
    assert worker.wait(60) != 0
    assert not planted.exists()

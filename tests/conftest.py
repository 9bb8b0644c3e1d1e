"""Fixtures for the end-to-end tests: real git repositories and the real `cujo` command."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pgcluster
import pytest
import recordtemplate
from cujorun import CUJO, Cujo
from gitrepo import GitRepo
from hypothesis import settings

# Property tests explore new examples on a developer's machine (and keep failures in
# .hypothesis/); under CI they run a fixed set, so a build's result does not depend on
# the draw. Run them with more examples locally to look for new counterexamples.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI") or os.environ.get("CUJO_REQUIRE_ISOLATION"):
    settings.load_profile("ci")

# Ctrl-C reaches the commands the tests start as it would in a terminal. A suite started
# in the background (`.ci/run &`) inherits SIGINT ignored, which Python then leaves
# ignored in every child: the tests that press Ctrl-C waited on a review for ever.
# A handler of Python's own is reset to the default at exec, so the children get it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The fake GitHub (a real HTTP server on loopback) for the relay's tests.
pytest_plugins = ["fakegithub.plugin", "coordinatorworld"]

Files = Mapping[str, str | None]
TOP = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _records_from_a_template() -> Iterator[None]:
    """A new SQLite record gets the schema the migrations made once (recordtemplate.py)."""
    with pytest.MonkeyPatch.context() as patch:
        recordtemplate.install(patch)
        yield


@pytest.fixture(scope="session")
def cujo(tmp_path_factory: pytest.TempPathFactory) -> Cujo:
    """The `cujo` command, recording every review of the session in one local record."""
    assert CUJO.exists(), f"{CUJO} is missing: install the project with `make`"
    return Cujo(tmp_path_factory.mktemp("cujo-data"), tmp_path_factory.mktemp)


@pytest.fixture(scope="session")
def pr_repo(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., GitRepo]:
    """Build a repository whose `main` holds ``base`` and whose branch ``pr`` adds ``head``."""

    def build(name: str, base: Files, head: Files, *, branch: str = "pr") -> GitRepo:
        repo = GitRepo(tmp_path_factory.mktemp(name) / "repo")
        repo.write(base).commit("base")
        repo.branch(branch).checkout(branch)
        repo.write(head).commit("the pull request")
        repo.checkout("main")
        return repo

    return build


@pytest.fixture(scope="session")
def installed_cujo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return `cujo` installed as action.yml installs it: a wheel, into a venv of its own.

    The dependencies come from the test environment's site-packages (added as a plain
    path, so its editable finder for this checkout is never loaded): the harness that
    runs is the installed copy, at the path the sandbox must not see. Under xdist the
    workers share one install (the first to get the lock builds it; the rest wait): the
    session's temp root is theirs alone, made fresh each session.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    with open(shared / "harness.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "harness" / "installed"
        if not done.exists():
            cujo = _install_cujo(shared / "harness")
            done.write_text(str(cujo))
        return Path(done.read_text())


def _install_cujo(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)  # a worker that failed half-way left it
    root.mkdir()
    # Built from a clean copy: an in-tree build/ would leave stale modules in later wheels.
    source = root / "source"
    shutil.copytree(
        TOP,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", ".cujo", "*.egg-info", "*_cache", "__pycache__"
        ),
    )
    wheels = root / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    venv = root / "venv"
    # No pip of its own (ensurepip costs seconds): this environment's pip installs into it.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    (wheel,) = wheels.glob("cujo-*.whl")
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         str(wheel)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]
    Path(purelib, "cujo-test-deps.pth").write_text(deps + "\n")
    found = subprocess.run(
        [str(python), "-I", "-c", "import cujo_action; print(cujo_action.__file__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert found.startswith(str(venv)), f"the installed harness is not the one imported: {found}"
    return venv / "bin" / "cujo"


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[str]:
    """Start a throwaway PostgreSQL cluster for the session; skip, saying why, without one."""
    # Outside pytest's temp tree: pytest makes its own root 0700 at each session start,
    # and the postgres user (the cluster's owner when tests run as root) must get in.
    root = Path(tempfile.mkdtemp(prefix="cujo-postgres-"))
    try:
        with pgcluster.cluster(root) as url:
            yield url
    except pgcluster.NoPostgres as exc:
        pytest.skip(f"PostgreSQL: {exc}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty record's URL on each store the relay supports (one suite, both stores)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'record.db'}"
    admin: str = request.getfixturevalue("postgres_cluster")
    return pgcluster.new_database(admin)


# Suites that prove the sandbox's boundary: under CI (root, with the tools .ci/run
# installs) a skip there is a red build, never a quiet pass. So is a skipped PostgreSQL
# test under CUJO_REQUIRE_POSTGRES (.ci/run installs the server).
_SAFETY_SUITES = (
    "test_isolation_e2e.py",
    "test_detection_e2e.py",
    "test_jail.py",
    "test_netns.py",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """Fail a skipped safety test when CUJO_REQUIRE_ISOLATION is set (as .ci/run sets it)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped:
        return
    uses_postgres = "postgres_cluster" in getattr(item, "fixturenames", ())
    if uses_postgres and os.environ.get("CUJO_REQUIRE_POSTGRES"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a PostgreSQL test was skipped under CI, which must run it: {reason}"
        return
    if not os.environ.get("CUJO_REQUIRE_ISOLATION"):
        return
    if item.path.name in _SAFETY_SUITES:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a safety test was skipped under CI, which must run it: {reason}"


# `CUJO_TEST_CPU=FILE pytest` appends each test's CPU seconds (its own process and the
# children it waited for: the reviews it ran), its start, wall time and worker to FILE,
# one JSON line per test, so where the suite's CPU goes can be summed per file (wall time
# on two busy cores says little) and each worker's idle stretches seen.
_CPU_LOG = os.environ.get("CUJO_TEST_CPU")


def _cpu_now() -> float:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Record the test's CPU seconds when CUJO_TEST_CPU names a file."""
    if not _CPU_LOG:
        yield
        return
    before, start = _cpu_now(), time.time()
    yield
    line = json.dumps(
        {
            "test": item.nodeid,
            "cpu": round(_cpu_now() - before, 3),
            "start": round(start, 3),
            "wall": round(time.time() - start, 3),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        }
    )
    with open(_CPU_LOG, "a", encoding="utf-8") as log:
        log.write(line + "\n")


# The longest files first (summed test time of a fresh run, slowest first), then the rest
# of the end-to-end folder, then everything else. The workers each take a whole file in
# collection order (`-n 4 --dist loadfile --no-loadscope-reorder`: without that flag
# xdist hands out the files with the most tests first, which sent the end-to-end files,
# a few long tests each, to the end of the run): a long file taken last ran alone at the
# end, while the many short files now fill both workers' last minutes.
LONGEST_FILES = (
    "tests/e2e/test_detection_e2e.py",
    "tests/e2e/test_isolation_rootless_e2e.py",
    "tests/e2e/test_review_e2e.py",
    "tests/e2e/test_isolation_e2e.py",
    "tests/e2e/test_relay_e2e.py",
)


def _file_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in LONGEST_FILES:
        return LONGEST_FILES.index(path)
    return len(LONGEST_FILES) + (0 if path.startswith("tests/e2e/") else 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files longest first; a file's own tests keep their order (a stable sort)."""
    items.sort(key=_file_rank)

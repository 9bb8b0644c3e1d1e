"""The harness's locks: every download action.yml makes is pinned by version and hash.

``make lock`` writes them (it needs the index); these tests need nothing but the files.
pip itself refuses, under ``--require-hashes``, a lock that misses a dependency, so a
lock that drifts from pyproject.toml fails on the runner: these tests make it fail here.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from repo_paths import TOP

LOCKS = TOP / "requirements"
PYPROJECT = tomllib.loads((TOP / "pyproject.toml").read_text())
# One requirement of a uv/pip-compile lock: `name==version [; marker] \` then its hashes.
ENTRY = re.compile(
    r"^(?P<req>[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;\\]+(?: ; [^\\\n]+)?) \\\n"
    r"(?P<hashes>(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)",
    re.MULTILINE,
)


def locked(name: str) -> dict[str, list[tuple[Requirement, int]]]:
    """Return the lock's entries by canonical name: (requirement, number of hashes)."""
    text = (LOCKS / name).read_text()
    entries: dict[str, list[tuple[Requirement, int]]] = {}
    for match in ENTRY.finditer(text):
        req = Requirement(match["req"])
        entries.setdefault(canonicalize_name(req.name), []).append(
            (req, match["hashes"].count("--hash="))
        )
    # Every line that is not a comment or a hash belongs to a parsed entry.
    starts = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert len(starts) == sum(len(v) for v in entries.values()), f"{name}: unparsed lines"
    return entries


def runner_environments() -> list[dict[str, str]]:
    """Return marker environments for the runner: ubuntu-24.04, x86_64, Python 3.11-3.13."""
    environments = []
    for minor in ("11", "12", "13"):
        env = dict(default_environment())
        env.update(
            sys_platform="linux",
            platform_system="Linux",
            os_name="posix",
            platform_machine="x86_64",
            implementation_name="cpython",
            platform_python_implementation="CPython",
            python_version=f"3.{minor}",
            python_full_version=f"3.{minor}.0",
        )
        environments.append(env)
    return environments


def pin_for(
    entries: dict[str, list[tuple[Requirement, int]]], name: str, env: dict[str, str]
) -> Version:
    """Return the version the lock installs for ``name`` in ``env``."""
    found = [
        req
        for req, _ in entries.get(canonicalize_name(name), [])
        if req.marker is None or req.marker.evaluate(env)
    ]
    assert len(found) == 1, (
        f"{name}: {len(found)} pins apply on the runner ({env['python_version']})"
    )
    (spec,) = found[0].specifier
    return Version(spec.version)


@pytest.mark.parametrize("name", ["harness.txt", "harness-build.txt", "relay.txt"])
def test_every_requirement_is_pinned_exactly_with_hashes(name: str) -> None:
    entries = locked(name)
    assert entries
    for versions in entries.values():
        for req, hashes in versions:
            (spec,) = req.specifier
            assert spec.operator == "==", req
            assert hashes >= 1, req
    assert "make lock" in (LOCKS / name).read_text().splitlines()[1]


@pytest.mark.parametrize("env", runner_environments(), ids=lambda e: e["python_version"])
def test_the_lock_meets_what_pyproject_asks_of_the_harness(env: dict[str, str]) -> None:
    entries = locked("harness.txt")
    project = PYPROJECT["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["sandbox"]]
    wanted += [
        line for line in (LOCKS / "harness.in").read_text().splitlines() if line and line[0] != "#"
    ]
    for text in wanted:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        assert req.specifier.contains(pin_for(entries, req.name, env)), req


def test_the_build_lock_meets_the_build_system() -> None:
    entries = locked("harness-build.txt")
    for text in PYPROJECT["build-system"]["requires"]:
        req = Requirement(text)
        (env,) = runner_environments()[:1]
        assert req.specifier.contains(pin_for(entries, req.name, env)), req


def test_the_build_backend_is_not_left_to_the_harness_lock() -> None:
    # Installed first, on its own, so the locked sdists build with a hashed setuptools.
    assert "setuptools" not in locked("harness.txt")
    assert set(locked("harness-build.txt")) == {"setuptools"}


# -- the relay's image (Dockerfile): its base by digest, its dependencies from relay.txt --


@pytest.mark.parametrize("env", runner_environments(), ids=lambda e: e["python_version"])
def test_the_relay_lock_meets_what_pyproject_asks_of_the_relay(env: dict[str, str]) -> None:
    entries = locked("relay.txt")
    project = PYPROJECT["project"]
    for text in [*project["dependencies"], *project["optional-dependencies"]["relay"]]:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        assert req.specifier.contains(pin_for(entries, req.name, env)), req
    # The build backend comes from harness-build.txt, installed before it.
    assert "setuptools" not in entries


def test_the_relay_image_is_pinned_by_digest_and_installed_from_the_locks() -> None:
    dockerfile = (TOP / "Dockerfile").read_text()
    (base,) = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert re.fullmatch(r"FROM python:3\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    assert "--require-hashes -r requirements/harness-build.txt" in dockerfile
    assert "--require-hashes --no-build-isolation -r requirements/relay.txt" in dockerfile
    # Cujo itself: from this tree, nothing else fetched.
    assert "--no-deps --no-build-isolation --no-index ." in dockerfile
    assert "pip install" not in dockerfile.replace("pip install --no-cache-dir", "")

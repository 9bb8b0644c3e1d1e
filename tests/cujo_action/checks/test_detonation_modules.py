"""Detonation imports only the modules the install's own distributions ship."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cujo_action.checks.detonation import (
    LISTER,
    checkout_names,
    entry_points,
    parse_modules,
    parse_seed,
)


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    """Return a new venv's interpreter and its site-packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert purelib != sysconfig.get_path("purelib")
    return python, Path(purelib)


def _distribution(site: Path, name: str, version: str, top_level: str, ships: list[str]) -> None:
    """Install a distribution by hand: its metadata, top_level.txt, RECORD and files."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(top_level)
    record = [f"{info.name}/{n},," for n in ("METADATA", "top_level.txt", "RECORD")]
    for path in ships:
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text("")
        record.append(f"{path},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


def _list(python: Path, *args: str) -> str:
    return subprocess.run(
        [str(python), "-c", LISTER, *args], capture_output=True, text=True, check=True
    ).stdout


def test_only_modules_the_installed_distributions_ship_are_imported(tmp_path: Path) -> None:
    python, site = _venv(tmp_path)
    # As Debian's setuptools wheel seeds a venv: a top_level.txt naming `debian`, unshipped.
    _distribution(site, "seedtools", "66.1", "seedtools\ndebian\n", ["seedtools/__init__.py"])
    seed = parse_seed(_list(python))
    assert seed == ["seedtools==66.1"]
    # What the install then puts in place: a package, a module, and a name it does not ship.
    _distribution(
        site, "tinycalc", "0.1", "tinycalc\ndebian\nhelper\n", ["tinycalc/__init__.py", "helper.py"]
    )
    # And a legacy install (`setup.py install`): an egg-info, whose files are its sources.
    egg = site / "tinyegg-1.0-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: tinyegg\nVersion: 1.0\n")
    (egg / "top_level.txt").write_text("tinyegg\n")
    (egg / "SOURCES.txt").write_text("setup.py\nsrc/tinyegg/__init__.py\n")
    (site / "tinyegg").mkdir()
    (site / "tinyegg" / "__init__.py").write_text("")
    listed = parse_modules(_list(python, json.dumps(seed)))
    assert (listed.own, listed.others, listed.total) == ([], ["helper", "tinycalc", "tinyegg"], 3)
    # Without the seed, the venv's own distribution is imported too, but never `debian`.
    listed = parse_modules(_list(python, "[]"))
    assert listed.others == ["helper", "seedtools", "tinycalc", "tinyegg"]
    # Built from a folder (`pip install .` writes direct_url.json with dir_info): the
    # project's own, listed apart so it is imported first.
    info = site / "tinycalc-0.1.dist-info"
    (info / "direct_url.json").write_text('{"url": "file:///w/src", "dir_info": {}}')
    listed = parse_modules(_list(python, json.dumps(seed)))
    assert (listed.own, listed.others, listed.own_total) == (["helper", "tinycalc"], ["tinyegg"], 2)


def test_a_seed_listing_the_sandbox_could_have_forged_is_validated() -> None:
    said = ["pip==23.0", 3, "x" * 300]
    assert parse_seed("CUJO-DISTS " + json.dumps(said)) == ["pip==23.0"]
    assert parse_seed("CUJO-DISTS {broken") == []
    assert parse_seed("nothing") == []


def test_the_checkouts_own_names_are_read_without_following_its_links(tmp_path: Path) -> None:
    head = tmp_path / "head"
    (head / "pkg").mkdir(parents=True)
    (head / "pkg" / "__init__.py").write_text("")
    (head / "tool.py").write_text("")
    (head / "README.md").write_text("")
    (head / "not-a-name.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "secret_pkg").mkdir(parents=True)
    (head / "src").symlink_to(elsewhere)  # the pull request's link: never followed
    assert checkout_names(head)[0] == ["pkg", "tool"]
    (head / "src").unlink()
    (head / "src" / "inner").mkdir(parents=True)
    assert checkout_names(head)[0] == ["inner", "pkg", "src", "tool"]


def test_installed_modules_the_checkout_holds_are_the_projects_own(tmp_path: Path) -> None:
    python, site = _venv(tmp_path)
    _distribution(site, "tinycalc", "0.1", "tinycalc\n", ["tinycalc/__init__.py"])
    _distribution(site, "dep", "1.0", "dep\n", ["dep.py"])
    listed = parse_modules(_list(python, "[]", json.dumps(["tinycalc", "docs"])))
    assert (listed.own, listed.others) == (["tinycalc"], ["dep"])


def test_a_packages_own_entry_points_are_the_files_its_users_load(tmp_path: Path) -> None:
    head = tmp_path / "head"
    for rel in ("index.js", "lib/index.js", "lib/feature.mjs", "cli.js", "dist/a.cjs"):
        (head / rel).parent.mkdir(parents=True, exist_ok=True)
        (head / rel).write_text("")
    (tmp_path / "outside.js").write_text("")
    (head / "linked.js").symlink_to(tmp_path / "outside.js")  # the pull request's link
    manifest = {
        "main": "lib",
        "exports": {
            ".": {"require": "./dist/a.cjs", "import": "./lib/feature.mjs"},
            "./cli": "./cli",
            "./all/*": "./lib/*.js",  # a pattern: no one file
            "./up": "../outside.js",
            "./linked": "./linked.js",
            "./gone": "./missing.js",
        },
    }
    assert entry_points(manifest, head) == [
        "lib/index.js",
        "dist/a.cjs",
        "lib/feature.mjs",
        "cli.js",
    ]
    assert entry_points({"name": "x"}, head) == ["index.js"]  # node's default
    assert entry_points(["not", "a", "manifest"], head) == []


def test_a_checkout_folder_past_the_entries_read_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cujo_action.checks import detonation

    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.py").write_text("")
    assert detonation.checkout_names(tmp_path) == (["a", "b", "c"], False)
    monkeypatch.setattr(detonation, "MAX_LISTED", 2)
    names, cut = detonation.checkout_names(tmp_path)
    assert cut
    assert len(names) == 2

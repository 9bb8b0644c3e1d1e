"""What a run shares to start faster, and how it refuses to be led through a planted link.

The run's one venv template (made by root before any pull-request code, linked into each
installing check's HOME before it is handed over), the install's spool (packed once by
the install's uid, unpacked by each check that runs on it), and the timing record that
splits a run's fixed cost by stage.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cujo_action.arm import _seed_wheels, fast_venv
from cujo_action.arm.host import base_python
from cujo_action.arm.venvs import CACHE_ENV, KeptTemplate, TemplateStart, place_venvs, template_for
from cujo_action.checks import _receive_install
from cujo_action.checks._receive_install import MANIFEST
from cujo_action.checks.install_handoff import PACK, RECEIVE, create_spool, open_spool
from cujo_action.evidence.timing import Timeline, split, timing_record
from cujo_action.sandbox.boundary import BoundaryError, fresh_dir, hand_over
from cujo_action.sandbox.jail import JailError


def _fake_template(root: Path) -> Path:
    """A venv's shape as ``python -m venv`` leaves it, naming its own path."""
    template = root / "made" / "venv"
    (template / "bin").mkdir(parents=True)
    (template / "lib").mkdir()
    (template / "lib" / "site.py").write_text(f"# {template} stays as it is\n")
    (template / "bin" / "pip").write_text(f"#!{template}/bin/python\nimport pip\n")
    (template / "bin" / "activate").write_text(f'VIRTUAL_ENV="{template}"\n')
    (template / "bin" / "python").symlink_to(sys.executable)
    (template / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = python -m venv {template}\n")
    return template


def test_a_copy_names_the_path_its_commands_see(tmp_path: Path) -> None:
    template = _fake_template(tmp_path)
    (tmp_path / "home" / "work").mkdir(parents=True)
    dest = tmp_path / "home" / "work" / "venv"
    place_venvs(str(template), {dest: "/home/runner/work/venv"})
    assert (dest / "bin" / "pip").read_text().startswith("#!/home/runner/work/venv/bin/python\n")
    assert (dest / "bin" / "activate").read_text() == 'VIRTUAL_ENV="/home/runner/work/venv"\n'
    assert "venv /home/runner/work/venv" in (dest / "pyvenv.cfg").read_text()
    # A link stays a link, to the same interpreter; only the venv's own path is rewritten.
    assert os.readlink(dest / "bin" / "python") == sys.executable
    assert (dest / "lib" / "site.py").read_text() == f"# {template} stays as it is\n"
    # The template itself is left as it was made.
    assert (template / "bin" / "pip").read_text().startswith(f"#!{template}/bin/python")


def test_a_link_planted_where_a_copy_goes_is_refused(tmp_path: Path) -> None:
    template = _fake_template(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "home" / "work").mkdir(parents=True)
    dest = tmp_path / "home" / "work" / "venv"
    dest.symlink_to(target)
    with pytest.raises(BoundaryError):
        place_venvs(str(template), {dest: "/home/runner/work/venv"})
    assert list(target.iterdir()) == []  # nothing copied, nothing rewritten through the link


def test_a_folder_already_there_is_never_copied_into(tmp_path: Path) -> None:
    template = _fake_template(tmp_path)
    dest = tmp_path / "venv"
    dest.mkdir()
    (dest / "bin").mkdir()
    (dest / "bin" / "pip").symlink_to("/etc/passwd")  # a rewrite here would follow it
    with pytest.raises(BoundaryError):
        place_venvs(str(template), {dest: "/home/runner/work/venv"})
    assert (dest / "bin" / "pip").is_symlink()


def test_the_template_is_made_fresh_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "venv-template").symlink_to(target)
    with pytest.raises(BoundaryError):
        TemplateStart(sys.executable, tmp_path / "venv-template")
    assert list(target.iterdir()) == []


def test_the_template_is_a_venv_others_can_read(tmp_path: Path) -> None:
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    start = TemplateStart(python, tmp_path / "venv-template")
    made = start.result()
    assert made == str(tmp_path / "venv-template" / "venv")
    assert (tmp_path / "venv-template").stat().st_mode & 0o777 == 0o755
    pip = Path(made) / "bin" / "pip"
    assert pip.stat().st_mode & 0o005 == 0o005  # every check's uid reads and runs it
    done = subprocess.run(
        [f"{made}/bin/python", "-m", "pip", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_link_planted_as_the_spool_is_never_written_through(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("root's file\n")
    spool = tmp_path / "install.tar"
    spool.symlink_to(target)
    with pytest.raises(FileExistsError):
        create_spool(spool)
    assert target.read_text() == "root's file\n"


def test_a_spool_that_is_no_plain_file_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("root's file\n")
    (tmp_path / "link.tar").symlink_to(tmp_path / "target")
    with pytest.raises(JailError, match="cannot be opened"):
        open_spool(tmp_path / "link.tar")
    os.mkfifo(tmp_path / "fifo.tar")
    with pytest.raises(JailError, match="not a regular file"):
        open_spool(tmp_path / "fifo.tar")  # and never blocks on it
    with pytest.raises(JailError, match="not packed"):
        open_spool(tmp_path / "missing.tar")


def test_a_spool_is_read_by_every_check_from_its_start(tmp_path: Path) -> None:
    fd = create_spool(tmp_path / "install.tar")
    os.write(fd, b"packed once")
    os.close(fd)
    readers = [open_spool(tmp_path / "install.tar") for _ in range(3)]
    try:
        assert [os.read(r, 64) for r in readers] == [b"packed once"] * 3
    finally:
        for r in readers:
            os.close(r)


def test_the_split_tells_set_up_from_commands(tmp_path: Path) -> None:
    check = Timeline()
    check.add("harness start", 10.5, 10.6)
    check.add("receive install", 10.6, 11.6)
    check.add("test command", 11.6, 13.6)
    check.write(tmp_path / "tests.timings")
    run = Timeline()
    run.add("prepare", 0.0, 1.0)
    run.add("arm", 1.0, 3.0)
    run.add("arm/proxy", 1.0, 2.0)
    run.add("check/tests", 10.0, 14.0)
    run.extend(tmp_path / "tests.timings", "check/tests/")
    run.extend(tmp_path / "missing.timings", "check/probes/")  # a check that wrote none
    record = timing_record(run, 0.0)
    assert json.loads(json.dumps(record)) == record
    got = dict(split(record))
    assert got["prepare"] == pytest.approx(1.0)
    assert got["arm/proxy"] == pytest.approx(1.0)
    assert got["tests/python"] == pytest.approx(0.5)  # spawned at 10.0, its code ran at 10.5
    assert got["tests/commands"] == pytest.approx(2.0)
    assert got["tests/set-up"] == pytest.approx(2.0)  # 4 s in all, 2 of them its command
    assert got["tests/receive install"] == pytest.approx(1.0)


def test_a_timeline_that_is_not_one_adds_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.timings").write_text('{"name": "x"}')
    (tmp_path / "worse.timings").write_text('[{"name": "x", "start": "soon"}, 3]')
    run = Timeline()
    run.extend(tmp_path / "bad.timings", "check/x/")
    run.extend(tmp_path / "worse.timings", "check/x/")
    assert run.spans == []


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root keeps the templates")


@needs_root
def test_a_template_made_whole_is_kept_and_the_next_run_copies_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    python = base_python(for_sandbox_user=True)
    first = template_for(python, tmp_path / "run-1")
    assert isinstance(first, TemplateStart)
    made = first.result()
    assert made
    later = template_for(python, tmp_path / "run-2")
    assert isinstance(later, KeptTemplate)  # no process: ready at once
    assert later.result() == made
    assert not (tmp_path / "run-2").exists()

    dest = tmp_path / "home" / "work" / "venv"
    dest.parent.mkdir(parents=True)
    place_venvs(later.result(), {dest: "/home/runner/work/venv"}, made_at=later.made_at)

    activate = (dest / "bin" / "activate").read_text()
    assert "/home/runner/work/venv" in activate
    assert later.made_at not in activate
    assert later.result() not in activate
    prefix = subprocess.run(
        [str(dest / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert prefix == str(dest)


@needs_root
@pytest.mark.parametrize("planted", ["writable", "foreign", "link"])
def test_a_kept_template_anyone_else_could_have_changed_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """What root copies into every check's HOME comes from nowhere another user writes."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    python = base_python(for_sandbox_user=True)
    key = template_for(python, tmp_path / "run-0")
    assert isinstance(key, TemplateStart)
    key.cancel()
    kept = key.keep_as
    assert kept is not None
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "venv" / "bin").mkdir(parents=True)
    (elsewhere / "made-at").write_text("/nowhere/venv")
    if planted == "link":
        kept.symlink_to(elsewhere)
    else:
        elsewhere.rename(kept)
        if planted == "writable":
            kept.chmod(0o777)
        else:
            os.chown(kept, 12345, 12345)

    again = template_for(python, tmp_path / "run-1")

    assert isinstance(again, TemplateStart)  # made anew, not copied from what was planted
    assert again.result()
    again.discard()  # it could not take the planted one's name: not kept
    assert not again.folder.exists()
    assert sorted(p.name for p in cache.iterdir()) == [kept.name]


@needs_root
def test_two_first_runs_at_once_keep_one_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    python = base_python(for_sandbox_user=True)
    one, two = (template_for(python, tmp_path / f"run-{n}") for n in (1, 2))
    assert isinstance(one, TemplateStart)
    assert isinstance(two, TemplateStart)
    assert one.result()
    assert two.result()  # usable for its own run all the same
    one.discard()
    two.discard()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [one.keep_as.name]
    assert isinstance(template_for(python, tmp_path / "run-3"), KeptTemplate)


def test_a_venv_is_laid_out_as_links_to_the_template_and_its_own_scripts(
    tmp_path: Path,
) -> None:
    template = _fake_template(tmp_path)
    (tmp_path / "home" / "work").mkdir(parents=True)
    dest = tmp_path / "home" / "work" / "venv"
    place_venvs(str(template), {dest: "/home/runner/work/venv"})
    shared, own = dest / "lib" / "site.py", dest / "bin" / "pip"
    if os.geteuid() == 0:  # root's read-only files are shared; another user's are copied
        assert shared.stat().st_ino == (template / "lib" / "site.py").stat().st_ino
    # What names the venv's path is a file of its own: the template's is not rewritten.
    assert own.stat().st_ino != (template / "bin" / "pip").stat().st_ino
    assert own.stat().st_mode == (template / "bin" / "pip").stat().st_mode


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's files are shared as links")
def test_a_template_file_others_could_write_is_copied_not_linked(tmp_path: Path) -> None:
    template = _fake_template(tmp_path)
    (template / "lib" / "loose.py").write_text("x = 1\n")
    (template / "lib" / "loose.py").chmod(0o666)
    (template / "lib" / "theirs.py").write_text("y = 1\n")
    os.chown(template / "lib" / "theirs.py", 12345, 12345)
    dest = tmp_path / "venv"
    place_venvs(str(template), {dest: "/home/runner/work/venv"})
    for name in ("loose.py", "theirs.py"):
        copy, original = dest / "lib" / name, template / "lib" / name
        assert copy.stat().st_ino != original.stat().st_ino
        assert copy.read_text() == original.read_text()
    assert (dest / "lib" / "loose.py").stat().st_mode & 0o777 == 0o666


@pytest.mark.skipif(os.geteuid() != 0, reason="handing over needs root")
def test_handing_over_refuses_a_shared_file_others_could_write(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("shared\n")
    outside.chmod(0o666)
    os.link(outside, home / "linked.txt")
    with pytest.raises(BoundaryError, match="shared with another name"):
        hand_over(home, 12345, 12345)
    assert outside.stat().st_uid == 0


SANDBOX_UID = 64123  # no account: a uid that owns nothing on this machine


@needs_root
def test_a_check_cannot_change_the_template_through_its_links_but_can_change_its_venv(
    tmp_path: Path,
) -> None:
    """Attack test: the uid a check runs as, given a venv laid out as links to root's kept
    template, tries to write through every shared file; none changes. Its own venv stays
    its own to change (pip uninstalls from it; the template and the other copy keep all)."""
    top = Path(tempfile.mkdtemp(prefix="cujo-links-", dir="/tmp"))
    try:
        top.chmod(0o711)
        start = TemplateStart(base_python(for_sandbox_user=True), top / "template")
        template = Path(start.result())
        assert str(template)
        homes = [fresh_dir(top / name, 0o700) for name in ("one", "two")]
        for home in homes:
            fresh_dir(home / "work", 0o755)
        copies = {home / "work" / "venv": f"{home}/work/venv" for home in homes}
        place_venvs(str(template), copies, made_at=start.made_at)
        hand_over(homes[0], SANDBOX_UID, SANDBOX_UID)
        venv = homes[0] / "work" / "venv"
        shared = [p for p in venv.rglob("*") if p.is_file() and not p.is_symlink()
                  and p.stat().st_nlink > 1]  # fmt: skip
        assert len(shared) > 500  # pip's files, at least
        assert all(p.stat().st_uid == 0 for p in shared)  # never handed over
        assert venv.stat().st_uid == SANDBOX_UID
        assert (venv / "bin" / "pip").stat().st_uid == SANDBOX_UID  # rewritten: its own
        before = {p: p.read_bytes() for p in shared[:50]}
        as_uid = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                  "--clear-groups", "--"]  # fmt: skip
        env = {"PATH": "/usr/bin:/bin", "HOME": str(homes[0]), "TMPDIR": str(homes[0])}
        attack = (
            'for f in "$@"; do '
            '(echo pwned >> "$f") 2>/dev/null && echo "wrote $f"; '
            'chmod 666 "$f" 2>/dev/null && echo "chmod $f"; '
            'truncate -s 0 "$f" 2>/dev/null && echo "truncated $f"; '
            "done; true"
        )
        done = subprocess.run(
            [*as_uid, "sh", "-c", attack, "sh", *map(str, before)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert done.stdout == ""
        assert all(p.read_bytes() == data for p, data in before.items())
        assert all(p.stat().st_mode & 0o022 == 0 for p in before)

        uninstall = subprocess.run(
            [*as_uid, str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "pip"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert uninstall.returncode == 0, uninstall.stderr
        assert not list((venv / "lib").glob("python*/site-packages/pip"))
        for other in (template, homes[1] / "work" / "venv"):
            assert list(other.glob("lib/python*/site-packages/pip/__init__.py"))
        assert all(p.read_bytes() == data for p, data in before.items() if p.exists())
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _as_user(uid: int, work: Callable[[], None]) -> None:
    """Run ``work`` in a forked child that is ``uid`` and nobody else (no root left)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            work()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A fresh folder under /tmp that another uid can pass through (tmp_path's cannot)."""
    top = Path(tempfile.mkdtemp(prefix="cujo-copies-", dir="/tmp"))
    top.chmod(0o711)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@needs_root
def test_without_root_each_check_gets_a_copy_no_other_check_can_change(open_tmp: Path) -> None:
    """Attack test (the harness without root): every check's commands run as the harness's
    own uid, so a venv laid out from a template that uid made must share no file with the
    template or another check's venv. The install's uid writes, chmods and truncates every
    file of its venv: the template and the detonation's venv keep every byte."""
    user = SANDBOX_UID
    top = open_tmp
    start = TemplateStart(base_python(for_sandbox_user=True), top / "template")
    template = Path(start.result())
    assert str(template)
    subprocess.run(["chown", "-R", f"{user}:{user}", str(top)], check=True)  # the user's own
    homes = {name: top / name / "home" for name in ("install", "detonation")}

    def lay_out() -> None:  # as the harness does without root, before any PR code
        for home in homes.values():
            fresh_dir(home.parent, 0o700)
            fresh_dir(home, 0o700)
            fresh_dir(home / "work", 0o755)
        copies = {home / "work" / "venv": "/home/runner/work/venv" for home in homes.values()}
        place_venvs(str(template), copies, made_at=start.made_at)

    _as_user(user, lay_out)
    mine, theirs = (homes[name] / "work" / "venv" for name in ("install", "detonation"))
    files = [p for p in mine.rglob("*") if p.is_file() and not p.is_symlink()]
    assert len(files) > 500  # pip's files, at least
    inodes = {p.stat().st_ino for p in template.rglob("*") if p.is_file() and not p.is_symlink()}
    inodes |= {p.stat().st_ino for p in theirs.rglob("*") if p.is_file() and not p.is_symlink()}
    assert not [p for p in files if p.stat().st_ino in inodes]  # nothing shared
    as_uid = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
    # Each copy keeps its file's times, so the template's bytecode is still valid in it:
    # no check compiles pip anew (`python -v` names each cache it loads, or a stale one).
    imported = subprocess.run(
        [*as_uid, str(theirs / "bin" / "python"), "-v", "-c", "import pip._internal.cli"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    loaded = re.findall(r"code object from '(.+?)'", imported.stderr)
    assert [p for p in loaded if p.startswith(f"{theirs}/")], imported.stderr[-2000:]
    assert "bytecode is stale" not in imported.stderr, imported.stderr[-2000:]
    before = {p: p.read_bytes() for p in [*template.rglob("*.py"), *theirs.rglob("*.py")]}
    attack = (  # one process, every file: chmod, append, truncate
        "import os, sys\n"
        "for f in sys.argv[1:]:\n"
        "    os.chmod(f, 0o666)\n"
        "    with open(f, 'ab') as fh:\n"
        "        fh.write(b'pwned')\n"
        "    os.truncate(f, 1)\n"
    )
    subprocess.run([*as_uid, sys.executable, "-I", "-c", attack, *map(str, files)], check=True)
    assert all(p.stat().st_size == 1 for p in files)  # the attack did write its own venv
    assert [p for p, data in before.items() if p.read_bytes() != data] == []
    # Its scripts name the path the commands see, not the template's.
    assert "/home/runner/work/venv" in (theirs / "pyvenv.cfg").read_text() or (
        "/home/runner/work/venv" in (theirs / "bin" / "activate").read_text()
    )


SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_fast_venv_is_the_venv_python_makes(tmp_path: Path) -> None:
    """fast_venv makes, file for file, what `python -m venv` makes, pip working in it."""
    made, usual = tmp_path / "fast", tmp_path / "usual"
    fast_venv.fast(SYSTEM_PYTHON, made)  # the fast path itself: raises rather than fall back
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(usual)], check=True)
    assert _tree(made) == _tree(usual)
    assert any(name.endswith(".pyc") for name in _tree(made))  # byte-compiled as pip does
    for launcher in ("pip", "pip3"):
        first = (made / "bin" / launcher).read_text().splitlines()[0]
        assert first == (usual / "bin" / launcher).read_text().splitlines()[0].replace(
            str(usual), str(made)
        )
    config = (made / "pyvenv.cfg").read_text()
    assert "--without-pip" not in config
    assert config == (usual / "pyvenv.cfg").read_text().replace(str(usual), str(made))
    done = subprocess.run(
        [str(made / "bin" / "python"), "-m", "pip", "--version"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f"from {made}/lib/" in done.stdout


def test_a_seed_that_fails_leaves_the_usual_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "seed.py"
    broken.write_text("raise SystemExit('no wheels here')\n")
    monkeypatch.setattr(fast_venv, "SEED", broken)
    made = tmp_path / "venv"
    assert fast_venv.make(SYSTEM_PYTHON, made) == 0
    assert "making it with python -m venv" in capsys.readouterr().err
    assert "--without-pip" not in (made / "pyvenv.cfg").read_text()
    subprocess.run([str(made / "bin" / "python"), "-m", "pip", "--version"], check=True)


@pytest.mark.parametrize("count", [0, 2])
def test_the_seed_takes_one_wheel_of_each_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    import sysconfig

    folder = tmp_path / "wheels"
    folder.mkdir()
    for version in ("24.0", "25.0")[:count]:
        (folder / f"pip-{version}-py3-none-any.whl").write_bytes(b"")
        (folder / f"setuptools-{version}-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: str(folder))
    if count == 2:  # the folder ensurepip would use, with two of each: nothing guessed
        with pytest.raises(SystemExit, match="exactly one wheel"):
            _seed_wheels.wheels()
    else:  # an empty folder is passed over, for the next place ensurepip looks
        assert all(folder not in w.parents for w in _seed_wheels.wheels())


def test_a_manifest_names_only_plain_paths_below_the_venv() -> None:
    data = b"\0".join(
        [b"d ", b"d bin", b"f 12 bin/pip", b"f 13 ../../etc/passwd", b"f 14 /etc/shadow",
         b"f x lib/a.py", b"f 15 lib//b.py", b"junk", b""]
    )  # fmt: skip
    folders, shared = _receive_install.read_manifest(data)
    assert folders == {"", "bin"}
    assert shared == {12: "bin/pip"}


INSTALL_UID, RECEIVER_UID = 64124, 64125


def _as(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _listing(venv: Path) -> dict[str, str]:
    """Each entry below ``venv``: a folder, a link's text, or a file's bytes."""
    seen: dict[str, str] = {}
    for path in sorted(venv.rglob("*")):
        rel = str(path.relative_to(venv))
        if path.is_symlink():
            seen[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            seen[rel] = "dir"
        else:
            seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


@needs_root
def test_a_receiver_gets_the_install_venv_file_for_file_without_the_template_in_the_spool(
    tmp_path: Path,
) -> None:
    """The install changes its venv of template links every way pip can (removes, moves,
    replaces, adds files and folders); its spool carries only its own files, and the
    receiving uid's venv ends up the same, its shared files still the template's."""
    top = Path(tempfile.mkdtemp(prefix="cujo-spool-", dir="/tmp"))
    try:
        top.chmod(0o711)
        start = TemplateStart(base_python(for_sandbox_user=True), top / "template")
        template = Path(start.result())
        homes = {uid: fresh_dir(top / str(uid), 0o700) for uid in (INSTALL_UID, RECEIVER_UID)}
        for home in homes.values():
            fresh_dir(home / "work", 0o755)
        copies = {home / "work" / "venv": "/home/runner/work/venv" for home in homes.values()}
        place_venvs(str(template), copies, made_at=start.made_at)
        for uid, home in homes.items():
            hand_over(home, uid, uid)
        work = homes[INSTALL_UID] / "work"
        (work / "demo").mkdir()
        (work / "demo" / "setup.py").write_text("print('demo')\n")
        os.chown(work / "demo", INSTALL_UID, INSTALL_UID)
        os.chown(work / "demo" / "setup.py", INSTALL_UID, INSTALL_UID)
        site = next((work / "venv" / "lib").glob("python*/site-packages"))
        rel_site = site.relative_to(work / "venv")
        change = (
            f"cd {site} && rm -r pip/_vendor/rich && rm pip/py.typed && "
            "mv pip/__main__.py pip/moved_main.py && "
            "rm pip/__init__.py && cp pip/moved_main.py pip/__init__.py && "
            "mkdir -p newpkg/sub && echo 'x = 1' > newpkg/sub/mod.py && "
            "ln -s newpkg/sub/mod.py linked.py"
        )
        subprocess.run([*_as(INSTALL_UID), "sh", "-c", change], check=True)
        spool = top / "install.tar"
        with open(spool, "wb") as out:
            packed = subprocess.run(
                [*_as(INSTALL_UID), "bash", "-c",
                 PACK.format(work=work, repo="./demo", manifest=MANIFEST)],
                stdout=out, stderr=subprocess.PIPE, text=True, cwd=work,
            )  # fmt: skip
        assert packed.returncode == 0, packed.stderr
        with tarfile.open(spool) as archive:
            names = archive.getnames()
        assert names[0] == MANIFEST
        assert len(names) < 400  # the folders and the install's own files, not ~1,700
        assert f"./venv/{rel_site}/newpkg/sub/mod.py" in names
        assert f"./venv/{rel_site}/pip/_internal/main.py" not in names  # named, not sent

        receiving = homes[RECEIVER_UID] / "work"
        with open(spool, "rb") as spooled:
            received = subprocess.run(
                [*_as(RECEIVER_UID), base_python(for_sandbox_user=True), "-I", "-S", "-c",
                 RECEIVE, str(receiving)],
                stdin=spooled, capture_output=True, text=True, cwd=receiving,
            )  # fmt: skip
        assert received.returncode == 0, received.stderr
        assert _listing(receiving / "venv") == _listing(work / "venv")
        assert (receiving / "demo" / "setup.py").read_text() == "print('demo')\n"
        assert not (receiving / MANIFEST).exists()
        moved = receiving / "venv" / rel_site / "pip" / "moved_main.py"
        assert moved.stat().st_ino == (template / rel_site / "pip" / "__main__.py").stat().st_ino
        assert (template / rel_site / "pip" / "_vendor" / "rich").is_dir()  # untouched
        assert (template / rel_site / "pip" / "py.typed").is_file()
        assert not (receiving / "venv" / rel_site / "pip" / "py.typed").exists()
        done = subprocess.run(
            [*_as(RECEIVER_UID), str(receiving / "venv" / "bin" / "python"), "-c",
             "import pip._internal.main, newpkg.sub.mod"],
            capture_output=True, text=True, cwd=receiving,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(top, ignore_errors=True)

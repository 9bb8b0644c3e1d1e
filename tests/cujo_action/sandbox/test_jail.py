"""The jail: one command confined, as the harness runs every pull-request command.

As root (CI, as on an Actions runner) each command runs as a uid of its own inside
bubblewrap with its check's cgroups; these tests then also try the escape routes from
inside (uid 0, nested user namespaces, /proc, the harness's files, host sockets, shared
/tmp and /dev/shm, inherited descriptors, setuid, a fork bomb, memory). Elsewhere the
same commands run as the test's user, and the root-only tests skip with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cujorun import processes_with
from sandboxes import Sandbox, Sandboxes, sandboxes_for

import cujo_action
from cujo_action.arm.fingerprint_probe import FOLDERS
from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.limits import OUTPUT_FLOOD, OUTPUT_TAIL
from cujo_action.net.ns.netns import NetNamespace
from cujo_action.net.ns.nftguard import Redirect
from cujo_action.sandbox.jail import (
    INSIDE_UID,
    Confinement,
    JailError,
    Outcome,
    run_confined,
)
from cujo_action.sandbox.output import Printed
from cujo_action.sandbox.uids import UID_BASE
from cujo_action.watch.procinfo import parent_pids

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="needs root: per-run uids, as on Actions")


@pytest.fixture
def sandboxes() -> Iterator[Sandboxes]:
    # The sandbox uid must pass through every parent of its home: pytest's are root's 0700.
    top = Path(tempfile.mkdtemp(prefix="cujo-jail-"))
    top.chmod(0o711)
    try:
        yield from sandboxes_for(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(params=["shell", "worker"])
def box(sandboxes: Sandboxes, request: pytest.FixtureRequest) -> Sandbox:
    # pid 1 is either the plain shell or the decoy runner worker; the jail's promises hold
    # the same with either.
    return sandboxes.make(worker=request.param == "worker")


def run(box: Sandbox, cmd: str, timeout: float = 30, **kw: int) -> object:
    return run_confined(
        cmd, cwd=box.cwd, env=ENV, timeout=timeout, confinement=box.confinement, **kw
    )


def test_exit_code_and_output(box: Sandbox) -> None:
    out = run_confined(
        "echo hello; echo oops >&2; exit 7",
        cwd=box.cwd, env=ENV, timeout=30, confinement=box.confinement,
    )  # fmt: skip
    assert out.exit_code == 7
    assert not out.timed_out
    assert out.stdout_tail == "hello\n"
    assert out.stderr_tail == "oops\n"


def test_environment_is_only_what_was_given(box: Sandbox) -> None:
    os.environ["CUJO_TEST_LEAK"] = "harness-secret"
    try:
        out = run_confined("env", cwd=box.cwd, env=ENV, timeout=30, confinement=box.confinement)
    finally:
        del os.environ["CUJO_TEST_LEAK"]
    assert "harness-secret" not in out.stdout_tail
    assert "HOME=/nonexistent" in out.stdout_tail


def test_timeout_kills_everything_it_started(box: Sandbox) -> None:
    marker = f"{3000 + os.getpid() % 997}.{threading.get_ident() % 997}"
    # A background grandchild that would outlive a naive kill of the shell.
    out = run_confined(
        f"sleep {marker} & wait", cwd=box.cwd, env=ENV, timeout=1, confinement=box.confinement
    )
    assert out.timed_out
    assert out.exit_code is None
    assert processes_with(f"sleep {marker}") == []


def test_leftover_background_process_is_killed_when_the_command_exits(box: Sandbox) -> None:
    marker = f"{4000 + os.getpid() % 997}.{threading.get_ident() % 991}"
    out = run_confined(
        f"(setsid sleep {marker} >/dev/null 2>&1 &)",
        cwd=box.cwd, env=ENV, timeout=30, confinement=box.confinement,
    )  # fmt: skip
    assert out.exit_code == 0
    assert processes_with(f"sleep {marker}") == []


def test_stdin_and_stdout_can_be_files(box: Sandbox, tmp_path: Path) -> None:
    src, dst = tmp_path / "in", tmp_path / "out"
    src.write_text("from the harness\n")
    with src.open("rb") as fin, dst.open("wb") as fout:
        out = run_confined(
            "tr a-z A-Z", cwd=box.cwd, env=ENV, timeout=30, confinement=box.confinement,
            stdin_fd=fin.fileno(), stdout_fd=fout.fileno(),
        )  # fmt: skip
    assert out.exit_code == 0
    assert dst.read_text() == "FROM THE HARNESS\n"


def test_output_keeps_only_the_tail(box: Sandbox) -> None:
    out = run_confined(
        "seq 1 100000", cwd=box.cwd, env=ENV, timeout=30, confinement=box.confinement
    )
    assert out.exit_code == 0
    assert out.stdout_tail.endswith("100000\n")
    assert len(out.stdout_tail) <= OUTPUT_TAIL
    assert out.stdout_bytes > OUTPUT_TAIL


def test_flood_is_cut_off(box: Sandbox) -> None:
    # 1 GiB of zeros: the jail must stop it near the cap instead of draining it all.
    out = run_confined(
        "head -c 1073741824 /dev/zero", cwd=box.cwd, env=ENV, timeout=120,
        confinement=box.confinement,
    )  # fmt: skip
    assert out.flooded
    assert out.exit_code is None
    assert OUTPUT_FLOOD < out.stdout_bytes < 1073741824 // 2


DECOYS = make_decoys()
TOKEN = next(d for d in DECOYS if d.name == "GITHUB_TOKEN").value


def test_a_decoy_printed_base64_twice_is_found_far_past_the_tail(box: Sandbox) -> None:
    # tj-actions' trick, in pieces (separate writes) and followed by enough output that
    # the report's tail no longer holds it: the whole stream is searched, not the tail.
    twice = shlex.quote(TOKEN)
    cmd = (
        f"v=$(printf %s {twice} | base64 -w0 | base64 -w0); "
        'printf "%s" "${v:0:30}"; printf "%s\\n" "${v:30}"; '
        "seq 1 300000; echo done >&2"
    )
    out = run_confined(
        cmd, cwd=box.cwd, env=ENV, timeout=60, confinement=box.confinement,
        search=DecoyMatcher(DECOYS),
    )  # fmt: skip
    assert out.exit_code == 0
    assert out.stdout_bytes > 2 * OUTPUT_TAIL
    assert out.printed == (Printed("GITHUB_TOKEN", "base64+base64", "stdout"),)
    assert out.output_unsearched == 0


def test_a_decoy_on_stderr_is_found_and_named_by_its_stream(box: Sandbox) -> None:
    out = run_confined(
        f"echo ok; printf 'token=%s\\n' {shlex.quote(TOKEN)} >&2",
        cwd=box.cwd, env=ENV, timeout=30, confinement=box.confinement,
        search=DecoyMatcher(DECOYS),
    )  # fmt: skip
    assert out.printed == (Printed("GITHUB_TOKEN", "plain", "stderr"),)


def test_a_flood_is_searched_up_to_the_cap(box: Sandbox) -> None:
    # Printing the decoy and then flooding cannot wash it out: what came before the cap
    # was searched as it arrived.
    out = run_confined(
        f"echo {shlex.quote(TOKEN)}; head -c 1073741824 /dev/zero",
        cwd=box.cwd, env=ENV, timeout=120, confinement=box.confinement,
        search=DecoyMatcher(DECOYS),
    )  # fmt: skip
    assert out.flooded
    assert out.printed == (Printed("GITHUB_TOKEN", "plain", "stdout"),)


def test_output_is_not_searched_unless_asked(box: Sandbox) -> None:
    out = run(box, f"echo {shlex.quote(TOKEN)}")
    assert out.printed == ()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- escape routes


@root_only
def test_no_command_runs_as_root_in_any_mode() -> None:
    for netns in (None, "cujo-anything"):
        with pytest.raises(JailError, match="as root"):
            Confinement(netns, None, None)
        with pytest.raises(JailError, match="as root"):
            Confinement(netns, 0, 0)


@root_only
def test_the_command_is_a_uid_of_its_own_and_cannot_read_root_files(box: Sandbox) -> None:
    assert box.uid is not None
    assert box.uid >= UID_BASE
    out = run(box, "id -u; cat /etc/shadow >/dev/null 2>&1 && echo SHADOW || echo denied")
    inside = INSIDE_UID if box.confinement.view is not None else box.uid
    assert out.stdout_tail.split() == [str(inside), "denied"]


@root_only
def test_setuid_and_sudo_are_powerless(box: Sandbox) -> None:
    out = run(box, "sudo -n id -u 2>&1; echo rc=$?; su -c id 2>&1 </dev/null; echo rc=$?")
    assert "rc=0" not in out.stdout_tail, out.stdout_tail
    assert "\n0\n" not in f"\n{out.stdout_tail}"


@root_only
def test_nested_user_namespaces_are_closed(box: Sandbox) -> None:
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    out = run(box, "unshare -Urn id -u 2>&1; echo rc=$?")
    assert out.stdout_tail.strip().endswith("rc=1"), out.stdout_tail
    assert "\n0\nrc=0" not in out.stdout_tail


@root_only
def test_proc_shows_only_the_sandbox_not_the_harness(box: Sandbox) -> None:
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    out = run(
        box,
        "ls /proc | grep -c '^[0-9]'; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '",
    )
    count, _, cmdlines = out.stdout_tail.partition("\n")
    # pid 1 and what it keeps (its sleep, or the runner's tree), the command's shell,
    # ls/grep: never the harness.
    worker = box.confinement.view.worker
    assert int(count) < (worker.processes if worker is not None else 2) + 8, out.stdout_tail
    # ptrace needs a process to aim at: the harness's pids are not even there.
    assert "pytest" not in cmdlines, cmdlines
    assert "cujo_action" not in cmdlines, cmdlines


@root_only
def test_harness_files_are_not_visible(sandboxes: Sandboxes) -> None:
    package = str(Path(cujo_action.__file__).resolve().parent)
    box = sandboxes.make(hidden=(package,))
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    out = run(box, f"ls -A {package} | wc -l; ls /tmp /run /dev/shm /home | wc -l")
    assert out.stdout_tail.split()[0] == "0", out.stdout_tail


@root_only
def test_tmp_and_dev_shm_are_private(sandboxes: Sandboxes) -> None:
    one, two = sandboxes.make(), sandboxes.make()
    if one.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    name = f"cujo-private-{os.getpid()}"
    assert (
        run(one, f"echo x > /tmp/{name} && echo x > /dev/shm/{name} && echo ok").stdout_tail
        == "ok\n"
    )
    seen = run(two, f"cat /tmp/{name} /dev/shm/{name} 2>/dev/null | wc -l")
    assert seen.stdout_tail.strip() == "0"  # another check sees none of it
    assert not Path(f"/tmp/{name}").exists()
    assert not Path(f"/dev/shm/{name}").exists()
    again = run(one, f"cat /tmp/{name} /dev/shm/{name} 2>/dev/null | wc -l")
    assert again.stdout_tail.strip() == "0"  # each command's /tmp is its own, too


@root_only
def test_one_check_cannot_touch_anothers_home(sandboxes: Sandboxes) -> None:
    one, two = sandboxes.make(), sandboxes.make()
    (two.home / "secret").write_text("two's\n")
    os.chown(two.home / "secret", two.uid or 0, two.uid or 0)
    out = run(
        one,
        f"cat {two.home}/secret 2>&1; echo planted >> {two.home}/secret 2>&1; echo rc=$?",
    )
    assert "two's" not in out.stdout_tail
    assert (two.home / "secret").read_text() == "two's\n"


@root_only
def test_unix_sockets_of_host_services_are_out_of_reach(box: Sandbox) -> None:
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    accepted: list[bytes] = []
    paths = [Path(f"/run/cujo-test-{os.getpid()}.sock"), Path(f"/tmp/cujo-test-{os.getpid()}.sock")]
    servers = []
    for path in paths:
        path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        os.chmod(path, 0o777)  # a service that lets anybody in, as docker's group would
        server.listen(4)
        server.settimeout(0.2)
        servers.append(server)
    try:
        probe = "; ".join(
            f"python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{p}\")' "
            f"2>/dev/null && echo reached || echo unreachable"
            for p in paths
        )
        out = run(box, probe)
        for server in servers:
            try:
                conn, _ = server.accept()
                accepted.append(conn.recv(10))
                conn.close()
            except TimeoutError:
                pass
        assert out.stdout_tail.split() == ["unreachable", "unreachable"], out.stdout_tail
        assert accepted == []
    finally:
        for server, path in zip(servers, paths, strict=True):
            server.close()
            path.unlink(missing_ok=True)


@root_only
def test_no_inherited_descriptor_reaches_the_command(box: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "harness-only"
    secret.write_text("harness secret\n")
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        out = run(box, "ls /proc/self/fd | sort -n | tr '\\n' ' '")
    finally:
        os.close(fd)
    # stdin, stdout, stderr and the descriptor `ls` reads its folder through; nothing
    # else (not the harness's files, not the sandbox's status pipe).
    assert out.stdout_tail.split() == ["0", "1", "2", "3"], out.stdout_tail


@root_only
def test_the_command_cannot_forge_its_exit_status(box: Sandbox) -> None:
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    # Writing a status into every descriptor it can find changes nothing.
    out = run(box, "for fd in 3 4 5 6 7 8 9 10 11 12; do echo 0 >&$fd; done 2>/dev/null; exit 9")
    assert out.exit_code == 9


@root_only
def test_a_fork_bomb_meets_the_check_limit_and_is_reported(box: Sandbox) -> None:
    out = run(box, "bomb() { bomb | bomb & }; bomb", timeout=20)
    assert out.process_flood, out
    assert out.peak_processes > 100 or out.refused_forks > 0
    assert out.duration_s < 20


# The command returns at once; what it left computes a while (runnable, making nothing)
# before it starts to multiply: a fork bomb slow to start, as on a loaded machine.
LATE_BOMB = (
    "( i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; bomb() { bomb | bomb & }; bomb )"
    " >/dev/null 2>&1 &"
)


@root_only
def test_a_fork_bomb_that_starts_after_its_command_returned_is_reported(box: Sandbox) -> None:
    out = run(box, LATE_BOMB, timeout=30)
    assert out.exit_code == 0
    assert out.process_flood, out


@root_only
def test_memory_is_limited_by_whatever_this_machine_offers(
    sandboxes: Sandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUJO_CHECK_MEMORY_MB", "128")
    box = sandboxes.make()
    described = box.limits.describe()
    out = run(box, "python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'; echo rc=$?")
    if box.limits.kind == "rlimits":
        # Nothing enforces memory here, and the report says so rather than pretending.
        assert "no memory limit" in described
        return
    assert "memory 128 MiB" in described
    assert "rc=137" in out.stdout_tail, out
    assert out.oom_kills >= 1


# --------------------------------------------------------------------------- the runner's tree

# tj-actions/changed-files' way: read a process's memory through /proc, keep what looks
# like a secret in the runner's own format.
MEMDUMP = r"""
import re, sys
found = set()
pid = sys.argv[1]
try:
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if perms.startswith("r"):
                start, end = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(start)
                    found.update(re.findall(rb'"[^"]+":\{"value":"[^"]*","isSecret":true\}',
                                            mem.read(end - start)))
                except (OSError, OverflowError, ValueError):
                    pass
except PermissionError:
    print(pid, "closed")
    raise SystemExit
print(pid, len(found))
"""
# Each process from the step's shell up to pid 1: name, then command line.
ANCESTORS = (
    'p=$$; while [ "$p" != 0 ]; do '
    "echo \"$(cat /proc/$p/comm)|$(tr '\\0' ' ' < /proc/$p/cmdline)\"; "
    "p=$(awk '{print $4}' /proc/$p/stat); done"
)
RUNNER = "/home/runner/runners/2.321.0/bin"


def worker_box(sandboxes: Sandboxes) -> Sandbox:
    box = sandboxes.make(worker=True)
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    return box


def processes_of(uid: int) -> list[str]:
    """Return the live (not zombie) processes whose real uid is ``uid``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            status = (proc / "status").read_text() if proc.name.isdigit() else ""
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)] and "zombie" not in fields["State"]:
            found.append(f"{proc.name} {fields['Name'].strip()}")
    return found


@root_only
def test_pid_1_is_systemd_and_the_step_descends_from_the_runner(sandboxes: Sandboxes) -> None:
    box = worker_box(sandboxes)
    out = run(
        box,
        f"{ANCESTORS}; readlink /proc/1/exe || echo closed; ls /proc | grep -c '^[0-9]'; "
        "wc -c < /proc/2/cmdline; cat /proc/2/comm; awk '{print $4}' /proc/3/stat; "
        "wc -c < /proc/3/cmdline",
    )
    lines = out.stdout_tail.splitlines()
    shell, worker, listener, provisioner, init = (line.split("|") for line in lines[:5])
    assert shell[0] == "bash"
    assert re.fullmatch(r"/usr/bin/bash -e /home/runner/work/_temp/[0-9a-f-]{36}\.sh ", shell[1])
    assert worker == ["Runner.Worker", f"{RUNNER}/Runner.Worker spawnclient 107 110 "], out
    assert listener == ["Runner.Listener", f"{RUNNER}/Runner.Listener run "], out
    assert provisioner[0] == "provisioner", out
    assert provisioner[1].startswith("/opt/runner/provisioner/provisioner --agentdirectory ")
    assert init == ["systemd", "/sbin/init "], out
    # pid 1's executable is closed to the step, as root's is on a runner.
    assert lines[5] == "closed", out
    assert box.confinement.view is not None
    assert box.confinement.view.worker is not None
    processes = box.confinement.view.worker.processes
    assert processes >= 100
    assert int(lines[6]) >= processes, out  # the tree, the step's shell, ls and grep
    # kthreadd is pid 2, with an empty command line, and the kernel threads its children.
    assert lines[7:] == ["0", "kthreadd", "2", "0"], out
    assert out.exit_code == 0


@root_only
def test_the_workers_memory_holds_the_job_and_nothing_else_is_open(
    sandboxes: Sandboxes,
) -> None:
    box = worker_box(sandboxes)
    code = shlex.quote(MEMDUMP)
    out = run(
        box,
        "for p in $(pgrep -f '^/home/runner/runners/.*/Runner.Worker ') 1 2 3 "
        "$(pgrep -x dockerd) $(pgrep -x Runner.Listener); "
        f"do python3 -c {code} $p; done",
    )
    seen = dict(line.split() for line in out.stdout_tail.splitlines())
    assert len(seen) == 6, out
    worker = min(seen, key=lambda pid: seen[pid] == "closed")
    assert seen.pop(worker) == "3", out  # the job's secrets, readable by its user
    assert set(seen.values()) == {"closed"}, out  # everything else is root's, as it were


@root_only
def test_no_process_of_the_tree_outlives_the_command(sandboxes: Sandboxes) -> None:
    box = worker_box(sandboxes)
    assert box.uid is not None
    out = run(box, "ls /proc | grep -c '^[0-9]'")
    assert int(out.stdout_tail) > 100, out
    # Killing bubblewrap kills the sandbox's pid 1, and the kernel the rest of its PID
    # namespace; that finishes a moment after the harness has its answer.
    deadline = time.monotonic() + 10
    while processes_of(box.uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(box.uid) == []


def zombie_children(uid: int) -> int:
    """Return how many children of this process are ``uid``'s zombies."""
    found = 0
    for proc in Path("/proc").iterdir():
        try:
            status = (proc / "status").read_text() if proc.name.isdigit() else ""
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        mine = fields.get("PPid", "").strip() == str(os.getpid())
        if mine and fields["Uid"].split()[:1] == [str(uid)] and "zombie" in fields["State"]:
            found += 1
    return found


@root_only
def test_a_commands_pid_1_is_reaped_before_the_next_one_starts(box: Sandbox) -> None:
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    assert box.uid is not None
    # Each pid 1 is adopted here when bubblewrap's monitor is killed before it; the next
    # command reaps it before it starts, so none is left but the last one's, and none is
    # in the check's cgroup when the next command's leftovers are counted.
    outcomes = [run(box, "true") for _ in range(4)]
    assert [o.exit_code for o in outcomes] == [0, 0, 0, 0]
    assert zombie_children(box.uid) <= 1


@root_only
def test_the_step_runs_from_a_script_as_bash_c_would_and_it_is_gone_after(
    sandboxes: Sandboxes,
) -> None:
    box = worker_box(sandboxes)
    out = run(box, 'false; echo "still $0"; cat "$0"; exit 3')
    lines = out.stdout_tail.splitlines()
    # A runner's `bash -e`, and yet a failing command does not end the step.
    assert lines[0].startswith("still /home/runner/work/_temp/"), out
    assert lines[1:] == ["set +e", 'false; echo "still $0"; cat "$0"; exit 3'], out
    assert out.exit_code == 3
    assert list((box.home / "work" / "_temp").iterdir()) == []


@root_only
@pytest.mark.parametrize(
    ("cmd", "code"),
    [
        ("exit 0", 0),
        ("exit 42", 42),
        ("kill -9 $$", 137),
        ("kill $$", 143),
        # The whole process group: the worker stays to say how the step ended.
        ("kill -TERM 0", 143),
        ("kill $PPID; exit 5", 5),
    ],
)
def test_the_worker_reports_how_the_command_ended(
    sandboxes: Sandboxes, cmd: str, code: int
) -> None:
    box = worker_box(sandboxes)
    assert run(box, cmd).exit_code == code


# --------------------------------------------------------------------------- the tree


@pytest.fixture
def neutral() -> Iterator[Sandboxes]:
    # Homes in a folder named as the run's is (tempfile's plain tmpXXXXXXXX): the mount
    # table shows the path a bind comes from.
    top = Path(tempfile.mkdtemp())
    top.chmod(0o711)
    try:
        yield from sandboxes_for(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@root_only
def test_the_mount_table_names_nothing_of_cujo_nor_the_phase_namespaces(
    neutral: Sandboxes, tmp_path: Path
) -> None:
    # The harness's install hidden as a run hides it; its path names Cujo on this machine.
    package = str(Path(cujo_action.__file__).resolve().parent)
    box = neutral.make(hidden=(package, str(tmp_path)), worker=True)
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    # A phase's namespace, as a run has one: its file under /run/netns is a host mount.
    with NetNamespace(Redirect(transparent_port=9), state_dir=tmp_path) as ns:
        assert Path("/run/netns", ns.name).exists()
        # In it (`ip netns exec` makes the mount namespace) and outside (`unshare` does).
        for netns in (ns.name, None):
            out = run_confined(
                "grep -i -e cujo -e /run/netns /proc/self/mountinfo /proc/self/mounts "
                "/proc/1/mountinfo; echo mounts=$(grep -c ' /home/runner ' /proc/self/mountinfo)",
                cwd=box.cwd, env=ENV, timeout=30, confinement=replace(box.confinement, netns=netns),
            )  # fmt: skip
            assert out.stdout_tail == "mounts=1\n", (netns, out.stdout_tail)
            # Detached for the sandbox alone: the host still holds the namespace there.
            assert os.path.ismount(Path("/run/netns", ns.name))


MADE_HERE = ("/var/run/docker.sock", "/run/systemd", "/home/linuxbrew")
FOLDERS_CHECK = """
import json, os, socket, stat, sys
folders = json.loads(sys.argv[1])
sock = "/var/run/docker.sock"
info = os.stat(sock)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sock)
    docker = "connected"
except ConnectionRefusedError:
    docker = "refused"
# What systemd's folder holds: empty folders, never a socket of the host's.
held = sorted(os.path.join(d, n)[len("/run/systemd/"):]
              for d, dirs, files in os.walk("/run/systemd") for n in dirs + files)
print(json.dumps({
    "present": [f for f in folders if os.path.lexists(f)],
    "docker": [stat.S_ISREG(info.st_mode), info.st_size, docker],
    "systemd": [h for h in held if not os.path.isdir("/run/systemd/" + h)],
    "resolve": os.path.isdir("/run/systemd/resolve"),
    "host_writable": [f for f in folders if f not in json.loads(sys.argv[2])
                      and os.path.lexists(f) and os.access(f, os.W_OK)],
}))
"""


@root_only
def test_the_images_folders_are_there_and_what_comes_from_the_host_is_read_only(
    neutral: Sandboxes,
) -> None:
    box = neutral.make()
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    # The probe's list: made by the sandbox under its own tmpfs, or the host's (read-only).
    expected = [f for f in FOLDERS if f in MADE_HERE or os.path.lexists(f)]
    out = run(
        box,
        f"python3 -c {shlex.quote(FOLDERS_CHECK)} {shlex.quote(json.dumps(FOLDERS))} "
        f"{shlex.quote(json.dumps(MADE_HERE))}",
    )
    seen = json.loads(out.stdout_tail)
    assert seen["present"] == expected, out
    # Docker's socket path: an empty file, refused as when the daemon is down.
    assert seen["docker"] == [True, 0, "refused"]
    assert seen["systemd"] == []
    assert seen["resolve"] is True
    assert seen["host_writable"] == []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@root_only
def test_every_process_of_a_command_descends_from_the_pid_1_it_names(box: Sandbox) -> None:
    if box.confinement.view is None:
        pytest.skip("bubblewrap does not work here")
    assert box.uid is not None
    mark = f"{time.time_ns() % 10_000_000}.25"  # a sleep only this command runs
    # A daemon that left its parent (an orphan) is pid 1's to reap: it descends from it too.
    got: dict[str, object] = {}
    worker = threading.Thread(
        target=lambda: got.update(out=run(box, f"( sleep {mark} & ) ; sleep 1.5")), daemon=True
    )
    worker.start()
    chains: list[tuple[int, ...]] = []
    deadline = time.monotonic() + 10
    while not chains and time.monotonic() < deadline:
        found = [int(line.split(":", 1)[0]) for line in processes_with(f"sleep {mark}")]
        chains = [parent_pids(pid) for pid in found if _comm(pid) == "sleep"]
        time.sleep(0.05)
    worker.join(30)
    out = got["out"]
    assert isinstance(out, Outcome)
    assert out.exit_code == 0, out
    assert chains, "the orphan was never seen"
    assert isinstance(out.sandbox_pid, int)
    assert all(out.sandbox_pid in chain for chain in chains), (out.sandbox_pid, chains)
    again = run(box, "true")
    assert isinstance(again, Outcome)
    assert again.sandbox_pid not in (None, out.sandbox_pid)

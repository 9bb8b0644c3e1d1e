"""A rootless phase namespace: its TCP and DNS reach the harness only, the rest is counted.

A real holder (``unshare --user --map-root-user --net``) with loopback stand-ins for the
phase's proxy (answers a CONNECT, then greets) and resolver (DNS over TCP); commands join
it as ``join_argv`` does and run in bubblewrap as a check's commands do. Targets are
TEST-NET addresses, which never leave the namespace.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import unprivileged
from repo_paths import TOP

from cujo_action.arm.host import read_isolation
from cujo_action.arm.localisolation import local_isolation
from cujo_action.net.ns.netns import drops_for
from cujo_action.net.ns.rootless import RootlessNamespace
from cujo_action.net.ns.rootlessguard import ForwarderPorts, guard_ruleset
from cujo_action.sandbox.phase_namespace import (
    holder_pid,
    is_rootless,
    join_argv,
    kill_all_in,
    namespace_inode,
)
from cujo_action.sandbox.reaper import namespace_inode as any_namespace_inode
from cujo_action.sandbox.resolvconf import kept_search, search_path

WHY = local_isolation(read_isolation()).why if shutil.which("bwrap") else "no bwrap"
pytestmark = pytest.mark.skipif(
    local_isolation(read_isolation()).isolation != "full", reason=f"needs namespaces: {WHY}"
)


class Listener:
    """A loopback TCP listener that records what each client sent first."""

    def __init__(self, answer: bytes, *, dns: bool = False) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.heard: list[bytes] = []
        self._answer, self._dns = answer, dns
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                if self._dns:
                    size = struct.unpack("!H", conn.recv(2))[0]
                    query = conn.recv(size)
                    self.heard.append(query)
                    conn.sendall(struct.pack("!H", len(query)) + query)  # an echo as answer
                    continue
                head = b""
                while b"\r\n\r\n" not in head and (more := conn.recv(1024)):
                    head += more
                self.heard.append(head)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n" + self._answer)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[RootlessNamespace, Listener, Listener]]:
    proxy, resolver = Listener(b"greetings from the proxy\n"), Listener(b"", dns=True)
    ns = RootlessNamespace(tmp_path / "ns", proxy_port=proxy.port, dns_port=resolver.port)
    ns.create()
    try:
        yield ns, proxy, resolver
    finally:
        ns.destroy()
        proxy.sock.close()
        resolver.sock.close()


def confined(ns: RootlessNamespace, code: str) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` in the namespace, in bubblewrap, as a check's command runs."""
    bwrap = [
        shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev",
        "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-user", "--disable-userns",
        "--uid", "1001", "--gid", "1001", "--unshare-pid", "--unshare-ipc",
        "--die-with-parent", "--",
    ]  # fmt: skip
    return subprocess.run(
        [*join_argv(ns.name), *bwrap, "/usr/bin/python3", "-c", code],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_raw_connection_reaches_the_proxy_as_a_connect_to_where_it_was_aimed(
    held: tuple[RootlessNamespace, Listener, Listener],
) -> None:
    ns, proxy, _ = held
    done = confined(
        ns,
        "import socket; s = socket.create_connection(('203.0.113.9', 4444), timeout=10); "
        "s.sendall(b'hello'); print(s.recv(100).decode(), end='')",
    )
    assert done.stdout == "greetings from the proxy\n", done
    (head,) = proxy.heard
    assert head.split(b"\r\n")[0] == b"CONNECT 203.0.113.9:4444 HTTP/1.1"


def test_dns_to_the_stub_and_to_any_address_reaches_the_resolver_only(
    held: tuple[RootlessNamespace, Listener, Listener],
) -> None:
    ns, proxy, resolver = held
    done = confined(
        ns,
        "import socket\n"
        "for where in ('127.0.0.53', '192.0.2.53'):\n"
        "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(10)\n"
        "    u.sendto(b'query to ' + where.encode(), (where, 53))\n"
        "    print(u.recvfrom(512)[0].decode())\n",
    )
    assert done.stdout.splitlines() == ["query to 127.0.0.53", "query to 192.0.2.53"], done
    assert resolver.heard == [b"query to 127.0.0.53", b"query to 192.0.2.53"]
    assert proxy.heard == []


def test_other_packets_go_nowhere_silently_and_are_counted(
    held: tuple[RootlessNamespace, Listener, Listener],
) -> None:
    ns, proxy, resolver = held
    done = confined(
        ns,
        "import socket; u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(3): u.sendto(b'beacon', ('203.0.113.9', 9999))\n"
        "print('sent')",
    )
    assert done.stdout == "sent\n", done  # no error a runner would not give
    drops = drops_for(ns.name)
    assert [str(r) for r in drops.refused] == ["refused: 3 packets to 203.0.113.9:9999/udp"]
    assert (proxy.heard, resolver.heard) == ([], [])


def test_a_command_cannot_read_or_change_the_guard_or_make_a_namespace(
    held: tuple[RootlessNamespace, Listener, Listener],
) -> None:
    ns, _, _ = held
    done = confined(
        ns,
        "import subprocess\n"
        "for argv in (['nft', 'list', 'ruleset'], ['nft', 'flush', 'ruleset'],\n"
        "             ['ip', 'link', 'set', 'docker0', 'up'], ['unshare', '-Urn', 'true']):\n"
        "    print(subprocess.run(argv, capture_output=True).returncode != 0)\n",
    )
    assert done.stdout.split() == ["True"] * 4, done
    # The guard is whole: what it counts is still counted.
    assert drops_for(ns.name).packets == 0


def test_what_a_phase_leaves_in_its_namespace_is_killed_but_not_the_holder(
    held: tuple[RootlessNamespace, Listener, Listener],
) -> None:
    ns, _, _ = held
    left = subprocess.Popen([*join_argv(ns.name), "sleep", "600"])
    try:
        inode = namespace_inode(ns.name)
        assert inode is not None
        assert any_namespace_inode(ns.name) == inode
        # nsenter joins, then execs sleep: only then is the process the phase's to kill.
        joined_by = time.monotonic() + 30
        while not _inside(left.pid, inode) and left.poll() is None:
            assert time.monotonic() < joined_by, "the command never joined the namespace"
            time.sleep(0.01)
        kill_all_in(ns.name)
        assert left.wait(timeout=10) != 0
        assert ns.process is not None
        assert ns.process.poll() is None
    finally:
        if left.poll() is None:  # a failed assert leaves no process for later tests
            left.kill()
            left.wait()


def _inside(pid: int, inode: int) -> bool:
    """Say whether ``pid`` runs ``sleep`` in the network namespace ``inode``."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        return comm == "sleep" and os.stat(f"/proc/{pid}/ns/net").st_ino == inode
    except OSError:
        return False


def test_names_say_which_kind_of_namespace() -> None:
    assert is_rootless("userns:123")
    assert holder_pid("userns:123") == 123
    assert not is_rootless("ns-abc123")


def test_the_guard_redirects_tcp_and_dns_and_counts_the_rest_in_the_root_sets() -> None:
    script = guard_ruleset(ForwarderPorts(tcp=15001, dns=15053))
    assert "meta l4proto tcp counter redirect to :15001" in script
    assert "udp dport 53 counter redirect to :15053" in script
    # The same names the host-side table uses: ns.nftguard.parse_drops reads both.
    for name in ("set refused4 ", "set refused4_other ", 'comment "refused"', 'comment "ipv6"'):
        assert name in script


def test_an_ordinary_user_keeps_one_search_domain_for_the_jail_and_the_resolver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not root: /run/cujo is not its to write, and a domain made per process would make
    # the resolver log a searched name (name.<domain>) as a host of its own.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert search_path() == tmp_path / "cujo" / "resolver-search"
    first = kept_search()
    assert kept_search() == first
    assert (tmp_path / "cujo" / "resolver-search").read_text().strip() == first


# Run as an ordinary user (the jail refuses a command without a uid as root): the
# checkout's harness, with the test environment's packages, on the system's Python.
AS_USER = """
import shutil, sys
from pathlib import Path
from cujo_action.net.ns.rootless import RootlessNamespace
from cujo_action.sandbox.jail import Confinement, View, run_confined
ns = RootlessNamespace(Path(sys.argv[1]) / "ns", proxy_port=9, dns_port=9).create()
try:
    confinement = Confinement(ns.name, None, None, View(shutil.which("bwrap"), (), (), ()),
                              nproc=40)
    outcome = run_confined(sys.argv[2], cwd=Path("/"), env={"PATH": "/usr/bin:/bin"},
                           timeout=30, confinement=confinement)
    print(outcome.process_flood, outcome.peak_processes)
finally:
    ns.destroy()
"""
# The command returns at once; what it left computes a while (runnable, making nothing)
# before it multiplies: a fork bomb slow to start, as on a loaded machine.
LATE_BOMB = (
    "( i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; bomb() { bomb | bomb & }; bomb )"
    " >/dev/null 2>&1 &"
)


@pytest.mark.parametrize(
    "command",
    [
        # 100 sleepers where 40 processes are allowed: the rest refused.
        pytest.param(
            "for i in $(seq 100); do sleep 30 & done 2>/dev/null; echo started", id="sleepers"
        ),
        pytest.param(LATE_BOMB, id="late-bomb"),
    ],
)
def test_a_command_in_a_rootless_namespace_meets_the_process_limit(command: str) -> None:
    python = unprivileged.system_python()
    if os.geteuid() != 0 or python is None:
        pytest.skip("switches to an ordinary account with the system's Python: root only")
    # Not under pytest's own temporary folder: that is root's alone (0700).
    tmp_path = Path(tempfile.mkdtemp(prefix="cujo-rootless-nproc-"))
    tmp_path.chmod(0o755)
    work = unprivileged.owned(tmp_path / "work")
    paths = [str(TOP), sysconfig.get_paths()["purelib"]]
    account = unprivileged.Account(tmp_path, work, python)
    done = subprocess.run(
        [*account.argv(python, "-c", AS_USER), str(work), command],
        env={"PATH": "/usr/bin:/bin", "HOME": str(work), "PYTHONPATH": ":".join(paths)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    shutil.rmtree(tmp_path, ignore_errors=True)
    # It is a flood, held at the limit however fast its parent returned.
    flood, peak = done.stdout.split()
    assert flood == "True", done
    assert int(peak) <= 40, done

"""The resolver reads as a runner's: 127.0.0.53 in resolv.conf, answered by the logging one.

Inside a phase's namespace, DNS asked of systemd-resolved's stub address (UDP and TCP)
reaches the logging resolver, logged with the phase's label and the process that asked;
the sandbox reads the resolver files systemd-resolved writes, bound over a plain
/etc/resolv.conf (this machine) or written into its own /run where /etc/resolv.conf is a
runner's symlink (tried in a private mount namespace); and the sandboxed command can
neither list nor change the table that makes the stub address work.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sandboxes import Sandbox, Sandboxes, sandboxes_for

from cujo_action.net.dns.asker import holds_address
from cujo_action.net.dns.resolver import ResolverConfig, start_resolver
from cujo_action.net.egress import parse_egress_log
from cujo_action.net.namebook import SINK_ADDRESS
from cujo_action.net.ns import netns
from cujo_action.net.ns.dnsstub import STUB_TABLE, stub_ruleset
from cujo_action.net.ns.layout import Layout
from cujo_action.net.ns.netns import NetNamespace
from cujo_action.net.ns.nftguard import Redirect
from cujo_action.sandbox.jail import Confinement, Outcome, View, run_confined
from cujo_action.sandbox.resolvconf import (
    AZURE_DNS,
    STUB_CONF,
    UPLINK_CONF,
    HostResolver,
    ResolvFile,
    host_resolver,
    kept_search,
    made_up_search,
    sandbox_files,
    stub_resolv_conf,
)

REASON = netns.unavailable()
LABEL = "tests/test"
PRIVATE = ("/home", "/run", "/tmp")
ETC = "/etc/resolv.conf"
needs_root = pytest.mark.skipif(REASON is not None, reason=f"namespaces unavailable: {REASON}")

# --------------------------------------------------------------------------- pure parts


def test_the_stub_table_sends_both_stub_addresses_to_the_gateway() -> None:
    lay = Layout("a1b2c3", 5)
    text = stub_ruleset(lay)
    assert f"table ip {STUB_TABLE} {{" in text
    for proto in ("udp", "tcp"):
        assert (
            f"ip daddr {{ 127.0.0.53, 127.0.0.54 }} {proto} dport 53 counter "
            f'dnat to {lay.host_ip}:53 comment "stub"'
        ) in text
    assert f'oifname "{lay.sandbox_link}" ip saddr 127.0.0.0/8' in text
    assert f"snat to {lay.sandbox_ip}" in text


def test_stub_resolv_conf_is_systemd_255s() -> None:
    text = stub_resolv_conf(("abc.bx.internal.cloudapp.net",))
    lines = text.splitlines()
    assert lines[0] == (
        "# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8)."
    )
    assert lines[1] == "# Do not edit."
    assert lines[-3:] == [
        "nameserver 127.0.0.53",
        "options edns0 trust-ad",
        "search abc.bx.internal.cloudapp.net",
    ]
    assert stub_resolv_conf(()).endswith("search .\n")


def test_a_made_up_search_domain_is_shaped_as_an_azure_vms() -> None:
    name, zone, *rest = made_up_search().split(".")
    assert len(name) == 26
    assert name.isalnum()
    assert name == name.lower()
    assert len(zone) == 2
    assert rest == ["internal", "cloudapp", "net"]
    assert made_up_search() != made_up_search()


def test_a_plain_resolv_conf_is_covered_and_the_runner_files_are_written() -> None:
    files = sandbox_files(HostResolver(), "x.bx.internal.cloudapp.net", PRIVATE)
    by_path = {f.path: f for f in files}
    assert sorted(by_path) == sorted(["/etc/resolv.conf", STUB_CONF, UPLINK_CONF])
    assert by_path["/etc/resolv.conf"].bind
    assert not by_path[STUB_CONF].bind
    assert not by_path[UPLINK_CONF].bind
    assert by_path["/etc/resolv.conf"].content == by_path[STUB_CONF].content
    uplink = by_path[UPLINK_CONF].content.decode()
    assert f"nameserver {AZURE_DNS}\nsearch x.bx.internal.cloudapp.net\n" in uplink
    # Nothing to cover: no bind (bubblewrap could not make the file on a read-only root).
    missing = sandbox_files(HostResolver(etc_exists=False), "x.test", PRIVATE)
    assert [f.path for f in missing] == [STUB_CONF, UPLINK_CONF]


def test_a_symlink_into_run_gets_a_file_there_and_no_bind() -> None:
    host = HostResolver(STUB_CONF, True, ("real.cx.internal.cloudapp.net",), ("168.63.129.16",))
    files = sandbox_files(host, "unused.test", PRIVATE)
    assert [(f.path, f.bind) for f in files] == [(STUB_CONF, False), (UPLINK_CONF, False)]
    assert b"search real.cx.internal.cloudapp.net\n" in files[0].content
    # Elsewhere under a private folder (NetworkManager's, resolvconf's): written there.
    other = sandbox_files(HostResolver("/run/NetworkManager/resolv.conf"), "d.test", PRIVATE)
    assert next((f.path, f.bind) for f in other) == ("/run/NetworkManager/resolv.conf", False)
    assert b"nameserver 127.0.0.53\n" in other[0].content


def test_host_resolver_reads_a_resolved_hosts_domains_and_uplinks(tmp_path: Path) -> None:
    resolved = tmp_path / "run" / "systemd" / "resolve"
    resolved.mkdir(parents=True)
    (resolved / "stub-resolv.conf").write_text(stub_resolv_conf(("vm.dx.internal.cloudapp.net",)))
    (resolved / "resolv.conf").write_text(
        "nameserver 168.63.129.16\nnameserver 127.0.0.1\nsearch vm.dx.internal.cloudapp.net\n"
    )
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "resolv.conf").symlink_to("../run/systemd/resolve/stub-resolv.conf")
    host = host_resolver(str(etc / "resolv.conf"), str(resolved))
    assert host == HostResolver(
        str(resolved / "stub-resolv.conf"),
        True,
        ("vm.dx.internal.cloudapp.net",),
        ("168.63.129.16",),
    )
    (etc / "plain").write_text("nameserver 10.0.0.2\nsearch corp.example\n")
    assert host_resolver(str(etc / "plain"), str(resolved)) == HostResolver(str(etc / "plain"))


def test_the_made_up_search_domain_is_made_once_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "state" / "resolver-search"
    first = kept_search(path)
    assert kept_search(path) == first
    assert path.read_text() == first + "\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert list(path.parent.iterdir()) == [path]  # no temporary left behind


def test_holds_address_reads_the_namespace_of_a_process() -> None:
    assert holds_address(os.getpid(), "127.0.0.1")
    assert not holds_address(os.getpid(), "192.0.2.77")
    assert not holds_address(2**22 + 7, "127.0.0.1")  # no such process


# --------------------------------------------------------------------------- the real thing


def query(name: str, ident: int, flags: int = 0x0100, edns: bool = False) -> bytes:
    """Return a DNS query for ``name`` (type A), with an OPT record when ``edns``."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    head = struct.pack("!HHHHHH", ident, flags, 1, 0, 0, 1 if edns else 0)
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0) if edns else b""
    return head + qname + struct.pack("!HH", 1, 1) + opt


# Run inside the sandbox with the host's python: one query to a stub address over UDP
# (a connected socket, as glibc's), one over TCP, one sent unconnected, one to 127.0.0.1
# where nothing listens (as on a runner). Prints each reply in hex, or the error.
ASK = r"""
import json, socket, struct, sys
names, asks = json.loads(sys.argv[1]), {}
def udp(where, message, connect=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        if connect:
            s.connect(where)
            s.send(message)
            return s.recv(4096).hex()
        s.sendto(message, where)
        return s.recvfrom(4096)[0].hex()
    except OSError as e:
        return type(e).__name__
def tcp(where, message):
    with socket.create_connection(where, 5) as c:
        c.sendall(struct.pack("!H", len(message)) + message)
        (n,) = struct.unpack("!H", c.recv(2))
        data = b""
        while len(data) < n:
            data += c.recv(n - len(data))
        return data.hex()
for key, (host, how, message) in names.items():
    message = bytes.fromhex(message)
    if how == "tcp":
        asks[key] = tcp((host, 53), message)
    else:
        asks[key] = udp((host, 53), message, how == "udp")
print(json.dumps(asks))
"""


@dataclass
class Stub:
    ns: NetNamespace
    log: Path
    box: Sandbox
    resolver_alive: Callable[[], bool]

    def confinement(self) -> Confinement:
        box = self.box
        return Confinement(self.ns.name, box.uid, box.uid, box.confinement.view, box.limits)

    def run(self, cmd: str, env: dict[str, str] | None = None) -> Outcome:
        return run_confined(
            cmd,
            cwd=self.box.cwd,
            env=env or {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"},
            timeout=60,
            confinement=self.confinement(),
        )

    def wait(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Poll the log until a record matches: a line lands after its answer left."""
        deadline = time.monotonic() + 15
        while True:
            for record in parse_egress_log(self.log.read_bytes()).records:
                if pred(record):
                    return record
            assert self.resolver_alive()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.02)


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    if REASON is not None or os.geteuid() != 0:
        pytest.skip(f"namespaces unavailable: {REASON}")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    tmp = tmp_path_factory.mktemp("stub")
    config = ResolverConfig(labels=[LABEL], log_path=tmp / "egress.jsonl", ready_path=tmp / "r")
    resolver = start_resolver(config, tmp / "dns")
    top = Path(tempfile.mkdtemp(prefix="dnsstub-"))
    top.chmod(0o711)
    boxes: Iterator[Sandboxes] = sandboxes_for(top)
    made = next(boxes)
    try:
        box = made.make()
        if box.confinement.view is None:
            pytest.skip("bubblewrap does not work here")
        redirect = Redirect(transparent_port=9, dns_port=resolver.ports[LABEL])
        with NetNamespace(redirect, state_dir=tmp / "state") as ns:
            yield Stub(ns, config.log_path, box, resolver.alive)
    finally:
        next(boxes, None)
        shutil.rmtree(top, ignore_errors=True)
        assert resolver.stop() == 0


def ask(stub: Stub, asks: dict[str, tuple[str, str, bytes]]) -> dict[str, str]:
    wire = {k: (host, how, message.hex()) for k, (host, how, message) in asks.items()}
    out = stub.run(f"exec python3 -c {_quote(ASK)} {_quote(json.dumps(wire))}")
    assert out.exit_code == 0, out.stderr_tail
    answers: dict[str, str] = json.loads(out.stdout_tail)
    return answers


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def tag(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}.stub.test"


@needs_root
def test_udp_and_tcp_to_the_stub_reach_the_resolver_with_the_phase_and_the_asker(
    stub: Stub,
) -> None:
    names = {k: tag(k) for k in ("udp", "tcp", "loose", "proxy")}
    answers = ask(
        stub,
        {
            "udp": ("127.0.0.53", "udp", query(names["udp"], 1)),
            "tcp": ("127.0.0.53", "tcp", query(names["tcp"], 2)),
            "loose": ("127.0.0.53", "sendto", query(names["loose"], 3)),
            "proxy": ("127.0.0.54", "udp", query(names["proxy"], 4)),
        },
    )
    for key, name in names.items():
        reply = bytes.fromhex(answers[key])
        assert reply.endswith(socket.inet_aton(SINK_ADDRESS)), (key, answers[key])
        record = stub.wait(lambda r, name=name: r["host"] == name)  # type: ignore[misc]
        assert (record["label"], record["action"]) == (LABEL, "sunk")
        # The asker is named although its socket is bound to 127.0.0.1 (or nothing).
        asker = record.get("process") or {}
        assert "python3" in str(asker.get("exe")), (key, record)


@needs_root
def test_getent_reads_resolv_conf_and_asks_the_stub(stub: Stub) -> None:
    name = tag("glibc")
    out = stub.run(f"cat /etc/resolv.conf; getent hosts {name}")
    assert out.exit_code == 0, out.stderr_tail
    assert "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch " in out.stdout_tail
    assert out.stdout_tail.splitlines()[-1].split()[0] == SINK_ADDRESS
    record = stub.wait(lambda r: r["host"] == name and r["url"].endswith("type=A"))
    assert record["label"] == LABEL
    assert "getent" in str((record.get("process") or {}).get("exe"))
    # getent asks AAAA first; after the empty answer glibc asks again with the search
    # domain appended (as on a runner): logged as the same host, and answered NXDOMAIN.
    search = out.stdout_tail.split("\nsearch ", 1)[1].split()[0]
    asked = {r["url"] for r in _records(stub) if r["host"] == name}
    assert f"dns:{name}.{search}?type=AAAA" in asked
    assert not any(r["host"].endswith(search) for r in _records(stub))


@needs_root
def test_the_stubs_answer_reads_as_resolveds(stub: Stub) -> None:
    asked_ad = query(tag("ad"), 7, flags=0x0100 | 0x0020, edns=True)  # RD, AD (trust-ad)
    asked_cd = query(tag("cd"), 8, flags=0x0100 | 0x0010)  # RD, CD
    answers = ask(
        stub, {"ad": ("127.0.0.53", "udp", asked_ad), "cd": ("127.0.0.53", "udp", asked_cd)}
    )
    ad, cd = bytes.fromhex(answers["ad"]), bytes.fromhex(answers["cd"])
    flags = struct.unpack("!H", ad[2:4])[0]
    assert flags & 0x8180 == 0x8180  # QR, RD, RA
    assert flags & 0x0400 == 0
    assert flags & 0x0020 == 0
    assert struct.unpack("!H", ad[10:12]) == (1,)  # an OPT record, as the query had one
    assert ad.endswith(b"\x00\x00\x29" + struct.pack("!H", 65494) + b"\x00\x00\x00\x00\x00\x00")
    assert struct.unpack("!H", cd[2:4])[0] & 0x0010 == 0x0010  # CD echoed
    assert struct.unpack("!H", cd[10:12]) == (0,)  # no OPT unasked


@needs_root
def test_dns_to_any_other_address_is_handled_as_before(stub: Stub) -> None:
    names = {k: tag(k) for k in ("public", "gateway", "loopback")}
    answers = ask(
        stub,
        {
            "public": ("192.0.2.53", "udp", query(names["public"], 5)),
            "gateway": (stub.ns.host_ip, "tcp", query(names["gateway"], 6)),
            "loopback": ("127.0.0.1", "udp", query(names["loopback"], 7)),
        },
    )
    for key in ("public", "gateway"):
        assert bytes.fromhex(answers[key]).endswith(socket.inet_aton(SINK_ADDRESS)), answers
        assert stub.wait(lambda r, k=key: r["host"] == names[k])["label"] == LABEL  # type: ignore[misc]
    # The namespace's own loopback has no resolver, as a runner's has none on 127.0.0.1.
    assert answers["loopback"] == "ConnectionRefusedError"
    assert not any(r["host"] == names["loopback"] for r in _records(stub))


def _records(stub: Stub) -> list[dict[str, Any]]:
    return parse_egress_log(stub.log.read_bytes()).records


@needs_root
def test_the_sandbox_cannot_list_or_flush_the_stub_table(stub: Stub) -> None:
    nft = shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin")
    assert nft is not None
    attempts = (
        f"{nft} list ruleset; echo list=$?; {nft} flush ruleset; echo flush=$?; "
        f"{nft} delete table ip {STUB_TABLE}; echo delete=$?; "
        f"unshare -rn {nft} flush ruleset; echo userns=$?; "
        "echo 0 > /proc/sys/net/ipv4/conf/all/route_localnet; echo sysctl=$?"
    )
    out = stub.run(attempts)
    said = dict(line.split("=", 1) for line in out.stdout_tail.splitlines() if "=" in line)
    assert set(said) == {"list", "flush", "delete", "userns", "sysctl"}, out.stdout_tail
    assert all(code != "0" for code in said.values()), out.stdout_tail
    assert "Operation not permitted" in out.stderr_tail
    # Untouched: the table is there, and the stub still answers.
    listed = subprocess.run(
        stub.ns.run_in([nft, "list", "table", "ip", STUB_TABLE]), capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert "127.0.0.53" in listed.stdout
    name = tag("after")
    assert bytes.fromhex(ask(stub, {"a": ("127.0.0.53", "udp", query(name, 9))})["a"]).endswith(
        socket.inet_aton(SINK_ADDRESS)
    )


@needs_root
def test_resolv_conf_is_bound_over_a_plain_file_without_cujos_names(stub: Stub) -> None:
    if os.path.islink("/etc/resolv.conf"):
        pytest.skip("this host's /etc/resolv.conf is a symlink (the next test's layout)")
    out = stub.run(
        "grep -E 'resolv|/run/systemd' /proc/self/mountinfo; echo ---; "
        "cat /run/systemd/resolve/stub-resolv.conf /run/systemd/resolve/resolv.conf; "
        "stat -c '%a %F' /etc/resolv.conf; ls /proc/self/fd | wc -l"
    )
    mounts, _, rest = out.stdout_tail.partition("---\n")
    # One bind over the plain file (bubblewrap's copy, not a host folder of Cujo's), and
    # none under /run: the runner's files are files of the sandbox's own tmpfs.
    assert [m.split()[4] for m in mounts.splitlines()] == ["/etc/resolv.conf"], mounts
    assert "cujo" not in mounts
    assert "/etc/netns" not in mounts
    assert "/run/systemd/resolve/stub-resolv.conf managed by" in rest
    assert f"nameserver {AZURE_DNS}\n" in rest
    assert "644 regular file" in rest
    assert rest.splitlines()[-1].strip() == "4"  # no resolver file's descriptor leaks in


# In a private mount namespace, /etc gets an overlay where resolv.conf is the runner's
# symlink; there the jail runs a command, as on a runner.
RUNNER_LAYOUT = r"""
import json, os, subprocess, sys
sys.path[:0] = json.loads(sys.argv[2])
subprocess.run(["mount", "-t", "tmpfs", "layer", "/mnt"], check=True)
os.mkdir("/mnt/upper"); os.mkdir("/mnt/work")
os.symlink("../run/systemd/resolve/stub-resolv.conf", "/mnt/upper/resolv.conf")
subprocess.run(["mount", "-t", "overlay", "etc", "-o",
                "lowerdir=/etc,upperdir=/mnt/upper,workdir=/mnt/work", "/etc"], check=True)
import pickle
from cujo_action.sandbox.jail import run_confined
confinement, cwd, cmd = pickle.loads(bytes.fromhex(sys.argv[1]))
out = run_confined(cmd, cwd=cwd, env={"PATH": "/usr/bin:/bin"}, timeout=60,
                   confinement=confinement)
print(json.dumps([out.exit_code, out.stdout_tail, out.stderr_tail]))
"""


@needs_root
def test_on_a_runners_layout_the_file_is_written_into_run_and_nothing_is_mounted(
    stub: Stub,
) -> None:
    import pickle

    name = tag("runner")
    cmd = (
        "readlink /etc/resolv.conf; grep -cE 'resolv|/etc ' /proc/self/mountinfo; "
        f"cat /etc/resolv.conf; getent hosts {name}"
    )
    box = stub.box
    confinement = Confinement(stub.ns.name, box.uid, box.uid, box.confinement.view)
    payload = pickle.dumps((confinement, box.cwd, cmd)).hex()
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", RUNNER_LAYOUT,
         payload, json.dumps(sys.path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    code, stdout, stderr = json.loads(done.stdout.splitlines()[-1])
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == "../run/systemd/resolve/stub-resolv.conf"
    # The overlay on /etc is this test's; nothing of the resolver is mounted.
    assert lines[1] == "1", stdout
    assert "# This is /run/systemd/resolve/stub-resolv.conf managed by" in stdout
    assert "nameserver 127.0.0.53\noptions edns0 trust-ad\n" in stdout
    assert lines[-1].split()[0] == SINK_ADDRESS
    assert stub.wait(lambda r: r["host"] == name)["label"] == LABEL


def test_the_view_writes_the_files_into_its_tmpfs_or_binds_them() -> None:
    view = View("/usr/bin/bwrap", (), (), ())
    resolv = [(7, ResolvFile(STUB_CONF, b"", False)), (8, ResolvFile(ETC, b"", True))]
    args = " ".join(view.args("/", resolv=resolv))
    assert f"--perms 0644 --file 7 {STUB_CONF}" in args
    assert f"--perms 0644 --ro-bind-data 8 {ETC}" in args
    # Written after the tmpfs it lands in is mounted, or the tmpfs would hide it.
    assert args.index("--tmpfs /run") < args.index("--file 7")
    # The image's skeleton (sandbox/tree.py) makes the folder first and hides nothing.
    assert args.index("--dir /run/systemd/resolve ") < args.index("--file 7")
    bare = view.args("/")
    assert "--file" not in bare
    assert "--ro-bind-data" not in bare

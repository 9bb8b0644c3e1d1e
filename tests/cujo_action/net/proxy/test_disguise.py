"""Nothing the proxy shows a client says mitmproxy: its CA, its leaves, its error answers.

The first tests pin the installed mitmproxy's behaviour this relies on (where it loads a
CA from, which addon picks a client's certificate, how it writes an error page), so an
upgrade that goes around the disguise fails here. The rest drive the real proxy on
loopback with real TLS clients trusting the run's bundle.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID, NameOID

from cujo_action.arm.fingerprint import differences, load_profile
from cujo_action.arm.fingerprint_probe import PROXY_NAMES, read_tls
from cujo_action.net.lookalike.ca import SECTIGO_ECC

# mitmproxy's addons import ldap3, which warns about pyasn1 names on import: not ours.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from mitmproxy import addons, certs, version
    from mitmproxy.addons.tlsconfig import TlsConfig
    from mitmproxy.options import CONF_BASENAME, Options
    from mitmproxy.proxy import context
    from mitmproxy.proxy.layers.http import _http1, _http2, _http3
    from mitmproxy.test import taddons, tflow
    from mitmproxy.tls import TlsData

    from cujo_action.net.proxy import process as proxy_module
    from cujo_action.net.proxy.config import CA_CERT_NAME, CA_KEY_NAME, ProxyConfig
    from cujo_action.net.proxy.disguise import (
        ERROR_SERVER,
        LookalikeTlsConfig,
        client_host,
        disguise,
        write_run_ca,
    )
    from cujo_action.net.proxy.process import STDERR_NAME, ProxyHandle, start_proxy, write_ca_bundle
    from cujo_action.sandbox.helper_processes import NotReady

LABEL = "tests/test"
SECTIGO_CN = "Sectigo ECC Domain Validation Secure Server CA"
# A request whose Content-Length is no number: mitmproxy answers it itself.
BAD_REQUEST = b"GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: x\r\n\r\n"
# Words no byte a client receives may hold.
TELLS = (b"mitmproxy", b"cujo")


def says_a_tell(data: bytes) -> list[bytes]:
    return [word for word in TELLS if word in data.lower()]


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo, after the test, what ``disguise`` changes in mitmproxy's modules."""
    for module in (_http1, _http2, _http3):
        monkeypatch.setattr(module, "format_error", module.format_error)
    monkeypatch.setattr(version, "MITMPROXY", version.MITMPROXY)


# --------------------------------------------------------------------------- the CA files


def test_the_run_ca_is_written_where_mitmproxy_loads_an_existing_one(tmp_path: Path) -> None:
    ca_cert = write_run_ca(tmp_path)
    assert ca_cert == tmp_path / CA_CERT_NAME
    assert (tmp_path / CA_KEY_NAME).name == f"{CONF_BASENAME}-ca.pem"
    assert (tmp_path / CA_KEY_NAME).stat().st_mode & 0o777 == 0o600
    assert ca_cert.stat().st_mode & 0o777 == 0o644
    assert b"PRIVATE KEY" not in ca_cert.read_bytes()
    # mitmproxy's own loader takes it as is, and makes no CA of its own.
    store = certs.CertStore.from_store(tmp_path, CONF_BASENAME, 2048)
    assert store.default_ca.cn == SECTIGO_CN
    assert isinstance(store.default_privatekey, ec.EllipticCurvePrivateKey)
    assert store.default_ca.to_pem() == ca_cert.read_bytes()
    assert not list(tmp_path.glob("*.p12"))


@pytest.mark.parametrize("name", [CA_KEY_NAME, CA_CERT_NAME])
def test_a_ca_file_planted_in_confdir_is_never_written_through(tmp_path: Path, name: str) -> None:
    """Attack: a link (or file) planted at a CA file's name; nothing is written through it."""
    confdir = tmp_path / "confdir"
    confdir.mkdir()
    target = tmp_path / "target"
    target.write_text("precious\n")
    (confdir / name).symlink_to(target)
    with pytest.raises(FileExistsError):
        write_run_ca(confdir)
    assert target.read_text() == "precious\n"
    assert (confdir / name).is_symlink()


# --------------------------------------------------------------------------- mitmproxy pins


def test_disguise_puts_its_tls_addon_in_place_of_mitmproxys(restored: None, tmp_path: Path) -> None:
    defaults = addons.default_addons()
    assert sum(type(a) is TlsConfig for a in defaults) == 1
    replaced = disguise(defaults, tmp_path / CA_CERT_NAME)
    assert [type(a) for a in replaced].count(LookalikeTlsConfig) == 1
    assert not any(type(a) is TlsConfig for a in replaced)
    assert len(replaced) == len(defaults)
    assert next(a for a in replaced if isinstance(a, LookalikeTlsConfig)).name == "tlsconfig"


def test_disguise_fails_loudly_without_mitmproxys_tls_addon(restored: None, tmp_path: Path) -> None:
    others = [a for a in addons.default_addons() if type(a) is not TlsConfig]
    with pytest.raises(RuntimeError, match="0 TlsConfig"):
        disguise(others, tmp_path / CA_CERT_NAME)


def test_mitmproxys_error_pages_become_nginxs(restored: None, tmp_path: Path) -> None:
    before = _http1.make_error_response(502, "cujo: upstream connection refused")
    assert says_a_tell(before)  # what this replaces
    disguise(addons.default_addons(), tmp_path / CA_CERT_NAME)
    after = _http1.make_error_response(502, "cujo: upstream connection refused")
    assert not says_a_tell(after)
    assert b"\r\nServer: nginx\r\n" in after
    assert b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>" in after
    for module in (_http2, _http3):
        assert not says_a_tell(module.format_error(400, "body exceeds mitmproxy's limit"))
    assert version.MITMPROXY == ERROR_SERVER


def on_a_loop(body: Callable[[], None]) -> None:
    """Run ``body`` on an event loop that is closed after: mitmproxy's test context
    would otherwise open one of its own and leave it open."""

    async def run() -> None:
        body()

    asyncio.run(run())


def _tls_context(sni: str | None, server: str | None) -> context.Context:
    client = tflow.tclient_conn()
    client.sni = sni
    client.sockname = ("198.18.0.9", 443)
    ctx = context.Context(client, Options())
    ctx.server.address = (server, 443) if server else None
    return ctx


def _leaf_shown(addon: LookalikeTlsConfig, ctx: context.Context) -> x509.Certificate:
    """Return the certificate mitmproxy's client-side TLS start puts on the connection."""
    data = TlsData(ctx.client, ctx)
    addon.tls_start_client(data)
    assert data.ssl_conn is not None
    shown = data.ssl_conn.get_certificate()
    assert shown is not None
    return shown.to_cryptography()


# mitmproxy's own TLS start hands pyOpenSSL objects pyOpenSSL calls deprecated.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_leaf_mitmproxy_shows_a_client_is_issued_for_its_sni_alone(tmp_path: Path) -> None:
    ca_cert = write_run_ca(tmp_path)
    addon = LookalikeTlsConfig(ca_cert)

    def body() -> None:
        with taddons.context(addon) as tctx:
            tctx.configure(addon, confdir=str(tmp_path))
        # A transparent client: the address it reached is the resolver's made-up one.
        ctx = _tls_context("api.github.com", "198.18.0.7")
        leaf = _leaf_shown(addon, ctx)
        assert leaf.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == SECTIGO_CN
        assert leaf.subject.rfc4514_string() == "CN=api.github.com"
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
        assert list(san.value) == [x509.DNSName("api.github.com")]
        entry = addon.get_cert(ctx)
        # A key of its own (mitmproxy's leaves reuse the CA's), the CA sent after it.
        assert entry.privatekey is not addon.certstore.default_privatekey
        assert entry.chain_file == ca_cert
        assert addon.get_cert(ctx) is entry  # issued once per name
        assert addon.get_cert(_tls_context("github.com", None)) is not entry

    on_a_loop(body)


def test_a_client_without_sni_gets_a_leaf_for_the_address_it_reached() -> None:
    assert client_host(_tls_context(None, "pypi.org")) == "pypi.org"
    assert client_host(_tls_context(None, None)) == "198.18.0.9"
    assert client_host(_tls_context("a.test", "198.18.0.7")) == "a.test"


def test_a_ca_mitmproxy_made_itself_is_an_error_that_stops_the_proxy(tmp_path: Path) -> None:
    addon = LookalikeTlsConfig(tmp_path / CA_CERT_NAME)

    def body() -> None:
        with taddons.context(addon) as tctx:
            # No run CA written: mitmproxy mints its CN=mitmproxy one. The addon manager
            # logs the error; logged while the proxy starts, mitmproxy's ErrorCheck
            # (which proxy.process._serve adds) makes the process exit, so start_proxy fails.
            tctx.options.update(confdir=str(tmp_path))
            with pytest.raises(RuntimeError, match="loaded the CA 'mitmproxy', not the run's"):
                addon.configure({"confdir"})

    on_a_loop(body)


# --------------------------------------------------------------------------- the real proxy


@dataclass
class Running:
    handle: ProxyHandle
    bundle: Path
    closed_port: int

    @property
    def port(self) -> int:
        return self.handle.ports[LABEL]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("disguise")
    config = ProxyConfig(
        labels=[LABEL],
        confdir=tmp / "confdir",
        # localhost stands for a registry that cannot be reached: forwarded, and failing.
        allow_hosts=["localhost"],
        registry_hosts=["localhost"],
        log_path=tmp / "egress.jsonl",
        ready_path=tmp / "ready.json",
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens there once closed
    handle = start_proxy(config)
    try:
        yield Running(handle, write_ca_bundle(handle.ca_cert, tmp / "bundle.pem"), closed)
    finally:
        handle.stop()


def _tunnel(running: Running, target: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", running.port), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return sock


def _read_all(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_python_ssl_strict_trusts_the_run_ca_and_sees_sectigo(running: Running) -> None:
    context_ = ssl.create_default_context(cafile=str(running.bundle))
    context_.verify_flags |= ssl.VERIFY_X509_STRICT  # Python 3.13's default
    with (
        _tunnel(running, "api.github.com:443") as raw,
        context_.wrap_socket(raw, server_hostname="api.github.com") as tls,
    ):
        cert = tls.getpeercert()
        der = tls.getpeercert(binary_form=True)
    assert cert is not None
    assert der is not None
    issuer = {k: v for rdn in cert["issuer"] for k, v in rdn}
    assert issuer["organizationName"] == "Sectigo Limited"
    assert issuer["commonName"] == SECTIGO_CN
    assert cert["subject"] == ((("commonName", "api.github.com"),),)
    assert cert["subjectAltName"] == (("DNS", "api.github.com"),)
    assert cert["OCSP"] == (SECTIGO_ECC.leaf_ocsp,)
    assert not says_a_tell(der)
    assert not says_a_tell(running.handle.ca_cert.read_bytes())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_the_chain_sent_is_the_leaf_then_the_ca_and_neither_says_mitmproxy(
    running: Running,
) -> None:
    out = subprocess.run(
        [
            *("openssl", "s_client", "-proxy", f"127.0.0.1:{running.port}"),
            *("-connect", "github.com:443", "-servername", "github.com", "-showcerts"),
            *("-CAfile", str(running.bundle), "-verify_return_error"),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert b"Verify return code: 0 (ok)" in out.stdout, out.stdout + out.stderr
    chain = x509.load_pem_x509_certificates(out.stdout)
    assert [c.subject.rfc4514_string() for c in chain] == [
        "CN=github.com",
        SECTIGO_ECC.name().rfc4514_string(),
    ]
    assert not says_a_tell(out.stdout)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_trusting_the_bundle_completes_and_sees_the_sectigo_issuer(
    running: Running,
) -> None:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    out = subprocess.run(
        [
            *("curl", "-sS", "--proxy", f"http://127.0.0.1:{running.port}"),
            *("--cacert", str(running.bundle), "-o", "/dev/null"),
            *("-w", "%{http_code} %{ssl_verify_result}\n%{certs}"),
            "https://api.github.com/zen",
        ],
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(b"200 0\n")
    # curl 7.88 and later print the chain it was sent (%{certs}); older ones nothing more.
    if b"Issuer:" in out.stdout:
        issuer = "Issuer:C = GB, ST = Greater Manchester, L = Salford, O = Sectigo Limited, CN = "
        assert (issuer + SECTIGO_CN).encode() in out.stdout
    assert not says_a_tell(out.stdout)


def test_a_malformed_request_is_answered_like_nginx(running: Running) -> None:
    with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:
        sock.sendall(
            b"GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: x\r\n\r\n"
        )
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"\r\nServer: nginx\r\n" in answer
    assert not says_a_tell(answer)


def test_an_allowed_host_that_cannot_be_reached_is_answered_like_nginx(
    running: Running,
) -> None:
    target = f"localhost:{running.closed_port}"
    context_ = ssl.create_default_context(cafile=str(running.bundle))
    with (
        _tunnel(running, target) as raw,
        context_.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(f"GET /simple/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = _read_all(tls)
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), answer
    assert b"<hr><center>nginx</center>" in answer
    assert not says_a_tell(answer)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_an_http2_error_answer_says_nginx_too(running: Running) -> None:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    out = subprocess.run(
        [
            *("curl", "-sS", "--http2", "-i", "--proxy", f"http://127.0.0.1:{running.port}"),
            *("--cacert", str(running.bundle)),
            f"https://localhost:{running.closed_port}/simple/",
        ],
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
    )
    # Past the proxy's own "200 Connection established", the answer inside the tunnel.
    assert b"\r\n\r\nHTTP/2 502" in out.stdout, out.stdout + out.stderr
    assert b"\nserver: nginx\r\n" in out.stdout
    assert not says_a_tell(out.stdout)


def test_the_fingerprint_probe_reads_a_public_ca_through_the_proxy(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{running.port}")
    monkeypatch.setenv("SSL_CERT_FILE", str(running.bundle))
    reading = read_tls()
    assert reading["tls.issuer"] == "Sectigo Limited"
    assert "api.github.com" in reading["tls.names"]
    profile = load_profile()
    tls_rules = {k: v for k, v in profile["fields"].items() if k.startswith("tls.")}
    assert set(tls_rules) == {"tls.issuer", "tls.names"}
    assert differences(reading, {"fields": tls_rules}) == []
    # The profile no longer accepts a certificate that says mitmproxy.
    said = {"tls.issuer": "mitmproxy", "tls.names": ["mitmproxy", "api.github.com"]}
    found = differences(said, profile | {"fields": tls_rules})
    assert [(d.field, d.accepted) for d in found] == [("tls.issuer", None), ("tls.names", None)]


def test_a_start_retried_after_losing_its_port_mints_a_ca_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first process wrote its CA, then lost a port it picked: the next one starts."""
    firsts: list[bytes] = []

    class FirstLosesItsPort(proxy_module.Starting):
        def ready(self) -> dict[str, Any]:
            found = super().ready()
            if firsts:
                return found
            firsts.append(Path(found["ca_cert"]).read_bytes())
            self.cancel()
            with (tmp_path / "confdir" / STDERR_NAME).open("a") as err:
                err.write("failed to listen at 127.0.0.1\n")  # what mitmproxy says then
            raise NotReady(1, timed_out=False)

    monkeypatch.setattr(proxy_module, "Starting", FirstLosesItsPort)
    config = ProxyConfig(
        labels=[LABEL],
        confdir=tmp_path / "confdir",
        log_path=tmp_path / "egress.jsonl",
        ready_path=tmp_path / "ready.json",
    )
    handle = start_proxy(config)
    try:
        assert handle.alive()
        assert firsts
        assert handle.ca_cert.read_bytes() != firsts[0]  # minted anew, not left behind
        key_and_cert = (tmp_path / "confdir" / CA_KEY_NAME).read_bytes()
        assert key_and_cert.endswith(handle.ca_cert.read_bytes())
    finally:
        handle.stop()

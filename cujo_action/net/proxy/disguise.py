"""Keep the proxy from saying mitmproxy to a client: its CA, its certificates, its errors.

Runs only in the proxy process (``proxy.process._serve`` imports it), before mitmproxy starts:

* ``write_run_ca`` mints the run's CA (``lookalike/ca.py``) and writes it where mitmproxy
  loads an existing CA from its confdir (``mitmproxy-ca.pem``: key then certificate), so
  mitmproxy never makes its own ``CN=mitmproxy`` one. The files are created, never
  opened if present: ``start_proxy`` checked the confdir was fresh before this process
  was told to go.
* ``LookalikeTlsConfig`` replaces mitmproxy's TLS addon only where it picks the
  certificate shown to a client: a leaf issued by ``lookalike.ca.issue_leaf`` for the
  name the client asked for (SNI, else the address it reached), with a key of its own,
  sent with the CA after it as a server sends its intermediate. mitmproxy's own leaves
  reuse the CA's key, name the made-up address a transparent client reached, and carry
  none of a public CA's extensions.
* ``disguise`` puts that addon in place of mitmproxy's and makes the error pages
  mitmproxy writes itself (a malformed request, an allowed host that cannot be reached)
  an nginx error page, with no ``Server: mitmproxy`` and no message of the proxy's.

Each step fails loudly if mitmproxy no longer has what it replaces (tested against the
installed version in ``tests/cujo_action/net/lookalike/test_ca.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from mitmproxy import certs, version
from mitmproxy.addons.tlsconfig import TlsConfig
from mitmproxy.proxy import context
from mitmproxy.proxy.layers.http import _http1, _http2, _http3

from cujo_action.net.lookalike.ca import (
    SECTIGO_ECC,
    CaProfile,
    cert_pem,
    issue_leaf,
    key_pem,
    mint_ca,
)
from cujo_action.net.proxy.config import CA_CERT_NAME, CA_KEY_NAME

# What mitmproxy's own error answers name as their server, and sign their page with.
ERROR_SERVER: Final = "nginx"


def write_run_ca(confdir: Path, profile: CaProfile = SECTIGO_ECC) -> Path:
    """Mint the run's CA into ``confdir`` where mitmproxy loads it; return its certificate."""
    key, cert = mint_ca(profile)
    # Key then certificate, the layout mitmproxy writes and reads; only the proxy reads it.
    _create(confdir / CA_KEY_NAME, key_pem(key) + cert_pem(cert), 0o600)
    # The certificate alone: what the sandbox's bundle adds, and the chain sent after a leaf.
    return _create(confdir / CA_CERT_NAME, cert_pem(cert), 0o644)


def _create(path: Path, data: bytes, mode: int) -> Path:
    """Create ``path`` with ``data``; a name already there (even a link) is an error."""
    # O_EXCL with O_CREAT never follows a link at the name: it fails on any entry there.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


class LookalikeTlsConfig(TlsConfig):
    """mitmproxy's TLS addon, but the certificate a client sees is a public CA's leaf."""

    # The name mitmproxy's addon manager knows the addon by, kept.
    name = "tlsconfig"

    def __init__(self, ca_cert: Path, profile: CaProfile = SECTIGO_ECC) -> None:
        """Issue leaves like ``profile``'s, sent with ``ca_cert`` (the CA alone) after them."""
        super().__init__()
        self.ca_cert = ca_cert
        self.profile = profile
        self._ca: tuple[Any, ec.EllipticCurvePrivateKey, x509.Certificate] | None = None

    def configure(self, updated: Any) -> None:
        """Load the store as mitmproxy does, then refuse a CA that is not the run's own."""
        super().configure(updated)  # type: ignore[no-untyped-call]
        store = self.certstore
        if store is not None and store.default_ca.cn != _common_name(self.profile):
            raise RuntimeError(
                f"mitmproxy loaded the CA {store.default_ca.cn!r}, not the run's: "
                "certificates would say so (see proxy.disguise.write_run_ca)"
            )

    def _run_ca(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        """Return the CA's key and certificate, read once from the store mitmproxy loaded."""
        store = self.certstore
        if self._ca is None or self._ca[0] is not store:
            key = store.default_privatekey
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise RuntimeError("the run's CA key is not the ECDSA key write_run_ca made")
            ca = x509.load_pem_x509_certificate(store.default_ca.to_pem())
            self._ca = (store, key, ca)
        return self._ca[1], self._ca[2]

    def get_cert(self, conn_context: context.Context) -> certs.CertStoreEntry:
        """Return the leaf for the name the client asked for, issued once and kept."""
        host = client_host(conn_context)
        store = self.certstore
        entry = store.certs.get(host)
        if entry is None:
            ca_key, ca = self._run_ca()
            key, leaf = issue_leaf(ca_key, ca, host, self.profile)
            entry = certs.CertStoreEntry(
                cert=certs.Cert(leaf),
                privatekey=key,  # type: ignore[arg-type]  # mitmproxy types it RSA only
                # OpenSSL builds the chain it sends from this file: the leaf, then the CA.
                chain_file=self.ca_cert,
                chain_certs=[certs.Cert(ca)],
            )
            store.certs[host] = entry
            store.expire(entry)  # mitmproxy's own bound on the certificates it keeps
        return entry


def client_host(conn_context: context.Context) -> str:
    """Return the name a leaf is for: the client's SNI, else the address it reached."""
    if conn_context.client.sni:
        return str(conn_context.client.sni)
    if conn_context.server.address:
        return str(conn_context.server.address[0])
    return str(conn_context.client.sockname[0])


def error_page(status_code: int, message: str = "") -> bytes:
    """Return nginx's page for ``status_code``; the proxy's own message is never shown."""
    del message  # it can name the proxy or its limits
    try:
        title = f"{status_code} {HTTPStatus(status_code).phrase}"
    except ValueError:
        title = str(status_code)
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n<hr><center>{ERROR_SERVER}</center>\r\n"
        "</body>\r\n</html>\r\n"
    ).encode()


def disguise(addons: Sequence[Any], ca_cert: Path, profile: CaProfile = SECTIGO_ECC) -> list[Any]:
    """Return mitmproxy's default addons with ``LookalikeTlsConfig`` in place of its own.

    Also makes mitmproxy's own error answers nginx's. Raises if the installed mitmproxy
    no longer has the addon or the error-page functions this replaces.
    """
    found = [i for i, addon in enumerate(addons) if type(addon) is TlsConfig]
    if len(found) != 1:
        raise RuntimeError(
            f"mitmproxy's default addons hold {len(found)} TlsConfig: the certificates "
            "shown to clients would be mitmproxy's own"
        )
    modules = (_http1, _http2, _http3)
    if not all(callable(getattr(m, "format_error", None)) for m in modules):
        raise RuntimeError("mitmproxy no longer writes its error pages with format_error")
    if not isinstance(getattr(version, "MITMPROXY", None), str):
        raise RuntimeError("mitmproxy no longer names its error answers' server MITMPROXY")
    for module in modules:
        module.format_error = error_page  # type: ignore[attr-defined]
    # Read when an error answer is sent (its Server header), never by the rest of the
    # proxy: no flow is saved and no web UI runs.
    version.MITMPROXY = ERROR_SERVER
    replaced = list(addons)
    replaced[found[0]] = LookalikeTlsConfig(ca_cert, profile)
    return replaced


def _common_name(profile: CaProfile) -> str:
    """Return the CN of the profile's CA."""
    return next(str(value) for oid, value in profile.subject if oid == x509.NameOID.COMMON_NAME)

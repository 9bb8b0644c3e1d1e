"""The run's CA and its leaves read as a public CA's (parsed back with cryptography)."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import (
    AuthorityInformationAccessOID,
    ExtendedKeyUsageOID,
    ExtensionOID,
    NameOID,
)

from cujo_action.net.lookalike.ca import (
    DV_POLICY,
    SECTIGO_ECC,
    ca_validity,
    cert_pem,
    issue_leaf,
    key_pem,
    leaf_days,
    mint_ca,
)

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
SECTIGO_DN = (
    "CN=Sectigo ECC Domain Validation Secure Server CA,O=Sectigo Limited,"
    "L=Salford,ST=Greater Manchester,C=GB"
)


def ext(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> x509.Extension[x509.ExtensionType]:
    return cert.extensions.get_extension_for_oid(oid)


def every_text(cert: x509.Certificate) -> str:
    """Return every name and extension of ``cert`` as text, and its DER read as Latin-1."""
    return " ".join(
        [cert.subject.rfc4514_string(), cert.issuer.rfc4514_string()]
        + [repr(e.value) for e in cert.extensions]
        + [cert_pem(cert).decode(), cert.tbs_certificate_bytes.decode("latin-1")]
    )


@pytest.fixture(scope="module")
def ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    return mint_ca(SECTIGO_ECC, NOW)


def test_the_ca_has_the_sectigo_intermediates_names_key_and_validity(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    key, cert = ca
    assert cert.subject.rfc4514_string() == SECTIGO_DN
    assert cert.issuer == cert.subject  # a trust anchor is its own issuer
    public = cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.curve.name == "secp256r1"
    assert public.public_numbers() == key.public_key().public_numbers()
    assert cert.signature_hash_algorithm is not None
    assert cert.signature_hash_algorithm.name == "sha384"
    assert cert.not_valid_before_utc == dt.datetime(2018, 11, 2, tzinfo=UTC)
    assert cert.not_valid_after_utc == dt.datetime(2030, 12, 31, 23, 59, 59, tzinfo=UTC)
    # 16 random bytes, as a public CA's serial.
    assert 2**64 < cert.serial_number < 2**128


def test_the_ca_has_a_public_intermediates_extensions(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    _, cert = ca
    basic = ext(cert, ExtensionOID.BASIC_CONSTRAINTS)
    assert basic.critical
    assert basic.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = ext(cert, ExtensionOID.KEY_USAGE)
    assert usage.critical
    assert isinstance(usage.value, x509.KeyUsage)
    assert (usage.value.digital_signature, usage.value.key_cert_sign, usage.value.crl_sign) == (
        True,
        True,
        True,
    )
    assert not usage.value.key_encipherment
    eku = ext(cert, ExtensionOID.EXTENDED_KEY_USAGE)
    assert not eku.critical
    assert list(eku.value) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    ski = ext(cert, ExtensionOID.SUBJECT_KEY_IDENTIFIER).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(cert.public_key())
    policies = ext(cert, ExtensionOID.CERTIFICATE_POLICIES).value
    assert [p.policy_identifier.dotted_string for p in policies] == ["2.5.29.32.0", DV_POLICY]
    crl = ext(cert, ExtensionOID.CRL_DISTRIBUTION_POINTS).value
    assert [n.value for p in crl for n in p.full_name] == [SECTIGO_ECC.ca_crl]
    aia = ext(cert, ExtensionOID.AUTHORITY_INFORMATION_ACCESS).value
    assert [(a.access_method, a.access_location.value) for a in aia] == [
        (AuthorityInformationAccessOID.CA_ISSUERS, SECTIGO_ECC.ca_issuers),
        (AuthorityInformationAccessOID.OCSP, SECTIGO_ECC.ca_ocsp),
    ]
    # No AKI: it would send a verifier looking for USERTrust's root above this one.
    with pytest.raises(x509.ExtensionNotFound):
        ext(cert, ExtensionOID.AUTHORITY_KEY_IDENTIFIER)
    assert "mitmproxy" not in every_text(cert).lower()


def test_a_ca_whose_model_ends_soon_moves_on_but_keeps_years_behind_and_ahead() -> None:
    late = dt.datetime(2030, 6, 1, tzinfo=UTC)
    start, end = ca_validity(SECTIGO_ECC, late)
    assert start <= late - dt.timedelta(days=365)
    assert end - late > dt.timedelta(days=3 * 365)
    assert ca_validity(SECTIGO_ECC, NOW) == (SECTIGO_ECC.not_before, SECTIGO_ECC.not_after)


def test_a_leaf_is_a_dv_certificate_for_the_host_alone(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    ca_key, ca_cert = ca
    key, leaf = issue_leaf(ca_key, ca_cert, "api.github.com", SECTIGO_ECC, NOW)
    assert leaf.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.github.com")])
    assert leaf.issuer == ca_cert.subject
    leaf.verify_directly_issued_by(ca_cert)
    public = leaf.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.curve.name == "secp256r1"
    assert public.public_numbers() == key.public_key().public_numbers()
    # A key of its own: mitmproxy's leaves carry the CA's.
    assert public.public_numbers() != ca_key.public_key().public_numbers()
    assert 2**64 < leaf.serial_number < 2**128
    assert leaf.signature_hash_algorithm is not None
    assert leaf.signature_hash_algorithm.name == "sha256"

    san = ext(leaf, ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
    assert not san.critical
    assert list(san.value) == [x509.DNSName("api.github.com")]
    usage = ext(leaf, ExtensionOID.KEY_USAGE)
    assert usage.critical
    assert usage.value.digital_signature
    assert not usage.value.key_cert_sign
    assert not usage.value.key_encipherment
    basic = ext(leaf, ExtensionOID.BASIC_CONSTRAINTS)
    assert basic.critical
    assert basic.value == x509.BasicConstraints(ca=False, path_length=None)
    eku = ext(leaf, ExtensionOID.EXTENDED_KEY_USAGE).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    ski = ext(leaf, ExtensionOID.SUBJECT_KEY_IDENTIFIER).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(public)
    aki = ext(leaf, ExtensionOID.AUTHORITY_KEY_IDENTIFIER).value
    ca_ski = ext(ca_cert, ExtensionOID.SUBJECT_KEY_IDENTIFIER).value
    assert aki.key_identifier == ca_ski.digest
    assert aki.authority_cert_issuer is None
    policies = ext(leaf, ExtensionOID.CERTIFICATE_POLICIES).value
    assert [p.policy_identifier.dotted_string for p in policies] == [
        "1.3.6.1.4.1.6449.1.2.2.7",
        DV_POLICY,
    ]
    aia = ext(leaf, ExtensionOID.AUTHORITY_INFORMATION_ACCESS).value
    assert [a.access_location.value for a in aia] == [
        "http://crt.sectigo.com/SectigoECCDomainValidationSecureServerCA.crt",
        "http://ocsp.sectigo.com",
    ]
    with pytest.raises(x509.ExtensionNotFound):  # SCTs cannot be made: left out
        ext(leaf, ExtensionOID.PRECERT_SIGNED_CERTIFICATE_TIMESTAMPS)
    assert "mitmproxy" not in every_text(leaf).lower()


def test_a_leaf_was_issued_days_ago_at_midnight_for_the_term_the_rules_allow(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    ca_key, ca_cert = ca
    starts = set()
    for _ in range(20):
        _, leaf = issue_leaf(ca_key, ca_cert, "github.com", SECTIGO_ECC, NOW)
        start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
        assert (start.hour, start.minute, start.second) == (0, 0, 0)
        assert (end.hour, end.minute, end.second) == (23, 59, 59)
        assert NOW - dt.timedelta(days=70) < start < NOW - dt.timedelta(hours=20)
        # Issued after 2026-03-15: under the 200 days the Baseline Requirements allow.
        assert end - start == dt.timedelta(days=199, hours=23, minutes=59, seconds=59)
        assert end > NOW + dt.timedelta(days=120)
        starts.add(start)
    assert len(starts) > 1  # not one date every run shares


@pytest.mark.parametrize(
    ("issued", "days"),
    [
        (dt.datetime(2025, 6, 1, tzinfo=UTC), 365),
        (dt.datetime(2026, 3, 15, tzinfo=UTC), 199),
        (dt.datetime(2027, 6, 1, tzinfo=UTC), 99),
        (dt.datetime(2029, 6, 1, tzinfo=UTC), 46),
    ],
)
def test_a_leafs_term_follows_the_baseline_requirements(issued: dt.datetime, days: int) -> None:
    assert leaf_days(SECTIGO_ECC, issued) == days


def test_an_address_gets_an_ip_name_and_a_long_name_no_cn(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    ca_key, ca_cert = ca
    _, by_ip = issue_leaf(ca_key, ca_cert, "198.18.0.7", SECTIGO_ECC, NOW)
    san = ext(by_ip, ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert [str(n.value) for n in san] == ["198.18.0.7"]
    assert isinstance(next(iter(san)), x509.IPAddress)
    host = ("a" * 60) + ".exfil.test"
    _, long_name = issue_leaf(ca_key, ca_cert, host, SECTIGO_ECC, NOW)
    assert long_name.subject == x509.Name([])
    san_ext = ext(long_name, ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
    assert san_ext.critical  # RFC 5280: with an empty subject the names are critical
    assert list(san_ext.value) == [x509.DNSName(host)]


def test_the_key_is_written_as_mitmproxy_reads_it(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
) -> None:
    from mitmproxy.certs import load_pem_private_key

    key, cert = ca
    loaded = load_pem_private_key(key_pem(key) + cert_pem(cert), None)
    assert isinstance(loaded, ec.EllipticCurvePrivateKey)
    assert loaded.private_numbers() == key.private_numbers()

"""The run's CA and the certificates it issues, shaped like a public CA's.

The proxy intercepts TLS with a CA made fresh for each run. A pull request's code can
read what that CA signs: the issuer of ``api.github.com``'s certificate, its validity,
its extensions. Here the CA carries the names, validity and extensions of the
intermediate that issues github.com's and api.github.com's certificates (Sectigo's ECC
Domain Validation CA), and each leaf is shaped like one of its DV certificates: subject
``CN=host`` only, DNS names, a random serial, a key of its own, the CA/Browser Forum's
policy, and Sectigo's OCSP and issuer URLs.

What cannot be copied: the keys (so every fingerprint and signature differs), the
chain above the CA (a trust anchor must be self-signed, so it is its own issuer where the
real one is issued by USERTrust's root), and the embedded SCTs (a log's signature over a
certificate it never saw cannot be made). ``docs/limits.md`` says so for people.

Pure: values in, certificates out (keys are random). The proxy process writes the CA
(``proxy/disguise.py``) and asks for leaves while it serves.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID

UTC = dt.UTC

# The CA/Browser Forum's OID for a domain-validated server certificate.
DV_POLICY: Final = "2.23.140.1.2.1"
ANY_POLICY: Final = "2.5.29.32.0"

# The most days a server certificate issued from a date may be valid (CA/Browser Forum
# Baseline Requirements, ballot SC-081), newest first.
MAX_DAYS: Final = (
    (dt.datetime(2029, 3, 15, tzinfo=UTC), 47),
    (dt.datetime(2027, 3, 15, tzinfo=UTC), 100),
    (dt.datetime(2026, 3, 15, tzinfo=UTC), 200),
    (dt.datetime(2000, 1, 1, tzinfo=UTC), 398),
)


@dataclass(frozen=True)
class CaProfile:
    """What a public CA's intermediate and the leaves it issues look like."""

    subject: tuple[tuple[x509.ObjectIdentifier, str], ...]
    # The real intermediate's validity; moved on if the real one is near its end.
    not_before: dt.datetime
    not_after: dt.datetime
    ca_policies: tuple[str, ...]
    ca_crl: str
    ca_issuers: str
    ca_ocsp: str
    # A leaf's validity when the rules allow it (the issuer's usual term), in days.
    leaf_days: int
    # Policy OIDs of a leaf, each with its CPS URL ("" for none), in the issuer's order.
    leaf_policies: tuple[tuple[str, str], ...]
    leaf_issuers: str
    leaf_ocsp: str

    def name(self) -> x509.Name:
        """Return the CA's subject (and, self-signed, its issuer)."""
        return x509.Name([x509.NameAttribute(oid, value) for oid, value in self.subject])


# Sectigo ECC Domain Validation Secure Server CA: the issuer of github.com's and
# api.github.com's certificates (crt.sh, 2024-2025), as its certificate reads.
SECTIGO_ECC: Final = CaProfile(
    subject=(
        (NameOID.COUNTRY_NAME, "GB"),
        (NameOID.STATE_OR_PROVINCE_NAME, "Greater Manchester"),
        (NameOID.LOCALITY_NAME, "Salford"),
        (NameOID.ORGANIZATION_NAME, "Sectigo Limited"),
        (NameOID.COMMON_NAME, "Sectigo ECC Domain Validation Secure Server CA"),
    ),
    not_before=dt.datetime(2018, 11, 2, tzinfo=UTC),
    not_after=dt.datetime(2030, 12, 31, 23, 59, 59, tzinfo=UTC),
    ca_policies=(ANY_POLICY, DV_POLICY),
    ca_crl="http://crl.usertrust.com/USERTrustECCCertificationAuthority.crl",
    ca_issuers="http://crt.usertrust.com/USERTrustECCAddTrustCA.crt",
    ca_ocsp="http://ocsp.usertrust.com",
    leaf_days=365,
    leaf_policies=(("1.3.6.1.4.1.6449.1.2.2.7", "https://sectigo.com/CPS"), (DV_POLICY, "")),
    leaf_issuers="http://crt.sectigo.com/SectigoECCDomainValidationSecureServerCA.crt",
    leaf_ocsp="http://ocsp.sectigo.com",
)

# Subject CN holds at most 64 characters (RFC 5280's ub-common-name).
_CN_MAX = 64


def serial() -> int:
    """Return a random 16-byte serial number, as public CAs use (never zero)."""
    return secrets.randbits(128) or 1


def ca_validity(profile: CaProfile, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Return the CA's validity: the real one's, or ten years on once that nears its end."""
    if now + dt.timedelta(days=365) < profile.not_after:
        return profile.not_before, profile.not_after
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=365)
    end = start.replace(year=start.year + 10, month=12, day=31, hour=23, minute=59, second=59)
    return start, end


def leaf_days(profile: CaProfile, not_before: dt.datetime) -> int:
    """Return how many days a leaf issued on ``not_before`` is valid (the rules' cap)."""
    cap = next(days for since, days in MAX_DAYS if not_before >= since)
    return min(profile.leaf_days, cap - 1)


def leaf_validity(profile: CaProfile, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Return a leaf's validity: issued some days ago at midnight, ending at 23:59:59."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = leaf_days(profile, today)
    # Issued between one day and a third of its term ago, as a certificate renewed on a
    # schedule is found at any point of its life.
    start = today - dt.timedelta(days=1 + secrets.randbelow(max(days // 3, 1)))
    end = start + dt.timedelta(days=leaf_days(profile, start), hours=23, minutes=59, seconds=59)
    return start, end


def mint_ca(
    profile: CaProfile = SECTIGO_ECC, now: dt.datetime | None = None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """Return a fresh CA key (ECDSA P-256) and its self-signed certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = ca_validity(profile, now or dt.datetime.now(UTC))
    name = profile.name()
    public = key.public_key()
    builder = (
        x509.CertificateBuilder()
        .serial_number(serial())
        .issuer_name(name)
        .subject_name(name)
        .not_valid_before(start)
        .not_valid_after(end)
        .public_key(public)
        # No AuthorityKeyIdentifier: the real one names USERTrust's root key, and a
        # verifier would then look for that root above this one.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_server_client_auth(), critical=False)
        .add_extension(_policies((oid, "") for oid in profile.ca_policies), critical=False)
        .add_extension(
            x509.CRLDistributionPoints(
                [
                    x509.DistributionPoint(
                        [x509.UniformResourceIdentifier(profile.ca_crl)], None, None, None
                    )
                ]
            ),
            critical=False,
        )
        .add_extension(_access(profile.ca_issuers, profile.ca_ocsp), critical=False)
    )
    # The real intermediate is signed by a P-384 root with SHA-384.
    return key, builder.sign(key, hashes.SHA384())


def issue_leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    host: str,
    profile: CaProfile = SECTIGO_ECC,
    now: dt.datetime | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """Return a fresh key and a DV certificate for ``host`` (a name or an address)."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = leaf_validity(profile, now or dt.datetime.now(UTC))
    alt = _alt_name(host)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, host)] if len(host) <= _CN_MAX else []
    )
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .serial_number(serial())
        .issuer_name(ca_cert.subject)
        .subject_name(subject)
        .not_valid_before(start)
        .not_valid_after(end)
        .public_key(key.public_key())
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_server_client_auth(), critical=False)
        .add_extension(_policies(profile.leaf_policies), critical=False)
        .add_extension(_access(profile.leaf_issuers, profile.leaf_ocsp), critical=False)
        # No SCT list: see the module's docstring. With no CN the names are critical.
        .add_extension(x509.SubjectAlternativeName([alt]), critical=len(subject) == 0)
    )
    return key, builder.sign(ca_key, hashes.SHA256())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """Return a private key as PEM (the form mitmproxy writes its own CA's key in)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    """Return a certificate as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def _alt_name(host: str) -> x509.GeneralName:
    """Return ``host`` as a subject alternative name: an address, else a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    """Return digitalSignature, with keyCertSign and cRLSign for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _server_client_auth() -> x509.ExtendedKeyUsage:
    """Return the extended key usage of a public CA's TLS certificates."""
    return x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])


def _policies(policies: Iterable[tuple[str, str]]) -> x509.CertificatePolicies:
    """Return certificate policies from (OID, CPS URL or "") pairs."""
    return x509.CertificatePolicies(
        [
            x509.PolicyInformation(x509.ObjectIdentifier(oid), [cps] if cps else None)
            for oid, cps in policies
        ]
    )


def _access(issuers: str, ocsp: str) -> x509.AuthorityInformationAccess:
    """Return the issuer's certificate and OCSP URLs, in the order Sectigo writes them."""
    return x509.AuthorityInformationAccess(
        [
            x509.AccessDescription(
                AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier(issuers)
            ),
            x509.AccessDescription(
                AuthorityInformationAccessOID.OCSP, x509.UniformResourceIdentifier(ocsp)
            ),
        ]
    )

"""Make decoy secrets in real formats (``matcher.py`` finds them in bytes).

Decoys sit wherever a real Actions job keeps secrets, each under a name that says where
(``decoyfiles.py`` lays out the files, ``actionsjob.py`` the checkout and the worker):

=============================  =============================================================
name                           where the sandbox keeps it
=============================  =============================================================
AWS_*, NPM_TOKEN, GITHUB_TOKEN  the environment, as a step's ``env:`` (and
                               aws-actions/configure-aws-credentials) sets them
ACTIONS_RUNTIME_TOKEN,         the environment, as a JavaScript action's step sees them
ACTIONS_ID_TOKEN_REQUEST_TOKEN
CHECKOUT_TOKEN                 the checkout's ``.git/config``, in the ``http.…extraheader``
                               ``actions/checkout`` leaves there (``actionsjob.py``)
DOCKER_LOGIN_TOKEN             ``~/.docker/config.json``, as ``docker/login-action`` leaves it
RUNNER_CLIENT_ID,              the runner's ``.credentials`` and ``.credentials_rsaparams``
RUNNER_RSA_KEY                 in its root folder, beside ``bin/Runner.Worker``
RUNNER_WORKER_GITHUB_TOKEN,    the memory of the decoy ``Runner.Worker`` process, in the
RUNNER_WORKER_RUNTIME_TOKEN,   job message format the runner keeps (``actionsjob.py``)
RUNNER_WORKER_NPM_TOKEN
SSH_PRIVATE_KEY,               files under HOME (``decoyfiles.py``)
GH_OAUTH_TOKEN
PYPI_TOKEN                     nowhere but a changed workflow's ``secrets.*PYPI*``
                               (``workflow_jobs.secret_decoy``)
=============================  =============================================================
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import string
import struct
import time
import uuid
from dataclasses import dataclass
from math import gcd

_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
_ALNUM = string.ascii_letters + string.digits
_AWS_KEY_ID = string.ascii_uppercase + "234567"
_B64 = string.ascii_letters + string.digits + "+/"
_B64URL = string.ascii_letters + string.digits + "-_"
# A PyPI API token is "pypi-" and a macaroon in base64url whose head says "pypi.org".
# https://pypi.org/help/#apitoken
_PYPI_TOKEN_HEAD = "pypi-AgEIcHlwaS5vcmcCJ"  # noqa: S105 (a format, not a secret)
_RSA_BYTES = 256  # a 2048-bit key, as the runner makes its own (RSA.Create(2048))
_RSA_E = 65537
# The fields of .NET's RSAParameters as the runner writes them (RSAParametersSerializable),
# in its order, each with its length in bytes (ExportParameters pads each to it).
RSA_FIELDS: tuple[tuple[str, int], ...] = (
    ("d", _RSA_BYTES), ("dp", _RSA_BYTES // 2), ("dq", _RSA_BYTES // 2), ("exponent", 3),
    ("inverseQ", _RSA_BYTES // 2), ("modulus", _RSA_BYTES), ("p", _RSA_BYTES // 2),
    ("q", _RSA_BYTES // 2),
)  # fmt: skip


@dataclass(frozen=True)
class Decoy:
    """One planted secret: its value, and where it lives (env var, file under HOME).

    ``file`` names the one file under HOME that holds it, when that path does not depend
    on the job; files placed by the job's layout (the checkout, the runner's folder)
    leave it None (``decoyfiles.py`` and ``actionsjob.py`` place them).
    """

    name: str
    value: str
    env: str | None
    file: str | None


def _pick(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _base62(n: int, width: int) -> str:
    digits = []
    while n:
        n, r = divmod(n, 62)
        digits.append(_BASE62[r])
    return "".join(reversed(digits)).rjust(width, "0")


def _checksummed_token(prefix: str) -> str:
    """Return a GitHub/npm-style token: 30 random base62 chars and a CRC32 checksum."""
    # Secret scanners (and careful malware) check the trailing CRC32; a token that fails
    # it looks planted. https://github.blog/2021-04-05-behind-githubs-new-authentication-token-formats/
    body = _pick(_ALNUM, 30)
    return prefix + body + _base62(binascii.crc32(body.encode()), 6)


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _openssh_ed25519_body() -> str:
    """Return the base64 body of an unencrypted OpenSSH ed25519 key with random key bytes."""
    # Layout per openssh's PROTOCOL.key; the key bytes are random, not a real key pair,
    # which nothing short of signing with it can tell.
    pub, seed, check = secrets.token_bytes(32), secrets.token_bytes(32), secrets.token_bytes(4)
    host = f"fv-az{secrets.randbelow(900) + 100}-{secrets.randbelow(900) + 100}"
    comment = f"runner@{host}".encode()
    pub_blob = _ssh_string(b"ssh-ed25519") + _ssh_string(pub)
    private = (
        check
        + check
        + _ssh_string(b"ssh-ed25519")
        + _ssh_string(pub)
        + _ssh_string(seed + pub)
        + _ssh_string(comment)
    )
    private += bytes(range(1, 1 + (-len(private) % 8)))
    blob = (
        b"openssh-key-v1\0"
        + _ssh_string(b"none")
        + _ssh_string(b"none")
        + _ssh_string(b"")
        + struct.pack(">I", 1)
        + _ssh_string(pub_blob)
        + _ssh_string(private)
    )
    return base64.b64encode(blob).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _uuid() -> str:
    """Return a random version-4 uuid, as .NET's ``Guid.NewGuid`` makes them."""
    return str(uuid.uuid4())


def _actions_jwt(issuer: str, claims: dict[str, object]) -> str:
    """Return an RS256 JWT shaped as the Actions service signs them (random signature)."""
    # The header and claim names follow the tokens a hosted runner hands its jobs
    # (vstoken.actions.githubusercontent.com); nothing but the issuer's key can tell the
    # signature is not real.
    now = int(time.time()) - secrets.randbelow(120)
    header = {
        "typ": "JWT",
        "alg": "RS256",
        "x5t": _b64url(secrets.token_bytes(20)),
        "kid": secrets.token_hex(20).upper(),
    }
    payload = {**claims, "iss": issuer, "aud": issuer, "nbf": now, "exp": now + 6 * 3600}
    parts = [json.dumps(part, separators=(",", ":")).encode() for part in (header, payload)]
    return ".".join([*(_b64url(p) for p in parts), _b64url(secrets.token_bytes(256))])


def _runtime_token(ref: str) -> str:
    """Return an ``ACTIONS_RUNTIME_TOKEN``-shaped JWT (cache write, artifact upload) of a job
    run for ``ref``, the one cache scope it may write."""
    plan = _uuid()
    return _actions_jwt(
        "vstoken.actions.githubusercontent.com",
        {
            "nameid": "dddddddd-dddd-dddd-dddd-dddddddddddd",
            "scp": f"Actions.ExampleScope Actions.Results:{plan}:{_uuid()} "
            f"Actions.UploadArtifacts:00000000-0000-0000-0000-000000000000/1:{plan}",
            "IdentityTypeClaim": "System:ServiceIdentity",
            "ac": json.dumps([{"Scope": ref, "Permission": 3}], separators=(",", ":")),
            "acsl": "10",
            "orchid": f"{plan}.build.__default",
        },
    )


def _id_token_request_token() -> str:
    """Return an ``ACTIONS_ID_TOKEN_REQUEST_TOKEN``-shaped JWT (asks for an OIDC token)."""
    return _actions_jwt(
        "vstoken.actions.githubusercontent.com",
        {
            "nameid": "dddddddd-dddd-dddd-dddd-dddddddddddd",
            "scp": f"Actions.GenerateIdToken:{_uuid()}:{_uuid()}",
            "IdentityTypeClaim": "System:ServiceIdentity",
            "orchid": f"{_uuid()}.build.__default",
        },
    )


def _be(n: int, size: int) -> str:
    """Return ``n`` as ``size`` big-endian bytes in base64, as .NET serializes a byte[]."""
    return base64.b64encode(n.to_bytes(size, "big")).decode()


def _rsa_key() -> str:
    """Return a 2048-bit RSA key as the runner keeps one: its fields' base64, joined.

    The fields are ``RSA_FIELDS``, each a big-endian byte[] in base64 (``rsa_fields``
    splits them again). The numbers hang together as a key's do (n = p·q, d the inverse
    of e, dp, dq, the CRT coefficient), so nothing short of a primality test tells that p
    and q are random odd numbers rather than primes: a real key would cost a prime
    search on every draw, and the matcher draws three sets of decoys.
    """
    half = _RSA_BYTES // 2
    while True:
        # The two top bits set make n a full 2048 bits; the low bit makes each odd.
        p = secrets.randbits(half * 8) | (3 << (half * 8 - 2)) | 1
        q = secrets.randbits(half * 8) | (3 << (half * 8 - 2)) | 1
        lam = (p - 1) * (q - 1) // gcd(p - 1, q - 1)
        if p != q and gcd(_RSA_E, lam) == 1 and gcd(p, q) == 1:
            break
    d = pow(_RSA_E, -1, lam)
    numbers = {
        "d": d, "dp": d % (p - 1), "dq": d % (q - 1), "exponent": _RSA_E,
        "inverseQ": pow(q, -1, p), "modulus": p * q, "p": p, "q": q,
    }  # fmt: skip
    return "".join(_be(numbers[name], size) for name, size in RSA_FIELDS)


def rsa_fields(key: str) -> dict[str, str]:
    """Return an ``RUNNER_RSA_KEY`` decoy's fields (name → base64), in the runner's order."""
    fields: dict[str, str] = {}
    at = 0
    for name, size in RSA_FIELDS:
        width = 4 * -(-size // 3)
        fields[name] = key[at : at + width]
        at += width
    if at != len(key):
        raise ValueError("not an RSA key decoy")
    return fields


def make_decoys(ref: str = "refs/heads/main") -> tuple[Decoy, ...]:
    """Return a fresh set of decoy secrets in the formats real tools and scanners expect,
    for a job run for ``ref`` (the runtime tokens' cache scope)."""
    return (
        # As a step's env (or aws-actions/configure-aws-credentials) sets them: no file.
        Decoy("AWS_ACCESS_KEY_ID", "AKIA" + _pick(_AWS_KEY_ID, 16), "AWS_ACCESS_KEY_ID", None),
        Decoy("AWS_SECRET_ACCESS_KEY", _pick(_B64, 40), "AWS_SECRET_ACCESS_KEY", None),
        # A job's GITHUB_TOKEN is an installation token: ghs_, with the same checksum.
        Decoy("GITHUB_TOKEN", _checksummed_token("ghs_"), "GITHUB_TOKEN", None),
        Decoy("NPM_TOKEN", _checksummed_token("npm_"), "NPM_TOKEN", None),
        Decoy("SSH_PRIVATE_KEY", _openssh_ed25519_body(), None, ".ssh/id_ed25519"),
        Decoy("GH_OAUTH_TOKEN", _checksummed_token("gho_"), None, ".config/gh/hosts.yml"),
        Decoy("ACTIONS_RUNTIME_TOKEN", _runtime_token(ref), "ACTIONS_RUNTIME_TOKEN", None),
        Decoy(
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            _id_token_request_token(),
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            None,
        ),
        # The token a ghcr.io login with the job's token leaves in ~/.docker/config.json.
        Decoy("DOCKER_LOGIN_TOKEN", _checksummed_token("ghs_"), None, ".docker/config.json"),
        # Kept by arm where a real job keeps them, not in the environment.
        Decoy("CHECKOUT_TOKEN", _checksummed_token("ghs_"), None, None),
        Decoy("RUNNER_CLIENT_ID", _uuid(), None, None),
        Decoy("RUNNER_RSA_KEY", _rsa_key(), None, None),
        Decoy("RUNNER_WORKER_GITHUB_TOKEN", _checksummed_token("ghs_"), None, None),
        Decoy("RUNNER_WORKER_RUNTIME_TOKEN", _runtime_token(ref), None, None),
        Decoy("RUNNER_WORKER_NPM_TOKEN", _checksummed_token("npm_"), None, None),
        # What a release workflow's secrets.PYPI_API_TOKEN stands for (twine, the
        # publish action); no hosted runner has one anywhere else.
        Decoy("PYPI_TOKEN", _PYPI_TOKEN_HEAD + _pick(_B64URL, 150), None, None),
    )

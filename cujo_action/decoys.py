"""Make decoy secrets in real formats, lay them out as files, and find them in bytes."""

from __future__ import annotations

import base64
import binascii
import functools
import secrets
import string
import struct
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

MIN_NEEDLE = 12
"""Needles shorter than this are too short to mean anything and are skipped."""

ENCODINGS: tuple[str, ...] = ("plain", "url", "hex", "base64")

_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
_ALNUM = string.ascii_letters + string.digits
_AWS_KEY_ID = string.ascii_uppercase + "234567"
_B64 = string.ascii_letters + string.digits + "+/"
_PYPI_PREFIX = "pypi-AgEIcHlwaS5vcmc"  # base64 of the macaroon header naming pypi.org
# base64 of "openssh-key-v1\0": every OpenSSH private key body starts with it.
_OPENSSH_MAGIC_B64 = "b3BlbnNzaC1rZXktdjEA"
_OPENSSH_WRAP = 70
_URLSAFE_TO_STD = bytes.maketrans(b"-_", b"+/")


@dataclass(frozen=True)
class Decoy:
    """One planted secret: where it lives (env var, file under HOME) and its value."""

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


def make_decoys() -> tuple[Decoy, ...]:
    """Return a fresh set of decoy secrets in the formats real tools and scanners expect."""
    pypi_body = base64.urlsafe_b64encode(secrets.token_bytes(132)).decode().rstrip("=")
    return (
        Decoy(
            "AWS_ACCESS_KEY_ID",
            "AKIA" + _pick(_AWS_KEY_ID, 16),
            "AWS_ACCESS_KEY_ID",
            ".aws/credentials",
        ),
        Decoy(
            "AWS_SECRET_ACCESS_KEY",
            _pick(_B64, 40),
            "AWS_SECRET_ACCESS_KEY",
            ".aws/credentials",
        ),
        Decoy("GITHUB_TOKEN", _checksummed_token("ghp_"), "GITHUB_TOKEN", None),
        Decoy("NPM_TOKEN", _checksummed_token("npm_"), "NPM_TOKEN", ".npmrc"),
        Decoy("PYPI_TOKEN", _PYPI_PREFIX + pypi_body, None, ".pypirc"),
        Decoy("SSH_PRIVATE_KEY", _openssh_ed25519_body(), None, ".ssh/id_ed25519"),
        Decoy("GH_OAUTH_TOKEN", _checksummed_token("gho_"), None, ".config/gh/hosts.yml"),
        Decoy("DATABASE_PASSWORD", _pick(_ALNUM, 24), None, ".env"),
    )


def decoy_files(decoys: Iterable[Decoy]) -> dict[str, str]:
    """Return the decoy files (path relative to HOME → content) the given decoys fill."""
    v = {d.name: d.value for d in decoys}
    files: dict[str, str] = {}
    if "AWS_ACCESS_KEY_ID" in v and "AWS_SECRET_ACCESS_KEY" in v:
        files[".aws/credentials"] = (
            "[default]\n"
            f"aws_access_key_id = {v['AWS_ACCESS_KEY_ID']}\n"
            f"aws_secret_access_key = {v['AWS_SECRET_ACCESS_KEY']}\n"
        )
    if "NPM_TOKEN" in v:
        # Scoped to a registry no benign install of public packages talks to, so
        # `npm install` never sends the token anywhere on its own.
        files[".npmrc"] = (
            "@myorg:registry=https://npm.pkg.github.com/\n"
            f"//npm.pkg.github.com/:_authToken={v['NPM_TOKEN']}\n"
        )
    if "PYPI_TOKEN" in v:
        # Read by upload tools (twine), never by pip.
        files[".pypirc"] = (
            "[distutils]\nindex-servers =\n    pypi\n\n"
            f"[pypi]\nusername = __token__\npassword = {v['PYPI_TOKEN']}\n"
        )
    if "SSH_PRIVATE_KEY" in v:
        body = "\n".join(textwrap.wrap(v["SSH_PRIVATE_KEY"], _OPENSSH_WRAP))
        files[".ssh/id_ed25519"] = (
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"
        )
    if "GH_OAUTH_TOKEN" in v:
        files[".config/gh/hosts.yml"] = (
            "github.com:\n"
            "    users:\n"
            "        ci-bot:\n"
            f"            oauth_token: {v['GH_OAUTH_TOKEN']}\n"
            "    git_protocol: https\n"
            f"    oauth_token: {v['GH_OAUTH_TOKEN']}\n"
            "    user: ci-bot\n"
        )
    if "DATABASE_PASSWORD" in v:
        files[".env"] = (
            "NODE_ENV=production\n"
            f"DATABASE_URL=postgres://app:{v['DATABASE_PASSWORD']}@db.internal:5432/app\n"
        )
    return files


def _texts(value: str) -> list[str]:
    """Return the strings to look for that stand for ``value``."""
    texts = [value]
    if value.startswith(_OPENSSH_MAGIC_B64):
        # Key files wrap the body at 70 columns, so a copied file holds it only line by
        # line. The first line is the same in every ed25519 key and the last is mostly
        # comment and padding: only the middle lines are secret.
        texts += textwrap.wrap(value, _OPENSSH_WRAP)[1:-1]
    return texts


def _base64_needles(raw: bytes) -> list[bytes]:
    """Return standard-alphabet needles that find ``raw`` at any offset in a base64 blob."""
    needles = []
    for offset in range(3):
        # With `offset` unknown bytes before it, the group holding them mixes in their
        # bits, and the last partial group depends on what follows: keep only the groups
        # made of ``raw`` alone.
        padded = b"\0" * offset + raw
        full = len(padded) - len(padded) % 3
        encoded = base64.b64encode(padded[:full])
        needles.append(encoded[4:] if offset else encoded)
    return needles


def _url_needles(text: str) -> list[bytes]:
    out = []
    for quoted in (quote(text, safe=""), quote(text), quote_plus(text)):
        out += [quoted.encode(), _lower_escapes(quoted).encode()]
    return out


def _lower_escapes(quoted: str) -> str:
    parts = quoted.split("%")
    return parts[0] + "".join("%" + p[:2].lower() + p[2:] for p in parts[1:])


class DecoyMatcher:
    """Find decoy values in bytes, plain or encoded, with needles built once."""

    def __init__(self, decoys: Iterable[Decoy]) -> None:
        """Build every needle for ``decoys`` up front."""
        self.decoys: tuple[Decoy, ...] = tuple(decoys)
        # (needle, decoy name, encoding); base64 needles are searched in a copy of the
        # data with the urlsafe alphabet mapped to the standard one, which halves them.
        self._needles: list[tuple[bytes, str, str]] = []
        self._b64_needles: list[tuple[bytes, str]] = []
        for decoy in self.decoys:
            seen: set[bytes] = set()
            for text in _texts(decoy.value):
                raw = text.encode()
                candidates = [(raw, "plain")]
                candidates += [(n, "url") for n in _url_needles(text)]
                candidates += [(raw.hex().encode(), "hex"), (raw.hex().upper().encode(), "hex")]
                for needle, encoding in candidates:
                    if len(needle) >= MIN_NEEDLE and needle not in seen:
                        seen.add(needle)
                        self._needles.append((needle, decoy.name, encoding))
                for needle in _base64_needles(raw):
                    if len(needle) >= MIN_NEEDLE and needle not in seen:
                        seen.add(needle)
                        self._b64_needles.append((needle, decoy.name))

    def find(self, data: bytes) -> list[tuple[str, str]]:
        """Return (decoy name, encoding) for each decoy found in ``data``, in decoy order."""
        hits: set[tuple[str, str]] = set()
        for needle, name, encoding in self._needles:
            if (name, encoding) not in hits and needle in data:
                hits.add((name, encoding))
        if self._b64_needles:
            std = data.translate(_URLSAFE_TO_STD) if b"-" in data or b"_" in data else data
            for needle, name in self._b64_needles:
                if (name, "base64") not in hits and needle in std:
                    hits.add((name, "base64"))
        order = {d.name: i for i, d in enumerate(self.decoys)}
        return sorted(hits, key=lambda h: (order[h[0]], ENCODINGS.index(h[1])))


@functools.lru_cache(maxsize=8)
def _matcher(decoys: tuple[Decoy, ...]) -> DecoyMatcher:
    return DecoyMatcher(decoys)


def find_decoys(data: bytes, decoys: Sequence[Decoy]) -> list[tuple[str, str]]:
    """Return (decoy name, encoding) for each decoy found in ``data``."""
    return _matcher(tuple(decoys)).find(data)

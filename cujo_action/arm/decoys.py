"""Make decoy secrets in real formats, lay them out as files, and find them in bytes.

Decoys sit wherever a real Actions job keeps secrets, each under a name that says where:

=============================  =============================================================
name                           where the sandbox keeps it
=============================  =============================================================
AWS_*, NPM_TOKEN, GITHUB_TOKEN  the environment (and ``~/.aws/credentials``, ``~/.npmrc``)
ACTIONS_RUNTIME_TOKEN,         the environment, as a JavaScript action's step sees them
ACTIONS_ID_TOKEN_REQUEST_TOKEN
CHECKOUT_TOKEN                 the checkout's ``.git/config``, in the ``http.…extraheader``
                               ``actions/checkout`` leaves there (``actionsjob.py``)
RUNNER_WORKER_GITHUB_TOKEN,    the memory of the decoy ``Runner.Worker`` process, in the
RUNNER_WORKER_RUNTIME_TOKEN,   job message format the runner keeps (``actionsjob.py``)
RUNNER_WORKER_NPM_TOKEN
PYPI_TOKEN, SSH_PRIVATE_KEY,   files under HOME (``decoy_files``)
GH_OAUTH_TOKEN, DATABASE_…
=============================  =============================================================
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import secrets
import string
import struct
import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cujo_action.net.opacity import Opacity
from cujo_action.net.unwrap import BUDGET, Layer, Unwrap

MIN_NEEDLE = 12
"""Needles shorter than this are too short to mean anything and are skipped."""

# How a decoy was found, first layer undone first (unwrap.py names them).
ENCODINGS: tuple[str, ...] = (
    "plain", "url", "json", "qp", "hex", "base64", "base32",
    "gzip", "zlib", "deflate", "zstd", "brotli",
)  # fmt: skip

_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
_ALNUM = string.ascii_letters + string.digits
_AWS_KEY_ID = string.ascii_uppercase + "234567"
_B64 = string.ascii_letters + string.digits + "+/"
_PYPI_PREFIX = "pypi-AgEIcHlwaS5vcmc"  # base64 of the macaroon header naming pypi.org
_OPENSSH_WRAP = 70


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


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _uuid() -> str:
    raw = secrets.token_hex(16)
    return f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-{raw[16:20]}-{raw[20:]}"


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


def _runtime_token() -> str:
    """Return an ``ACTIONS_RUNTIME_TOKEN``-shaped JWT (cache write, artifact upload)."""
    plan = _uuid()
    return _actions_jwt(
        "vstoken.actions.githubusercontent.com",
        {
            "nameid": "dddddddd-dddd-dddd-dddd-dddddddddddd",
            "scp": f"Actions.ExampleScope Actions.Results:{plan}:{_uuid()} "
            f"Actions.UploadArtifacts:00000000-0000-0000-0000-000000000000/1:{plan}",
            "IdentityTypeClaim": "System:ServiceIdentity",
            "ac": '[{"Scope":"refs/pull/1/merge","Permission":3}]',
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
        # A job's GITHUB_TOKEN is an installation token: ghs_, with the same checksum.
        Decoy("GITHUB_TOKEN", _checksummed_token("ghs_"), "GITHUB_TOKEN", None),
        Decoy("NPM_TOKEN", _checksummed_token("npm_"), "NPM_TOKEN", ".npmrc"),
        Decoy("PYPI_TOKEN", _PYPI_PREFIX + pypi_body, None, ".pypirc"),
        Decoy("SSH_PRIVATE_KEY", _openssh_ed25519_body(), None, ".ssh/id_ed25519"),
        Decoy("GH_OAUTH_TOKEN", _checksummed_token("gho_"), None, ".config/gh/hosts.yml"),
        Decoy("DATABASE_PASSWORD", _pick(_ALNUM, 24), None, ".env"),
        Decoy("ACTIONS_RUNTIME_TOKEN", _runtime_token(), "ACTIONS_RUNTIME_TOKEN", None),
        Decoy(
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            _id_token_request_token(),
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            None,
        ),
        # Kept by arm where a real job keeps them, not in the environment or HOME.
        Decoy("CHECKOUT_TOKEN", _checksummed_token("ghs_"), None, None),
        Decoy("RUNNER_WORKER_GITHUB_TOKEN", _checksummed_token("ghs_"), None, None),
        Decoy("RUNNER_WORKER_RUNTIME_TOKEN", _runtime_token(), None, None),
        Decoy("RUNNER_WORKER_NPM_TOKEN", _checksummed_token("npm_"), None, None),
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


# A decoy counts as found when this many consecutive characters of it are (the whole decoy
# when it is shorter), of which at least SECRET_MIN are its own and not its format's (the
# "AKIA", "ghs_", the key header or a JWT's fixed claims every decoy of its kind shares).
SLICE = 20
SECRET_MIN = 16
# Slices are found through GRAM-long pieces looked up every STEP bytes: any SLICE-long
# slice holds one such piece, so the scan costs one dictionary lookup per STEP bytes.
GRAM = 12
# A layer larger than this is searched in windows of it (the folded copy stays small).
WINDOW = 4 << 20
STEP = SLICE - GRAM + 1
_DRAWS = 2  # other draws compared with, to tell a kind's format from a decoy's own bytes


@dataclass(frozen=True)
class _Text:
    """One decoy's value as searched: exact, folded, and how much of each prefix is secret."""

    name: str
    exact: bytes
    folded: bytes
    secret_before: tuple[int, ...]  # secret characters in value[:i], for i in 0..len

    def secret_in(self, start: int, end: int) -> int:
        return self.secret_before[end] - self.secret_before[start]


def _secret_mask(decoy: Decoy, others: Sequence[tuple[Decoy, ...]]) -> list[bool]:
    """Return, per character, whether it is the decoy's own (not its kind's format)."""
    value = decoy.value
    same = [o.value for draw in others for o in draw if o.name == decoy.name]
    same = [v for v in same if len(v) == len(value)]
    if not same:
        return [True] * len(value)
    return [any(v[i] != c for v in same) for i, c in enumerate(value)]


class DecoyMatcher:
    """Find decoy values in bytes, or long enough slices of them, through every encoding.

    Each input is unwrapped (``unwrap.py``: URL, JSON and MIME escapes, base64, base32,
    hex, compression, nested) and every layer is searched for a slice of SLICE characters
    of a decoy (the whole decoy if shorter). Found as ``(decoy name, encoding)``, the
    encoding being the path of layers undone (``plain``, ``base64``, ``gzip+base64``…).
    """

    def __init__(self, decoys: Iterable[Decoy], *, budget: int = BUDGET) -> None:
        """Build every lookup table for ``decoys`` up front (``budget``: see ``unwrap``)."""
        self.decoys: tuple[Decoy, ...] = tuple(decoys)
        self.budget = budget
        others = [make_decoys() for _ in range(_DRAWS)]
        self._texts: list[_Text] = []
        self._grams: dict[bytes, list[tuple[int, int]]] = {}
        self._folded: dict[bytes, list[tuple[int, int]]] = {}
        self._short: list[tuple[int, bytes, bytes]] = []
        for decoy in self.decoys:
            exact = decoy.value.encode()
            if len(exact) < MIN_NEEDLE:
                continue
            mask = _secret_mask(decoy, others)
            before = [0]
            for own in mask:
                before.append(before[-1] + own)
            idx = len(self._texts)
            self._texts.append(_Text(decoy.name, exact, exact.lower(), tuple(before)))
            if len(exact) < SLICE:
                self._short.append((idx, exact, exact.lower()))
                continue
            for i in range(len(exact) - GRAM + 1):
                if before[i + GRAM] - before[i]:  # a piece of format alone proves nothing
                    self._grams.setdefault(exact[i : i + GRAM], []).append((idx, i))
                    self._folded.setdefault(exact[i : i + GRAM].lower(), []).append((idx, i))
        # The last search: why part of it was not searched ("" if all was), and whether
        # nothing in it read as anything (``opacity.py``; judged when asked for).
        self.unsearched = ""
        self.opaque = False
        self._longest = max((len(t.exact) for t in self._texts), default=SLICE)

    @property
    def exhausted(self) -> bool:
        """Return whether a cap kept part of the last input from being searched."""
        return bool(self.unsearched)

    def _span(self, hay: bytes, at: int, idx: int, offset: int, folded: bool) -> tuple[int, int]:
        """Return (where it ends in ``hay``, its length) if the piece at ``at`` grows into a
        counting slice of decoy ``idx``, else (0, 0)."""
        text = self._texts[idx]
        value = text.folded if folded else text.exact
        left = 0
        while min(at, offset) > left and hay[at - left - 1] == value[offset - left - 1]:
            left += 1
        right = GRAM
        while (
            at + right < len(hay)
            and offset + right < len(value)
            and hay[at + right] == value[offset + right]
        ):
            right += 1
        start, end = offset - left, offset + right
        whole = len(value)
        counts = end - start >= min(SLICE, whole) and text.secret_in(start, end) >= min(
            SECRET_MIN, text.secret_in(0, whole)
        )
        return (at + right, end - start) if counts else (0, 0)

    def _scan(self, data: bytes, folded: bool) -> dict[int, int]:
        """Return, per decoy (by index) a slice of which is in ``data``, its longest slice.

        A large layer is searched window by window, each overlapping the next by a whole
        decoy, so a slice straddling two windows is in one of them whole.
        """
        if len(data) <= WINDOW:
            return self._scan_window(data, folded)
        found: dict[int, int] = {}
        overlap = self._longest + GRAM
        for start in range(0, len(data), WINDOW):
            window = data[start : start + WINDOW + overlap]
            for idx, length in self._scan_window(window, folded).items():
                found[idx] = max(found.get(idx, 0), length)
            if start + WINDOW + overlap >= len(data):
                break
        return found

    def _scan_window(self, data: bytes, folded: bool) -> dict[int, int]:
        hay = data.lower() if folded else data
        grams = self._folded if folded else self._grams
        found: dict[int, int] = {}
        past: dict[int, int] = {}  # where the last slice of each decoy ended in hay
        get = grams.get
        for at in range(0, len(hay) - GRAM + 1, STEP):
            entries = get(hay[at : at + GRAM])
            if entries:
                for idx, offset in entries:
                    if at < past.get(idx, 0):
                        continue  # inside a slice already measured
                    end, length = self._span(hay, at, idx, offset, folded)
                    if length:
                        past[idx] = end
                        found[idx] = max(found.get(idx, 0), length)
        for idx, exact, lower in self._short:
            if (lower if folded else exact) in hay:
                found[idx] = len(exact)
        return found

    def find(
        self, data: bytes, *, fold_case: bool = False, judge_opacity: bool = False
    ) -> list[tuple[str, str]]:
        """Return (decoy name, encoding) for each decoy found in ``data``, in decoy order.

        ``fold_case``: the bytes may have lost their case on the way (a DNS name). A layer
        undone as a whole (URL or JSON escapes) holds what its parent held: there, the
        layer that shows the longest slice of a decoy names the encoding. Afterwards
        ``unsearched`` says why part was not searched, and (``judge_opacity``) ``opaque``
        whether nothing in it read as anything.
        """
        walk = Unwrap(data, budget=self.budget)
        judge = Opacity() if judge_opacity else None
        layers: list[Layer] = []  # kept alive: their ids name their groups
        group_of: dict[int, int] = {}
        best: dict[tuple[int, int], tuple[int, int, str]] = {}
        for layer, parent in walk:
            layers.append(layer)
            whole_of = layer.whole and parent is not None
            group = group_of[id(parent)] if whole_of and parent is not None else id(layer)
            group_of[id(layer)] = group
            if judge is not None and not layer.leaf:
                judge.add(layer.data)
            for idx, length in self._scan(layer.data, fold_case and parent is None).items():
                held = best.get((idx, group))
                if held is None or length > held[0]:
                    best[(idx, group)] = (length, len(layer.path), layer.encoding)
        self.unsearched = walk.unsearched
        self.opaque = judge is not None and judge.opaque
        ranked = sorted(
            {(idx, depth, enc) for (idx, _), (_, depth, enc) in best.items()},
            key=lambda h: (h[0], h[1], _encoding_rank(h[2]), h[2]),
        )
        return list(dict.fromkeys((self._texts[idx].name, enc) for idx, _, enc in ranked))


def _encoding_rank(encoding: str) -> int:
    first = encoding.split("+", 1)[0]
    return ENCODINGS.index(first) if first in ENCODINGS else len(ENCODINGS)


@functools.lru_cache(maxsize=8)
def _matcher(decoys: tuple[Decoy, ...]) -> DecoyMatcher:
    return DecoyMatcher(decoys)


def find_decoys(data: bytes, decoys: Sequence[Decoy]) -> list[tuple[str, str]]:
    """Return (decoy name, encoding) for each decoy found in ``data``."""
    return _matcher(tuple(decoys)).find(data)

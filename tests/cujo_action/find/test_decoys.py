"""Decoy formats, and finding decoys in every encoding without false positives."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import string
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from jobs import job_for

from cujo_action.arm.decoyfiles import decoy_files, ssh_key
from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.find.matcher import MIN_NEEDLE, DecoyMatcher, find_decoys

JWT = r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{300,}"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
B64 = "[A-Za-z0-9+/]"
RSA_FIELDS = (
    ("d", 344),
    ("dp", 172),
    ("dq", 172),
    ("exponent", 4),
    ("inverseQ", 172),
    ("modulus", 344),
    ("p", 172),
    ("q", 172),
)  # fmt: skip  (base64 lengths)
JOB = job_for("octo/app")
FORMATS = {
    "AWS_ACCESS_KEY_ID": r"AKIA[A-Z2-7]{16}",
    "AWS_SECRET_ACCESS_KEY": r"[A-Za-z0-9+/]{40}",
    # A job's token is an installation token (ghs_), wherever the job keeps one.
    "GITHUB_TOKEN": r"ghs_[A-Za-z0-9]{36}",
    "CHECKOUT_TOKEN": r"ghs_[A-Za-z0-9]{36}",
    "RUNNER_WORKER_GITHUB_TOKEN": r"ghs_[A-Za-z0-9]{36}",
    "RUNNER_WORKER_NPM_TOKEN": r"npm_[A-Za-z0-9]{36}",
    "ACTIONS_RUNTIME_TOKEN": JWT,
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": JWT,
    "RUNNER_WORKER_RUNTIME_TOKEN": JWT,
    "NPM_TOKEN": r"npm_[A-Za-z0-9]{36}",
    "SSH_PRIVATE_KEY": r"b3BlbnNzaC1rZXktdjEA[A-Za-z0-9+/]+={0,2}",
    "GH_OAUTH_TOKEN": r"gho_[A-Za-z0-9]{36}",
    "PYPI_TOKEN": r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{150,}",
    "DOCKER_LOGIN_TOKEN": r"ghs_[A-Za-z0-9]{36}",
    "RUNNER_CLIENT_ID": UUID,
    # Each field of an RSA key, in base64, joined (decoyfiles.py writes the runner's file).
    "RUNNER_RSA_KEY": "".join(f"{B64}{{{n - 4}}}[A-Za-z0-9+/=]{{4}}" for _, n in RSA_FIELDS),
}
# Values with characters that percent-encoding changes, so "url" differs from "plain".
SLASHY = Decoy("SLASHY", "sk+live/" + "Ab3" * 8 + "==", None, None)


def by_name(decoys: tuple[Decoy, ...]) -> dict[str, Decoy]:
    return {d.name: d for d in decoys}


def base62_crc(body: str) -> str:
    alphabet = string.digits + string.ascii_uppercase + string.ascii_lowercase
    n, out = binascii.crc32(body.encode()), ""
    while n:
        n, r = divmod(n, 62)
        out = alphabet[r] + out
    return out.rjust(6, "0")


def test_every_decoy_has_its_real_format() -> None:
    decoys = by_name(make_decoys())
    assert set(decoys) == set(FORMATS)
    for name, pattern in FORMATS.items():
        assert re.fullmatch(pattern, decoys[name].value), (name, decoys[name].value)


def test_github_style_tokens_carry_a_valid_crc32_checksum() -> None:
    decoys = by_name(make_decoys())
    for name in ("GITHUB_TOKEN", "NPM_TOKEN", "GH_OAUTH_TOKEN", "CHECKOUT_TOKEN",
                 "DOCKER_LOGIN_TOKEN"):  # fmt: skip
        token = decoys[name].value[4:]
        assert token[30:] == base62_crc(token[:30]), name


def test_the_ci_environment_variables_are_decoys() -> None:
    env = {d.env: d.value for d in make_decoys() if d.env}
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "NPM_TOKEN"} <= set(env)
    assert {"ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"} <= set(env)


@pytest.mark.parametrize(
    "name",
    ["ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "RUNNER_WORKER_RUNTIME_TOKEN"],
)
def test_actions_tokens_are_rs256_jwts_from_the_actions_token_service(name: str) -> None:
    token = by_name(make_decoys())[name].value
    header, payload, signature = (
        base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)) for part in token.split(".")
    )
    head, claims = json.loads(header), json.loads(payload)
    assert (head["typ"], head["alg"]) == ("JWT", "RS256")
    assert claims["iss"] == "vstoken.actions.githubusercontent.com"
    assert claims["nbf"] < time.time() < claims["exp"]
    assert len(signature) == 256  # an RSA-2048 signature's length


@pytest.mark.parametrize("name", ["ACTIONS_RUNTIME_TOKEN", "RUNNER_WORKER_RUNTIME_TOKEN"])
def test_the_runtime_tokens_write_the_cache_of_the_branch_pushed_to(name: str) -> None:
    token = by_name(make_decoys(ref="refs/heads/release/2.x"))[name].value
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert json.loads(claims["ac"]) == [{"Scope": "refs/heads/release/2.x", "Permission": 3}]


def test_each_call_makes_fresh_values() -> None:
    first, second = by_name(make_decoys()), by_name(make_decoys())
    for name in FORMATS:
        assert first[name].value != second[name].value, name


def test_ssh_key_is_a_well_formed_openssh_ed25519_key(tmp_path: Path) -> None:
    decoys = by_name(make_decoys())
    text = ssh_key(decoys["SSH_PRIVATE_KEY"].value)
    lines = text.splitlines()
    assert lines[0] == "-----BEGIN OPENSSH PRIVATE KEY-----"
    assert lines[-1] == "-----END OPENSSH PRIVATE KEY-----"
    assert all(len(line) <= 70 for line in lines[1:-1])
    blob = base64.b64decode("".join(lines[1:-1]))
    assert blob.startswith(b"openssh-key-v1\0\0\0\0\x04none\0\0\0\x04none")
    assert "".join(lines[1:-1]) == decoys["SSH_PRIVATE_KEY"].value
    if shutil.which("ssh-keygen"):
        key = tmp_path / "id_ed25519"
        key.write_text(text)
        key.chmod(0o600)
        out = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("ssh-ed25519 ")


def all_encodings(value: str) -> dict[str, list[bytes]]:
    raw = value.encode()
    return {
        "plain": [raw],
        "url": [quote(value, safe="").encode(), quote_plus(value).encode()],
        "hex": [raw.hex().encode(), raw.hex().upper().encode()],
        "base64": [
            base64.b64encode(raw),
            base64.b64encode(raw).rstrip(b"="),
            base64.urlsafe_b64encode(raw),
            base64.urlsafe_b64encode(raw).rstrip(b"="),
        ],
    }


@pytest.mark.parametrize("decoy", [*make_decoys(), SLASHY], ids=lambda d: d.name)
def test_every_encoding_of_every_decoy_is_found(decoy: Decoy) -> None:
    decoys = (*make_decoys(), decoy)
    for encoding, blobs in all_encodings(decoy.value).items():
        if encoding == "url" and blobs[0] == decoy.value.encode():
            continue  # nothing to escape: the url form is the plain form
        for blob in blobs:
            data = b"prefix " + blob + b" suffix"
            assert (decoy.name, encoding) in find_decoys(data, decoys), (encoding, blob)


def test_url_encoding_is_found_in_both_quote_forms_and_lowercase_escapes() -> None:
    for blob in (
        quote(SLASHY.value, safe=""),
        quote(SLASHY.value),
        quote_plus(SLASHY.value),
        re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(SLASHY.value, safe="")),
    ):
        assert find_decoys(f"q={blob}&x=1".encode(), [SLASHY]) == [("SLASHY", "url")], blob


@pytest.mark.parametrize("alphabet", ["standard", "urlsafe"])
def test_base64_embedded_in_a_larger_blob_is_found_at_every_offset(alphabet: str) -> None:
    encode = base64.b64encode if alphabet == "standard" else base64.urlsafe_b64encode
    for decoy in (*make_decoys(), SLASHY):
        offsets = set()
        for pad in range(3):
            doc = {"host": "runner" + "x" * pad, "env": {"K": decoy.value}, "tail": "y" * 7}
            text = json.dumps(doc).encode()
            offsets.add(text.index(decoy.value.encode()) % 3)
            blob = encode(text)
            assert decoy.value.encode() not in blob
            hits = find_decoys(b"data=" + blob, [*make_decoys(), decoy])
            assert (decoy.name, "base64") in hits, (decoy.name, pad)
        assert offsets == {0, 1, 2}, decoy.name


def test_a_copied_key_file_is_found_plain_and_base64() -> None:
    decoys = make_decoys()
    key_file = decoy_files(decoys, JOB)[".ssh/id_ed25519"].encode()
    assert find_decoys(key_file, decoys) == [("SSH_PRIVATE_KEY", "plain")]
    escaped = json.dumps({"id_ed25519": key_file.decode()}).encode()
    assert find_decoys(escaped, decoys) == [("SSH_PRIVATE_KEY", "plain")]
    assert find_decoys(base64.b64encode(b"k=" + key_file), decoys) == [
        ("SSH_PRIVATE_KEY", "base64")
    ]


def test_no_false_positive_on_benign_data() -> None:
    decoys = make_decoys()
    benign = [
        os.urandom(1 << 20),
        base64.b64encode(os.urandom(300_000)),
        os.urandom(200_000).hex().encode(),
        # Another run's decoys share every fixed prefix (AKIA, ghp_, the key header).
        json.dumps(decoy_files(make_decoys(), JOB)).encode(),
        base64.b64encode(json.dumps(decoy_files(make_decoys(), JOB)).encode()),
        b"GET /simple/six/ HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip/24.0\r\n\r\n",
    ]
    for data in benign:
        assert find_decoys(data, decoys) == []


def test_needles_shorter_than_the_minimum_are_skipped() -> None:
    short = Decoy("SHORT", "x" * (MIN_NEEDLE - 1), None, None)
    assert find_decoys(b"aaa " + short.value.encode() + b" bbb", [short]) == []
    long = Decoy("LONG", "x" * MIN_NEEDLE, None, None)
    assert find_decoys(b"aaa " + long.value.encode() + b" bbb", [long]) == [("LONG", "plain")]


def test_results_come_in_decoy_order_then_encoding_order() -> None:
    decoys = make_decoys()
    first, last = decoys[0], decoys[-1]
    data = last.value.encode().hex().encode() + b" " + last.value.encode() + first.value.encode()
    assert find_decoys(data, decoys) == [
        (first.name, "plain"),
        (last.name, "plain"),
        (last.name, "hex"),
    ]


def test_a_megabyte_is_scanned_in_linear_time() -> None:
    matcher = DecoyMatcher(make_decoys())

    def cpu_seconds(size: int) -> float:
        data = base64.urlsafe_b64encode(os.urandom(size * 3 // 4))
        start = time.thread_time()  # this thread's CPU: the machine's load does not count
        for _ in range(3):
            assert matcher.find(data) == []
        return time.thread_time() - start

    small, large = cpu_seconds(128 * 1024), cpu_seconds(1024 * 1024)
    # Eight times the bytes: about eight times the work when linear, 64 when quadratic.
    assert large < 24 * max(small, 0.001), (small, large)

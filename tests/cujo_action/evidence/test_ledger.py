"""The tamper record's lines: what they carry, what they never carry, how they are read back."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from cujo_action.evidence.ledger import (
    begin_line,
    egress_line,
    end_line,
    item_line,
    shown_host,
)
from cujo_action.evidence.reader import read_record
from cujo_action.evidence.recorder import EgressTail
from cujo_action.schema import DecoyEvent, Observation
from cujo_action.watch.watcher import DecoyWatcher

RUN = "run-7"
HEAD, BASE = "a" * 40, "b" * 40
SECRET = "AKIAIOSFODNN7EXAMPLEwJalrXUtnFEMIK7MDENG"


def raw(host: str, *, decoy: bool = False, check: str = "install", url: str = "") -> bytes:
    record = {
        "ts": 1.5,
        "label": f"{check}/install",
        "check": check,
        "phase": "install",
        "host": host,
        "port": 443,
        "method": "POST",
        "url": url or f"https://{host}/",
        "bytes_out": 10,
        "action": "sunk",
        "decoy_seen": ["AWS_SECRET_ACCESS_KEY"] if decoy else [],
        "decoy_where": [],
        "route": "proxy",
    }
    return json.dumps(record).encode() + b"\n"


def sha256_128(data: bytes) -> str:
    """Return the digest as the module documents it: sha256 in hex, its first 128 bits."""
    return hashlib.sha256(data).hexdigest()[:32]


def as_reported(item: DecoyEvent | Observation) -> bytes:
    """Return an item as JSON the way the relay reads it from the report: compact, by alias."""
    held = json.loads(item.model_dump_json(by_alias=True, indent=2))  # the report's text
    return json.dumps(held, separators=(",", ":"), ensure_ascii=False).encode()


def test_an_egress_line_names_the_log_line_without_its_content() -> None:
    line = raw(
        f"{SECRET.lower()}.collector.exfil.test", decoy=True, url=f"https://x.test/?k={SECRET}"
    )
    text = egress_line(RUN, 1234, line)

    assert SECRET not in text
    assert SECRET.lower() not in text
    record = read_record(text, RUN)
    (seen,) = record.egress
    assert (seen.offset, seen.length) == (1234, len(line))
    assert seen.digest == hashlib.sha256(line).hexdigest()[:32]
    assert (seen.check, seen.host, seen.decoy) == ("install", "*.exfil.test", True)


def test_a_host_shows_its_last_two_labels_only() -> None:
    assert shown_host("pypi.org") == "pypi.org"
    assert shown_host("files.pythonhosted.org.") == "*.pythonhosted.org"
    assert shown_host("MFRGG.ZDFMZ.exfil.test") == "*.exfil.test"
    assert shown_host("") == "-"
    assert " " not in shown_host("a b.c d")


def test_an_item_line_carries_the_digest_of_the_item_as_its_report_will_hold_it() -> None:
    event = DecoyEvent(
        id="tests:decoy:3",
        phase="test",
        path="~/.aws/credentials",
        event="read",
        pid=4242,
        exe="/usr/bin/python3",
        ts=1796066001.123457,
        cmdline="python -m pytest",
        parents=["4000 /usr/bin/bash"],
    )
    obs = Observation(id="install:obs:1", kind="shell_profile_write", detail="~/.bashrc written")
    text = "\n".join(
        [item_line(RUN, event.id, event, "decoy-read"), item_line(RUN, obs.id, obs, obs.kind)]
    )

    record = read_record(text, RUN)
    # The relay parses the report from JSON: the digest must survive that round trip.
    again = DecoyEvent.model_validate_json(event.model_dump_json())
    assert [(i.evidence_id, i.digest) for i in record.items] == [
        ("tests:decoy:3", sha256_128(as_reported(again))),
        ("install:obs:1", sha256_128(as_reported(obs))),
    ]
    assert as_reported(again) == as_reported(event)
    assert "credentials" not in text  # the path a decoy lives at is the report's to say


def test_the_record_is_read_from_a_real_job_log_shape() -> None:
    stamp = "2026-11-30T19:02:01.1234567Z "
    lines = [
        stamp + "cujo: run run-7: preparing",
        "\ufeff" + stamp + begin_line(RUN, HEAD, BASE),
        stamp + egress_line(RUN, 0, raw("pypi.org")) + "\r",
        stamp + egress_line(RUN, 0, raw("pypi.org")),  # the same line twice counts once
        stamp + egress_line("run-8", 0, raw("other.test")),  # another run's
        stamp + "cujo-evidence run-7 egress 12 nonsense",  # ours, but it does not parse
        "echo cujo-evidence run-7 end 5",  # not at the start of a line: not ours
        stamp + end_line(RUN, 99),
    ]

    record = read_record("\n".join(lines), RUN)

    assert record.begun
    assert (record.head_sha, record.base_sha) == (HEAD, BASE)
    assert [e.host for e in record.egress] == ["pypi.org"]
    assert record.malformed == 1
    assert (record.ended, record.egress_bytes) == (True, 99)
    assert read_record("\n".join(lines), "run-9").begun is False


# --------------------------------------------------------------------------- the printer


def test_the_tail_prints_each_whole_line_as_it_is_appended(tmp_path: Path) -> None:
    log = tmp_path / "egress.jsonl"
    printed: list[str] = []
    two = threading.Event()

    def write(line: str) -> None:
        printed.append(line)
        if len(printed) == 2:
            two.set()

    tail = EgressTail(RUN, log, write=write)
    tail.start()  # before the log exists, as after arm
    first, second = raw("pypi.org"), raw("collector.exfil.test", decoy=True)
    with log.open("ab") as fh:
        fh.write(first)
        fh.flush()
        fh.write(second + b'{"ts": 2')  # a writer mid-line
        fh.flush()
        assert two.wait(10), printed  # printed while the run goes on, not at its end
        fh.write(b"}\n")
    assert tail.stop() == len(first) + len(second) + len(b'{"ts": 2}\n')

    record = read_record("\n".join(printed), RUN)
    assert [(e.offset, e.length) for e in record.egress] == [
        (0, len(first)),
        (len(first), len(second)),
        (len(first) + len(second), len(b'{"ts": 2}\n')),
    ]
    assert [e.decoy for e in record.egress] == [False, True, False]
    assert record.ended
    assert record.egress_bytes == tail.offset


def test_the_tail_never_follows_a_link_planted_at_the_log(tmp_path: Path) -> None:
    """Root follows the log from a folder only root can see; still, a link there is refused."""
    secret = tmp_path / "shadow"
    secret.write_bytes(raw("secret.test"))
    log = tmp_path / "egress.jsonl"
    log.symlink_to(secret)
    printed: list[str] = []

    tail = EgressTail(RUN, log, write=printed.append)
    tail.start()
    assert tail.stop() == 0

    assert read_record("\n".join(printed), RUN).egress == []
    assert tail.error is not None
    assert "egress.jsonl" in tail.error


@pytest.mark.parametrize("backend", ["inotify"])
def test_the_watcher_numbers_decoy_events_as_they_are_recorded(
    tmp_path: Path, backend: str
) -> None:
    decoy = tmp_path / "credentials"
    decoy.write_text("[default]\n")
    seen: list[tuple[int, str]] = []
    watcher = DecoyWatcher(
        [decoy],
        lambda: "test",
        backend=backend,  # type: ignore[arg-type]
        on_event=lambda n, ev: seen.append((n, ev.event)),
    )
    watcher.start()
    decoy.read_text()
    watcher.sync()
    decoy.write_text("changed\n")
    events = watcher.stop()

    assert seen
    assert [n for n, _ in seen] == list(range(1, len(events) + 1))
    assert [kind for _, kind in seen] == [ev.event for ev in events]

"""Decide and record egress: which hosts are allowed, what a request gets, the log's lines."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, Literal, NamedTuple, get_args

from cujo_action.limits import EGRESS_LOG_LINE
from cujo_action.schema import (
    ALL_CHECKS,
    MAX_SHORT,
    MAX_TEXT,
    RAW_METHOD,
    REGISTRY_HOSTS,
    REGISTRY_READ_METHODS,
    Egress,
    Phase,
    clip,
    normalize_host,
)

# The policy the proxy (proxy/process.py) and the resolver (dns/resolver.py) apply, and the
# one log line format both append to ``run_dir/evidence/egress.jsonl``, read back by
# bundle.py. Pure: no I/O here beyond reading a stream it is given, so the harness
# processes, the bundler and the relay cannot disagree.

_PHASES: tuple[str, ...] = get_args(Phase)

Action = Literal["forwarded", "sunk", "refused", "registry-write"]


def split_label(label: str) -> tuple[str, str]:
    """Return (check, phase) from a "check/phase" label, or raise ValueError."""
    check, sep, phase = label.partition("/")
    if not sep or check not in ALL_CHECKS or phase not in _PHASES:
        raise ValueError(
            f"label {label!r} must be check/phase with check in {ALL_CHECKS} and phase in {_PHASES}"
        )
    return check, phase


# --------------------------------------------------------------------------- decisions


def host_allowed(host: str, allow_hosts: Iterable[str]) -> bool:
    """Return whether ``host`` matches an allow entry (exact, or ``*.suffix`` for subdomains)."""
    host = normalize_host(host)
    if not host:
        return False
    for entry in allow_hosts:
        pattern = normalize_host(entry)
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def decide(
    host: str,
    allow_hosts: Iterable[str],
    *,
    method: str | None = None,
    registry_hosts: Iterable[str] = REGISTRY_HOSTS,
) -> Action:
    """Return what the proxy does with a request to ``host`` (``method`` None: a name only)."""
    # Methods are case-sensitive (RFC 9110 section 9.1): "get" is not a read.
    if (
        method is not None
        and method not in REGISTRY_READ_METHODS
        and host_allowed(host, registry_hosts)
    ):
        return "registry-write"
    return "forwarded" if host_allowed(host, allow_hosts) else "sunk"


# How much a log line matters to the hard rules (app_relay/decide/rules.py), most first:
# what a report keeps when a check's egress is over its cap. A line that would make a
# critical finding comes before one that would make a warning, and that before the rest,
# so no flood of harmless lines can push out the line that blocks.
RANK_DECOY = 0  # decoy-egress: before anything else, whatever floods beside it
# unsearched-egress, opaque-egress, dns-tunnel: a line the proxy could not read through,
# or data sent as names, may hide a decoy (and the rules that read it may block).
RANK_UNREAD = 1
RANK_REGISTRY_WRITE = 2  # registry-write (install, import)
RANK_BYPASS = 3  # proxy-bypass: a raw channel, to an unexpected host
RANK_EARLY_UNEXPECTED = 4  # install-egress, import-egress
RANK_RUNTIME_REGISTRY_WRITE = 5  # runtime-registry-write
RANK_RUNTIME_UNEXPECTED = 6  # runtime-egress
RANK_EXPECTED = 7
_EARLY_PHASES = frozenset({"install", "import"})


def egress_rank(record: dict[str, Any], expected_hosts: Iterable[str]) -> int:
    """Return how much a log line matters to the rules (0 most); ``expected_hosts`` as allowed."""
    # What a rule acts on whatever the phase is kept first: no flood can push out a decoy,
    # and no flood of plain lines a tunnel's query or a body that could not be read.
    if record.get("decoy_seen"):
        return RANK_DECOY
    if record.get("dns_tunnel"):
        return RANK_UNREAD
    host = str(record.get("host", ""))
    unexpected = not host_allowed(host, expected_hosts)
    if unexpected and (record.get("unsearched") or record.get("opaque")):
        return RANK_UNREAD
    # A request to a registry that could not be searched is held against the run as to
    # any host (unsearched-egress): its reads are forwarded.
    if (
        record.get("unsearched")
        and record.get("route") != "dns"
        and host_allowed(host, REGISTRY_HOSTS)
    ):
        return RANK_UNREAD
    early = record.get("phase") in _EARLY_PHASES
    if record.get("dns_name") and early:
        return RANK_BYPASS  # dns-over-https: a lookup around the resolver
    if record.get("action") == "registry-write":
        return RANK_REGISTRY_WRITE if early else RANK_RUNTIME_REGISTRY_WRITE
    if host_allowed(str(record.get("host", "")), expected_hosts):
        return RANK_EXPECTED
    if record.get("route") == "direct" and record.get("method") == RAW_METHOD:
        return RANK_BYPASS
    return RANK_EARLY_UNEXPECTED if early else RANK_RUNTIME_UNEXPECTED


def order_egress(
    records: Iterable[dict[str, Any]], expected_hosts: Iterable[str]
) -> list[dict[str, Any]]:
    """Return log lines most telling first (``egress_rank``), in time order within a rank."""
    expected = list(expected_hosts)
    return sorted(records, key=lambda r: (egress_rank(r, expected), float(r.get("ts", 0))))


# --------------------------------------------------------------------------- the log


def egress_record(
    *,
    ts: float,
    label: str,
    host: str,
    port: int,
    method: str,
    url: str,
    bytes_out: int,
    action: Action,
    decoy_seen: Sequence[str] = (),
    decoy_where: Sequence[str] = (),
    route: str = "proxy",
    dns_name: str = "",
    process: Mapping[str, Any] | None = None,
    unsearched: str = "",
    opaque: bool = False,
    dns_tunnel: bool = False,
    addressed: str = "",
) -> dict[str, Any]:
    """Return the log line for one request or tunnel.

    ``dns_name``: a DoH request's name; ``process``: who held the channel (``pid``,
    ``exe``, ``cmdline``, ``parents``), when the harness could tell; ``unsearched``: why
    part of it was not searched for decoys; ``opaque``: its body read as nothing;
    ``dns_tunnel``: a query of a tunnel's shape; ``addressed``: for a connection caught
    on its way (route "direct"), the name the run's resolver gave its address for (a
    client that connected to an address of its own has none, whatever its SNI or Host
    say). The last four appear only when set.
    """
    check, phase = split_label(label)
    extra: dict[str, Any] = {"dns_name": clip(dns_name, MAX_SHORT)} if dns_name else {}
    if process:
        extra["process"] = dict(process)
    if unsearched:
        extra["unsearched"] = clip(unsearched, MAX_SHORT)
    if opaque:
        extra["opaque"] = True
    if dns_tunnel:
        extra["dns_tunnel"] = True
    if addressed:
        extra["addressed"] = clip(addressed, MAX_SHORT)
    return {
        "ts": round(ts, 6),
        "label": label,
        "check": check,
        "phase": phase,
        "host": clip(host, MAX_SHORT),
        "port": port,
        "method": clip(method, MAX_SHORT),
        "url": clip(url, MAX_TEXT),
        "bytes_out": bytes_out,
        "action": action,
        "decoy_seen": list(decoy_seen),
        "decoy_where": list(decoy_where),
        "route": route,
        **extra,
    }


class EgressLog(NamedTuple):
    """The whole records of an egress log, and how many lines were not one."""

    records: list[dict[str, Any]]
    bad_lines: int  # lines that are not a whole record, e.g. cut by a killed proxy


_RECORD_KEYS = frozenset(
    egress_record(
        ts=0,
        label="install/install",
        host="",
        port=0,
        method="",
        url="",
        bytes_out=0,
        action="sunk",
    )
)


BadLine = Literal["bad", "long"]


def read_egress_log(
    stream: IO[bytes], labels: set[str] | None = None
) -> Iterator[dict[str, Any] | BadLine]:
    """Yield each record of the egress log in ``stream``, "bad" or "long" for other lines."""
    # Line by line, never whole: a pull request that floods the log cannot grow the
    # reader's memory. A line over EGRESS_LOG_LINE is skipped to its end unread ("long").
    while chunk := stream.readline(EGRESS_LOG_LINE + 1):
        if len(chunk) > EGRESS_LOG_LINE and not chunk.endswith(b"\n"):
            while chunk and not chunk.endswith(b"\n"):
                chunk = stream.readline(EGRESS_LOG_LINE + 1)
            yield "long"
            continue
        # As bytes.splitlines on the whole log: a stray carriage return splits too.
        for line in chunk.splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                yield "bad"
                continue
            if not isinstance(record, dict) or not record.keys() >= _RECORD_KEYS:
                yield "bad"
                continue
            if labels is None or record["label"] in labels:
                yield record


def parse_egress_log(data: bytes, labels: set[str] | None = None) -> EgressLog:
    """Return the records of an egress log's bytes (only ``labels`` when given), bad lines."""
    # A missing log is an error, not "no egress": read it with read_bytes, which raises.
    records: list[dict[str, Any]] = []
    bad = 0
    for item in read_egress_log(io.BytesIO(data), labels):
        if isinstance(item, dict):
            records.append(item)
        else:
            bad += 1
    return EgressLog(records, bad)


def egress_from_record(record: dict[str, Any], evidence_id: str) -> Egress:
    """Return the report's Egress item for one log record."""
    return Egress(
        id=evidence_id,
        phase=record["phase"],
        host=clip(record["host"], MAX_SHORT),
        port=record["port"],
        method=clip(record["method"], MAX_SHORT),
        url=clip(record["url"], MAX_TEXT),
        bytes_out=record["bytes_out"],
        action=record["action"],
        decoy_seen=[clip(n, MAX_SHORT) for n in record["decoy_seen"][:20]],
        decoy_where=[clip(w, MAX_SHORT) for w in record["decoy_where"][:20]],
        route=record.get("route", "proxy"),
        dns_name=clip(str(record.get("dns_name", "")), MAX_SHORT),
        ts=float(record["ts"]) if isinstance(record.get("ts"), int | float) else None,
        unsearched=clip(str(record.get("unsearched") or ""), MAX_SHORT),
        opaque=record.get("opaque") is True,
        dns_tunnel=record.get("dns_tunnel") is True,
        addressed=clip(str(record.get("addressed") or ""), MAX_SHORT),
        **_process_fields(record.get("process")),
    )


def _process_fields(process: object) -> dict[str, Any]:
    """Return the Egress fields naming a channel's process, from a log line (untrusted)."""
    if not isinstance(process, dict) or not isinstance(process.get("pid"), int):
        return {}
    parents = process.get("parents")
    return {
        "pid": process["pid"],
        "exe": clip(str(process["exe"]), MAX_TEXT) if process.get("exe") else None,
        "cmdline": clip(str(process.get("cmdline") or ""), MAX_TEXT) or None,
        "parents": [clip(str(p), MAX_SHORT) for p in parents[:8]]
        if isinstance(parents, list)
        else [],
        "origin": clip(str(process.get("origin") or ""), MAX_SHORT),
    }

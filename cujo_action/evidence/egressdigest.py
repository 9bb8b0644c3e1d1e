"""Digest the egress log as it streams: per check, what its report's egress is made of.

The log can be hundreds of MiB (a pull request making millions of DNS queries), so it is
read once, line by line, and each check keeps a bounded digest instead of its lines:

* forwarded registry reads no rule acts on, folded per (phase, host, method) as they
  come: the first line, how many, their bytes (one a rule acts on, a registry read that
  could not be searched, is an "other line" below);
* every other line, folded per kind the rules cannot tell apart (``_alike``: phase,
  host, method, action, route; a decoy-bearing line is a kind of its own): the line
  that sorts first (``egress_rank``, then time, then order in the log), how many, their
  bytes, how many would have made a finding;
* the lines one by one while they may all fit the report unfolded (``MAX_EGRESS``).

From it ``fit`` makes exactly the entries the list-based fitting made (and the same
count, phase and telling lines of what did not fit), however the log was cut into
lines. Memory is bounded twice: a kind's first line is held only while it may still be
among the report's entries (``_prune``), and over ``limits.EGRESS_DIGEST`` kinds the
least telling are only counted (``_evict``), which a log under the bundle's 8 MiB copy
cannot reach: the relay, which recomputes a report's egress from that copy
(``app_relay/runs/tamper.py``), agrees to the byte.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple

from cujo_action import limits
from cujo_action.net.egress import (
    RANK_EXPECTED,
    RANK_UNREAD,
    egress_from_record,
    egress_rank,
    read_egress_log,
)
from cujo_action.schema import ALL_CHECKS, MAX_EGRESS, REGISTRY_HOSTS, Egress, parent_domain

PHASES = frozenset({"install", "import", "test", "probe", "smoke"})
_ALIKE_FIELDS = ("phase", "host", "method", "action", "route")
# A kind's first line is dropped once this many are held beyond the report's entries.
_PRUNE_FACTOR = 4
# Over the digest's cap, evict down to this share of it: amortizes the sort.
_EVICT_TO = 3 / 4

Key = tuple[int, float, int]  # (egress_rank, ts, order in the log): how a line sorts


@dataclass(slots=True)
class _Kind:
    """Lines folded into one report entry: the first as they sort, how many, their bytes."""

    key: Key
    first: dict[str, Any] | None  # None once it cannot be among the report's entries
    phase: str
    count: int = 0
    bytes: int = 0
    telling: int = 0  # lines of rank above RANK_EXPECTED: they would have made a finding


class Dropped(NamedTuple):
    """What of a check's egress did not fit its report's entries."""

    lines: int
    telling: int  # of them, lines that would have made a finding
    phase: str  # the phase most of them came from ("" when none)
    uncounted_kinds: int = 0  # lines only counted: over the digest's cap of kinds
    uncounted_telling: int = 0  # of them, lines that would have made a finding
    uncounted_decoys: int = 0  # of them, decoy-bearing or unreadable lines (RANK_UNREAD or less)


NONE_DROPPED = Dropped(0, 0, "")


class CheckEgress(NamedTuple):
    """A check's egress entries, and what did not fit ``MAX_EGRESS``."""

    entries: list[Egress]
    dropped: Dropped


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _entry(check: str, n: int, kind: _Kind) -> Egress:
    """Return the report entry of one line, or of lines folded into their first."""
    assert kind.first is not None, "a kind among the entries holds its first line"
    first = kind.first
    url = str(first.get("url", ""))
    if kind.count > 1:
        url = f"{url} (+{kind.count - 1} more requests to this host)"
    record = {**first, "url": url, "bytes_out": max(_int(first.get("bytes_out", 0)), kind.bytes)}
    return egress_from_record(record, f"{check}:egress:{n}")


@dataclass
class CheckDigest:
    """One check's egress, digested line by line in bounded memory."""

    expected: list[str]
    max_entries: int = MAX_EGRESS
    cap: int = limits.EGRESS_DIGEST
    # Forwarded reads per (phase, host, method), in the order of their first line.
    forwarded: dict[Hashable, _Kind] = field(default_factory=dict)
    # Every other line per kind (``_alike``), and the lines one by one until too many.
    kinds: dict[Hashable, _Kind] = field(default_factory=dict)
    single: list[tuple[Key, dict[str, Any]]] | None = field(default_factory=list)
    lines: int = 0  # lines other than forwarded reads
    threshold: Key | None = None  # a kind sorting after it is never among the entries
    held: int = 0  # kinds holding their first line
    evicted: int = 0  # lines only counted, over the cap of kinds
    evicted_telling: int = 0
    evicted_decoys: int = 0
    evicted_phases: Counter[str] = field(default_factory=Counter)

    def add(self, line: dict[str, Any], seq: int) -> None:
        """Digest one log line of this check, the ``seq``-th of the log."""
        rank = egress_rank(line, self.expected)
        phase = sys.intern(str(line["phase"]))
        if (
            line.get("action") == "forwarded"
            and not line.get("decoy_seen")
            and rank >= RANK_EXPECTED
        ):
            fkey = (phase, str(line.get("host")), sys.intern(str(line.get("method"))))
            kind = self.forwarded.get(fkey)
            if kind is None:
                # Forwarded reads come after every other entry, in order: only the
                # first ``max_entries`` of them can ever be in the report.
                keep = line if len(self.forwarded) < self.max_entries else None
                kind = self.forwarded[fkey] = _Kind((rank, 0.0, seq), keep, phase)
        else:
            self.lines += 1
            ts = line.get("ts", 0)
            key: Key = (rank, float(ts) if isinstance(ts, int | float) else 0.0, seq)
            if self.single is not None:
                self.single.append((key, line))
            kind = self._alike_kind(line, key, phase)
        kind.count += 1
        kind.bytes += _int(line.get("bytes_out", 0))
        kind.telling += rank < RANK_EXPECTED
        if self.single is not None and self.lines + len(self.forwarded) > self.max_entries:
            self.single = None  # folded from now on: the kinds say it all
        # Counted first: the kind just made may be the one evicted.
        if len(self.kinds) + len(self.forwarded) > self.cap:
            self._evict()

    def _alike_kind(self, line: dict[str, Any], key: Key, phase: str) -> _Kind:
        """Return the kind ``line`` folds into, with ``line`` as its first if it sorts first."""
        if line.get("decoy_seen"):
            akey: Hashable = ("decoy", key[2])  # never folded
        elif line.get("dns_tunnel"):
            # A tunnel's queries fold per parent domain, as its rule names them.
            akey = ("tunnel", phase, parent_domain(str(line.get("host", ""))))
        else:
            akey = tuple(sys.intern(str(line.get(f))) for f in _ALIKE_FIELDS)
        may_lead = self.threshold is None or key < self.threshold
        kind = self.kinds.get(akey)
        if kind is None:
            kind = self.kinds[akey] = _Kind(key, line if may_lead else None, phase)
            self.held += may_lead
        elif key < kind.key:
            self.held += may_lead - (kind.first is not None)
            kind.key, kind.first = key, line if may_lead else None
        if self.held > _PRUNE_FACTOR * self.max_entries:
            self._prune()
        return kind

    def _prune(self) -> None:
        """Drop the first lines of kinds that can no longer be among the report's entries."""
        # Keys only decrease and kinds only arrive, so the max_entries-th key only falls:
        # a kind after it now can lead later only through a new first line.
        nth = heapq.nsmallest(self.max_entries, (k.key for k in self.kinds.values()))
        if len(nth) < self.max_entries:
            return
        self.threshold = nth[-1]
        for kind in self.kinds.values():
            if kind.first is not None and kind.key > self.threshold:
                kind.first = None
                self.held -= 1

    def _evict(self) -> None:
        """Count only the least telling kinds, down to a share of the cap."""
        # In the report's order (kinds by key, then forwarded reads): the last go first.
        ordered = [*sorted(self.kinds.items(), key=lambda kv: kv[1].key), *self.forwarded.items()]
        keep = int(self.cap * _EVICT_TO)
        for akey, kind in ordered[keep:]:
            self.evicted += kind.count
            self.evicted_telling += kind.telling
            if kind.key[0] <= RANK_UNREAD:
                self.evicted_decoys += kind.count
            self.evicted_phases[kind.phase] += kind.count
            if akey in self.kinds:
                self.held -= kind.first is not None
                del self.kinds[akey]
            else:
                del self.forwarded[akey]
        self.single = None

    def fit(self, check: str) -> CheckEgress:
        """Return the report's entries (``MAX_EGRESS`` at most) and what did not fit."""
        if self.single is not None:
            # Everything fits: each line its own entry, then the folded reads.
            singles = sorted(self.single, key=lambda kl: kl[0])
            groups = [
                _Kind(key, line, "", 1, _int(line.get("bytes_out", 0))) for key, line in singles
            ]
            entries = [*groups, *self.forwarded.values()]
            out = [_entry(check, n, kind) for n, kind in enumerate(entries, start=1)]
            return CheckEgress(out, NONE_DROPPED)
        ordered = [*sorted(self.kinds.values(), key=lambda k: k.key), *self.forwarded.values()]
        kept, rest = ordered[: self.max_entries], ordered[self.max_entries :]
        out = [_entry(check, n, kind) for n, kind in enumerate(kept, start=1)]
        phases: Counter[str] = Counter()
        for kind in rest:
            phases[kind.phase] += kind.count
        phases.update(self.evicted_phases)
        lines = sum(k.count for k in rest) + self.evicted
        if not lines:
            return CheckEgress(out, NONE_DROPPED)
        return CheckEgress(
            out,
            Dropped(
                lines,
                sum(k.telling for k in rest) + self.evicted_telling,
                phases.most_common(1)[0][0],
                self.evicted,
                self.evicted_telling,
                self.evicted_decoys,
            ),
        )


@dataclass
class EgressDigest:
    """The whole egress log, digested per check as it was read."""

    egress_allow: tuple[str, ...] = ()
    checks: frozenset[str] = frozenset(ALL_CHECKS)
    max_entries: int = MAX_EGRESS
    cap: int = limits.EGRESS_DIGEST
    per_check: dict[str, CheckDigest] = field(default_factory=dict)
    records: int = 0  # whole records, of every check
    bad_lines: int = 0  # lines that are not a whole record
    long_lines: int = 0  # lines over limits.EGRESS_LOG_LINE, skipped unread

    def add(self, record: dict[str, Any]) -> None:
        """Digest one whole record of the log."""
        seq = self.records
        self.records += 1
        check, phase = record.get("check"), record.get("phase")
        if not isinstance(check, str) or check not in self.checks:
            return
        if not isinstance(phase, str) or phase not in PHASES:
            return
        digest = self.per_check.get(check)
        if digest is None:
            expected = [*REGISTRY_HOSTS, *self.egress_allow]
            digest = CheckDigest(expected, self.max_entries, self.cap)
            self.per_check[check] = digest
        digest.add(record, seq)

    def fit(self, check: str) -> CheckEgress:
        """Return ``check``'s report entries and what did not fit (``CheckDigest.fit``)."""
        digest = self.per_check.get(check)
        return digest.fit(check) if digest is not None else CheckEgress([], NONE_DROPPED)


def read_egress(
    stream: IO[bytes],
    egress_allow: Sequence[str] = (),
    *,
    checks: Iterable[str] = ALL_CHECKS,
    max_entries: int = MAX_EGRESS,
    cap: int = limits.EGRESS_DIGEST,
) -> EgressDigest:
    """Return the digest of the egress log read from ``stream``, line by line."""
    digest = EgressDigest(tuple(egress_allow), frozenset(checks), max_entries, cap)
    for item in read_egress_log(stream):
        if isinstance(item, dict):
            digest.add(item)
        elif item == "long":
            digest.long_lines += 1
        else:
            digest.bad_lines += 1
    return digest


def digest_records(
    records: Iterable[dict[str, Any]],
    egress_allow: Sequence[str] = (),
    *,
    bad_lines: int = 0,
    max_entries: int = MAX_EGRESS,
    cap: int = limits.EGRESS_DIGEST,
) -> EgressDigest:
    """Return the digest of log records already read (``parse_egress_log``)."""
    digest = EgressDigest(tuple(egress_allow), frozenset(ALL_CHECKS), max_entries, cap)
    for record in records:
        digest.add(record)
    digest.bad_lines = bad_lines
    return digest

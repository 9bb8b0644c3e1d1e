"""Follow DNS names across queries: decoys sent a few characters per query, and tunnels.

One query name holds at most 255 bytes, and a careful exfiltration sends far less per
query: eight hex characters of a token, a sequence number, the attacker's zone
(``3a9f01c2.17.t.exfil.test``). No single name then holds a decoy's slice
(``matcher.SLICE``), so names are followed as streams, keyed by

* the check/phase label, the asking process and the parent domain (one process looping),
* the label and the parent domain alone (a process per query: ``nslookup`` in a loop),
* the label and the asking process across every parent domain, once that process has
  asked under a second one (pieces spread over several zones; until then its stream under
  the first parent holds the same data, and seeds this one when it starts).

Per stream, the labels left of the parent domain that stay the same query after query
(the zone's ``t``) are static and left out; the rest, joined without dots in order, is
the stream's data, searched for decoys after each query around its new tail only (so the
cost stays linear in the bytes asked). A second copy leaves out a label that reads as a
sequence counter. A decoy found so is named ``dns:joined+<encoding>`` on the query that
completed it.

Per label and parent domain, and per process across parent domains, new data strings are
also counted: many distinct random-looking ones are a tunnel (data leaving as names,
whatever it is), marked from the query that reaches the threshold on (the rule
``dns-tunnel``).

The parent domain is the name's registrable part, approximated without a public suffix
list: its last two labels (``exfil.test``, ``example.com``), three when the last is a
two-letter country code under a generic second level (``evil.co.uk``, ``x.com.au``).
A miss there merges streams (all of ``co.zz``), never splits one: static labels are
still left out, so the reassembly holds.

At most ``limits.DNS_STREAMS`` streams of each kind (by parent domain; by process and
parent domain; by process across parent domains) are followed at once; past that the
least recently used of that kind is forgotten, with what it held. That is loud: a later
query that comes back to a forgotten stream (its process and parent domain, or its
parent domain alone) is logged ``unsearched``, naming how many streams its check/phase
forgot, and the rule ``unsearched-egress`` makes it critical when its host is not
expected. An attacker who
cycles through hundreds of parent domains between chunks to make the reassembly forget
is named so. A benign suite is not: it must ask for hundreds of distinct parent domains
between two queries under one of them, and the query that comes back must be to a host
it was not allowed, which an ordinary suite's look-ups of its registries and a few test
hosts never are. A process's stream forgotten (hundreds of processes, one look-up each)
marks nothing while its parent domain's stream is followed and no other process asked
under it since (that stream then holds the same data); a one-off stream forgotten and
never asked again marks nothing. A process's stream across parent domains, forgotten and
asked again, is always named: no other stream holds what it joined.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cujo_action.find.matcher import SLICE, DecoyMatcher
from cujo_action.limits import DNS_DISTINCT, DNS_REASSEMBLY, DNS_STREAMS
from cujo_action.schema import registrable_length

# How far before a stream's new bytes each search starts: the longest encoding of a
# decoy's slice (SLICE characters: 40 in hex, 32 in base32 plus a group's alignment, 28
# in base64) must fit whole in one search, so a slice that ends in the new bytes is
# always searched whole, and one that ended earlier was found then.
SCAN_OVERLAP = 2 * SLICE + 16
# A counter label: decimal digits, no longer than this (a zero-padded 32-bit counter).
COUNTER_MAX = 10
# Tunnel thresholds, per check/phase and parent domain. A test suite looks up a few
# dozen names, hundreds of times: repeats are not new. A CDN name carries a short hash
# (d1a2b3c4.cloudfront.net): a handful of distributions is normal, dozens of distinct
# ones in one phase is data. So, counted over new data strings only:
# * TUNNEL_NAMES random-looking ones: at least RANDOM_LENGTH characters, ENTROPY_MIN bits
#   per character (eight random hex characters average 2.6; "download" has 2.5, "api"
#   is too short), of which NOVEL_MIN are not shared with the previous new one (so
#   host-101, host-102… are one name counting up, not data);
TUNNEL_NAMES = 32
RANDOM_LENGTH = 8
ENTROPY_MIN = 2.4
NOVEL_MIN = 6
# * or TUNNEL_BYTES of such novel characters in all (chunks shorter than RANDOM_LENGTH,
#   down to one character a query), when they read as an encoding rather than counting:
#   over BYTES_ENTROPY_MIN bits per character (hex has 4, base32 5; decimal digits at
#   most 3.3, so host-1 … host-5000 stays a count).
TUNNEL_BYTES = 1024
BYTES_ENTROPY_MIN = 3.5
# New data strings remembered per label and parent domain (beyond, a repeat of a
# forgotten one counts as new: by then the stream is a tunnel by any measure).
DISTINCT_CAP = DNS_DISTINCT


def entropy(counts: Sequence[int] | dict[int, int]) -> float:
    """Return the Shannon entropy, in bits per symbol, of symbol counts."""
    values = counts.values() if isinstance(counts, dict) else counts
    total = sum(values)
    if not total:
        return 0.0
    return -sum(c / total * math.log2(c / total) for c in values if c)


def _counts(data: bytes) -> dict[int, int]:
    counts: dict[int, int] = {}
    for byte in data:
        counts[byte] = counts.get(byte, 0) + 1
    return counts


def _novel(data: bytes, previous: bytes) -> bytes:
    """Return ``data`` less what it shares with ``previous`` at its start and end."""
    limit = min(len(data), len(previous))
    head = 0
    while head < limit and data[head] == previous[head]:
        head += 1
    tail = 0
    while tail < limit - head and data[-1 - tail] == previous[-1 - tail]:
        tail += 1
    return data[head : len(data) - tail]


def _is_counter(label: bytes) -> bool:
    return len(label) <= COUNTER_MAX and label.isdigit()


@dataclass
class _Position:
    """One label position, counted from the parent domain leftwards, in one stream."""

    value: bytes
    agreed: int = 1  # queries that had ``value`` there
    varied: bool = False

    @property
    def static(self) -> bool:
        return not self.varied and self.agreed >= 2


@dataclass
class _Tunnel:
    """New data strings under one label and parent domain, and whether they are a tunnel."""

    distinct: set[int] = field(default_factory=set)
    previous: bytes = b""
    random_names: int = 0
    novel_bytes: int = 0
    novel_counts: dict[int, int] = field(default_factory=dict)
    marked: bool = False

    def add(self, data: bytes) -> bool:
        """Count one query's data string; return whether the stream is a tunnel."""
        if self.marked or not data:
            return self.marked
        key = hash(data)
        if key in self.distinct:
            return False
        if len(self.distinct) < DISTINCT_CAP:
            self.distinct.add(key)
        novel = _novel(data, self.previous)
        self.previous = data
        if (
            len(data) >= RANDOM_LENGTH
            and len(novel) >= NOVEL_MIN
            and entropy(_counts(data)) >= ENTROPY_MIN
        ):
            self.random_names += 1
        self.novel_bytes += len(novel)
        for byte in novel:
            self.novel_counts[byte] = self.novel_counts.get(byte, 0) + 1
        self.marked = self.random_names >= TUNNEL_NAMES or (
            self.novel_bytes >= TUNNEL_BYTES and entropy(self.novel_counts) >= BYTES_ENTROPY_MIN
        )
        return self.marked


class _Stream:
    """The names of one key: a window of their labels, and their data's latest bytes."""

    def __init__(self, tunnel: bool) -> None:
        self.window: deque[tuple[bytes, ...]] = deque()  # labels left of the parent
        self.size = 0  # bytes of labels in the window
        self.positions: dict[int, _Position] = {}
        self.counter_at: int | None = None  # where the last counter was, from the right
        # Each digit label's last value, by position: a counter is the one that went up
        # by one (with one-character data, the data can be digits too).
        self.numbers: dict[int, int] = {}
        self.counted = False  # whether a counter was left out since the last rebuild
        self.joined = b""  # the data's latest bytes, every label
        self.uncounted = b""  # the same without counters
        self.tunnel = _Tunnel() if tunnel else None
        self.recent: set[str] = set()  # decoys the last search found (in its overlap)
        self.last: tuple[bytes, ...] = ()  # the last name's labels, folded
        self.last_types: set[int] = set()  # the types asked for it since
        self.last_pid: int | None = None  # who asked last (a parent domain's stream)
        # A stream across parent domains: each query's parent and labels as asked, beside
        # the window (which holds them less the labels static under their own parent).
        self.asked: deque[tuple[bytes, tuple[bytes, ...]]] = deque()

    def repeats(self, left: tuple[bytes, ...], qtype: int, retry: bool = False) -> bool:
        """Return whether a query asks again for the last name (A, then AAAA; a retry)."""
        folded = tuple(label.lower() for label in left)
        # The same name for a type not yet asked is the same look-up (getaddrinfo asks A
        # and AAAA); asked for a type again, it is a new look-up (the same data again),
        # unless glibc asks it again with the search domain appended (``retry``).
        if folded == self.last and (retry or qtype not in self.last_types):
            self.last_types.add(qtype)
            return True
        self.last, self.last_types = folded, {qtype}
        return False

    def _learn(self, left: tuple[bytes, ...]) -> bool:
        """Note each label's position; return whether one became or stopped being static."""
        flipped = False
        n = len(left)
        for i, label in enumerate(left):
            at = n - 1 - i
            folded = label.lower()
            known = self.positions.get(at)
            if known is None:
                self.positions[at] = _Position(folded)
            elif not known.varied:
                was = known.static
                if known.value == folded:
                    known.agreed += 1
                else:
                    known.varied = True
                flipped |= was != known.static
        return flipped

    def _data(self, left: tuple[bytes, ...]) -> tuple[bytes, bytes, bool]:
        """Return a query's data (every label; without a counter) and if one was left out."""
        n = len(left)
        kept = [
            (n - 1 - i, label)
            for i, label in enumerate(left)
            if not (
                (p := self.positions.get(n - 1 - i)) is not None
                and p.static
                and p.value == label.lower()
            )
        ]
        joined = b"".join(label for _, label in kept)
        if len(kept) < 2:
            return joined, joined, False
        counters = [(at, label) for at, label in kept if _is_counter(label)]
        last, self.numbers = self.numbers, {at: int(label) for at, label in counters}
        if not counters:
            return joined, joined, False
        counting = [c for c in counters if last.get(c[0], -2) + 1 == int(c[1])]
        candidates = counting or counters
        same = [c for c in candidates if c[0] == self.counter_at]
        at = (same or [min(candidates, key=lambda c: (len(c[1]), c[0]))])[0][0]
        self.counter_at = at
        return joined, b"".join(label for pos, label in kept if pos != at), True

    def add(self, left: tuple[bytes, ...]) -> tuple[list[bytes], bytes]:
        """Take one query's labels; return the regions to search, and its data string."""
        self.window.append(left)
        self.size += sum(len(label) for label in left)
        while self.size > DNS_REASSEMBLY and len(self.window) > 1:
            self.size -= sum(len(label) for label in self.window.popleft())
        if self._learn(left):
            # Which labels are data changed: search the window again as it reads now.
            self.joined = self.uncounted = b""
            self.counted = False
            self.counter_at = None
            self.numbers = {}
            regions = self._extend(self.window)
        else:
            regions = self._extend((left,))
        data, _, _ = self._data(left)
        return regions, data.lower()

    def rebuild(self, window: Sequence[tuple[bytes, ...]]) -> list[bytes]:
        """Read the window anew (which labels are data changed); return the regions."""
        self.window = deque(window)
        self.size = sum(len(label) for left in self.window for label in left)
        self.positions = {}
        for left in self.window:
            self._learn(left)
        self.joined = self.uncounted = b""
        self.counted = False
        self.counter_at = None
        self.numbers = {}
        return self._extend(self.window)

    def static_at(self, left: tuple[bytes, ...]) -> frozenset[int]:
        """Return the positions of ``left`` whose label is this stream's static one."""
        n = len(left)
        return frozenset(
            n - 1 - i
            for i, label in enumerate(left)
            if (p := self.positions.get(n - 1 - i)) is not None
            and p.static
            and p.value == label.lower()
        )

    def _extend(
        self, queries: Sequence[tuple[bytes, ...]] | deque[tuple[bytes, ...]]
    ) -> list[bytes]:
        joined, uncounted = [self.joined], [self.uncounted]
        for left in queries:
            every, without, counted = self._data(left)
            joined.append(every)
            uncounted.append(without)
            self.counted |= counted
        added = sum(len(b) for b in joined) - len(self.joined)
        full = b"".join(joined)
        regions = [full[-(added + SCAN_OVERLAP) :]] if added else []
        self.joined = full[-SCAN_OVERLAP:]
        full_uncounted = b"".join(uncounted)
        added_uncounted = len(full_uncounted) - len(self.uncounted)
        if self.counted and added_uncounted:
            region = full_uncounted[-(added_uncounted + SCAN_OVERLAP) :]
            if region not in regions:
                regions.append(region)
        self.uncounted = full_uncounted[-SCAN_OVERLAP:]
        return regions


Streams = OrderedDict[tuple[str, int | None, bytes], "_Stream"]
# The parent domain of a process's stream across parent domains.
ANY_PARENT = b"*"


@dataclass(frozen=True)
class FlowResult:
    """What following one query found: decoys (names, places), and whether it is a tunnel."""

    seen: list[str]
    where: list[str]  # "dns:joined+<encoding>", one per decoy in ``seen``
    tunnel: bool
    # Streams of this query's check/phase forgotten so far, when the query continues one
    # of them (0 otherwise): what it completed may have begun in what was forgotten.
    forgotten: int = 0


# Streams forgotten are remembered by one bit each of a table this large: a query that
# comes back to one is named (``FlowResult.forgotten``). A collision names a query that
# lost nothing: the table fails loud, never silent, and stays 256 KiB whatever is asked.
FORGOTTEN_BITS = 1 << 21


class NameFlow:
    """Follow query names per asker and parent domain (see the module's docstring)."""

    def __init__(self, matcher: DecoyMatcher, *, max_streams: int = DNS_STREAMS) -> None:
        """Search with ``matcher``; keep at most ``max_streams`` streams (the latest used)."""
        self.matcher = matcher
        self.max_streams = max_streams
        # Streams by parent domain alone, by process too, and by process across parent
        # domains, each kind kept apart: a process per look-up (curl in a loop) forgets
        # other processes' streams only.
        self._kinds: tuple[Streams, Streams, Streams] = (
            OrderedDict(),
            OrderedDict(),
            OrderedDict(),
        )
        # Each asker's last parent domain: a second one starts its stream across them.
        self._last_parent: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self.evicted = 0  # streams forgotten to stay within max_streams
        self.evicted_by_label: dict[str, int] = {}
        self._forgotten = bytearray(FORGOTTEN_BITS // 8)
        self._order = {d.name: i for i, d in enumerate(matcher.decoys)}

    def _bit(self, key: tuple[str, int | None, bytes]) -> tuple[int, int]:
        at = hash(key) % FORGOTTEN_BITS
        return at >> 3, 1 << (at & 7)

    @property
    def streams(self) -> dict[tuple[str, int | None, bytes], _Stream]:
        """Return every stream followed now."""
        return {**self._kinds[0], **self._kinds[1], **self._kinds[2]}

    @staticmethod
    def _kind(key: tuple[str, int | None, bytes]) -> int:
        return 0 if key[1] is None else 2 if key[2] == ANY_PARENT else 1

    def _stream(self, key: tuple[str, int | None, bytes]) -> tuple[_Stream, bool]:
        """Return the stream of ``key`` and whether it was forgotten before (now anew)."""
        kind = self._kind(key)
        streams = self._kinds[kind]
        stream = streams.get(key)
        if stream is not None:
            streams.move_to_end(key)
            return stream, False
        byte, bit = self._bit(key)
        forgotten = bool(self._forgotten[byte] & bit)
        stream = streams[key] = _Stream(tunnel=kind != 1)
        while len(streams) > self.max_streams:
            old, _ = streams.popitem(last=False)
            self.evicted += 1
            self.evicted_by_label[old[0]] = self.evicted_by_label.get(old[0], 0) + 1
            byte, bit = self._bit(old)
            self._forgotten[byte] |= bit
        return stream, forgotten

    def follow(
        self,
        label: str,
        pid: int | None,
        labels: Sequence[bytes],
        qtype: int = 1,
        retry: bool = False,
    ) -> FlowResult:
        """Take one query (``pid``: its asker, None when unknown); return what it completed.

        ``retry``: the name was asked with the search domain appended (``labels`` are
        without it), so right after the same name it is the same look-up, whatever type.
        """
        labels = tuple(label for label in labels if label)
        parent_n = registrable_length(labels)
        left = labels[: len(labels) - parent_n]
        if not left:
            return FlowResult([], [], False)
        parent = b".".join(labels[len(labels) - parent_n :]).lower()
        keys: list[tuple[str, int | None, bytes]] = [(label, None, parent)]
        across_forgotten = False
        if pid is not None:
            keys.append((label, pid, parent))
            across, across_forgotten = self._across(label, pid, parent)
            if across is not None:
                keys.append(across)
        searched: dict[bytes, dict[str, str]] = {}
        hits: dict[str, str] = {}
        tunnel = False
        resumed = False
        zone_changed = False  # the labels static under this parent changed with this query
        for key in keys:
            stream, forgotten = self._stream(key)
            if key[1] is None:
                # The parent domain's stream holds its tunnel count, and this process's
                # data unless another process asked under it since.
                resumed |= forgotten
                interleaved = stream.last_pid != pid
                stream.last_pid = pid
            elif key[2] == ANY_PARENT:
                resumed |= forgotten or across_forgotten
            else:
                resumed |= forgotten and interleaved
            spans_parents = key[2] == ANY_PARENT
            if stream.repeats((*left, parent) if spans_parents else left, qtype, retry):
                tunnel |= stream.tunnel is not None and stream.tunnel.marked
                continue
            if spans_parents:
                regions, data = self._add_across(stream, label, pid, parent, left, zone_changed)
            elif key[1] is not None:
                static = stream.static_at(left)
                regions, data = stream.add(left)
                zone_changed = static != stream.static_at(left)
            else:
                regions, data = stream.add(left)
            if stream.tunnel is not None:
                tunnel |= stream.tunnel.add(data)
            found: dict[str, str] = {}
            for region in regions:
                if len(region) < SLICE:
                    continue
                if region in searched:
                    found.update(searched[region])
                    continue
                searched[region] = dict(self.matcher.find(region, fold_case=True))
                found.update(searched[region])
            # A slice the last search found may still be in this one's overlap: the query
            # that completed it was named then.
            for name, encoding in found.items():
                if name not in stream.recent:
                    hits.setdefault(name, encoding)
            stream.recent = set(found)
        seen = sorted(hits, key=lambda n: self._order.get(n, len(self._order)))
        where = [f"dns:joined+{hits[n]}" for n in seen]
        count = self.evicted_by_label.get(label, 0) if resumed else 0
        return FlowResult(seen, where, tunnel, count)

    def _across(
        self, label: str, pid: int, parent: bytes
    ) -> tuple[tuple[str, int, bytes] | None, bool]:
        """Return the key of ``pid``'s stream across parent domains, once it has one, and
        whether it had been forgotten.

        It starts when the process asks under a second parent domain, seeded with what its
        stream under the first one holds (searched there already: only the joins across
        the two are new).
        """
        asker, key = (label, pid), (label, pid, ANY_PARENT)
        before = self._last_parent.get(asker)
        self._last_parent[asker] = parent
        self._last_parent.move_to_end(asker)
        while len(self._last_parent) > self.max_streams:
            self._last_parent.popitem(last=False)
        if key in self._kinds[2]:
            return key, False
        byte, bit = self._bit(key)
        if before is None or before == parent:
            # A process that crossed parent domains before its stream was forgotten.
            return (key, True) if self._forgotten[byte] & bit else (None, False)
        stream, forgotten = self._stream(key)
        first = self._kinds[1].get((label, pid, before))
        for left in first.window if first is not None else ():
            _, data = self._add_across(stream, label, pid, before, left, False)
            if stream.tunnel is not None:
                stream.tunnel.add(data)
        return key, forgotten

    def _add_across(
        self,
        stream: _Stream,
        label: str,
        pid: int | None,
        parent: bytes,
        left: tuple[bytes, ...],
        zone_changed: bool,
    ) -> tuple[list[bytes], bytes]:
        """Add one query to a process's stream across parent domains: its labels less
        those static under its own parent (a zone's ``t.one`` before ``exfil.test``), so
        the data of each parent joins; when what is static under this parent changed,
        the window is read anew. Return the regions to search and the query's data."""
        stream.asked.append((parent, left))
        if zone_changed:
            regions = stream.rebuild(
                [self._zone_free(label, pid, p, asked) for p, asked in stream.asked]
            )
            data = stream.window[-1]
        else:
            regions, _ = stream.add(self._zone_free(label, pid, parent, left))
            data = stream.window[-1]
        while len(stream.asked) > len(stream.window):
            stream.asked.popleft()
        return regions, b"".join(data).lower()

    def _zone_free(
        self, label: str, pid: int | None, parent: bytes, left: tuple[bytes, ...]
    ) -> tuple[bytes, ...]:
        """Return ``left`` less the labels static in the process's stream under ``parent``."""
        own = self._kinds[1].get((label, pid, parent))
        if own is None:
            return left
        static = own.static_at(left)
        n = len(left)
        kept = tuple(lbl for i, lbl in enumerate(left) if n - 1 - i not in static)
        return kept or left


def merge_flow(record: dict[str, Any], found: FlowResult, prefix: str = "dns:") -> None:
    """Add to a log line what following its query found (decoys, ``dns_tunnel``, a stream
    forgotten: ``unsearched``); a decoy its name held alone is named as found there."""
    for name, place in zip(found.seen, found.where, strict=True):
        if name not in record["decoy_seen"]:
            record["decoy_seen"].append(name)
            named = prefix + place.removeprefix("dns:")
            if named not in record["decoy_where"]:
                record["decoy_where"].append(named)
    if found.tunnel:
        record["dns_tunnel"] = True
    if found.forgotten and not record.get("unsearched"):
        record["unsearched"] = forgotten_reason(found.forgotten)


def forgotten_reason(count: int) -> str:
    """Return why a query continuing a forgotten stream was not searched whole."""
    return (
        f"DNS reassembly forgot this stream: {count} streams of this phase forgotten "
        f"past the limit of {DNS_STREAMS}"
    )

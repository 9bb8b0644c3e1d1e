"""The tamper record: each evidence event as one compact line in the job's log, as it happens.

A pull request that became root on the runner could rewrite the evidence before the bundle
is made, or the bundle itself. What the harness printed before that moment is already in
GitHub's hands (the runner uploads a step's output while it runs), and cannot be taken
back. So the root harness prints every evidence event as a line of its own when it sees
it, and the relay, after the run, reads the job's log and checks that the bundle holds
each one (``app_relay/runs/tamper.py``): a line the bundle does not hold is ``evidence-tamper``.

Lines say what kind of event it was and carry a digest of it, never its content: no decoy
value, no URL, no pull-request output (a host shows only its last two labels, which a
DNS-label exfiltration does not fill). Pure: formatting and parsing, shared by both sides.

    cujo-evidence <run> begin <head> <base>
    cujo-evidence <run> egress <offset> <length> <digest> <check> <route> <action> <host> [decoy]
    cujo-evidence <run> item <evidence id> <digest> <kind>
    cujo-evidence <run> end <egress log bytes>

``egress`` lines name a line of the proxy's and resolver's log by its byte offset and
length and the sha256 of its bytes (the bundle copies that log, capped); ``item`` lines
name a decoy event or an observation by its id in its check's report and the sha256 of
the item as the report holds it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from pydantic import BaseModel

PREFIX = "cujo-evidence"
DIGEST_CHARS = 32  # 128 bits of sha256: a forged line or item has to collide with it
_RUN = r"[A-Za-z0-9._-]{1,64}"
_HEX = rf"[0-9a-f]{{{DIGEST_CHARS}}}"
_WORD = r"[a-z_-]{1,40}"
# The runner prefixes each line of a job's log with its time (and the text a step printed
# may carry a BOM or \r); anything else before the prefix means it is not our line.
_STAMP = r"(?:\ufeff)?(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z )?"
_LINE = re.compile(
    rf"^{_STAMP}{PREFIX} (?P<run>{_RUN}) (?P<kind>begin|egress|item|end) (?P<rest>[^\r\n]*?)\r?$"
)
_BEGIN = re.compile(r"^(?P<head>[0-9a-f]{40}) (?P<base>[0-9a-f]{40})$")
_EGRESS = re.compile(
    rf"^(?P<offset>\d{{1,12}}) (?P<length>\d{{1,9}}) (?P<digest>{_HEX}) "
    rf"(?P<check>{_WORD}) (?P<route>{_WORD}) (?P<action>{_WORD}) (?P<host>\S{{1,80}})"
    r"(?P<decoy> decoy)?$"
)
_ITEM = re.compile(
    rf"^(?P<id>[a-z]+:(?:decoy|obs):[1-9][0-9]{{0,5}}) (?P<digest>{_HEX}) (?P<what>\S{{1,80}})$"
)
_END = re.compile(r"^(?P<bytes>\d{1,12})$")


def digest(data: bytes) -> str:
    """Return the digest a line carries for ``data``."""
    return hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]


def item_digest(item: BaseModel) -> str:
    """Return the digest of a report item (a decoy event or an observation) as JSON."""
    return digest(item.model_dump_json(by_alias=True).encode())


def shown_host(host: str) -> str:
    """Return the last two labels of ``host``: where it went, without what a label carried."""
    labels = [label for label in host.strip().rstrip(".").lower().split(".") if label]
    shown = ".".join(labels[-2:]) or "-"
    shown = re.sub(r"[^a-z0-9.:_-]", "?", shown)[:60]
    return shown if len(labels) <= 2 else f"*.{shown}"


def _token(value: object) -> str:
    text = str(value) if value is not None else "-"
    return re.sub(r"[^a-z_-]", "_", text.lower())[:40] or "-"


def begin_line(run_id: str, head_sha: str, base_sha: str) -> str:
    """Return the line that opens a run's record (before any pull-request code runs)."""
    return f"{PREFIX} {run_id} begin {head_sha} {base_sha}"


def egress_line(run_id: str, offset: int, raw: bytes) -> str:
    """Return the line for one whole line of the egress log, ``raw`` with its newline."""
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        record = {}
    flag = " decoy" if record.get("decoy_seen") else ""
    return (
        f"{PREFIX} {run_id} egress {offset} {len(raw)} {digest(raw)} "
        f"{_token(record.get('check'))} {_token(record.get('route'))} "
        f"{_token(record.get('action'))} {shown_host(str(record.get('host', '')))}{flag}"
    )


def item_line(run_id: str, evidence_id: str, item: BaseModel, what: str) -> str:
    """Return the line for a decoy event or an observation (``what``: its kind)."""
    return f"{PREFIX} {run_id} item {evidence_id} {item_digest(item)} {_token(what)}"


def end_line(run_id: str, egress_bytes: int) -> str:
    """Return the line that says the harness read the whole egress log (its size)."""
    return f"{PREFIX} {run_id} end {egress_bytes}"


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class EgressLine:
    """A line of the egress log as the job's log names it."""

    offset: int
    length: int
    digest: str
    check: str
    host: str
    decoy: bool


@dataclass(frozen=True)
class ItemLine:
    """A decoy event or an observation as the job's log names it."""

    evidence_id: str
    digest: str
    what: str


@dataclass
class Record:
    """What a job's log says one run's harness saw."""

    run_id: str
    begun: bool = False
    head_sha: str | None = None
    base_sha: str | None = None
    egress: list[EgressLine] = field(default_factory=list)
    items: list[ItemLine] = field(default_factory=list)
    ended: bool = False
    egress_bytes: int | None = None
    # Lines that start like ours, for this run, but do not parse: said on the run page.
    malformed: int = 0

    @property
    def events(self) -> int:
        """Return how many evidence events the log names."""
        return len(self.egress) + len(self.items)


def read_record(log: str, run_id: str) -> Record:
    """Return what ``log`` (a job's log, or the harness's stderr) records for ``run_id``.

    Lines of other runs and every other line are ignored; the same line twice counts once.
    """
    record = Record(run_id=run_id)
    seen: set[str] = set()
    for raw in log.splitlines():
        if PREFIX not in raw:
            continue
        m = _LINE.match(raw)
        if m is None or m["run"] != run_id:
            continue
        kind, rest = m["kind"], m["rest"]
        if (key := f"{kind} {rest}") in seen:
            continue
        seen.add(key)
        if not _take(record, kind, rest):
            record.malformed += 1
    return record


def _take(record: Record, kind: str, rest: str) -> bool:
    if kind == "begin":
        if (b := _BEGIN.match(rest)) is None:
            return False
        record.begun, record.head_sha, record.base_sha = True, b["head"], b["base"]
    elif kind == "egress":
        if (e := _EGRESS.match(rest)) is None:
            return False
        record.egress.append(
            EgressLine(
                offset=int(e["offset"]),
                length=int(e["length"]),
                digest=e["digest"],
                check=e["check"],
                host=e["host"],
                decoy=e["decoy"] is not None,
            )
        )
    elif kind == "item":
        if (i := _ITEM.match(rest)) is None:
            return False
        record.items.append(ItemLine(i["id"], i["digest"], i["what"]))
    else:
        if (n := _END.match(rest)) is None:
            return False
        record.ended, record.egress_bytes = True, int(n["bytes"])
    return True

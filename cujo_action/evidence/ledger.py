"""The tamper record: each evidence event as one compact line in the job's log, as it happens.

A pull request that became root on the runner could rewrite the evidence before the bundle
is made, or the bundle itself. What the harness printed before that moment is already in
GitHub's hands (the runner uploads a step's output while it runs), and cannot be taken
back. So the root harness prints every evidence event as a line of its own when it sees
it, and the relay, after the run, reads the job's log and checks that the bundle holds
each one (``app_relay/runs/tamper.py``): a line the bundle does not hold is ``evidence-tamper``.

Lines say what kind of event it was and carry a digest of it, never its content: no decoy
value, no URL, no pull-request output (a host shows only its last two labels, which a
DNS-label exfiltration does not fill). Pure: formatting; the relay reads the lines back
with ``reader.read_record``.

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

from pydantic import BaseModel

PREFIX = "cujo-evidence"
DIGEST_CHARS = 32  # 128 bits of sha256: a forged line or item has to collide with it


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

"""Reconcile the job's log with the bundle: evidence the log recorded must be in the bundle.

The root harness prints each evidence event to the job's log as it happens
(``cujo_action/evidence/ledger.py``); GitHub holds those lines before anything a pull request did
later could reach them. A bundle that lacks one of them — a line of the egress log gone
or changed, a decoy event or an observation missing from its report — was rewritten
after the fact: ``evidence-tamper``, critical. So is a report whose egress is not what
the bundle's own egress log makes of it. Pure: the log's text and a validated bundle in,
what does not reconcile out.

What the log cannot say is said, not guessed: a log without a record for this run (a
harness from before the record, or a log that could not be read) is a note on the run,
and the bundle stands on its own seals as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from app_relay.verdict import MAX_EVIDENCE, Finding, Verdict
from app_relay.words.inert import code_span
from cujo_action import schema
from cujo_action.evidence.reader import (
    Bundle,
    EgressCopy,
    Record,
    egress_as_logged,
    egress_faithful,
    held_lines,
    holds_as_recorded,
    read_egress_copy,
    read_record,
)
from cujo_action.schema import DecoyEvent, Observation, Report

RULE = "evidence-tamper"


@dataclass(frozen=True)
class Lost:
    """One piece of evidence the log recorded that the bundle does not hold as recorded."""

    evidence_id: str  # the report item's id, or record:egress:<offset> for a log line
    why: str


@dataclass
class Reconciled:
    """What reconciling a job's log with a bundle found."""

    events: int = 0  # evidence events the log recorded for this run
    lost: list[Lost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """Return one line for the run's timeline."""
        if self.lost:
            return (
                f"{len(self.lost)} of {self.events} evidence events in the job's log are not "
                "in the bundle as recorded: the evidence was tampered with"
            )
        said = f"{self.events} evidence events in the job's log, all in the bundle"
        return "; ".join([said, *self.notes])


def reconcile(log: str, bundle: Bundle, folder: Path) -> Reconciled:
    """Return what of the record in ``log`` the bundle (validated, unpacked in ``folder``)
    does not hold."""
    record = read_record(log, bundle.run_id)
    found = Reconciled(events=record.events)
    if record.malformed:
        found.notes.append(f"{record.malformed} record lines of this run do not parse")
    if not record.begun:
        found.notes.append("the job's log holds no tamper record for this run")
        return found
    if not record.ended:
        found.notes.append("the record has no end: the harness did not finish following its log")
    if bundle.failure is not None:
        # A failed bundle holds no evidence at all: what it cannot show is named only
        # when it is itself a block (a request that carried a decoy), so a harness that
        # failed after ordinary traffic stays an error.
        found.lost += [
            Lost(
                f"record:egress:{e.offset}",
                f"a request carrying a decoy to {e.host} ({e.check}) is in the job's log; "
                "the bundle is a failure that holds none of it",
            )
            for e in record.egress
            if e.decoy
        ]
        return found
    copy = read_egress_copy(folder)
    found.lost += _lost_egress(record, copy)
    found.lost += _lost_items(record, bundle)
    found.lost += _unfaithful_egress(bundle, copy, record)
    return found


def _lost_egress(record: Record, copy: EgressCopy) -> list[Lost]:
    """Return the recorded egress lines the bundle's copy of the log does not hold.

    A line is found by its content wherever it is (removing one line moves every later
    one; only the removed one is lost); one past the end of a copy that stopped at the
    cap counts as held when the seal says the log was that long.
    """
    data = copy.data or b""
    held = held_lines(copy)
    lost = []
    for line in record.egress:
        if line.digest in held:
            continue
        end = line.offset + line.length
        if copy.capped and end > len(data) and copy.sealed is not None and end <= copy.sealed:
            continue  # past the bundle's cap, on a log the seal says was that long
        what = f"a {'request carrying a decoy' if line.decoy else 'request'} to {line.host}"
        lost.append(
            Lost(
                f"record:egress:{line.offset}",
                f"{what} ({line.check}) is in the job's log but not in the bundle's egress log",
            )
        )
    return lost


def _items(reports: Iterable[Report]) -> dict[str, DecoyEvent | Observation]:
    items: dict[str, DecoyEvent | Observation] = {}
    for report in reports:
        items.update({event.id: event for event in report.decoy_events})
        items.update({obs.id: obs for obs in report.observations})
    return items


def _lost_items(record: Record, bundle: Bundle) -> list[Lost]:
    held = _items(bundle.reports)
    lost = []
    for line in record.items:
        check = line.evidence_id.split(":", 1)[0]
        kind = "decoy event" if ":decoy:" in line.evidence_id else "observation"
        item = held.get(line.evidence_id)
        if item is None:
            lost.append(
                Lost(line.evidence_id, f"{check}'s {kind} ({line.what}) is missing from its report")
            )
        elif not holds_as_recorded(item, line):
            lost.append(
                Lost(line.evidence_id, f"{check}'s {kind} ({line.what}) was changed in its report")
            )
    return lost


def _unfaithful_egress(bundle: Bundle, copy: EgressCopy, record: Record) -> list[Lost]:
    """Return reports whose egress is not what the bundle's egress log makes of it."""
    if bundle.plan is None:
        return []
    if copy.data is None and not record.egress:
        return []
    if copy.capped:
        return []  # capped: the harness read more than the bundle holds
    # The same streamed digest the harness made of the whole log.
    logged = egress_as_logged(
        copy.data or b"", bundle.plan.policy.egress_allow, [r.check for r in bundle.reports]
    )
    lost = []
    for report in bundle.reports:
        if not egress_faithful(logged[report.check], report):
            first = report.egress[0].id if report.egress else f"{report.check}:egress:1"
            lost.append(
                Lost(first, f"{report.check}'s egress is not what the bundle's egress log shows")
            )
    return lost


# --------------------------------------------------------------------------- the verdict


def with_tampering(verdict: Verdict, found: Reconciled) -> Verdict:
    """Return ``verdict`` blocked by one ``evidence-tamper`` finding when evidence was lost."""
    if not found.lost:
        return verdict
    cited = [lost.evidence_id for lost in found.lost][:MAX_EVIDENCE]
    many = len(found.lost)
    finding = Finding(
        id="F1",
        rule=RULE,
        severity="critical",
        check="record",
        title=(
            f"evidence tampered with: {many} event{'s' if many != 1 else ''} the job's log "
            f"recorded {'are' if many != 1 else 'is'} not in the bundle as recorded"
        ),
        evidence=cited,
    )
    others = [f.model_copy(update={"id": f"F{n}"}) for n, f in enumerate(verdict.findings, start=2)]
    # The first loss names a host the pull request chose: inert, as every summary's quote.
    summary = (
        "Blocked: the bundle does not hold what the harness recorded in the job's log as it "
        f"happened ({code_span(found.lost[0].why)}). Something rewrote the evidence after "
        "the fact."
    )
    judge = verdict.judge if verdict.model_use is not None else "deterministic"
    return Verdict(
        state="blocked",
        summary=summary,
        findings=[finding, *others],
        unproven=verdict.unproven,
        judge=judge,
        model_use=verdict.model_use,
    )


# --------------------------------------------------------------------------- no bundle

RECORD_DECOY_EGRESS = "record-decoy-egress"
RECORD_CRITICAL_EVENT = "record-critical-event"
# Observation kinds a hard rule makes critical whatever the phase and the detail: seen in
# the record, they block even when the bundle that held them is refused.
CRITICAL_KINDS: frozenset[str] = frozenset(
    {
        schema.PERSISTENCE_WRITE,
        schema.SHELL_PROFILE_WRITE,
        schema.PYTHON_STARTUP_WRITE,
        schema.SYSTEMD_UNIT_WRITE,
        schema.AUTOSTART_WRITE,
        schema.CRON_WRITE,
        schema.GIT_HOOK_WRITE,
        schema.SSH_ACCESS_WRITE,
        schema.PACKAGE_INDEX_WRITE,
        schema.TOOL_CONFIG_WRITE,
        schema.WORKFLOW_COMMAND_WRITE,
        schema.HARNESS_TAMPER,
        schema.SUDO,
        schema.PROCESS_FLOOD,
        schema.DECOY_IN_OUTPUT,
    }
)


def record_verdict(log: str, run_id: str, why: str) -> tuple[Verdict | None, dict[str, str]]:
    """Return the verdict the job's log alone supports when the bundle cannot be used.

    The bundle was refused (``why``): its reports cannot be read, but what the harness
    printed as it happened still can. A request of the head's checks that carried a decoy
    blocks (``record-decoy-egress``, citing ``record:egress:<offset>``), and so does an
    observation whose kind a hard rule makes critical in any phase, unless the base's run
    recorded the same kind (``record-critical-event``, citing the item's id). Anything
    else the record holds says nothing certain: None, and the run stays an error.
    """
    record = read_record(log, run_id)
    said: dict[str, str] = {}
    findings: list[Finding] = []
    sent = [e for e in record.egress if e.decoy and e.check in schema.CHECK_NAMES]
    if sent:
        for e in sent:
            said[f"record:egress:{e.offset}"] = (
                f"a request carrying a decoy to {e.host} ({e.check}), in the job's log"
            )
        hosts = sorted({e.host for e in sent})
        findings.append(
            Finding(
                id="F1",
                rule=RECORD_DECOY_EGRESS,
                severity="critical",
                check="record",
                title=f"a decoy secret left the sandbox (to {', '.join(hosts)}), as the job's "
                f"log recorded it: {len(sent)} request{'s' if len(sent) != 1 else ''}",
                evidence=[f"record:egress:{e.offset}" for e in sent][:MAX_EVIDENCE],
            )
        )
    at_base = {i.what for i in record.items if i.evidence_id.startswith(f"{schema.BASE_CHECK}:")}
    events = [
        i
        for i in record.items
        if i.what in CRITICAL_KINDS
        and i.what not in at_base
        and i.evidence_id.split(":", 1)[0] in schema.CHECK_NAMES
    ]
    if events:
        for i in events:
            said[i.evidence_id] = f"{i.what}, in the job's log"
        kinds = sorted({i.what for i in events})
        findings.append(
            Finding(
                id=f"F{len(findings) + 1}",
                rule=RECORD_CRITICAL_EVENT,
                severity="critical",
                check="record",
                title=f"the job's log recorded {', '.join(kinds)}",
                evidence=[i.evidence_id for i in events][:MAX_EVIDENCE],
            )
        )
    if not findings:
        return None, {}
    summary = (
        "Blocked: the sandbox's reports could not be used "
        f"({code_span(why.strip().rstrip('.'))}), but the job's log, printed by the harness as "
        "it happened, records what blocks the pull request."
    )
    verdict = Verdict(
        state="blocked", summary=summary, findings=findings, unproven=[], judge="deterministic"
    )
    return verdict, said


def described(found: Reconciled) -> dict[str, str]:
    """Return a plain description of each lost piece of evidence, by id (for the review)."""
    return {lost.evidence_id: lost.why for lost in found.lost}

"""Reconciling the job's log with the bundle (app_relay/runs/tamper.py), case by case.

Bundles are written here as the harness writes them (reports, the raw egress log, the
seal, the manifest) and read back through ``read_bundle``; the log is the tamper record
the harness would have printed for them. The whole path with the real sandbox is in
tests/e2e/test_relay_e2e.py (a bundle rewritten after the fact is blocked).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from bundlefactory import make_plan, make_report
from coordinatorworld import BASE
from relayworld import REPO, synthetic

from app_relay.decide.hits import RuleContext
from app_relay.decide.rules import apply_rules
from app_relay.runs.tamper import CRITICAL_KINDS, reconcile, record_verdict, with_tampering
from app_relay.verdict import Finding, ModelUse, Verdict
from cujo_action.evidence import bundle as harness_bundle
from cujo_action.evidence.bundle import attach_egress, write_failure, write_manifest
from cujo_action.evidence.egressdigest import read_egress
from cujo_action.evidence.ledger import begin_line, egress_line, end_line, item_line
from cujo_action.evidence.reader import EvidenceSeal, read_bundle
from cujo_action.evidence.reportfit import fit_report, report_bytes
from cujo_action.schema import (
    CHECK_NAMES,
    DecoyEvent,
    Failure,
    Observation,
    Policy,
    Report,
)

RUN, HEAD = "run-1", "c" * 40


def line(host: str, check: str = "install", *, decoy: bool = False, n: int = 0) -> bytes:
    record = {
        "ts": 1.0 + n,
        "label": f"{check}/install",
        "check": check,
        "phase": "install",
        "host": host,
        "port": 443,
        "method": "POST" if decoy else "GET",
        "url": f"https://{host}/{n}",
        "bytes_out": 10,
        "action": "sunk" if decoy else "forwarded",
        "decoy_seen": ["NPM_TOKEN"] if decoy else [],
        "decoy_where": ["body"] if decoy else [],
        "route": "proxy",
    }
    return json.dumps(record).encode() + b"\n"


READ = DecoyEvent(id="tests:decoy:1", phase="test", path="~/.npmrc", event="read", ts=2.5)
BASHRC = Observation(id="install:obs:1", kind="shell_profile_write", detail="~/.bashrc written")


class Harness:
    """Write a bundle the way run.py does, and the record it prints on the way."""

    def __init__(self, folder: Path, log_lines: list[bytes]) -> None:
        self.folder, self.log = folder, b"".join(log_lines)
        self.printed = [begin_line(RUN, HEAD, BASE)]
        offset = 0
        for raw in log_lines:
            self.printed.append(egress_line(RUN, offset, raw))
            offset += len(raw)
        self.printed.append(item_line(RUN, READ.id, READ, "decoy-read"))
        self.printed.append(item_line(RUN, BASHRC.id, BASHRC, BASHRC.kind))
        self.printed.append(end_line(RUN, offset))

    def write(self, copy: bytes | None = None, sealed: bytes | None = None) -> Path:
        out = self.folder
        out.mkdir(parents=True, exist_ok=True)
        plan = make_plan(run_id=RUN, base_sha=BASE, head_sha=HEAD, policy=Policy())
        (out / "plan.json").write_text(plan.model_dump_json(by_alias=True))
        egress = read_egress(io.BytesIO(self.log))
        for check in CHECK_NAMES:
            over: dict[str, Any] = {}
            if check == "tests":
                over["decoy_events"] = [READ]
            if check == "install":
                over["observations"] = [BASHRC]
            report = make_report(check, run_id=RUN, base_sha=BASE, head_sha=HEAD, **over)
            final = attach_egress(report, egress, proxy_ok=True)
            (out / f"{check}.json").write_text(final.dump())
        (out / "evidence").mkdir(exist_ok=True)
        data = self.log if copy is None else copy
        (out / "evidence" / "egress.jsonl").write_bytes(data)
        whole = self.log if sealed is None else sealed
        seal = EvidenceSeal(
            name="evidence/egress.jsonl",
            sha256=hashlib.sha256(whole).hexdigest(),
            bytes=len(whole),
            writers=["proxy"],
        )
        write_manifest(out, RUN, HEAD, BASE, [seal])
        return out

    def record(self) -> str:
        # As the runner shows it: each line stamped.
        return "\n".join(f"2026-11-30T19:00:00.0000000Z {p}" for p in self.printed)


def reconciled(folder: Path, log: str) -> Any:
    return reconcile(log, read_bundle(folder, run_id=RUN), folder)


def rewrite_report(folder: Path, check: str, **update: Any) -> None:
    path = folder / f"{check}.json"
    data = json.loads(path.read_text())
    data.update(update)
    path.write_text(json.dumps(data))
    manifest = json.loads((folder / "manifest.json").read_text())
    seals = [EvidenceSeal.model_validate(s) for s in manifest["evidence"]]
    write_manifest(folder, RUN, HEAD, BASE, seals)


LOG = [line("pypi.org"), line("collector.exfil.test", decoy=True, n=1), line("pypi.org", n=2)]


# --------------------------------------------------------------------------- reconcile


def test_a_bundle_the_harness_wrote_holds_everything_it_recorded(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", LOG)
    found = reconciled(harness.write(), harness.record())

    assert found.lost == []
    assert found.events == len(LOG) + 2
    assert found.notes == []
    assert found.line() == "5 evidence events in the job's log, all in the bundle"


def test_a_request_taken_out_of_the_log_is_lost_and_only_that_one(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", LOG)
    folder = harness.write(copy=LOG[0] + LOG[2], sealed=LOG[0] + LOG[2])

    found = reconciled(folder, harness.record())

    (lost,) = [x for x in found.lost if x.evidence_id.startswith("record:")]
    assert lost.evidence_id == f"record:egress:{len(LOG[0])}"
    assert "carrying a decoy" in lost.why
    assert "*.exfil.test" in lost.why or "exfil.test" in lost.why
    # The reports were made from the whole log: they no longer match the bundle's copy.
    assert {x.evidence_id.split(":")[0] for x in found.lost} >= {"record", "install"}


def test_an_item_missing_or_changed_in_its_report_is_lost(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", LOG)
    folder = harness.write()
    rewrite_report(folder, "tests", decoy_events=[])
    changed = BASHRC.model_copy(update={"detail": "nothing here"})
    rewrite_report(folder, "install", observations=[json.loads(changed.model_dump_json())])

    found = reconciled(folder, harness.record())

    assert {x.evidence_id: x.why for x in found.lost} == {
        "tests:decoy:1": "tests's decoy event (decoy-read) is missing from its report",
        "install:obs:1": "install's observation (shell_profile_write) was changed in its report",
    }


def test_a_report_whose_egress_the_log_does_not_make_is_lost(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", LOG)
    folder = harness.write()
    rewrite_report(folder, "install", egress=[])

    found = reconciled(folder, harness.record())

    (lost,) = found.lost
    assert lost.evidence_id == "install:egress:1"
    assert lost.why == "install's egress is not what the bundle's egress log shows"


def test_lines_past_a_capped_copy_are_held_when_the_seal_says_the_log_was_that_long(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # A small cap stands in for the 8 MiB one; both sides read the same constant.
    monkeypatch.setattr(harness_bundle, "MAX_EVIDENCE_LOG", len(LOG[0]))
    monkeypatch.setattr("cujo_action.evidence.reader.MAX_EVIDENCE_LOG", len(LOG[0]))
    harness = Harness(tmp_path / "b", LOG)
    folder = harness.write(copy=LOG[0])

    assert reconciled(folder, harness.record()).lost == []

    # A seal that says the log was shorter than what the record shows: those are lost.
    short = Harness(tmp_path / "c", LOG)
    folder = short.write(copy=LOG[0], sealed=LOG[0])
    lost = reconciled(folder, short.record()).lost
    assert [x.evidence_id for x in lost] == [
        f"record:egress:{len(LOG[0])}",
        f"record:egress:{len(LOG[0]) + len(LOG[1])}",
    ]


def test_a_failed_bundle_is_tamper_only_when_the_log_shows_a_request_carrying_a_decoy(
    tmp_path: Path,
) -> None:
    failure = Failure(run_id=RUN, stage="bundle", reason="a writer died", head_sha=HEAD)
    ordinary = Harness(tmp_path / "a", [LOG[0], LOG[2]])
    write_failure(ordinary.folder, failure)
    found = reconciled(ordinary.folder, ordinary.record())
    assert found.lost == []

    carried = Harness(tmp_path / "b", LOG)
    write_failure(carried.folder, failure)
    (lost,) = reconciled(carried.folder, carried.record()).lost
    assert lost.evidence_id == f"record:egress:{len(LOG[0])}"
    assert "the bundle is a failure" in lost.why


def test_without_a_record_the_bundle_stands_and_the_run_page_says_so(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", LOG)
    folder = harness.write()
    rewrite_report(folder, "tests", decoy_events=[])

    found = reconciled(folder, "2026-11-30T19:00:00Z cujo: an older harness said nothing\n")

    assert found.lost == []
    assert found.notes == ["the job's log holds no tamper record for this run"]
    # Another run's record is no record of this one.
    assert reconciled(folder, harness.record().replace(RUN, "run-2")).notes == found.notes


# --------------------------------------------------------------------------- the verdict


def test_lost_evidence_blocks_with_one_critical_finding_first(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", LOG)
    folder = harness.write()
    rewrite_report(folder, "tests", decoy_events=[])
    found = reconciled(folder, harness.record())
    before = Verdict(
        state="clean",
        summary="Nothing found.",
        judge="model",
        model_use=ModelUse(model="m", outcome="answered"),
    )
    warned = Finding(
        id="F1", rule="tests-fail", severity="warn", check="tests", title="t", evidence=["x:y:1"]
    )

    after = with_tampering(before.model_copy(update={"findings": [warned]}), found)

    assert after.state == "blocked"
    assert [(f.id, f.rule, f.severity, f.check) for f in after.findings] == [
        ("F1", "evidence-tamper", "critical", "record"),
        ("F2", "tests-fail", "warn", "tests"),
    ]
    assert after.findings[0].evidence == ["tests:decoy:1"]
    assert after.model_use == before.model_use
    assert with_tampering(before, reconciled(harness.write(), harness.record())) == before


def test_an_error_verdict_with_lost_evidence_is_blocked_not_error(tmp_path: Path) -> None:
    carried = Harness(tmp_path / "b", LOG)
    write_failure(carried.folder, Failure(run_id=RUN, stage="checks", reason="killed"))
    found = reconciled(carried.folder, carried.record())
    error = Verdict(state="error", summary="checks: killed", judge="model")

    after = with_tampering(error, found)

    assert after.state == "blocked"
    assert after.judge == "deterministic"  # no model was asked about the tampering


# --------------------------------------------------------------------------- through the relay


def test_the_relay_reads_the_job_log_and_names_one_it_cannot_read(make: Any) -> None:
    w = make()

    clean = synthetic()

    def produce(dispatch: Any, out: Path) -> str | None:
        clean(dispatch, out)
        # The job is listed, but its log is not there (GitHub answers 404 once it expired).
        w.fake.state.set_jobs(REPO, dispatch.run_id, [])
        return None

    head = w.review(1, produce)

    (check,) = w.checks(head)
    assert check["conclusion"] == "success"  # the bundle stands on its own
    (run,) = w.store.list_runs()
    unread = [e.detail for e in w.store.events(run.run_id) if e.kind == "log-unread"]
    assert len(unread) == 1
    assert "cannot be read" in unread[0]
    assert "404" in unread[0] or "Not Found" in unread[0]
    assert w.fake.state.calls("GET", r"/actions/jobs/\d+/logs$")


def test_the_relay_blocks_a_bundle_that_lost_what_its_job_log_recorded(make: Any) -> None:
    w = make()
    clean = synthetic()

    def produce(dispatch: Any, out: Path) -> str | None:
        rid = dispatch.inputs["run-id"]
        clean(dispatch, out)
        # The harness had recorded a decoy read the bundle does not hold.
        return "\n".join(
            [
                begin_line(rid, dispatch.inputs["head-sha"], dispatch.inputs["base-sha"]),
                item_line(rid, READ.id, READ, "decoy-read"),
                end_line(rid, 0),
            ]
        )

    head = w.review(2, produce)

    (check,) = w.checks(head)
    assert check["conclusion"] == "failure"
    (review,) = w.reviews()
    assert review["state"] == "CHANGES_REQUESTED"
    assert "evidence-tamper" in review["body"]
    assert "tests's decoy event (decoy-read) is missing from its report" in review["body"]
    (run,) = w.store.list_runs()
    assert run.state == "blocked"
    assert [e.kind for e in w.store.events(run.run_id)].count("tamper") == 1


def test_the_blocked_summary_quotes_the_loss_inertly(tmp_path: Path) -> None:
    """The loss names a host the pull request chose: no Markdown of its own in the summary."""
    shaped = [line("a_b_.x.test"), line("*bold*.exfil.test", decoy=True, n=1)]
    harness = Harness(tmp_path / "b", shaped)
    folder = harness.write(copy=shaped[0], sealed=shaped[0])
    found = reconciled(folder, harness.record())
    before = Verdict(state="clean", summary="Nothing found.", judge="deterministic")

    after = with_tampering(before, found)

    assert f"`{found.lost[0].why}`" in after.summary


def test_a_flooded_log_the_harness_streamed_reconciles_with_the_relays_reading(
    tmp_path: Path,
) -> None:
    # Over the report's cap: requests folded and dropped by the harness's streamed digest,
    # recomputed by the relay from the bundle's copy, must agree to the byte.
    flood = [line(f"h{n % 700}.cdn.test", n=n) for n in range(1_500)]
    flood += [line(f"s{n}.sink.test", decoy=False, n=n).replace(b'"forwarded"', b'"sunk"')
              for n in range(600)]  # fmt: skip
    harness = Harness(tmp_path / "b", [*flood, line("collector.exfil.test", decoy=True, n=9_999)])
    folder = harness.write()
    install = {r.check: r for r in read_bundle(folder, run_id=RUN).reports}["install"]
    assert install.egress[0].decoy_seen == ["NPM_TOKEN"]
    assert [c.limit for c in install.cuts] == ["report-egress"]

    assert reconciled(folder, harness.record()).lost == []

    data = json.loads((folder / "install.json").read_text())
    rewrite_report(folder, "install", egress=data["egress"][:-1])
    assert [x.evidence_id for x in reconciled(folder, harness.record()).lost] == [
        "install:egress:1"
    ]


# --------------------------------------------------------------------------- fitted reports

SPREAD = [
    line("pypi.org"),
    line("files.pythonhosted.org", n=1),
    line("registry.npmjs.org", n=2),
    line("collector.exfil.test", decoy=True, n=3),
]


def fit_install(folder: Path, **change: Any) -> None:
    """Rewrite install.json as the writer's fitting would leave it (a smaller budget)."""
    report = Report.model_validate_json((folder / "install.json").read_bytes())
    fitted = fit_report(report, budget=report_bytes(report) - 1)
    data = json.loads(fitted.dump())
    rewrite_report(folder, "install", **{"egress": data["egress"], "cuts": data["cuts"], **change})


def test_a_report_fitted_to_its_budget_still_reconciles(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", SPREAD)
    folder = harness.write()
    fit_install(folder)
    install = {r.check: r for r in read_bundle(folder, run_id=RUN).reports}["install"]
    assert len(install.egress) == 3  # one expected request left out, the decoy kept
    assert [c.limit for c in install.cuts] == ["report-bytes"]

    assert reconciled(folder, harness.record()).lost == []


def test_a_decoy_request_left_out_is_tampering_even_with_a_cut(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", SPREAD)
    folder = harness.write()
    fit_install(folder)
    data = json.loads((folder / "install.json").read_text())
    rewrite_report(folder, "install", egress=[e for e in data["egress"] if not e["decoy_seen"]])

    lost = reconciled(folder, harness.record()).lost
    assert [why.why for why in lost] == [
        "install's egress is not what the bundle's egress log shows"
    ]


def test_a_request_left_out_without_a_cut_is_tampering(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "b", SPREAD)
    folder = harness.write()
    fit_install(folder, cuts=[])

    lost = reconciled(folder, harness.record()).lost
    assert [why.why for why in lost] == [
        "install's egress is not what the bundle's egress log shows"
    ]


# --------------------------------------------------------------------------- no bundle


def printed(*lines: str) -> str:
    return "\n".join([begin_line(RUN, HEAD, BASE), *lines, end_line(RUN, 0)])


def test_a_decoy_leaving_in_the_record_blocks_without_a_bundle() -> None:
    raw = line("collector.exfil.test", decoy=True, n=1)
    log = printed(egress_line(RUN, 0, line("pypi.org")), egress_line(RUN, 120, raw))

    verdict, said = record_verdict(log, RUN, "install.json does not match its sha256")

    assert verdict is not None
    assert verdict.state == "blocked"
    (finding,) = verdict.findings
    assert (finding.rule, finding.severity, finding.check) == (
        "record-decoy-egress",
        "critical",
        "record",
    )
    assert finding.evidence == ["record:egress:120"]
    assert "*.exfil.test" in said["record:egress:120"]


def test_a_critical_event_in_the_record_blocks_unless_the_base_did_it_too() -> None:
    cron = Observation(id="tests:obs:4", kind="cron_write", detail="crontab written")
    log = printed(
        item_line(RUN, cron.id, cron, cron.kind), item_line(RUN, READ.id, READ, "decoy-read")
    )

    verdict, _said = record_verdict(log, RUN, "refused")

    assert verdict is not None
    assert [(f.rule, f.evidence) for f in verdict.findings] == [
        ("record-critical-event", ["tests:obs:4"])
    ]
    at_base = Observation(id="base:obs:1", kind="cron_write", detail="crontab written")
    both = printed(
        item_line(RUN, cron.id, cron, cron.kind), item_line(RUN, at_base.id, at_base, "cron_write")
    )
    assert record_verdict(both, RUN, "refused") == (None, {})


def test_a_record_with_nothing_that_blocks_leaves_the_error() -> None:
    base_sent = json.dumps({"check": "base", "host": "x.exfil.test", "decoy_seen": ["K"]})
    log = printed(
        egress_line(RUN, 0, line("pypi.org")),
        egress_line(RUN, 99, base_sent.encode() + b"\n"),  # the base's doing, not the head's
        item_line(RUN, READ.id, READ, "decoy-read"),  # a warning at most
    )
    assert record_verdict(log, RUN, "refused") == (None, {})
    assert record_verdict("", RUN, "refused") == (None, {})


@pytest.mark.parametrize("kind", sorted(CRITICAL_KINDS))
def test_each_kind_the_record_blocks_on_is_critical_by_the_rules_in_any_phase(kind: str) -> None:
    """An oracle from the rules themselves: the kind alone makes a critical finding."""
    for phase in ("install", "test"):
        obs = Observation(id="tests:obs:1", kind=kind, detail="d", phase=phase)  # type: ignore[arg-type]
        report = make_report("tests", run_id=RUN, base_sha=BASE, head_sha=HEAD, observations=[obs])
        findings = apply_rules([report], RuleContext())
        assert any(f.severity == "critical" for f in findings), (kind, phase, findings)

"""Build valid reports for the rule and judge tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app_relay.decide.hits import RuleContext
from app_relay.decide.rules import RULES, apply_rules
from app_relay.verdict import Finding
from cujo_action.schema import (
    CheckName,
    CommandResult,
    Cut,
    DecoyEvent,
    DecoyReader,
    Egress,
    Observation,
    Phase,
    Report,
)
from cujo_action.watch.persistence import Entry, changes, places

# The HOME-relative checkout the harness watches (actionsjob.py).
WORKSPACE = "work/app/app"
RUN_ID = "run-1"
HEAD = "a" * 40
BASE = "b" * 40
STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

# The phase a check's evidence is in unless a test says otherwise.
PHASE: dict[CheckName, Phase] = {
    "install": "install",
    "detonation": "import",
    "tests": "test",
    "probes": "probe",
    "smoke": "smoke",
}


class ReportFactory:
    """Make evidence with ids like `install:egress:1`, numbered per check and kind."""

    def __init__(self) -> None:
        self._seen: Counter[tuple[str, str]] = Counter()

    def _id(self, check: CheckName, kind: str) -> str:
        self._seen[check, kind] += 1
        return f"{check}:{kind}:{self._seen[check, kind]}"

    def egress(
        self,
        check: CheckName,
        host: str,
        *,
        phase: Phase | None = None,
        decoys: Sequence[str] = (),
        where: Sequence[str] = (),
        action: str = "sunk",
        method: str = "GET",
        port: int = 443,
        route: str = "proxy",
        dns_name: str = "",
        unsearched: str = "",
        opaque: bool = False,
        dns_tunnel: bool = False,
        bytes_out: int = 120,
        **process: Any,
    ) -> Egress:
        return Egress(
            id=self._id(check, "egress"),
            phase=phase or PHASE[check],
            host=host,
            port=port,
            method=method,
            url=f"https://{host}/x",
            bytes_out=bytes_out,
            action=action,  # type: ignore[arg-type]
            decoy_seen=list(decoys),
            decoy_where=list(where),
            route=route,  # type: ignore[arg-type]
            dns_name=dns_name,
            unsearched=unsearched,
            opaque=opaque,
            dns_tunnel=dns_tunnel,
            **process,  # pid, exe, cmdline, parents, ts
        )

    def decoy(
        self,
        check: CheckName,
        path: str,
        event: str = "read",
        *,
        phase: Phase | None = None,
        exe: str | None = None,
        **process: Any,
    ) -> DecoyEvent:
        return DecoyEvent(
            id=self._id(check, "decoy"),
            phase=phase or PHASE[check],
            path=path,
            event=event,  # type: ignore[arg-type]
            exe=exe,
            **process,  # pid, cmdline, parents, ts
        )

    def observation(
        self,
        check: CheckName,
        kind: str,
        detail: str = "",
        *,
        path: str | None = None,
        phase: Phase | None = None,
    ) -> Observation:
        return Observation(
            id=self._id(check, "obs"), kind=kind, detail=detail, path=path, phase=phase
        )

    def cut(
        self,
        check: CheckName,
        limit: str,
        *,
        dropped: int = 1,
        kept: int = 0,
        phase: Phase | None = None,
        hides_danger: bool = True,
        detail: str = "",
    ) -> Cut:
        return Cut(
            id=self._id(check, "cut"),
            limit=limit,  # type: ignore[arg-type]
            phase=phase,
            kept=kept,
            dropped=dropped,
            hides_danger=hides_danger,
            detail=detail,
        )

    @staticmethod
    def reader(
        pid: int,
        path: str,
        *,
        phase: Phase = "test",
        ts: float | None = None,
        parents: Sequence[int] = (),
    ) -> DecoyReader:
        return DecoyReader(pid=pid, phase=phase, path=path, ts=ts, parents=list(parents))

    @staticmethod
    def command(
        cmd: str,
        *,
        phase: Phase = "test",
        exit_code: int | None = 0,
        timed_out: bool = False,
        **step: Any,
    ) -> CommandResult:
        return CommandResult(
            cmd=cmd, phase=phase, exit_code=exit_code, timed_out=timed_out, duration_s=900.0,
            **step,  # workflow_step, started_ts, sandbox_pid
        )  # fmt: skip

    def persisted(
        self, check: CheckName, files: dict[str, tuple[str | None, str | None]]
    ) -> list[Observation]:
        """Return the observations the harness makes of files (shown path → before, after).

        The harness's own judgement (``cujo_action/watch/persistence.py``) decides what counts,
        so each rule is tested on what a check would really report.
        """
        found = places(WORKSPACE)
        before = {p: Entry(f"fp:{b}", b) for p, (b, _) in files.items() if b is not None}
        after = {p: Entry(f"fp:{a}", a) for p, (_, a) in files.items() if a is not None}
        return [
            self.observation(check, c.kind, c.detail, path=c.path)
            for c in changes(before, after, found)
        ]

    @staticmethod
    def report(
        check: CheckName,
        *,
        status: str = "ok",
        summary: str = "",
        isolation: str = "full",
        evidence_complete: bool = True,
        egress: Sequence[Egress] = (),
        decoy_events: Sequence[DecoyEvent] = (),
        observations: Sequence[Observation] = (),
        commands: Sequence[CommandResult] = (),
        cuts: Sequence[Cut] = (),
        decoy_readers: Sequence[DecoyReader] = (),
    ) -> Report:
        return Report(
            run_id=RUN_ID,
            check=check,
            head_sha=HEAD,
            base_sha=BASE,
            status=status,  # type: ignore[arg-type]
            summary=summary,
            started_at=STARTED,
            finished_at=STARTED + timedelta(seconds=30),
            isolation=isolation,  # type: ignore[arg-type]
            evidence_complete=evidence_complete,
            commands=list(commands),
            egress=list(egress),
            decoy_events=list(decoy_events),
            observations=list(observations),
            cuts=list(cuts),
            decoy_readers=list(decoy_readers),
        )


@pytest.fixture
def make() -> ReportFactory:
    return ReportFactory()


@pytest.fixture
def ctx() -> RuleContext:
    return RuleContext()


@pytest.fixture
def run_rule() -> Callable[..., list[Finding]]:
    """Return the findings one rule contributes, going through the RULES registry."""

    def run(
        rule_id: str, reports: Sequence[Report], ctx: RuleContext | None = None
    ) -> list[Finding]:
        assert rule_id in {rule.id for rule in RULES}, f"{rule_id} is not registered"
        found = apply_rules(reports, ctx or RuleContext())
        return [f for f in found if f.rule == rule_id]

    return run


class PersistenceRule:
    """Test one persistence rule on what the harness would report of file writes."""

    def __init__(self, make: ReportFactory, run_rule: Callable[..., list[Finding]]) -> None:
        self.make, self.run_rule = make, run_rule

    def fires(
        self, rule: str, kind: str, writes: dict[str, tuple[str | None, str | None]]
    ) -> list[Finding]:
        """Assert each write is one critical finding of ``rule`` naming its path."""
        seen = self.make.persisted("install", writes)
        assert {o.kind for o in seen} == {kind}
        assert len(seen) == len(writes)
        findings = self.run_rule(rule, [self.make.report("install", observations=seen)])
        assert [f.evidence for f in findings] == [[o.id] for o in seen]
        assert all(f.severity == "critical" and f.check == "install" for f in findings)
        for finding, write in zip(findings, seen, strict=True):
            assert write.path is not None
            assert write.path in finding.title
        return findings

    def misses(self, rule: str, harmless: dict[str, tuple[str | None, str | None]]) -> None:
        """Assert the harness reports none of these, and the rule ignores other kinds."""
        assert self.make.persisted("tests", harmless) == []
        other = self.make.observation("tests", "file_write", path="~/.bashrc")
        assert self.run_rule(rule, [self.make.report("tests", observations=[other])]) == []


@pytest.fixture
def persistence_rule(
    make: ReportFactory, run_rule: Callable[..., list[Finding]]
) -> PersistenceRule:
    return PersistenceRule(make, run_rule)

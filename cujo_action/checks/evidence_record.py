"""Record what one check saw as observations and cuts, each written to the tamper record.

``EvidenceRecord`` is the base of ``CheckRun``: the harness runs the commands and reads
the watchers; this turns what they saw (decoys printed, privilege tools run, packets
refused, the decoy evidence's caps) into observations, and each limit reached into a
cut (``limits.py``) that marks the evidence incomplete when it could hide danger.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from pathlib import Path

from cujo_action import limits
from cujo_action.arm.context import Armed
from cujo_action.checks.decoy_record import DecoyRecord
from cujo_action.evidence.ledger import item_line
from cujo_action.evidence.recorder import emit
from cujo_action.evidence.reportfit import with_cut
from cujo_action.limits import LimitId
from cujo_action.net.namebook import NameBook
from cujo_action.net.ns.netns import drops_for
from cujo_action.sandbox.jail import Outcome
from cujo_action.sandbox.phase_namespace import NetnsError
from cujo_action.schema import (
    DECOY_IN_OUTPUT,
    MAX_OBSERVATIONS,
    MAX_TEXT,
    REFUSED_PACKETS,
    SANDBOX_PROBE,
    SUDO,
    CheckName,
    Cut,
    Observation,
    Phase,
    clip,
)
from cujo_action.watch.execguard import ExecGuard, PrivilegedExec
from cujo_action.watch.persistence import SCHEDULERS
from cujo_action.watch.sandbox_probing import is_probe
from cujo_action.watch.watcher import DecoyWatcher


def tool_kind(tool: str) -> str:
    """Return the observation an exec of a watched tool is: cron, a probe, or sudo."""
    if tool in SCHEDULERS:
        return SCHEDULERS[tool]
    return SANDBOX_PROBE if is_probe(tool) else SUDO


class EvidenceRecord:
    """One check's observations and cuts, and whether its evidence is complete."""

    def __init__(self, check: CheckName, run_id: str) -> None:
        self.check, self._run_id = check, run_id
        self.observations: list[Observation] = []
        self.cuts: list[Cut] = []
        self.dropped_observations = 0
        self.evidence_complete = True

    def say(self, message: str) -> None:
        """Show progress on stderr (the orchestrator passes it through)."""
        print(f"cujo: {self.check}: {message}", file=sys.stderr, flush=True)

    def observe(
        self,
        kind: str,
        detail: str,
        *,
        path: str | None = None,
        line: int | None = None,
        phase: Phase | None = None,
    ) -> str:
        """Record an observation and return its evidence id."""
        if len(self.observations) >= MAX_OBSERVATIONS:
            self.dropped_observations += 1
            return ""
        oid = f"{self.check}:obs:{len(self.observations) + 1}"
        observation = Observation(
            id=oid,
            kind=clip(kind, 200),
            detail=clip(detail, MAX_TEXT),
            path=clip(path, MAX_TEXT) if path else None,
            line=line,
            phase=phase,
        )
        self.observations.append(observation)
        emit(item_line(self._run_id, oid, observation, observation.kind))
        return oid

    def cut(
        self,
        limit: LimitId,
        *,
        dropped: int,
        kept: int = 0,
        detail: str = "",
        phase: Phase | None = None,
        hides_danger: bool | None = None,
    ) -> str:
        """Record that a limit on evidence was reached (``limits.py``) and return its id.

        ``hides_danger`` defaults to the limit's own; a cut that could hide danger marks
        the evidence incomplete (the check is then unproven, naming the limit).
        """
        self.cuts = with_cut(
            self.cuts, self.check, limit,
            dropped=dropped, kept=kept, detail=detail, phase=phase, hides_danger=hides_danger,
        )  # fmt: skip
        if self.cuts[-1].hides_danger:
            self.evidence_complete = False
        return self.cuts[-1].id

    def _observe_printed(self, outcome: Outcome, shown: str, phase: Phase) -> None:
        """Record each decoy a command printed (one per decoy and stream), and any part of
        its output the search could not decode; never the decoy or the output itself."""
        encodings: dict[tuple[str, str], list[str]] = {}
        for printed in outcome.printed:
            encodings.setdefault((printed.name, printed.stream), []).append(printed.encoding)
        for (name, stream), found in encodings.items():
            self.say(f"{phase}: a decoy ({name}) was printed to {stream}")
            self.observe(
                DECOY_IN_OUTPUT,
                f"{name} ({', '.join(found)}) in the {stream} of `{clip(shown, 200)}`",
                phase=phase,
            )
        if outcome.output_unsearched:
            written = outcome.stdout_bytes + outcome.stderr_bytes
            self.cut(
                "output-search",
                dropped=outcome.output_unsearched,
                kept=max(written - outcome.output_unsearched, 0),
                detail=f"{outcome.output_unsearched} bytes of the output of "
                f"`{clip(shown, 200)}` were decoded only in part (the decode budget ran out)",
                phase=phase,
            )

    def _observe_guarded(self, guard: ExecGuard | None) -> None:
        """Record the execs of watched tools the guard saw, one per tool and phase."""
        if guard is None:
            return
        seen: dict[tuple[str, str], list[PrivilegedExec]] = {}
        for ev in guard.stop():
            seen.setdefault((ev.path, ev.phase), []).append(ev)
        if not guard.complete:
            self.cut("exec-guard-queue", dropped=1, detail="the exec guard lost events")
        for (path, phase), evs in seen.items():
            first = evs[0]
            caller = first.exe or "?"
            if first.cmdline:
                caller += f": `{clip(first.cmdline, 200)}`"
            more = f" (and {len(evs) - 1} more times)" if len(evs) > 1 else ""
            self.observe(
                tool_kind(path),
                f"{path} was executed by pid {first.pid} (from {caller}) during {phase}{more}",
                path=path,
            )

    def _observe_refused(self, armed: Armed, labels_used: Collection[str]) -> None:
        """Record the packets each namespace this check used refused (proxy bypasses)."""
        book = NameBook(Path(armed.dns_names)) if armed.dns_names else None
        for name in sorted(labels_used):
            ns = armed.netns.get(name)
            if ns is None:
                continue
            try:
                drops = drops_for(ns)
            except (NetnsError, OSError, ValueError) as exc:
                self.evidence_complete = False
                self.observe("harness_error", f"could not read {ns}'s refused packets: {exc}")
                continue
            phase = name.split("/", 1)[1]
            if len(drops.refused) > limits.REFUSED_PACKETS:
                self.cut(
                    "refused-packets",
                    dropped=len(drops.refused) - limits.REFUSED_PACKETS,
                    kept=limits.REFUSED_PACKETS,
                    detail=f"refused packets during {phase}",
                    phase=phase,  # type: ignore[arg-type]
                )
            for refused in drops.refused[: limits.REFUSED_PACKETS]:
                # An address the resolver made up for a name is shown with that name.
                host = book.name_of(refused.dst) if book is not None else None
                aimed = f" ({host})" if host else ""
                self.observe(
                    REFUSED_PACKETS, f"{refused}{aimed} during {phase} (bypassing the proxy)"
                )
            if drops.ipv6_packets:
                self.observe(
                    REFUSED_PACKETS, f"refused: {drops.ipv6_packets} IPv6 packets during {phase}"
                )

    def _cut_decoys(self, watcher: DecoyWatcher, decoys: DecoyRecord) -> None:
        """Name what the decoy evidence's caps left out (``decoy_record``)."""
        coalesced = watcher.coalesced
        if decoys.dropped:
            also = f"; {coalesced} more accesses past the first processes" if coalesced else ""
            self.cut(
                "report-decoy-events",
                dropped=decoys.dropped,
                kept=len(decoys.kept),
                detail="repeated readers past the report's room; every reader's pid is in "
                f"decoy_readers{also}",
            )
        if watcher.readers_dropped:
            self.cut(
                "decoy-readers",
                dropped=watcher.readers_dropped,
                kept=len(watcher.readers),
                detail="processes that read a decoy past the readers' cap",
            )

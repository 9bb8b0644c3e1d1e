"""Fit a report to what its reader accepts, and read one that does not fit without refusing it.

The writer's side (``fit_report``): a report over ``limits.REPORT_BYTES`` is trimmed from
its least important evidence until it fits — expected egress first, then the commands'
output tails, then the readers' paths, then warn-making egress, then critical-making
egress, then decoy readers — and never a decoy-bearing request, a decoy event or an
observation (the job's log holds each of those by digest, ``app_relay/runs/tamper.py``). What
was trimmed is one ``report-bytes`` cut; it hides danger (the check is unproven) when
anything beyond expected egress, output tails and reader paths went.

The reader's side (``parse_report``): a report whose hashes matched is read even when it
is over a cap — over-long strings clipped, list items past their caps dropped from the
end (writers put the important ones first) — and says so with a cut. Only what cannot be
trusted at all is refused: not JSON, the wrong schema, a field of the wrong kind, or a
report bound to another run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from cujo_action import limits
from cujo_action.limits import REPORT_READ, LimitId, MiB
from cujo_action.net.egress import (
    RANK_EXPECTED,
    RANK_RUNTIME_REGISTRY_WRITE,
    RANK_RUNTIME_UNEXPECTED,
    RANK_UNREAD,
    egress_rank,
)
from cujo_action.schema import (
    MAX_CUTS,
    MAX_REPORT_BYTES,
    MAX_TEXT,
    REGISTRY_HOSTS,
    Cut,
    Egress,
    Phase,
    Report,
    ReportError,
    clip,
    was_clipped,
)

# The most a reader takes in at all (the relay's archive already caps a file at 8 MiB):
# past this, a report is not one any Cujo writer made, and it is refused.
MAX_REPORT_READ: Final = REPORT_READ
# What the tails and reader paths shrink to when a report is over its budget.
_SHORT_TAIL: Final = 1_000
_SHORT_PATH: Final = 64
_READ_ROUNDS: Final = 8


def report_bytes(report: Report) -> int:
    """Return how many bytes the report takes as written (``Report.dump``)."""
    return len(report.dump().encode())


def with_cut(
    cuts: list[Cut],
    check: str,
    limit: LimitId,
    *,
    dropped: int,
    kept: int = 0,
    detail: str = "",
    phase: Phase | None = None,
    hides_danger: bool | None = None,
) -> list[Cut]:
    """Return ``cuts`` with one more (``limits.py``), the new one last.

    ``hides_danger`` defaults to the limit's own. Past ``MAX_CUTS`` the last cut gives
    way to the new one, which keeps its ``hides_danger`` if that was set: a limit reached
    is never silent.
    """
    hides = limits.LIMITS[limit].hides_danger if hides_danger is None else hides_danger
    kept_cuts = list(cuts)
    if len(kept_cuts) >= MAX_CUTS:
        hides = hides or kept_cuts.pop().hides_danger
    cut = Cut(
        id=f"{check}:cut:{len(kept_cuts) + 1}",
        limit=limit,
        phase=phase,
        kept=kept,
        dropped=dropped,
        detail=clip(detail, MAX_TEXT),
        hides_danger=hides,
    )
    return [*kept_cuts, cut]


def add_cut(
    report: Report,
    limit: LimitId,
    *,
    dropped: int,
    kept: int = 0,
    detail: str = "",
    phase: Phase | None = None,
    hides_danger: bool | None = None,
) -> Report:
    """Return ``report`` with one more cut (``limits.py``), incomplete when it hides danger.

    When the report already holds ``MAX_CUTS`` cuts the last one gives way, keeping its
    ``hides_danger`` if that was set: a limit reached is never silent.
    """
    cuts = with_cut(
        list(report.cuts), report.check, limit,
        dropped=dropped, kept=kept, detail=detail, phase=phase, hides_danger=hides_danger,
    )  # fmt: skip
    complete = report.evidence_complete and not cuts[-1].hides_danger
    return report.model_copy(update={"cuts": cuts, "evidence_complete": complete})


def clipped_fields(report: Report) -> int:
    """Return how many strings of the report's items a writer clipped (they carry the mark)."""
    found = 0
    for item in (*report.egress, *report.decoy_events, *report.observations, *report.commands):
        for value in item.model_dump().values():
            values = value if isinstance(value, list) else [value]
            found += sum(1 for v in values if isinstance(v, str) and was_clipped(v))
    return found


def note_clipped_fields(report: Report) -> Report:
    """Return ``report`` with a ``report-field`` cut counting its clipped strings, if any."""
    if any(cut.limit == "report-field" for cut in report.cuts):
        return report
    count = clipped_fields(report)
    if not count:
        return report
    return add_cut(
        report,
        "report-field",
        dropped=count,
        detail=f"{count} strings (a path, a command line, a URL, output) were over their "
        "caps in bytes of JSON and were clipped where they were written",
    )


# --------------------------------------------------------------------------- writing


def _cost(item: BaseModel, depth: int) -> int:
    """Return about how many bytes ``item`` takes in an indented report at list ``depth``."""
    text = item.model_dump_json(by_alias=True, indent=2)
    return len(text.encode()) + 2 * depth * (text.count("\n") + 1) + 2


def fit_report(
    report: Report, *, budget: int = MAX_REPORT_BYTES, expected_hosts: Iterable[str] = ()
) -> Report:
    """Return ``report`` trimmed to ``budget`` bytes from its least important evidence.

    ``expected_hosts`` are the policy's ``egress_allow`` (registries are always expected).
    """
    size = report_bytes(report)
    if size <= budget:
        return report
    expected = [*REGISTRY_HOSTS, *expected_hosts]
    target = budget
    for _ in range(_FIT_ROUNDS):
        trim = _trim(report, size - target, expected)
        now = report_bytes(trim.report)
        if now <= budget:
            break
        # Item sizes are estimated (indentation); pay for the error and trim again.
        target -= now - budget + 4096
    still = "" if now <= budget else "; still over: decoy events and observations are never trimmed"
    return add_cut(
        trim.report,
        "report-bytes",
        kept=now,
        dropped=trim.dropped,
        detail=f"the report was {size} bytes, over its budget of {budget}; trimmed: "
        + ", ".join(trim.said)
        + still,
        hides_danger=trim.hides_danger,
    )


_FIT_ROUNDS: Final = 4
_WARN_RANKS: Final = frozenset({RANK_RUNTIME_REGISTRY_WRITE, RANK_RUNTIME_UNEXPECTED})


@dataclass
class _Trim:
    report: Report
    dropped: int = 0
    hides_danger: bool = False
    said: list[str] = field(default_factory=list)


def _trim(report: Report, over: int, expected: list[str]) -> _Trim:
    """Return ``report`` with at least ``over`` bytes (as estimated) of its least important
    evidence trimmed, and what went."""
    done = _Trim(report)
    egress = list(report.egress)
    ranks = {e.id: egress_rank(e.model_dump(), expected) for e in egress}

    def drop_egress(which: Callable[[int], bool], what: str) -> None:
        nonlocal over
        gone = 0
        for item in reversed(list(egress)):
            if over <= 0:
                break
            if which(ranks[item.id]) and not item.decoy_seen:
                egress.remove(item)
                over -= _cost(item, 2)
                gone += 1
        done.dropped += gone
        if gone:
            done.said.append(f"{gone} {what} requests")

    drop_egress(lambda rank: rank >= RANK_EXPECTED, "expected (registry or egress_allow)")
    commands = list(report.commands)
    for n in reversed(range(len(commands))):
        if over <= 0:
            break
        cmd = commands[n]
        out = clip(cmd.stdout_tail, _SHORT_TAIL, keep="tail")
        err = clip(cmd.stderr_tail, _SHORT_TAIL, keep="tail")
        saved = len(cmd.stdout_tail.encode()) + len(cmd.stderr_tail.encode())
        saved -= len(out.encode()) + len(err.encode())
        if saved > 0:
            update = {"stdout_tail": out, "stderr_tail": err, "output_truncated": True}
            commands[n] = cmd.model_copy(update=update)
            over -= saved
            done.said.append(f"the output tail of command {n + 1} shortened")
    readers = list(report.decoy_readers)
    if over > 0 and readers:
        before = sum(len(r.path.encode()) for r in readers)
        readers = [r.model_copy(update={"path": clip(r.path, _SHORT_PATH)}) for r in readers]
        over -= before - sum(len(r.path.encode()) for r in readers)
        done.said.append("the decoy readers' paths shortened")
    if over > 0:
        # From here on what goes could have made a finding: the check is unproven.
        done.hides_danger = True
        drop_egress(lambda rank: rank in _WARN_RANKS, "warn-making")
        drop_egress(lambda rank: rank > RANK_UNREAD, "critical-making")
    if over > 0 and readers:
        gone = 0
        while over > 0 and readers:
            over -= _cost(readers.pop(), 2)
            gone += 1
        done.dropped += gone
        done.said.append(f"the last {gone} decoy readers")
    update = {"egress": egress, "commands": commands, "decoy_readers": readers}
    done.report = report.model_copy(update=update)
    return done


# --------------------------------------------------------------------------- reading


def parse_report(raw: bytes, *, run_id: str, head_sha: str, base_sha: str) -> Report:
    """Validate one report's bytes and bind it to the run; raise ReportError with why.

    A report over a cap is read as far as it fits and carries a cut saying what was not.
    """
    if len(raw) > MAX_REPORT_READ:
        raise ReportError(
            f"report is {len(raw)} bytes, over the {MAX_REPORT_READ // MiB} MiB any writer makes"
        )
    clipped = dropped = 0
    try:
        report = Report.model_validate_json(raw)
    except ValidationError as exc:
        report, clipped, dropped = _salvage(raw, exc)
    for name, want in (("run_id", run_id), ("head_sha", head_sha), ("base_sha", base_sha)):
        if getattr(report, name) != want:
            raise ReportError(
                f"report {report.check} is bound to {name}={getattr(report, name)!r}, "
                f"not this run's {want!r}"
            )
    if dropped or len(raw) > MAX_REPORT_BYTES:
        report = add_cut(
            report,
            "report-bytes",
            kept=len(raw),
            dropped=dropped,
            detail=f"the report is {len(raw)} bytes (the cap is {MAX_REPORT_BYTES}); "
            f"read anyway: {dropped} list items past their caps dropped from the end, "
            f"{clipped} strings clipped",
            hides_danger=bool(dropped),
        )
        report = report.model_copy(update={"evidence_complete": False})
    elif clipped:
        report = add_cut(
            report,
            "report-field",
            dropped=clipped,
            detail=f"{clipped} strings were over their caps and were clipped when read",
        )
    return report


_FIXABLE: Final = frozenset({"string_too_long", "too_long"})


def _salvage(raw: bytes, first: ValidationError) -> tuple[Report, int, int]:
    """Return the report read with over-long strings clipped and long lists cut, and how
    many of each; raise ReportError when something else is wrong with it."""
    try:
        data: Any = json.loads(raw)
    except ValueError:
        raise ReportError("report is not JSON") from None
    clipped = dropped = 0
    error = first
    for _ in range(_READ_ROUNDS):
        errors = error.errors()
        unfixable = [e for e in errors if e["type"] not in _FIXABLE]
        if unfixable:
            where = ".".join(str(p) for p in unfixable[0]["loc"])
            raise ReportError(f"report fails validation at {where}: {unfixable[0]['msg']}")
        # Strings first, then lists from the deepest: an index stays valid while it is used.
        for e in sorted(errors, key=lambda e: (e["type"] == "too_long", -len(e["loc"]))):
            cap = int((e.get("ctx") or {}).get("max_length", 0))
            *path, last = e["loc"]
            try:
                parent = data
                for part in path:
                    parent = parent[part]
                value = parent[last]
            except (KeyError, IndexError, TypeError):
                continue  # inside an item already dropped
            if isinstance(value, str):
                parent[last] = clip(value, cap)
                clipped += 1
            elif isinstance(value, list):
                dropped += len(value) - cap
                parent[last] = value[:cap]
        try:
            return Report.model_validate(data), clipped, dropped
        except ValidationError as exc:
            error = exc
    raise ReportError("report cannot be read within its caps")


def egress_kept_faithfully(expected: Sequence[Egress], held: Sequence[Egress]) -> bool:
    """Return whether ``held`` is ``expected`` with only requests that carried no decoy
    left out, in the same order and each unchanged (what ``fit_report`` may do)."""
    by_id = {e.id: e for e in expected}
    order = {e.id: n for n, e in enumerate(expected)}
    last = -1
    for item in held:
        want = by_id.get(item.id)
        if want is None or want.model_dump_json() != item.model_dump_json():
            return False
        if order[item.id] <= last:
            return False
        last = order[item.id]
    kept = {e.id for e in held}
    return not any(e.decoy_seen for e in expected if e.id not in kept)

"""Run a sandbox review: prepare → arm → checks → bundle, writing everything to one folder.

The sandbox never decides: it only produces reports. A failure before the checks
(not a repository, unknown ref, malformed ``.cujo.yml``) is written as ``failure.json``
so the deciding side can say why the run is ``error``.

Nothing a run starts outlives it. Pull-request commands run in sessions of their own (so
a timeout kills a whole group), which a Ctrl-C on the terminal never reaches; so the
orchestrator makes itself a child subreaper, turns SIGINT and SIGTERM into an orderly
stop, and, however the run ends, kills every process still below it.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Literal

from cujo_action.arm.arming import Harness, Warm, arm, warm_up
from cujo_action.arm.context import Armed
from cujo_action.arm.staging import base_runs, runs
from cujo_action.checks.harness import write_report
from cujo_action.checks.privileged import NOT_RUN
from cujo_action.checks.processes import (
    CheckProcess,
    collect_report,
    descendants,
    kill_tree,
    placeholder_report,
)
from cujo_action.checks.static_check import static_report
from cujo_action.checks.zygote import Zygote
from cujo_action.evidence.bundle import (
    attach_egress,
    copy_evidence,
    report_path,
    write_failure,
    write_manifest,
)
from cujo_action.evidence.egressdigest import read_egress
from cujo_action.evidence.recorder import EgressTail, emit, record_begin
from cujo_action.evidence.timing import TIMINGS_NAME, Timeline, split_line, timing_record
from cujo_action.limits import WORKFLOW_RUN_TIME, WORKFLOWS_CHECK_TIME
from cujo_action.net.dns.resolver import ResolverError
from cujo_action.net.proxy.process import ProxyError
from cujo_action.prepare.git import PrepareError
from cujo_action.prepare.plan import prepare
from cujo_action.sandbox.boundary import BoundaryError
from cujo_action.sandbox.jail import JailError
from cujo_action.schema import CheckName, Failure, Plan, PolicyError, Report, clip, stage_mark

# prctl(2): orphans below this process are re-parented to it instead of to init.
PR_SET_CHILD_SUBREAPER = 36


def _say(message: str) -> None:
    print(f"cujo: {message}", file=sys.stderr, flush=True)


def _stage(stage: str, what: str, why: str = "") -> None:
    """Mark a stage on stderr, for the workflow step that follows it (``stages.py``)."""
    emit(stage_mark(stage, what, why))


def _stage_failed(out: Path, stage: str, failure: Failure, message: str) -> int:
    """Write ``failure`` to ``out``, say why, mark ``stage`` ended failed; return exit 3."""
    write_failure(out, failure)
    _say(message)
    _stage(stage, "ended", "failed")
    return 3


class Interrupted(BaseException):  # like KeyboardInterrupt: only its own handler catches it
    """The run was told to stop (SIGINT or SIGTERM) before it finished."""


# --------------------------------------------------------------------------- orphans and signals


def _become_subreaper() -> None:
    """Adopt orphaned descendants (Linux), so a sweep from here finds every one."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        return


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into ``Interrupted`` (once), restoring the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    signals = (signal.SIGINT, signal.SIGTERM)

    def stop(signum: int, frame: FrameType | None) -> None:
        # Once: a second signal must not cut the cleanup short.
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    previous: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {
        sig: signal.signal(sig, stop) for sig in signals
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_sandbox(
    repo: str,
    base: str,
    head: str,
    run_id: str,
    out: Path,
    *,
    workdir: Path | None = None,
    keep: bool = False,
    pull_request: int | None = None,
    token: str | None = None,
    upstream: str = "",
    base_branch: str = "",
) -> int:
    """Review head against base in the sandbox; write reports to ``out``; return 0 or 3.

    The run owns its process: it adopts orphans and, at the end, kills whatever it
    started that is still running. Call it in a process of its own, as
    ``python -m cujo_action run`` does. ``token`` is used by prepare's git alone, before
    any pull-request code runs (see ``prepare``).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        # A neutral name (tmpXXXXXXXX): the sandbox's mount table shows the folders bound
        # from here by their path (HOME, /etc/passwd), so it names neither Cujo nor the run.
        work = workdir or Path(tempfile.mkdtemp())
    except OSError as exc:
        # Nowhere to write even a failure: say so plainly, and the caller finds no bundle.
        _say(f"cannot set up the run's folders: {exc.strerror or exc} ({exc.filename or out})")
        return 3
    _become_subreaper()
    # Children this process had before the run are not the run's to kill.
    before = descendants(os.getpid())
    code = 3
    try:
        with _stop_on_signals():
            try:
                code = _run(
                    repo, base, head, run_id, out, work, pull_request, token,
                    upstream=upstream, base_branch=base_branch,
                )  # fmt: skip
            except Interrupted as exc:
                write_failure(
                    out,
                    Failure(
                        run_id=run_id,
                        stage="checks",
                        reason=f"the run was interrupted ({exc}) before it finished",
                    ),
                )
                _say(f"interrupted ({exc}); stopping everything the run started")
            except Exception as exc:  # nothing is lost: the bundle says the run fell over, and why
                write_failure(out, Failure(run_id=run_id, stage="checks", reason=f"{exc!r}"))
                _say(f"the run fell over: {exc!r}")
            finally:
                _end_of_run(before)
    except Interrupted as exc:
        # The stop came as the run ended (after its result, before or during the sweep):
        # the bundle stands as the run left it; the sweep still runs, to its end.
        _say(f"interrupted ({exc}) as the run ended; stopping everything the run started")
        _end_of_run(before)
    finally:
        if workdir is None and not keep:
            shutil.rmtree(work, ignore_errors=True)
    return code


def _end_of_run(before: set[int]) -> None:
    """Kill whatever the run left below this process; no stop may cut this short.

    Whatever escaped its check (or was left by a check killed at its deadline) was
    re-parented here: nothing the pull request started outlives the run.
    """
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    if left := kill_tree(os.getpid(), include_root=False, spare=before):
        _say(f"killed {left} process(es) left running at the end of the run")


def _run(
    repo: str,
    base: str,
    head: str,
    run_id: str,
    out: Path,
    work: Path,
    pull_request: int | None,
    token: str | None,
    *,
    upstream: str = "",
    base_branch: str = "",
) -> int:
    started = time.monotonic()
    timeline = Timeline()
    pr = f", pull request #{pull_request}" if pull_request is not None else ""
    _say(f"run {run_id}: preparing {repo} ({base} → {head}{pr})")
    _stage("prepare", "began")
    # The proxy and the resolver load, and the venv template is made, while prepare clones;
    # so does the zygote the checks are forked from, where they become this process's.
    zygote = Zygote() if Zygote.usable() else None
    try:
        with timeline.span("warm-up"):
            warm = warm_up(work / "run")
    except (ProxyError, ResolverError, BoundaryError, OSError) as exc:
        if zygote is not None:
            zygote.close()
        return _stage_failed(
            out,
            "prepare",
            Failure(run_id=run_id, stage="arm", reason=str(exc)),
            f"cannot start the sandbox's harness: {exc}",
        )
    try:
        with timeline.span("prepare"):
            plan = prepare(
                repo, base, head, run_id, work / "checkout", pull_request=pull_request,
                token=token, upstream=upstream, base_branch=base_branch,
            )  # fmt: skip
    except PolicyError as exc:
        return _stage_failed(
            out,
            "prepare",
            Failure(
                run_id=run_id,
                stage="policy",
                reason=str(exc),
                path=exc.path,
                line=exc.line,
                key=exc.key or None,
            ),
            f"policy error: {exc}",
        )
    except PrepareError as exc:
        return _stage_failed(
            out,
            "prepare",
            Failure(run_id=run_id, stage="prepare", reason=str(exc)),
            f"cannot prepare: {exc}",
        )
    else:
        # The tamper record opens before any pull-request code runs (ledger.py).
        record_begin(run_id, plan.head_sha, plan.base_sha)
        _stage("prepare", "ended", "ok")
        _say(
            f"plan ({plan.ecosystem}): install `{plan.install or '-'}`, test `{plan.test or '-'}`, "
            f"smoke `{plan.smoke or '-'}`; policy from base {plan.policy_from[:12]}"
        )
        if plan.push is not None and plan.upstream is not None:
            ran_on = (
                f"the merge {plan.push.after[:12]} of head into base"
                if plan.push.merged
                else f"head {plan.push.after[:12]} ({plan.notes[0] if plan.notes else 'no merge'})"
            )
            _say(
                f"post-merge: the checks run on {ran_on}, as its push to "
                f"{plan.upstream.repository} {plan.upstream.branch}"
            )
        return _armed(plan, out, work, timeline, started, warm, zygote)
    finally:
        warm.cancel()  # what arm did not take (it takes all once it is reached)
        if zygote is not None:
            zygote.close()


def _plan_failure(plan: Plan, stage: Literal["arm", "bundle"], reason: str) -> Failure:
    """Return why the run failed at ``stage`` once ``plan`` was made (it names the shas)."""
    return Failure(
        run_id=plan.run_id,
        stage=stage,
        reason=reason,
        head_sha=plan.head_sha,
        base_sha=plan.base_sha,
    )


def _armed(
    plan: Plan,
    out: Path,
    work: Path,
    timeline: Timeline,
    started: float,
    warm: Warm,
    zygote: Zygote | None,
) -> int:
    armed_or_failed = _arm(plan, out, work, timeline, warm)
    if isinstance(armed_or_failed, int):
        return armed_or_failed
    armed, harness = armed_or_failed
    checks = _Checks(plan, armed, out, zygote)
    tail = EgressTail(plan.run_id, Path(armed.egress_log))
    tail.start()
    try:
        reports = checks.run(harness)
    finally:
        # Interrupted (or fallen over) with checks still running: stop them before the
        # proxy, so no request they make goes unlogged.
        checks.stop()
        proxy_ok = harness.alive()
        with timeline.span("harness stop"):
            harness.stop()
        # Its writers have stopped: the rest of the log goes to the record, then its end.
        tail.stop()
        if tail.error:
            _say(f"the tamper record could not follow the egress log: {tail.error}")
    checks.timed(timeline)
    log = Path(armed.egress_log)
    _stage("bundle", "began")
    code = _bundle(
        plan, reports, harness, log, out, proxy_ok=proxy_ok, started=started, timeline=timeline
    )
    _stage("bundle", "ended", "ok" if code == 0 else "failed")
    return code


def _arm(
    plan: Plan, out: Path, work: Path, timeline: Timeline, warm: Warm
) -> tuple[Armed, Harness] | int:
    """Arm the sandbox and say its isolation; return it, or the failed stage's exit code."""
    try:
        # The sandbox users pass through the work folder to their own areas; the pristine
        # checkout stays root's, and reports stay in `out`: neither is ever visible to them.
        work.chmod(0o711)
        (work / "checkout").chmod(0o700)
        out.chmod(0o700)
        _stage("arm", "began")
        with timeline.span("arm"):
            armed, harness = arm(plan, work / "run", hide=[out, work], timeline=timeline, warm=warm)
    except (ProxyError, JailError, BoundaryError, OSError) as exc:
        return _stage_failed(
            out,
            "arm",
            _plan_failure(plan, "arm", str(exc)),
            f"cannot arm the sandbox: {exc}",
        )
    _stage("arm", "ended", f"isolation {armed.isolation}")
    if armed.isolation == "full":
        uids = sorted(a.uid for a in armed.areas.values() if a.uid is not None)
        # Without root, separate mounts stand where separate uids stand (net/ns/rootless.py).
        who = (
            f"uids {uids[0]}-{uids[-1]} (one per check)"
            if uids
            else "without root (a mount of its own per check)"
        )
        _say(f"isolation full: bubblewrap, {who}, {len(armed.netns)} network namespaces")
    else:
        _say(f"isolation PARTIAL: {armed.isolation_reason}")
    return armed, harness


# The checks that run on the install's tree, once it is in.
_LATER: tuple[CheckName, ...] = ("tests", "probes", "smoke")


class _Checks:
    """The checks of one armed run: started in their order, each waited for, each report
    read back (or written in its place for a check that does not run)."""

    def __init__(self, plan: Plan, armed: Armed, out: Path, zygote: Zygote | None) -> None:
        self.plan, self.armed, self.out, self.zygote = plan, armed, out, zygote
        self.context = Path(armed.run_dir) / "context.json"
        self.started: list[CheckProcess] = []

    def start(self, name: CheckName, budget: float) -> CheckProcess:
        check = CheckProcess(name, self.context, self.out, budget, self.zygote)
        self.started.append(check)
        return check

    def run(self, harness: Harness) -> list[Report]:
        """Run every check to its end; return their reports, the install's first."""
        timeouts = self.plan.policy.timeouts
        _say("detonation, install, workflows and the base starting")
        detonation = self.start("detonation", 2 * timeouts.install + 60 * 26)
        # What the pull request changes about CI, and what its text does to the base's:
        # read from git objects, no pull-request code runs.
        workflows = self.start("workflows", WORKFLOWS_CHECK_TIME)
        at_base, privileged = self._base(), self._privileged()
        install = self.start("install", timeouts.install)
        install.wait()
        installed = collect_report(install, self.plan)
        # The areas of the checks that run on the install's tree, staged meanwhile.
        harness.staged()
        running = self._later(installed)
        waited = [
            *running, detonation, workflows,
            *(c for c in (at_base, privileged) if c is not None),
        ]  # fmt: skip
        for check in waited:
            check.wait()
        reports = [installed] + [collect_report(c, self.plan) for c in waited]
        placeholders: list[CheckName] = [*([] if running else _LATER)]
        placeholders += [] if privileged else ["privileged"]
        return reports + [
            Report.model_validate_json(report_path(self.out, n).read_bytes()) for n in placeholders
        ]

    def _base(self) -> CheckProcess | None:
        """The base, installed and tested beside the head from the start (differential).
        CUJO_BASE=off leaves it out (to measure what it costs; nothing is then "also at
        base")."""
        timeouts = self.plan.policy.timeouts
        if base_runs():
            return self.start("base", timeouts.install + timeouts.test)
        _stage("base", "skipped", "CUJO_BASE=off")
        return None

    def _privileged(self) -> CheckProcess | None:
        """The head again in the job of a base workflow that already runs it, with secrets
        before any merge (checks/privileged.py); skipped where the base has none."""
        timeouts = self.plan.policy.timeouts
        if runs(self.plan, "privileged"):
            return self.start("privileged", timeouts.install + timeouts.test)
        _stage("privileged", "skipped", NOT_RUN)
        # Nothing to run here, which is no gap: ok, saying why (and, as every check's
        # report does, why the run's isolation is partial when it is).
        write_report(
            static_report(
                "privileged", self.armed, self.plan, lambda _plan, _record: ("ok", NOT_RUN)
            ),
            report_path(self.out, "privileged"),
        )
        return None

    def _later(self, installed: Report) -> list[CheckProcess]:
        """Start the checks that run on the install's tree, or say why they cannot."""
        timeouts = self.plan.policy.timeouts
        # The smoke check also runs the changed workflow jobs that run after the merge.
        budgets = {
            "tests": timeouts.test,
            "probes": timeouts.probes,
            "smoke": timeouts.smoke + WORKFLOW_RUN_TIME,
        }
        if installed.status in ("ok", "skipped"):
            _say(f"install {installed.status}; tests, probes and smoke starting")
            return [self.start(name, budgets[name]) for name in _LATER]
        _say(f"install {installed.status}: {installed.summary}")
        # Say why, not only the status: "failed" alone hides a timeout or a flood.
        said = installed.summary.strip().splitlines()[0] if installed.summary.strip() else ""
        why = f" ({clip(said, 300)})" if said else ""
        for name in _LATER:
            _stage(name, "skipped", f"the install {installed.status}")
            write_report(
                placeholder_report(
                    self.plan,
                    name,
                    "skipped",
                    f"not run: the repository's install {installed.status}{why}",
                ),
                report_path(self.out, name),
            )
        return []

    def stop(self) -> None:
        for check in self.started:
            check.stop()

    def timed(self, timeline: Timeline) -> None:
        for check in self.started:
            check.timed(timeline)


def _bundle(
    plan: Plan,
    reports: list[Report],
    harness: Harness,
    log: Path,
    out: Path,
    *,
    proxy_ok: bool,
    started: float,
    timeline: Timeline,
) -> int:
    """Check the evidence against its seals, attach it to the reports and write the bundle."""
    bundling = time.monotonic()
    seals = [s.entry for s in harness.seals]
    for entry in seals:
        _say(f"evidence sealed: {entry.name}, {entry.bytes} bytes, sha256 {entry.sha256}")
    # Re-hashed here, after the checks and the harness are gone: the last moment before
    # the bundle is made from the logs.
    faults = harness.evidence_faults()

    def refuse() -> int:
        failure = _plan_failure(plan, "bundle", faults.reason())
        write_failure(out, failure, seals)
        _say(f"refusing to bundle: {failure.reason}")
        return 3

    if faults.untrusted:
        # A log that changed after its seal is not read at all: nothing in it counts.
        return refuse()
    # Streamed into a bounded digest per check: a flooded log cannot exhaust memory.
    allow = plan.policy.egress_allow
    with log.open("rb") as stream:
        egress = read_egress(stream, allow, checks=[r.check for r in reports])
    for report in reports:
        final = attach_egress(report, egress, proxy_ok=proxy_ok, egress_allow=allow)
        write_report(final, report_path(out, report.check))
    (out / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2))
    copy_evidence(log, out)
    if faults.lost:
        # The reports say what was seen until a writer died; the run still fails.
        return refuse()
    timeline.add("bundle", bundling, time.monotonic())
    record = timing_record(timeline, started)
    (out / TIMINGS_NAME).write_text(json.dumps(record, indent=1))
    write_manifest(out, plan.run_id, plan.head_sha, plan.base_sha, seals)
    _say(f"run {plan.run_id}: bundle written to {out} in {time.monotonic() - started:.1f}s")
    _say(f"timings: {split_line(record)}")
    return 0

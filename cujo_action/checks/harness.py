"""Give each check process the same way to run watched commands and write its report.

A check is a separate process (``python -m cujo_action.checks.<name>``) with a fresh
context: it reads ``context.json`` and ``plan.json`` written by ``arm``, seeds its own
decoy HOME, watches it, runs its commands confined, and writes exactly one report.
Egress is attached later by ``bundle``, from the proxy's log, once the proxy has stopped.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

from cujo_action.arm.actionsjob import FILE_COMMANDS
from cujo_action.arm.context import LABELS, Armed, label, sandbox_env
from cujo_action.arm.decoyfiles import decoy_paths
from cujo_action.checks.decoy_record import DecoyRecord
from cujo_action.checks.evidence_record import EvidenceRecord, tool_kind
from cujo_action.checks.install_handoff import (
    HANDOFF_TIMEOUT,
    open_spool,
    pack_install,
    receive_command,
)
from cujo_action.checks.modules import CHECK_MODULES
from cujo_action.evidence.timing import Timeline
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.sandbox.jail import FLOOD_SHARE, NPROC_LIMIT, JailError, Outcome, run_confined
from cujo_action.sandbox.reaper import become_subreaper, namespace_inode
from cujo_action.schema import (
    MAX_COMMANDS,
    MAX_OBSERVATIONS,
    MAX_SHORT,
    MAX_TEXT,
    MEMORY_LIMIT,
    PROCESS_FLOOD,
    CheckName,
    CommandResult,
    Phase,
    Plan,
    Report,
    Status,
    clip,
    utcnow,
)
from cujo_action.watch.execguard import ExecGuard
from cujo_action.watch.filecommand_scan import FileCommandScan
from cujo_action.watch.persistence import Entry, Place, changes, places
from cujo_action.watch.persistence_scan import ScanCut, scan, venv_places
from cujo_action.watch.sandbox_probing import WATCHED_TOOLS, decoy_folders
from cujo_action.watch.watcher import DecoyWatcher

_VENV_TIMEOUT = 300.0


class CheckRun(EvidenceRecord):
    """One check's run: its HOME, its watcher, its commands and its evidence.

    The check's area was staged by ``arm`` (its HOME with decoys, its copy of the head,
    all owned by the check's own uid): from here on root only reads it through
    ``boundary.fingerprints``; everything else in it is done by that uid, confined.
    """

    def __init__(
        self, check: CheckName, armed: Armed, plan: Plan, timeline: Timeline | None = None
    ) -> None:
        super().__init__(check, plan.run_id)
        self.armed, self.plan = armed, plan
        # Where the check's set-up time goes (the bundle's timings.json): figures only.
        self.timeline = timeline or Timeline()
        self.run_dir = Path(armed.run_dir)
        self.area = armed.area(check)
        self.home = Path(self.area.home)
        inside = armed.home_inside(check)
        self.work = f"{inside}/work"  # as the commands see it
        self.src = armed.workspace(check)  # work/<repo>/<repo>, as a hosted runner has it
        # Every place a write makes code run later (persistence.py), this check's copy of
        # the head included.
        self._workspace = f"work/{armed.job.repo}/{armed.job.repo}"
        self._places = places(self._workspace)
        # Under bubblewrap each command gets an empty /tmp; without, a folder staged in HOME.
        self.scratch = "/tmp" if armed.bwrap else f"{inside}/.cache/tmp"  # noqa: S108
        self.started_at = utcnow()
        # What the commands leave behind (daemons, a fork bomb's orphans) is adopted here,
        # below this check, rather than by the run: the jail reaps and kills it, and the
        # exec guard still knows it as this check's.
        become_subreaper()
        self._labels_used: set[str] = set()
        self.phase: Phase = next(p for c, p in LABELS if c == check)
        self.commands: list[CommandResult] = []
        self.dropped_commands = 0
        # The decoy files arm planted in HOME (``decoyfiles.py``). The checkout's git config
        # is not watched: git reads it on every command, so a read says nothing; a request
        # carrying its token is still decoy egress.
        self.decoy_paths = decoy_paths(self.home, armed.decoy_objects(), armed.job)
        # What a pull-request command prints is searched for the decoys (``output.py``);
        # the harness's own commands are not the pull request's output and are not.
        self.printed_matcher = DecoyMatcher(armed.decoy_objects())
        # The files the step leaves for the runner, read after each command as they are
        # now, before any command ran (``filecommand_scan.py``).
        self._file_commands = FileCommandScan(
            self.home,
            {var: f"work/_temp/_runner_file_commands/{kind}_{armed.job.file_commands}"
             for var, kind in FILE_COMMANDS},
            self.printed_matcher,
        )  # fmt: skip
        # Read before any command of this check's uid ran: nothing else can write it.
        self._venvs: list[Place] = []
        self._scan_cuts: set[tuple[str, str]] = set()
        self._before = self._snapshot(discover=True)
        # A sudo run by this check is named by the guard while it waits to start
        # (process, caller, phase). Where the guard cannot run (not root), the watcher's
        # exec watch is all there is, and it cannot tell whose exec it saw.
        self.guard = self._start_guard()
        self.decoys = DecoyRecord(check, plan.run_id, self.home)
        # Without the guard, inotify watches the tools: through this check's own copies
        # where arm made them (context.Armed.tool_copies), so what it sees is this
        # check's exec, never another's or the machine's.
        self._tool_names = dict(armed.tool_copies.get(check, []))
        copied = set(self._tool_names.values())
        exec_watch = [
            *(Path(copy) for copy in self._tool_names),
            *(t for t in WATCHED_TOOLS if os.path.realpath(t) not in copied),
        ]
        self.watcher = DecoyWatcher(
            self.decoy_paths,
            lambda: self.phase,
            exec_watch=exec_watch if self.guard is None else (),
            # Read before any command of this check's uid ran, like the snapshot above.
            folders=decoy_folders(self.home, self.decoy_paths),
            on_event=self.decoys.on_event,
        )
        self.watcher.start()

    def _snapshot(self, *, discover: bool = False) -> dict[str, Entry]:
        """Read the persistence places (``persistence_scan``), naming each limit reached.

        ``discover``: first find the virtual environments in HOME; those found before the
        commands ran are execution points (a new one is part of whatever made it).
        """
        if discover:
            known = [
                root.removesuffix("/lib") for p in self._places if p.installs for root in p.paths
            ]
            self._venvs, found = venv_places(self.home, self._workspace, known)
            self._record_scan_cuts(found.cuts)
        scanned = scan(self.home, [*self._places, *self._venvs])
        self._record_scan_cuts(scanned.cuts)
        return scanned.entries

    def _record_scan_cuts(self, cuts: list[ScanCut]) -> None:
        """Cut each limit the scans reached, once however many scans reached it."""
        for c in cuts:
            if (c.limit, c.detail) not in self._scan_cuts:
                self._scan_cuts.add((c.limit, c.detail))
                self.cut(c.limit, dropped=c.dropped, kept=c.kept, detail=c.detail,
                         hides_danger=c.hides_danger)  # fmt: skip

    def _start_guard(self) -> ExecGuard | None:
        """Start the exec guard on this check's processes; None where it cannot run."""
        phases: dict[int, str] = {}
        if self.armed.isolation == "full":
            for name, ns in self.armed.netns.items():
                check, _, phase = name.partition("/")
                inode = namespace_inode(ns)
                if check == self.check and inode is not None:
                    phases[inode] = phase
        # Without namespaces, this check's processes are those below it.
        guard = ExecGuard(
            WATCHED_TOOLS,
            phases,
            descendants_of=None if phases else os.getpid(),
            phase=lambda: self.phase,
        )
        try:
            guard.start()
        except OSError as exc:
            self.say(f"exec guard unavailable ({exc}); watching execs without the caller")
            return None
        return guard

    @property
    def venv(self) -> str:
        """Return the check's venv as its commands see it (where installs go)."""
        return f"{self.work}/venv"

    def _harness_command(self, cmd: str, what: str, *, stdin_fd: int | None = None) -> Outcome:
        """Run a command of the harness's own as the check's uid, confined; raise on failure.

        Its output is the harness's, not the pull request's: it is not searched for decoys.
        """
        outcome = run_confined(
            cmd,
            cwd=Path(self.work),
            env=sandbox_env(self.armed, self.plan, check=self.check, phase=self.phase, venv=None),
            timeout=HANDOFF_TIMEOUT,
            confinement=self.armed.confinement(self.check, self.phase),
            stdin_fd=stdin_fd,
        )
        if outcome.exit_code != 0:
            tail = outcome.stderr_tail.strip()[-400:]
            raise JailError(f"{what} failed (exit {outcome.exit_code}): {tail}")
        return outcome

    def make_venv(self, path: str) -> None:
        """Create a virtual environment for pull-request installs, as the check's uid."""
        if self.area.venv_staged and path == self.venv:
            return  # arm copied the run's venv template here before any PR code ran
        self.say(f"creating a virtual environment at {path}")
        with self.timeline.span("venv"):
            self._harness_command(
                f"{shlex.quote(self.armed.python)} -m venv {shlex.quote(path)}",
                "creating the venv",
            )

    def venv_for(self, ecosystem: str | None) -> str | None:
        """Make this check's venv for a Python project and return it; None for Node."""
        if ecosystem == "node":
            return None
        self.make_venv(self.venv)
        return self.venv

    def run_on_install(
        self, cmd: str, *, phase: Phase, timeout: float, keep: re.Pattern[bytes] | None = None
    ) -> Outcome:
        """Receive the install's tree, then run ``cmd`` in the head checkout, watched."""
        self.receive_install()
        venv = self.venv if self.plan.ecosystem != "node" else None
        return self.run(cmd, phase=phase, timeout=timeout, cwd=self.src, venv=venv, keep=keep)

    def pack_install(self) -> None:
        """Pack the install's results (the head as installed, and its venv) for the checks
        that run on them, as the install's uid, into a spool only root can reach.

        Once, however many checks receive it: each unpacks the same bytes as its own uid
        (``install_handoff``).
        """
        if self.check != "install":
            raise JailError(f"the {self.check} check has no install to pack")
        with self.timeline.span("pack install"):
            pack_install(self.armed)

    def receive_install(self) -> None:
        """Copy the install's results into this check's HOME, uid to uid, through a file.

        The install's uid packed its tree (``tar``, ``pack_install``), this check's uid
        unpacks it (``_receive_install``: its venv of template links made to match the
        install's first): root only holds the bytes, in a file of its own, and never
        walks either tree.
        """
        with self.timeline.span("receive install"), self.watcher.own_work():
            fd = open_spool(self.armed.install_spool())
            try:
                self._harness_command(
                    receive_command(self.armed.python, self.work),
                    "unpacking the install's tree",
                    stdin_fd=fd,
                )
            finally:
                os.close(fd)
            # What came with the install (its hooks, say) is the install's to answer for.
            self._before = self._snapshot(discover=True)

    def write_file(self, path: str, data: bytes) -> None:
        """Write a new file at ``path`` (as the commands see it) as the check's uid,
        confined, from a descriptor: root opens nothing in the check's tree."""
        fd = os.memfd_create("file", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            folder = shlex.quote(path.rsplit("/", 1)[0] or "/")
            # noclobber: a file (or a link) already there is refused, never written through.
            self._harness_command(
                f"umask 077 && mkdir -p {folder} && set -C && cat > {shlex.quote(path)}",
                f"writing {path}",
                stdin_fd=fd,
            )
        finally:
            os.close(fd)

    def run(
        self,
        cmd: str,
        *,
        phase: Phase,
        timeout: float,
        cwd: str,
        venv: str | None = None,
        env: Mapping[str, str] | None = None,
        workflow_step: str = "",
        keep: re.Pattern[bytes] | None = None,
    ) -> Outcome:
        """Run one pull-request command in ``phase``, confined and watched, and record it.

        ``cwd`` and ``venv`` are paths as the command sees them; ``env`` is set over the
        step's own variables (a workflow step's ``env:``); ``workflow_step`` names the
        changed workflow's step it is; ``keep`` asks for the lines of its output that
        match (``Outcome.kept_lines``: a test runner's failing tests).
        """
        # Attribute what already happened to the phase it happened in, then switch.
        self.watcher.sync()
        self.phase = phase
        env = {
            **sandbox_env(self.armed, self.plan, check=self.check, phase=phase, venv=venv),
            **(env or {}),
        }
        shown = cmd.strip().splitlines()[0] if cmd.strip() else cmd
        self.say(f"{phase}: $ {clip(shown, 160)}")
        self._labels_used.add(label(self.check, phase))
        started_ts = time.time()
        with self.timeline.span(f"{phase} command"):
            outcome = run_confined(
                cmd,
                cwd=Path(cwd),
                env=env,
                timeout=timeout,
                confinement=self.armed.confinement(self.check, phase),
                search=self.printed_matcher,
                keep=keep,
            )
        self._observe_printed(outcome, shown, phase)
        self._observe_file_commands(f"`{clip(shown, 200)}`", phase)
        if outcome.process_flood:
            refused = (
                f"; {outcome.refused_forks} forks were refused at the limit"
                if outcome.refused_forks
                else ""
            )
            self.observe(PROCESS_FLOOD, flood_detail(clip(cmd, 200), outcome) + refused)
        if outcome.oom_kills:
            self.observe(
                MEMORY_LIMIT,
                f"`{clip(cmd, 200)}` hit the check's memory limit "
                f"({self.area.limits.memory_mb} MiB): {outcome.oom_kills} process(es) killed",
            )
        if outcome.timed_out:
            self.say(f"{phase}: timed out after {timeout:.0f}s; killed")
            self.observe("timeout", f"`{clip(cmd, 200)}` ran past its {timeout:.0f}s timeout")
        elif outcome.flooded:
            self.say(f"{phase}: output flood; killed")
            written = outcome.stdout_bytes + outcome.stderr_bytes
            self.observe(
                "output_flood",
                f"`{clip(cmd, 200)}` wrote over {written} bytes of output and was cut off",
            )
            self.cut(
                "output-flood",
                dropped=1,
                kept=written,
                detail=f"`{clip(shown, 200)}` was killed after {written} bytes of output "
                "(searched for decoys up to there)",
                phase=phase,
            )
        else:
            self.say(f"{phase}: exit {outcome.exit_code} after {outcome.duration_s:.1f}s")
        if len(self.commands) < MAX_COMMANDS:
            self.commands.append(
                CommandResult(
                    cmd=clip(cmd, MAX_TEXT),
                    phase=phase,
                    exit_code=outcome.exit_code,
                    timed_out=outcome.timed_out,
                    duration_s=outcome.duration_s,
                    stdout_tail=outcome.stdout_tail,
                    stderr_tail=outcome.stderr_tail,
                    output_truncated=outcome.flooded
                    or outcome.stdout_bytes > len(outcome.stdout_tail.encode())
                    or outcome.stderr_bytes > len(outcome.stderr_tail.encode()),
                    workflow_step=clip(workflow_step, MAX_SHORT),
                    started_ts=started_ts,
                    sandbox_pid=outcome.sandbox_pid,
                )
            )
        else:
            self.dropped_commands += 1  # cut at the end: report-commands
        return outcome

    def file_command(self, var: str) -> str:
        """Return what the file command ``var`` (``GITHUB_ENV``…) held at the last look."""
        return self._file_commands.current.get(var, "")

    def _observe_file_commands(self, after: str, phase: Phase) -> None:
        """Record what the step's file commands newly hold that counts, and limits reached."""
        with self.timeline.span("file commands"):
            look = self._file_commands.look(after)
        for written in look.written:
            self.observe(written.kind, written.detail, path=written.path, phase=phase)
        for c in look.cuts:
            self.cut(c.limit, dropped=c.dropped, kept=c.kept, detail=c.detail, phase=phase)

    def finish(self, status: Status, summary: str) -> Report:
        """Stop watching, collect decoy and persistence evidence, and build the report."""
        with self.timeline.span("finish"):
            return self._finish(status, summary)

    def _finish(self, status: Status, summary: str) -> Report:
        self.watcher.stop()
        if not self.watcher.complete:
            self.observe("watcher_incomplete", "the decoy watcher lost events (queue overflow)")
            self.cut("watcher-queue", dropped=1, detail="the decoy watcher lost events")
        self._cut_decoys(self.watcher, self.decoys)
        for ev in self.watcher.exec_events():
            tool = self._tool_names.get(ev.path, ev.path)
            if ev.pid:
                who = f" by pid {ev.pid}" + (f" ({ev.exe})" if ev.exe else "")
                said = f"{tool} was executed{who} during {ev.phase}"
            else:
                said = (
                    f"{tool} was executed during {ev.phase} "
                    "(seen without root: no pid, exe or caller)"
                )
            self.observe(tool_kind(tool), said, path=tool)
        self._observe_guarded(self.guard)
        self._observe_refused(self.armed, self._labels_used)
        # What a process left behind wrote after the last command ended.
        self._observe_file_commands("the last command", self.phase)
        if self.armed.isolation == "partial":
            user = "as a uid of its own" if self.area.uid is not None else "as the harness's user"
            view = "in bubblewrap" if self.armed.bwrap else "seeing the host's files"
            self.observe(
                "isolation_partial",
                f"ran with proxy variables only (no network namespace), {user}, {view}: "
                + (self.armed.isolation_reason or "full isolation was not available"),
            )
        for change in changes(self._before, self._snapshot(), [*self._places, *self._venvs]):
            self.observe(change.kind, change.detail, path=change.path)
        if self.dropped_commands:
            self.cut("report-commands", dropped=self.dropped_commands, kept=len(self.commands))
        if self.dropped_observations:
            self.cut(
                "report-observations", dropped=self.dropped_observations, kept=MAX_OBSERVATIONS
            )
        return Report(
            run_id=self.plan.run_id,
            check=self.check,
            head_sha=self.plan.head_sha,
            base_sha=self.plan.base_sha,
            status=status,
            summary=clip(summary, MAX_TEXT),
            started_at=self.started_at,
            finished_at=utcnow(),
            isolation=self.armed.isolation,
            evidence_complete=self.evidence_complete,
            limits=clip(self.area.limits.describe(), MAX_SHORT),
            uid=self.area.uid,
            commands=self.commands,
            decoy_events=self.decoys.kept,
            observations=self.observations,
            decoy_readers=self.decoys.readers(self.watcher.readers),
            cuts=self.cuts,
        )


def flood_detail(cmd: str, outcome: Outcome) -> str:
    """Say how ``cmd``'s processes flooded: at once near the limit, or by multiplying on."""
    near = outcome.near_limit or outcome.peak_processes >= FLOOD_SHARE * NPROC_LIMIT
    if near or outcome.refused_forks:
        return (
            f"`{cmd}` ran {outcome.peak_processes} processes at once, near the sandbox's "
            f"process limit of {NPROC_LIMIT} (a fork bomb or close to one)"
        )
    return (
        f"`{cmd}` returned and what it left went on multiplying: "
        f"{outcome.made_after_return} processes made after it returned, up to "
        f"{outcome.peak_processes} at once, below the sandbox's process limit of "
        f"{NPROC_LIMIT} (a fork bomb or close to one)"
    )


def status_of(outcome: Outcome) -> Status:
    """Return the check status a command's outcome gives (a flood is not evidence)."""
    if outcome.flooded:
        return "error"
    return "ok" if outcome.exit_code == 0 else "failed"


def write_report(report: Report, out: Path) -> None:
    """Write the report atomically, so a reader never sees half of one."""
    tmp = out.with_suffix(".tmp")
    tmp.write_text(report.dump())
    os.replace(tmp, out)


def check_main(check: CheckName, body: Callable[[CheckRun], Report]) -> int:
    """Run a check as a process: read the context, run ``body``, write one report."""
    parser = argparse.ArgumentParser(prog=f"python -m {CHECK_MODULES[check]}")
    parser.add_argument("--context", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--timings", type=Path, help="where to write the check's timeline")
    args = parser.parse_args()
    timeline = Timeline()
    started = time.monotonic()
    with timeline.span("harness start"):
        armed = Armed.model_validate_json(args.context.read_text())
        plan = Plan.model_validate_json(Path(armed.plan_path).read_text())
        run = CheckRun(check, armed, plan, timeline)
    try:
        report = body(run)
    except Exception as exc:  # a check that falls over still reports, as an error
        tail = "".join(traceback.format_exception(exc))[-1500:]
        report = run.finish("error", f"the {check} check failed inside Cujo: {exc!r}\n{tail}")
    write_report(report, args.out)
    if args.timings is not None:
        timeline.write(args.timings)
    run.say(f"{report.status} in {time.monotonic() - started:.1f}s")
    return 0

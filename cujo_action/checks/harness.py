"""Give each check process the same way to run watched commands and write its report.

A check is a separate process (``python -m cujo_action.checks.<name>``) with a fresh
context: it reads ``context.json`` and ``plan.json`` written by ``arm``, seeds its own
decoy HOME, watches it, runs its commands confined, and writes exactly one report.
Egress is attached later by ``bundle``, from the proxy's log, once the proxy has stopped.
"""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from cujo_action import limits
from cujo_action.arm.actionsjob import FILE_COMMANDS
from cujo_action.arm.arming import LABELS, Armed, label, sandbox_env
from cujo_action.arm.decoys import DecoyMatcher, decoy_files
from cujo_action.checks import _receive_install
from cujo_action.checks.decoy_record import DecoyRecord
from cujo_action.evidence.ledger import item_line
from cujo_action.evidence.recorder import emit
from cujo_action.evidence.reportfit import with_cut
from cujo_action.evidence.timing import Timeline
from cujo_action.limits import LimitId
from cujo_action.net.netns import NetnsError, drops_for
from cujo_action.net.proxy import NameBook
from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.sandbox.jail import (
    NPROC_LIMIT,
    ExecGuard,
    JailError,
    Outcome,
    PrivilegedExec,
    become_subreaper,
    namespace_inode,
    run_confined,
)
from cujo_action.schema import (
    DECOY_IN_OUTPUT,
    MAX_COMMANDS,
    MAX_OBSERVATIONS,
    MAX_SHORT,
    MAX_TEXT,
    MEMORY_LIMIT,
    PROCESS_FLOOD,
    REFUSED_PACKETS,
    SUDO,
    CheckName,
    CommandResult,
    Cut,
    Observation,
    Phase,
    Plan,
    Report,
    Status,
    clip,
    utcnow,
)
from cujo_action.watch.persistence import SCHEDULERS, Entry, Place, changes, places
from cujo_action.watch.persistence_scan import ScanCut, scan, venv_places
from cujo_action.watch.watcher import PRIVILEGE_TOOLS, DecoyWatcher

# Executables whose run is evidence itself: a way to root (sudo), or to run later (crontab).
_WATCHED_TOOLS = (*PRIVILEGE_TOOLS, *(Path(tool) for tool in SCHEDULERS))
_HANDOFF_TIMEOUT = 600.0
# The install's tree, packed as its uid: the manifest first, then every folder and every
# file the uid owns (what it does not own in its venv is the template's: named, not sent).
_MANIFEST = _receive_install.MANIFEST
_PACK = (
    "cd {work} || exit 2\n"
    "me=$(id -u)\n"
    "if [ -d venv ] && [ ! -L venv ]; then\n"
    "  find venv -xdev \\( -type d -printf 'd %P\\0' \\) -o"
    " \\( -type f ! -uid \"$me\" -printf 'f %i %P\\0' \\) > {manifest}\n"
    "else\n"
    "  : > {manifest}\n"
    "fi\n"
    "{{ printf '%s\\0' {manifest}; find {repo} ./venv -xdev \\( -type d -o -uid \"$me\" \\)"
    " -print0 2>/dev/null; }} | tar -cf - --null --no-recursion --ignore-failed-read -T -\n"
    "code=$?\n"
    "rm -f {manifest}\n"
    "exit $code\n"
)
_RECEIVE = Path(_receive_install.__file__).read_text()
_VENV_TIMEOUT = 300.0


class CheckRun:
    """One check's run: its HOME, its watcher, its commands and its evidence.

    The check's area was staged by ``arm`` (its HOME with decoys, its copy of the head,
    all owned by the check's own uid): from here on root only reads it through
    ``boundary.fingerprints``; everything else in it is done by that uid, confined.
    """

    def __init__(
        self, check: CheckName, armed: Armed, plan: Plan, timeline: Timeline | None = None
    ) -> None:
        self.check, self.armed, self.plan = check, armed, plan
        # Where the check's set-up time goes (the bundle's timings.json): figures only.
        self.timeline = timeline or Timeline()
        self.run_dir = Path(armed.run_dir)
        self.area = armed.area(check)
        self.home = Path(self.area.home)
        inside = armed.home_inside(check)
        self.work = f"{inside}/work"  # as the commands see it
        self.src = armed.workspace(check)  # work/<repo>/<repo>, as a hosted runner has it
        # Every place a write makes code run later (persistence.py), this check's copy of
        # the head and its step's file commands included.
        self._workspace = f"work/{armed.job.repo}/{armed.job.repo}"
        self._places = places(
            self._workspace,
            {var: f"work/_temp/_runner_file_commands/{kind}_{armed.job.file_commands}"
             for var, kind in FILE_COMMANDS},
        )  # fmt: skip
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
        self.observations: list[Observation] = []
        self.cuts: list[Cut] = []
        self.dropped_observations = 0
        self.dropped_commands = 0
        self.evidence_complete = True
        self.decoy_paths = [self.home / rel for rel in decoy_files(armed.decoy_objects())]
        # What a pull-request command prints is searched for the decoys (``output.py``);
        # the harness's own commands are not the pull request's output and are not.
        self.printed_matcher = DecoyMatcher(armed.decoy_objects())
        # Read before any command of this check's uid ran: nothing else can write it.
        self._venvs: list[Place] = []
        self._scan_cuts: set[tuple[str, str]] = set()
        self._before = self._snapshot(discover=True)
        # A sudo run by this check is named by the guard while it waits to start
        # (process, caller, phase). Where the guard cannot run (not root), the watcher's
        # exec watch is all there is, and it cannot tell whose exec it saw.
        self.guard = self._start_guard()
        self.decoys = DecoyRecord(check, plan.run_id, self.home)
        self.watcher = DecoyWatcher(
            self.decoy_paths,
            lambda: self.phase,
            exec_watch=_WATCHED_TOOLS if self.guard is None else (),
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
            _WATCHED_TOOLS,
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

    def say(self, message: str) -> None:
        """Show progress on stderr (the orchestrator passes it through)."""
        print(f"cujo: {self.check}: {message}", file=sys.stderr, flush=True)

    def _harness_command(self, cmd: str, what: str, *, stdin_fd: int | None = None) -> Outcome:
        """Run a command of the harness's own as the check's uid, confined; raise on failure.

        Its output is the harness's, not the pull request's: it is not searched for decoys.
        """
        outcome = run_confined(
            cmd,
            cwd=Path(self.work),
            env=sandbox_env(self.armed, self.plan, check=self.check, phase=self.phase, venv=None),
            timeout=_HANDOFF_TIMEOUT,
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

    def pack_install(self) -> None:
        """Pack the install's results (the head as installed, and its venv) for the checks
        that run on them, as the install's uid, into a spool only root can reach.

        Once, however many checks receive it: each unpacks the same bytes as its own uid.
        What the install's uid does not own in its venv is the template's, shared by every
        check as links (``venvs.link_tree``): the spool names those files (the manifest
        ``_receive_install`` reads first) rather than carrying them.
        """
        if self.check != "install":
            raise JailError(f"the {self.check} check has no install to pack")
        with self.timeline.span("pack install"):
            # Beside the HOME, in the check's root-owned corner: no sandbox can write there.
            fd = create_spool(self.armed.install_spool())
            try:
                inside = self.armed.home_inside("install")
                packed = run_confined(
                    _PACK.format(
                        work=shlex.quote(f"{inside}/work"),
                        repo=shlex.quote(f"./{self.armed.job.repo}"),
                        manifest=_MANIFEST,
                    ),
                    cwd=Path(inside),
                    env={"PATH": "/usr/bin:/bin", "HOME": inside, "LANG": "C.UTF-8"},
                    timeout=_HANDOFF_TIMEOUT,
                    # No network: packing needs none.
                    confinement=replace(self.armed.confinement("install", "install"), netns=None),
                    stdout_fd=fd,
                )
            finally:
                os.close(fd)
            if packed.exit_code not in (0, 1) or packed.timed_out:
                os.unlink(self.armed.install_spool())  # receivers then say it is missing
                raise JailError(f"packing the install's tree failed: {packed.stderr_tail[-400:]}")

    def receive_install(self) -> None:
        """Copy the install's results into this check's HOME, uid to uid, through a file.

        The install's uid packed its tree (``tar``, ``pack_install``), this check's uid
        unpacks it (``_receive_install``: its venv of template links made to match the
        install's first): root only holds the bytes, in a file of its own, and never
        walks either tree.
        """
        with self.timeline.span("receive install"):
            fd = open_spool(self.armed.install_spool())
            try:
                self._harness_command(
                    f"{shlex.quote(self.armed.python)} -I -S -c {shlex.quote(_RECEIVE)} "
                    f"{shlex.quote(self.work)}",
                    "unpacking the install's tree",
                    stdin_fd=fd,
                )
            finally:
                os.close(fd)
        # What came with the install (its hooks, say) is the install's to answer for.
        self._before = self._snapshot(discover=True)

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
        emit(item_line(self.plan.run_id, oid, observation, observation.kind))
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

    def run(
        self, cmd: str, *, phase: Phase, timeout: float, cwd: str, venv: str | None = None
    ) -> Outcome:
        """Run one pull-request command in ``phase``, confined and watched, and record it.

        ``cwd`` and ``venv`` are paths as the command sees them.
        """
        # Attribute what already happened to the phase it happened in, then switch.
        self.watcher.sync()
        self.phase = phase
        env = sandbox_env(self.armed, self.plan, check=self.check, phase=phase, venv=venv)
        shown = cmd.strip().splitlines()[0] if cmd.strip() else cmd
        self.say(f"{phase}: $ {clip(shown, 160)}")
        self._labels_used.add(label(self.check, phase))
        with self.timeline.span(f"{phase} command"):
            outcome = run_confined(
                cmd,
                cwd=Path(cwd),
                env=env,
                timeout=timeout,
                confinement=self.armed.confinement(self.check, phase),
                search=self.printed_matcher,
            )
        self._observe_printed(outcome, shown, phase)
        if outcome.process_flood:
            refused = (
                f"; {outcome.refused_forks} forks were refused at the limit"
                if outcome.refused_forks
                else ""
            )
            self.observe(
                PROCESS_FLOOD,
                f"`{clip(cmd, 200)}` ran {outcome.peak_processes} processes at once, "
                f"near the sandbox's process limit of {NPROC_LIMIT} (a fork bomb or close "
                f"to one){refused}",
            )
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
                )
            )
        else:
            self.dropped_commands += 1  # cut at the end: report-commands
        return outcome

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

    def _observe_guarded(self) -> None:
        """Record the execs of privilege tools the guard saw, one per tool and phase."""
        if self.guard is None:
            return
        seen: dict[tuple[str, str], list[PrivilegedExec]] = {}
        for ev in self.guard.stop():
            seen.setdefault((ev.path, ev.phase), []).append(ev)
        if not self.guard.complete:
            self.cut("exec-guard-queue", dropped=1, detail="the exec guard lost events")
        for (path, phase), evs in seen.items():
            first = evs[0]
            caller = first.exe or "?"
            if first.cmdline:
                caller += f": `{clip(first.cmdline, 200)}`"
            more = f" (and {len(evs) - 1} more times)" if len(evs) > 1 else ""
            self.observe(
                SCHEDULERS.get(path, SUDO),
                f"{path} was executed by pid {first.pid} (from {caller}) during {phase}{more}",
                path=path,
            )

    def _observe_refused(self) -> None:
        """Record the packets each namespace this check used refused (proxy bypasses)."""
        book = NameBook(Path(self.armed.dns_names)) if self.armed.dns_names else None
        for name in sorted(self._labels_used):
            ns = self.armed.netns.get(name)
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

    def _cut_decoys(self) -> None:
        """Name what the decoy evidence's caps left out (``decoy_record``)."""
        coalesced = self.watcher.coalesced
        if self.decoys.dropped:
            also = f"; {coalesced} more accesses past the first processes" if coalesced else ""
            self.cut(
                "report-decoy-events",
                dropped=self.decoys.dropped,
                kept=len(self.decoys.kept),
                detail="repeated readers past the report's room; every reader's pid is in "
                f"decoy_readers{also}",
            )
        if self.watcher.readers_dropped:
            self.cut(
                "decoy-readers",
                dropped=self.watcher.readers_dropped,
                kept=len(self.watcher.readers),
                detail="processes that read a decoy past the readers' cap",
            )

    def finish(self, status: Status, summary: str) -> Report:
        """Stop watching, collect decoy and persistence evidence, and build the report."""
        with self.timeline.span("finish"):
            return self._finish(status, summary)

    def _finish(self, status: Status, summary: str) -> Report:
        self.watcher.stop()
        if not self.watcher.complete:
            self.observe("watcher_incomplete", "the decoy watcher lost events (queue overflow)")
            self.cut("watcher-queue", dropped=1, detail="the decoy watcher lost events")
        self._cut_decoys()
        for ev in self.watcher.exec_events():
            who = f" by pid {ev.pid}" + (f" ({ev.exe})" if ev.exe else "") if ev.pid else ""
            kind = SCHEDULERS.get(ev.path, SUDO)
            self.observe(kind, f"{ev.path} was executed{who} during {ev.phase}", path=ev.path)
        self._observe_guarded()
        self._observe_refused()
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


def create_spool(path: Path) -> int:
    """Create the install's spool for writing: a new file, never through a link."""
    return open_no_follow(path, "create")


def open_spool(path: Path) -> int:
    """Open the install's spool for reading; a link or anything but a file is refused."""
    try:
        fd = open_no_follow(path, "read", nonblock=True)
    except FileNotFoundError:
        raise JailError("the install's tree was not packed") from None
    except OSError as exc:
        raise JailError(f"the install's spool cannot be opened: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JailError("the install's spool is not a regular file")
    return fd


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
    parser = argparse.ArgumentParser(prog=f"python -m cujo_action.checks.{check}")
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

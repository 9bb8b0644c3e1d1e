"""Arm a run: decoy secrets, the logging proxy with its per-run CA, and the run's layout.

``warm_up`` starts the slow parts before the plan is known; ``arm`` starts what watches
the pull request (the ``Harness``, stopped and sealed together), stages each check's
area (``staging.py``) and writes what the checks read (``context.py``: ``Armed``).

Full isolation (root, ``ip`` and ``nft``, as on an Actions runner) adds, per phase, a
network namespace whose only way out is the proxy (transparent listeners catch clients
that ignore proxy variables) and the logging resolver, and runs pull-request commands as
the unprivileged sandbox user. Without root, where unprivileged user namespaces are
allowed, each phase's namespace is held by a forwarder of the harness's user instead
(``net/ns/rootless.py``: its TCP relayed to the proxy's transparent listeners by CONNECT,
its DNS to the resolver), and separate mounts stand where separate uids stand. Where
neither can be had, the run goes on with proxy variables only and says ``isolation:
partial`` with the reason.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

from cujo_action.arm.actionsjob import JobIdentity, github_facts, identity_of
from cujo_action.arm.context import LABELS, Armed, ArmedDecoy, CheckArea, label
from cujo_action.arm.host import (
    base_python,
    hidden_harness,
    isolation_unavailable,
    tool_homes,
    tool_path,
    worker_interpreter,
)
from cujo_action.arm.staging import runs, sandbox_accounts, stage
from cujo_action.arm.venvs import KeptTemplate, TemplateStart, template_for
from cujo_action.evidence.seals import EvidenceFaults, Seal, broken_seals, seal
from cujo_action.evidence.timing import Timeline
from cujo_action.find.decoys import Decoy, make_decoys
from cujo_action.net.dns.resolver import (
    ResolverConfig,
    ResolverError,
    ResolverHandle,
    ResolverStart,
    spawn_resolver,
)
from cujo_action.net.ns.netns import NetNamespace
from cujo_action.net.ns.nftguard import Redirect
from cujo_action.net.ns.rootless import RootlessNamespace
from cujo_action.net.proxy.config import ProxyConfig
from cujo_action.net.proxy.process import ProxyHandle, spawn_proxy, start_proxy, write_ca_bundle
from cujo_action.sandbox.boundary import fresh_dir, open_no_follow
from cujo_action.sandbox.cgroups import Limits, make_limits
from cujo_action.sandbox.helper_processes import KILLED, HarnessProcess, Spawned
from cujo_action.sandbox.jail import (
    INSIDE_HOME,
    NPROC_LIMIT,
    JailError,
    bwrap_unavailable,
    system_tool,
)
from cujo_action.sandbox.phase_namespace import NetnsError
from cujo_action.sandbox.uids import allocate_uids
from cujo_action.schema import ALL_CHECKS, REGISTRY_HOSTS, Plan
from cujo_action.watch.sandbox_probing import WATCHED_TOOLS

T = TypeVar("T")


@dataclass
class Harness:
    """What ``arm`` started: stopped together, asked together whether it still runs."""

    proxy: ProxyHandle
    resolver: ResolverHandle | None = None
    namespaces: list[NetNamespace | RootlessNamespace] = field(default_factory=list)
    # What else ends with the run: cgroups, the uid block.
    releases: list[Callable[[], object]] = field(default_factory=list)
    # Set by ``stop``: each evidence log as sealed once its writers had stopped, and what
    # already went wrong: writers dead before they were stopped, logs that could not be read.
    seals: list[Seal] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unsealed: list[str] = field(default_factory=list)
    # What is left to stage of the areas of the checks that receive the install's tree.
    staging: Future[None] | None = None

    def staged(self) -> None:
        """Wait until every check's area is staged; raise what went wrong staging it."""
        if self.staging is not None:
            self.staging.result()

    def writers(self) -> dict[str, HarnessProcess]:
        """Return the harness processes that write evidence, by name."""
        found: dict[str, HarnessProcess] = {"proxy": self.proxy}
        if self.resolver is not None:
            found["resolver"] = self.resolver
        return found

    def alive(self) -> bool:
        """Return whether every harness process still runs (else evidence is incomplete)."""
        return all(writer.alive() for writer in self.writers().values())

    def stop(self) -> None:
        """Stop the proxy and the resolver, seal their logs, remove the namespaces."""

        def destroy(ns: NetNamespace | RootlessNamespace) -> None:
            with contextlib.suppress(NetnsError, OSError):
                ns.destroy()

        with contextlib.suppress(Exception):  # said where the run waited for it
            self.staged()

        writers = self.writers()
        dead = {name for name, writer in writers.items() if not writer.alive()}
        self.lost = [
            f"the {name} was not running when the harness stopped it: what it did not "
            "log after it died is lost"
            for name in writers
            if name in dead
        ]
        # All at once: each part mostly waits on a process or the kernel.
        stops: list[Callable[[], object]] = [writer.stop for writer in writers.values()]
        stops += [partial(destroy, ns) for ns in self.namespaces]
        with ThreadPoolExecutor(len(stops)) as pool:
            ended = [pool.submit(stop) for stop in stops]
            codes = [done.result() for done in ended]
        for name, code in zip(writers, codes, strict=False):
            if code == KILLED and name not in dead:
                # It was still busy (or stuck) past its due: what it held is not logged.
                self.lost.append(
                    f"the {name} had to be killed when the harness stopped it: what it was "
                    "still writing (a search under way) is not in its log"
                )
        # Every writer has exited (or been killed): nothing may add to a log from now on.
        logs: dict[Path, list[str]] = {}
        for name, writer in writers.items():
            logs.setdefault(Path(writer.log_path), []).append(name)
        self.seals, self.unsealed = [], []
        for path, names in logs.items():
            try:
                self.seals.append(seal(path, f"evidence/{path.name}", names))
            except OSError as exc:
                self.unsealed.append(f"evidence/{path.name} cannot be sealed ({exc.strerror})")
        for release in self.releases:
            with contextlib.suppress(OSError):
                release()

    def evidence_faults(self) -> EvidenceFaults:
        """Return why the evidence cannot be bundled as it stands (call after ``stop``)."""
        return EvidenceFaults(
            lost=list(self.lost), untrusted=[*self.unsealed, *broken_seals(self.seals)]
        )


def _staging(
    work: Callable[[], None], template: TemplateStart | KeptTemplate | None
) -> Future[None]:
    """Run ``work`` in a thread of its own; then let the run's template go (a template
    another run kept first is not kept twice)."""

    def run() -> None:
        try:
            work()
        finally:
            if template is not None:
                template.discard()

    return _in_background(run)


def _in_background(work: Callable[[], T]) -> Future[T]:
    """Run ``work`` in a thread of its own."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="cujo-arm")
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)


def _sandbox_probe(
    uid: int | None, gid: int | None, job: JobIdentity, decoys: Sequence[Decoy]
) -> tuple[str, bytes, str | None]:
    """Return the runner worker's interpreter and compiled program where bubblewrap starts
    it (empty where not), and why bubblewrap cannot make a sandbox here (None: it can)."""
    bwrap = system_tool("bwrap")
    python, program = (
        worker_interpreter(bwrap, uid, gid, job, tuple(decoys))
        if Path(bwrap).is_absolute()
        else ("", b"")
    )
    # A worker that starts proves bubblewrap works too: one probe in the usual case.
    return python, program, None if python else bwrap_unavailable(uid, gid)


@dataclass(frozen=True)
class _Staged:
    """What staging the checks' areas found and made (``_stage_areas``)."""

    worker_python: str
    worker_program: bytes
    bwrap_why: str | None
    python: str
    passwd: Path
    group: Path
    areas: dict[str, CheckArea]
    finish: Callable[[], None]


def _stage_areas(
    plan: Plan,
    run_dir: Path,
    decoys: tuple[Decoy, ...],
    owners: dict[str, tuple[int | None, int | None]],
    limits: dict[str, Limits],
    job: JobIdentity,
    probe: Future[tuple[str, bytes, str | None]],
    template: TemplateStart | KeptTemplate | None,
    timed: Callable[[str], contextlib.AbstractContextManager[None]],
) -> _Staged:
    """Stage every check's area once the sandbox probe and the venv template are in.

    Runs in a thread of its own while the proxy starts; nothing of the pull request has
    run yet, and nothing else writes below ``run_dir/checks``.
    """
    with timed("arm/bubblewrap probe"):
        worker_python, worker_program, bwrap_why = probe.result()
    passwd, group = sandbox_accounts(run_dir)
    first_uid = owners[ALL_CHECKS[0]][0]
    python = base_python(for_sandbox_user=first_uid is not None or bwrap_why is None)
    with timed("arm/venv template"):
        venv_template = template.result() if template is not None else ""
    if venv_template and python != base_python(for_sandbox_user=True):
        venv_template = ""  # made with another interpreter than the checks use
    with timed("arm/stage"):
        areas, finish = stage(
            plan, run_dir, decoys, owners, limits, job,
            venv_template=venv_template,
            venv_made_at=template.made_at if template is not None else "",
            inside_home=INSIDE_HOME if bwrap_why is None else "",
        )  # fmt: skip
    return _Staged(worker_python, worker_program, bwrap_why, python, passwd, group, areas, finish)


def _drop_namespaces(harness: Harness) -> None:
    """Remove the phase namespaces made so far (the run goes on without them)."""
    for held in harness.namespaces:
        with contextlib.suppress(NetnsError, OSError):
            held.destroy()
    harness.namespaces = []


@dataclass
class Warm:
    """What a run starts before its plan is known, while prepare clones (``warm_up``): the
    proxy and the resolver importing, then waiting for their configs, and the venv
    template being made. ``arm`` sets them going; ``cancel`` stops what it never did."""

    why_partial: str | None  # isolation_unavailable(), asked once
    proxy: Spawned
    resolver: Spawned | None  # full isolation only
    template: TemplateStart | KeptTemplate | None  # as root only
    used: bool = False

    def cancel(self) -> None:
        """Stop whatever ``arm`` did not take (after a failed prepare, say)."""
        if self.used:
            return
        self.used = True
        _cancel(self.proxy, self.resolver, self.template)


class _Start(Protocol):
    """Something started in the background that can still be called off."""

    def cancel(self) -> None: ...


def _cancel(*starts: _Start | None) -> None:
    """Call off each of ``starts`` that was started, in order."""
    for start in starts:
        if start is not None:
            start.cancel()


@contextlib.contextmanager
def _cancelled_on_error(*starts: _Start | None) -> Iterator[None]:
    """Call off ``starts`` (``_cancel``) if the block raises, then let it raise."""
    try:
        yield
    except BaseException:
        _cancel(*starts)
        raise


def warm_up(run_dir: Path) -> Warm:
    """Start the harness's slow parts before the plan is known: call from the run's main
    thread (``die_with_parent``), before prepare; ``run_dir`` is made here."""
    run_dir.mkdir(parents=True, exist_ok=True)  # fresh: nothing of the PR has run yet
    run_dir.chmod(0o711)  # the sandbox user may pass through, never list or read
    why_partial = isolation_unavailable()
    # The one venv the checks share, made while the proxy starts. Kept from an earlier run
    # on this machine where root has one (venvs.template_for). Without root it is made for
    # this run only, in the run's folder no sandbox sees, and each check gets a copy of
    # its own (the checks' commands run as the harness's own uid: a shared link would let
    # one check change another's venv); copying it costs a fraction of a second where
    # `python -m venv` in each check cost five seconds.
    python = base_python(for_sandbox_user=True)
    template = (
        template_for(python, run_dir)
        if _root()
        else TemplateStart(python, run_dir / "venv-template")
    )
    with _cancelled_on_error(template):
        proxy = spawn_proxy(run_dir / "proxy-ca")
        with _cancelled_on_error(proxy):
            resolver = spawn_resolver(run_dir / "resolver") if why_partial is None else None
    return Warm(why_partial, proxy, resolver, template)


def _root() -> bool:
    return os.geteuid() == 0


def _rootless_namespaces(harness: Harness, labels: Sequence[str], where: Path) -> dict[str, str]:
    """Start a namespace holder per label (all at once), wait for each; return their names.

    Call from the run's main thread: each holder dies with the thread that started it.
    """
    assert harness.resolver is not None
    where.mkdir(mode=0o700)
    held: dict[str, RootlessNamespace] = {}
    for i, name in enumerate(labels):
        ns = RootlessNamespace(
            where / str(i),
            proxy_port=harness.proxy.transparent_ports[name],
            dns_port=harness.resolver.ports[name],
        )
        harness.namespaces.append(ns)
        ns.start()
        held[name] = ns
    for ns in held.values():
        ns.wait()
    return {name: ns.name for name, ns in held.items()}


def _worker_program(run_dir: Path, program: bytes) -> str:
    """Write the worker's compiled program where only root reads it; return its path
    ('' when there is no worker)."""
    if not program:
        return ""
    path = run_dir / "worker.pyc"
    fd = open_no_follow(path, "create", 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(program)
    return str(path)


def tool_copies(
    corners: Path, checks: Iterable[str] = ALL_CHECKS, tools: Sequence[Path] = WATCHED_TOOLS
) -> dict[str, list[tuple[str, str]]]:
    """Copy each watched tool into each check's corner, for its sandbox to run instead.

    Without root there is no exec guard, and inotify sees an open of a tool by anyone on
    the machine (another check, another run, the user's own ``sudo``): each check's copy
    (a file of its own, outside its HOME, bound over the tool's real path) is opened by
    its commands alone. The copy has no set-uid bit, which changes nothing: under
    ``no_new_privs`` a set-uid tool is powerless. Made before any pull-request code
    runs, from host files no sandbox can write. Returns (copy, the tool's real path).
    """
    real: dict[str, str] = {}  # the tool's real path → the name its copy is kept under
    for tool in tools:
        if tool.is_file() and os.access(tool, os.R_OK):
            real.setdefault(os.path.realpath(tool), f"{len(real)}-{tool.name}")
    copies: dict[str, list[tuple[str, str]]] = {}
    for check in checks:
        folder = fresh_dir(corners / check / "tools", 0o755)
        for path, name in real.items():
            copy = folder / name
            shutil.copyfile(path, copy)
            copy.chmod(0o755)
            copies.setdefault(check, []).append((str(copy), path))
    return copies


@dataclass(frozen=True)
class _Configs:
    """What the proxy and the resolver are told: the run's labels, decoys and names."""

    labels: list[str]
    decoys: tuple[Decoy, ...]
    proxy: ProxyConfig
    resolver: ResolverConfig
    names: Path | None  # where the resolver writes each name's address (full isolation)


def _configs(plan: Plan, run_dir: Path, job: JobIdentity, why_partial: str | None) -> _Configs:
    """Seed the decoys and write the proxy's and the resolver's configuration."""
    evidence = run_dir / "evidence"
    evidence.mkdir(mode=0o700, exist_ok=True)
    decoys = make_decoys(ref=f"refs/heads/{job.branch}")
    allow = [*REGISTRY_HOSTS, *plan.policy.egress_allow]
    # A port, a resolver port and a namespace for each phase of a check that runs here
    # (the privileged check runs only where the base runs head code; the base can be
    # left out).
    labels = [label(c, p) for c, p in LABELS if runs(plan, c)]
    decoy_specs = [{"name": d.name, "value": d.value} for d in decoys]
    resolver_dir = run_dir / "resolver"
    # The resolver gives each name an address of its own and writes which here, so the
    # proxy (and the refused-packet counts) can name what a raw connection was aimed at.
    names = resolver_dir / "names.jsonl" if why_partial is None else None
    proxy = ProxyConfig(
        labels=labels,
        confdir=run_dir / "proxy-ca",
        allow_hosts=allow,
        decoys=decoy_specs,
        log_path=evidence / "egress.jsonl",
        ready_path=run_dir / "proxy-ready.json",
        transparent=why_partial is None,
        relayed=why_partial is None and not _root(),
        names_path=names,
        github=github_facts(job),
    )
    resolver = ResolverConfig(
        labels=labels,
        allow_hosts=allow,
        decoys=decoy_specs,
        log_path=evidence / "egress.jsonl",  # one log, whole lines
        ready_path=resolver_dir / "ready.json",
        names_path=names,
    )
    return _Configs(labels, decoys, proxy, resolver, names)


def _owners(
    timed: Callable[[str], contextlib.AbstractContextManager[object]],
    releases: list[Callable[[], object]],
) -> dict[str, tuple[int | None, int | None]]:
    """As root, give each check a uid of its own for this run, whatever the isolation: no
    pull-request command ever runs as root. Without root there are none to give."""
    if os.geteuid() != 0:
        return dict.fromkeys(ALL_CHECKS, (None, None))
    if not Path(system_tool("setpriv")).is_absolute():
        raise JailError("`setpriv` (util-linux) is needed to drop root; install it")
    with timed("arm/uids"):
        block = allocate_uids()
    releases.append(block.release)
    return {c: (block.uid(i), block.uid(i)) for i, c in enumerate(ALL_CHECKS)}


def _isolate(
    harness: Harness, configs: _Configs, resolver_start: ResolverStart | None, run_dir: Path,
    timed: Callable[[str], contextlib.AbstractContextManager[object]],
) -> tuple[dict[str, str], dict[str, str], str | None]:  # fmt: skip
    """Start the resolver and make a network namespace per label; return the namespaces,
    the proxy's host address in each, and why isolation is partial (None when full)."""
    netns: dict[str, str] = {}
    hosts: dict[str, str] = {}
    try:
        assert resolver_start is not None
        with timed("arm/resolver"):
            harness.resolver = resolver_start.result()
        with timed("arm/namespaces"):
            if not _root():
                return _rootless_namespaces(harness, configs.labels, run_dir / "ns"), {}, None
            for name in configs.labels:
                ns = NetNamespace(
                    Redirect(
                        transparent_port=harness.proxy.transparent_ports[name],
                        dns_port=harness.resolver.ports[name],
                        proxy_port=harness.proxy.ports[name],
                    )
                )
                harness.namespaces.append(ns)
                ns.create()
                netns[name], hosts[name] = ns.name, ns.host_ip
    except (JailError, NetnsError, ResolverError, OSError, KeyError) as exc:
        # Fail closed: the run goes on, but says it could not be isolated, and its
        # verdict can then be at best unproven.
        _drop_namespaces(harness)
        return {}, {}, f"full isolation could not be set up: {exc}"
    return netns, hosts, None


def arm(
    plan: Plan,
    run_dir: Path,
    *,
    hide: Sequence[Path] = (),
    timeline: Timeline | None = None,
    warm: Warm | None = None,
) -> tuple[Armed, Harness]:
    """Seed decoys, start the harness, stage each check's area and write the context.

    ``hide`` names host paths (the output folder, say) no pull-request command may see;
    ``timeline`` records how long each piece took; ``warm`` is what ``warm_up`` started
    on ``run_dir`` before the plan was known (else it is started here).
    """
    timed = (timeline or Timeline()).span
    warm = warm or warm_up(run_dir)
    warm.used = True
    template = warm.template
    if template is not None and "node" in (plan.ecosystem, plan.base_ecosystem):
        template.cancel()  # npm makes no venv
        template = None
    # Who the job looks like (GitHub's API, answered by the proxy, knows it too): the push
    # of the merge to the base branch, whose cache its runtime token may write.
    job = identity_of(plan)
    why_partial = warm.why_partial
    configs = _configs(plan, run_dir, job, why_partial)
    decoys = configs.decoys
    # Both were launched by warm_up from this thread, which lives as long as the run: each
    # dies with the thread that forked it (PR_SET_PDEATHSIG), so never from a worker thread.
    resolver_start = (
        ResolverStart(configs.resolver, run_dir / "resolver", warm=warm.resolver)
        if warm.resolver is not None
        else None
    )
    # What needs no proxy comes first: the uids, the limits, and the checks' areas, staged
    # in a thread of their own (mostly copies and writes) while the proxy, another
    # process, starts and the namespaces are made.
    releases: list[Callable[[], object]] = []  # the harness's once it exists
    probe: Future[tuple[str, bytes, str | None]] | None = None
    staging: Future[_Staged] | None = None
    try:
        owners = _owners(timed, releases)
        first_uid, first_gid = owners[ALL_CHECKS[0]]
        # It takes a sandbox of its own: asked while the limits, the areas and the
        # namespaces are made, which it decides only where it fails (then they go).
        probe = _in_background(partial(_sandbox_probe, first_uid, first_gid, job, decoys))
        limits: dict[str, Limits] = {}
        tag = secrets.token_hex(4)
        with timed("arm/limits"):
            for check in (c for c in ALL_CHECKS if runs(plan, c)):
                limits[check] = made = make_limits(f"cujo-{tag}-{check}", NPROC_LIMIT)
                releases.append(made.remove)
        staging = _in_background(
            partial(
                _stage_areas, plan, run_dir, decoys, owners, limits, job, probe, template, timed
            )
        )
        with timed("arm/proxy"):
            harness = Harness(start_proxy(configs.proxy, warm=warm.proxy), releases=releases)
    except BaseException:
        # No harness yet: wait for what runs beside (nothing may write on), then let go.
        for pending in (staging, probe):
            if pending is not None:
                with contextlib.suppress(Exception):
                    pending.result()
        _cancel(resolver_start, template)
        for release in reversed(releases):
            with contextlib.suppress(Exception):
                release()
        raise
    try:
        (run_dir / "proxy-ca").chmod(0o700)  # the run CA's key stays the harness's
        bundle = run_dir / "ca-bundle.pem"
        write_ca_bundle(harness.proxy.ca_cert, bundle)
        bundle.chmod(0o644)
        netns: dict[str, str] = {}
        hosts: dict[str, str] = {}
        if why_partial is None:
            netns, hosts, why_partial = _isolate(harness, configs, resolver_start, run_dir, timed)
        with timed("arm/staged"):
            staged = staging.result()
        if staged.bwrap_why is not None and why_partial is None:
            why_partial = f"bubblewrap is needed for full isolation: {staged.bwrap_why}"
            netns, hosts = {}, {}
            _drop_namespaces(harness)
        copies: dict[str, list[tuple[str, str]]] = {}
        if not _root() and why_partial is None and staged.bwrap_why is None:
            with timed("arm/tool copies"):
                copies = tool_copies(run_dir / "checks", staged.areas)
        # The receivers' areas, while the install runs (stage's docstring says why safely).
        harness.staging = _staging(staged.finish, template)
        armed = Armed(
            run_dir=str(run_dir),
            plan_path=str(run_dir / "plan.json"),
            ca_bundle=str(bundle),
            proxy_host=configs.proxy.listen_host,
            proxy_ports=dict(harness.proxy.ports),
            egress_log=str(configs.proxy.log_path),
            decoys=[ArmedDecoy(name=d.name, value=d.value, env=d.env, file=d.file) for d in decoys],
            isolation="partial" if why_partial else "full",
            isolation_reason=why_partial or "",
            python=staged.python,
            tool_path=tool_path(),
            tool_homes=tool_homes(),
            netns=netns,
            proxy_hosts=hosts,
            dns_names=str(configs.names) if configs.names and why_partial is None else "",
            areas=staged.areas,
            bwrap=system_tool("bwrap") if staged.bwrap_why is None else "",
            hidden=sorted({*hidden_harness(), str(run_dir), *(str(p) for p in hide)}),
            passwd=str(staged.passwd),
            group=str(staged.group),
            job=job,
            worker_python=staged.worker_python,
            worker_program=_worker_program(run_dir, staged.worker_program),
            tool_copies=copies,
        )
        (run_dir / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2))
        context = run_dir / "context.json"
        context.write_text(armed.model_dump_json(indent=2))
        context.chmod(0o600)
    except BaseException:
        for pending in (staging, probe):  # its sandbox runs as a uid of the block stop releases
            if pending is not None:
                with contextlib.suppress(Exception):
                    pending.result()
        if resolver_start is not None and harness.resolver is None:
            resolver_start.cancel()
        if template is not None:
            template.cancel()
        harness.stop()
        raise
    return armed, harness

"""Arm a run: decoy secrets, the logging proxy with its per-run CA, and the run's layout.

``arm`` starts what watches the pull request; ``sandbox_env`` builds the one environment
pull-request commands see. Nothing of the harness's own environment is passed through:
the sandbox looks like an ordinary CI job and holds only decoys.

Full isolation (root, ``ip`` and ``nft``, as on an Actions runner) adds, per phase, a
network namespace whose only way out is the proxy (transparent listeners catch clients
that ignore proxy variables) and the logging resolver, and runs pull-request commands as
the unprivileged sandbox user. Where that cannot be had, the run goes on with proxy
variables only and says ``isolation: partial`` with the reason.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cujo_action.arm.actionsjob import (
    RUNNER_ROOT,
    WORKER_ARGS,
    WORKER_EXE,
    JobIdentity,
    checkout_config,
    event_payload,
    file_commands,
    job_env,
    job_message,
    new_identity,
    worker_env,
    worker_source,
)
from cujo_action.arm.decoys import Decoy, decoy_files, make_decoys
from cujo_action.arm.venvs import KeptTemplate, TemplateStart, place_venvs, template_for
from cujo_action.evidence.seals import EvidenceFaults, Seal, broken_seals, seal
from cujo_action.evidence.timing import Timeline
from cujo_action.net.dns import (
    ResolverConfig,
    ResolverError,
    ResolverHandle,
    ResolverStart,
    spawn_resolver,
)
from cujo_action.net.netlayout import NetnsError
from cujo_action.net.netns import NetNamespace, unavailable
from cujo_action.net.nftguard import Redirect
from cujo_action.net.proxy import ProxyHandle, spawn_proxy, start_proxy, write_ca_bundle
from cujo_action.net.proxyconfig import SYSTEM_CA, ProxyConfig
from cujo_action.sandbox.boundary import copy_pristine, fresh_dir, hand_over, write_below
from cujo_action.sandbox.cgroups import Limits, make_limits
from cujo_action.sandbox.helper_processes import HarnessProcess, Spawned
from cujo_action.sandbox.jail import (
    ALWAYS_HIDDEN,
    INSIDE_HOME,
    INSIDE_UID,
    NPROC_LIMIT,
    Confinement,
    JailError,
    View,
    Worker,
    bwrap_unavailable,
    run_confined,
    system_tool,
)
from cujo_action.sandbox.uids import allocate_uids
from cujo_action.schema import ALL_CHECKS, REGISTRY_HOSTS, CheckName, Isolation, Phase, Plan

# One proxy port per (check, phase): the port a request arrives on names who sent it.
LABELS: tuple[tuple[CheckName, Phase], ...] = (
    ("install", "install"),
    ("detonation", "install"),
    ("detonation", "import"),
    ("tests", "test"),
    ("probes", "probe"),
    ("smoke", "smoke"),
    ("base", "install"),
    ("base", "test"),
)


BASE_NICE = 10
# The checks that get the run's venv template laid out as their venv: those that install
# into it, and those that receive the install's (whose venv is then made to match it:
# ``_receive_install``, so the template's files need not travel through the spool).
VENV_CHECKS: tuple[CheckName, ...] = ("install", "detonation", "base", "tests", "probes", "smoke")
# The checks that run on the install's tree: their areas are finished while it runs.
RECEIVERS: tuple[CheckName, ...] = ("tests", "probes", "smoke")


def base_runs() -> bool:
    """Return whether the base is installed and tested beside the head (``CUJO_BASE=off``
    leaves it out, to measure what it costs; nothing is then "also at base")."""
    return os.environ.get("CUJO_BASE", "on") != "off"


def label(check: str, phase: str) -> str:
    """Return the proxy label of a check's phase."""
    return f"{check}/{phase}"


class DecoySpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    value: str
    env: str | None
    file: str | None


class CheckArea(BaseModel):
    """One check's own corner of the run: its uid, its HOME and its limits."""

    model_config = ConfigDict(frozen=True)
    home: str  # host path; the command sees it as INSIDE_HOME under a view
    uid: int | None  # None only when the harness is not root
    gid: int | None
    limits: Limits
    venv_staged: bool = False  # its work/venv is a copy of the run's template, made by arm


class Armed(BaseModel):
    """What a check process needs to run its commands watched (written as context.json)."""

    model_config = ConfigDict(frozen=True)
    run_dir: str
    plan_path: str
    ca_bundle: str
    proxy_host: str
    proxy_ports: dict[str, int]
    egress_log: str
    decoys: list[DecoySpec]
    isolation: Isolation
    isolation_reason: str = ""  # why isolation is partial (empty when full)
    python: str  # the interpreter venvs are made from
    tool_path: str  # directories of build tools (node, npm) the sandbox may use
    # Full isolation: each label's namespace, and the address its commands reach the
    # proxy at (the host side of its veth).
    netns: dict[str, str] = {}
    proxy_hosts: dict[str, str] = {}
    dns_names: str = ""  # the resolver's address → name file (full isolation)
    areas: dict[str, CheckArea] = {}
    # bubblewrap, when it works here (empty: commands see the host, partial isolation),
    # and the host paths it hides beyond jail.ALWAYS_HIDDEN.
    bwrap: str = ""
    hidden: list[str] = []
    passwd: str = ""  # the sandbox's /etc/passwd and /etc/group (host paths)
    group: str = ""
    # Who the job looks like (actionsjob.py), and the interpreter the decoy runner worker
    # runs with (empty: no worker, where bubblewrap or the interpreter cannot have one).
    job: JobIdentity
    worker_python: str = ""

    def decoy_objects(self) -> tuple[Decoy, ...]:
        """Return the decoys as the decoys module's type."""
        return tuple(Decoy(d.name, d.value, d.env, d.file) for d in self.decoys)

    def area(self, check: str) -> CheckArea:
        """Return a check's area; an unknown check is a harness bug, never unconfined."""
        try:
            return self.areas[check]
        except KeyError:
            raise JailError(f"no sandbox area for check {check!r}") from None

    def view(self, check: str) -> View | None:
        """Return what a check's commands see under bubblewrap (None: no bubblewrap)."""
        if not self.bwrap:
            return None
        ro = [(self.ca_bundle, str(SYSTEM_CA))] if SYSTEM_CA.is_file() else []
        if self.passwd and self.group:
            ro += [(self.passwd, "/etc/passwd"), (self.group, "/etc/group")]
        return View(
            bwrap=self.bwrap,
            binds=((self.area(check).home, INSIDE_HOME),),
            ro_binds=tuple(ro),
            hidden=tuple(self.hidden),
            worker=runner_worker(self.worker_python, self.job, self.decoy_objects())
            if self.worker_python
            else None,
        )

    def install_spool(self) -> Path:
        """Return where the install's tree is packed for the checks that run on it: in the
        install's root-owned corner, beside its HOME, where no sandbox user can write."""
        return Path(self.area("install").home).parent / "install.tar"

    def home_inside(self, check: str) -> str:
        """Return the check's HOME as its commands see it."""
        return INSIDE_HOME if self.bwrap else self.area(check).home

    def workspace(self, check: str) -> str:
        """Return the check's checkout as its commands see it (the hosted runner's layout)."""
        return f"{self.home_inside(check)}/work/{self.job.repo}/{self.job.repo}"

    def ca_inside(self) -> str:
        """Return the CA bundle's path as commands see it."""
        return str(SYSTEM_CA) if self.bwrap and SYSTEM_CA.is_file() else self.ca_bundle

    def confinement(self, check: str, phase: str) -> Confinement:
        """Return how a phase's commands are confined; raise for a phase with none."""
        name = label(check, phase)
        if (check, phase) not in LABELS:
            raise JailError(f"no confinement for {name}: not a phase of the run")
        area = self.area(check)
        ns = self.netns.get(name)
        if self.isolation == "full" and ns is None:
            raise JailError(f"no network namespace for {name} under full isolation")
        return Confinement(
            netns=ns if self.isolation == "full" else None,
            uid=area.uid,
            gid=area.gid,
            view=self.view(check),
            limits=area.limits,
            # The base runs beside the head, off its critical path: it yields the CPU.
            nice=BASE_NICE if check == "base" else 0,
        )


@dataclass
class Harness:
    """What ``arm`` started: stopped together, asked together whether it still runs."""

    proxy: ProxyHandle
    resolver: ResolverHandle | None = None
    namespaces: list[NetNamespace] = field(default_factory=list)
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

        def destroy(ns: NetNamespace) -> None:
            with contextlib.suppress(NetnsError, OSError):
                ns.destroy()

        with contextlib.suppress(Exception):  # said where the run waited for it
            self.staged()

        writers = self.writers()
        self.lost = [
            f"the {name} was not running when the harness stopped it: what it did not "
            "log after it died is lost"
            for name, writer in writers.items()
            if not writer.alive()
        ]
        # All at once: each part mostly waits on a process or the kernel.
        stops: list[Callable[[], object]] = [writer.stop for writer in writers.values()]
        stops += [partial(destroy, ns) for ns in self.namespaces]
        with ThreadPoolExecutor(len(stops)) as pool:
            for done in [pool.submit(stop) for stop in stops]:
                done.result()
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


def _in_background(
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

    pool = ThreadPoolExecutor(1, thread_name_prefix="cujo-staging")
    try:
        return pool.submit(run)
    finally:
        pool.shutdown(wait=False)


def runner_worker(python: str, job: JobIdentity, decoys: tuple[Decoy, ...]) -> Worker:
    """Return the decoy runner worker each command's sandbox starts as its pid 1."""
    return Worker(
        python=python,
        exe=WORKER_EXE,
        argv=WORKER_ARGS,
        mount=RUNNER_ROOT,
        env=tuple(worker_env(job).items()),
        source=worker_source(job_message(job, decoys)),
    )


def _worker_python(
    bwrap: str, uid: int | None, gid: int | None, job: JobIdentity, decoys: tuple[Decoy, ...]
) -> str:
    """Return an interpreter the runner worker starts with in bubblewrap ('' if none)."""
    # The system's own first: an interpreter linked to a libpython beside it (some
    # toolcache builds) cannot start from the worker's path.
    candidates = dict.fromkeys(["/usr/bin/python3", base_python(for_sandbox_user=True)])
    for python in candidates:
        if not _others_can_run(Path(python)):
            continue
        view = View(bwrap, (), (), (), worker=runner_worker(python, job, decoys))
        try:
            outcome = run_confined(
                "exit 0", cwd=Path("/"), env={"PATH": "/usr/bin:/bin"}, timeout=30,
                confinement=Confinement(None, uid, gid, view),
            )  # fmt: skip
        except (OSError, JailError):
            continue
        if outcome.exit_code == 0:
            return python
    return ""


def isolation_unavailable() -> str | None:
    """Return why full isolation cannot be had here, or None when it can."""
    if os.environ.get("CUJO_ISOLATION") == "partial":
        return "CUJO_ISOLATION=partial asked for proxy variables only"
    if reason := unavailable():
        return reason
    if not Path(system_tool("setpriv")).is_absolute():
        return "`setpriv` is not installed (util-linux)"
    return None


def _tool_path() -> str:
    dirs: list[str] = []
    for tool in ("node", "npm", "git"):
        found = shutil.which(tool)
        if found and (d := str(Path(found).parent)) not in dirs:
            dirs.append(d)
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if d not in dirs:
            dirs.append(d)
    return ":".join(dirs)


def _others_can_run(path: Path) -> bool:
    """Return whether a user with no special rights can execute ``path``."""
    real = path.resolve()
    try:
        if not real.stat().st_mode & 0o001:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in real.parents)
    except OSError:
        return False


def base_python(*, for_sandbox_user: bool) -> str:
    """Return a real interpreter (not the harness's venv) to make the run's venvs from.

    The sandbox user runs it inside bubblewrap, so it must be reachable by anybody and
    not in a hidden folder: a Python inside root's home (pyenv) is not, the system's is.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(sys.base_prefix) / "bin" / version, Path("/usr/bin/python3")]
    for candidate in candidates:
        if not candidate.exists():
            continue
        hidden = any(
            str(candidate.resolve()).startswith(h + "/") for h in (*ALWAYS_HIDDEN, sys.prefix)
        )
        if not for_sandbox_user or (_others_can_run(candidate) and not hidden):
            return str(candidate)
    return sys.executable


def _hidden_harness() -> list[str]:
    """Return the host paths of the harness's own install (hidden from every command)."""
    import cujo_action  # noqa: PLC0415

    paths = [str(Path(cujo_action.__file__).resolve().parent)]
    if sys.prefix != sys.base_prefix:  # a venv of its own: all of it
        paths.append(str(Path(sys.prefix).resolve()))
    return paths


def _sandbox_accounts(run_dir: Path) -> tuple[Path, Path]:
    """Write the sandbox's /etc/passwd and /etc/group: root, runner, nobody."""
    passwd, group = run_dir / "passwd", run_dir / "group"
    passwd.write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        f"runner:x:{INSIDE_UID}:{INSIDE_UID}:runner:{INSIDE_HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    group.write_text(f"root:x:0:\nrunner:x:{INSIDE_UID}:\nnogroup:x:65534:\n")
    for path in (passwd, group):
        path.chmod(0o644)
    return passwd, group


def stage(
    plan: Plan,
    run_dir: Path,
    decoys: tuple[Decoy, ...],
    owners: dict[str, tuple[int | None, int | None]],
    limits: dict[str, Limits],
    job: JobIdentity,
    *,
    venv_template: str = "",
    venv_made_at: str = "",
    inside_home: str = "",
) -> tuple[dict[str, CheckArea], Callable[[], None]]:
    """Give each check its own HOME (decoys seeded) and copy of the head, before any PR code.

    Every folder is made fresh (a name already there stops the run), the copies come
    from the pristine checkout only root has written, laid out as a hosted runner lays
    out a job (``work/<repo>/<repo>``, ``work/_temp``), and each HOME is handed to its
    check's uid in one symlink-proof walk. After this, root never writes these trees.

    With ``venv_template``, each check that installs gets it as ``work/venv`` (hard links
    to its read-only files, ``venvs.place_venvs``), pointed at the path its commands see
    it at (under ``inside_home``, or the host HOME).

    Returns the areas, and what is left to stage for the checks that run on the install's
    tree (``RECEIVERS``: their venvs and the hand-over of their HOMEs), to be finished
    while the install runs (``Harness.staged``): their HOMEs sit in root's 0711 corners,
    0700 and root's until handed over, so no uid that runs meanwhile can reach them, and
    their own uids run nothing before the run waits for it.
    """
    corners = fresh_dir(run_dir / "checks", 0o711)
    areas: dict[str, CheckArea] = {}
    venvs: dict[Path, str] = {}  # where the template is copied → the path commands see
    for check in ALL_CHECKS:
        corner = fresh_dir(corners / check, 0o711)  # root's: the uid cannot swap its HOME
        home = fresh_dir(corner / "home", 0o700)
        seed_home(home, decoys, job, plan)
        wanted = check != "base" or base_runs()  # nothing staged for a base that will not run
        if check in ("install", "detonation", "base") and wanted:
            checkout = fresh_dir(home / "work" / job.repo, 0o755) / job.repo
            ignore = ("node_modules",) if check == "detonation" else ()
            if check == "base":
                stage_base(plan, checkout)
            else:
                # The base worktree and the clone's reflog name the harness's own folders.
                skip = (".git/worktrees", ".git/logs")
                copy_pristine(Path(plan.head_dir), checkout, ignore=ignore, skip=skip)
            # As actions/checkout leaves it: the origin on GitHub, the token's extraheader.
            write_below(checkout, ".git/config", checkout_config(job, decoys), 0o644)
        ecosystem = plan.base_ecosystem if check == "base" else plan.ecosystem
        if venv_template and check in VENV_CHECKS and ecosystem != "node" and wanted:
            venvs[home / "work" / "venv"] = f"{inside_home or home}/work/venv"
        uid, gid = owners[check]
        areas[check] = CheckArea(
            home=str(home), uid=uid, gid=gid, limits=limits[check],
            venv_staged=home / "work" / "venv" in venvs,
        )  # fmt: skip

    def finish(checks: Collection[str]) -> None:
        homes = {Path(areas[c].home) for c in checks}
        mine = {dest: inside for dest, inside in venvs.items() if dest.parents[1] in homes}
        if mine:
            place_venvs(venv_template, mine, made_at=venv_made_at or None)  # all at once
        for check in checks:
            area = areas[check]
            if area.uid is not None and area.gid is not None:
                hand_over(Path(area.home), area.uid, area.gid)

    finish([c for c in ALL_CHECKS if c not in RECEIVERS])
    return areas, partial(finish, [c for c in ALL_CHECKS if c in RECEIVERS])


def stage_base(plan: Plan, checkout: Path) -> None:
    """Copy the base as a checkout of its own: its files, the clone's git, HEAD at base.

    The base worktree's ``.git`` is a file naming the harness's clone; the copy gets the
    clone's object store and the worktree's own index instead, with HEAD at base, so git
    (and a version taken from git) sees an ordinary checkout of the base commit. All of
    it is root's pristine checkout, copied before any pull-request code runs.
    """
    head, base = Path(plan.head_dir), Path(plan.base_dir)
    copy_pristine(base, checkout, skip=(".git",))
    copy_pristine(head / ".git", checkout / ".git", skip=("worktrees", "logs", "index"))
    index = head / ".git" / "worktrees" / base.name / "index"
    if index.is_file() and not index.is_symlink():
        shutil.copyfile(index, checkout / ".git" / "index", follow_symlinks=False)
    write_below(checkout, ".git/HEAD", plan.base_sha + "\n", 0o644)


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
        self.proxy.cancel()
        if self.resolver is not None:
            self.resolver.cancel()
        if self.template is not None:
            self.template.cancel()


def warm_up(run_dir: Path) -> Warm:
    """Start the harness's slow parts before the plan is known: call from the run's main
    thread (``die_with_parent``), before prepare; ``run_dir`` is made here."""
    run_dir.mkdir(parents=True, exist_ok=True)  # fresh: nothing of the PR has run yet
    run_dir.chmod(0o711)  # the sandbox user may pass through, never list or read
    why_partial = isolation_unavailable()
    # The one venv the checks share, made while the proxy starts (as root only: where the
    # harness is not root, each check makes its own as the harness's user). Kept from an
    # earlier run on this machine where root has one (venvs.template_for).
    template = template_for(base_python(for_sandbox_user=True), run_dir) if _root() else None
    proxy: Spawned | None = None
    try:
        proxy = spawn_proxy(run_dir / "proxy-ca")
        resolver = spawn_resolver(run_dir / "resolver") if why_partial is None else None
    except BaseException:
        if proxy is not None:
            proxy.cancel()
        if template is not None:
            template.cancel()
        raise
    return Warm(why_partial, proxy, resolver, template)


def _root() -> bool:
    return os.geteuid() == 0


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
    evidence = run_dir / "evidence"
    evidence.mkdir(mode=0o700, exist_ok=True)
    decoys = make_decoys()
    allow = [*REGISTRY_HOSTS, *plan.policy.egress_allow]
    labels = [label(c, p) for c, p in LABELS]
    decoy_specs = [{"name": d.name, "value": d.value} for d in decoys]
    why_partial = warm.why_partial
    resolver_dir = run_dir / "resolver"
    # The resolver gives each name an address of its own and writes which here, so the
    # proxy (and the refused-packet counts) can name what a raw connection was aimed at.
    names = resolver_dir / "names.jsonl" if why_partial is None else None
    config = ProxyConfig(
        labels=labels,
        confdir=run_dir / "proxy-ca",
        allow_hosts=allow,
        decoys=decoy_specs,
        log_path=evidence / "egress.jsonl",
        ready_path=run_dir / "proxy-ready.json",
        transparent=why_partial is None,
        names_path=names,
    )
    resolver_config = ResolverConfig(
        labels=labels,
        allow_hosts=allow,
        decoys=decoy_specs,
        log_path=evidence / "egress.jsonl",  # one log, whole lines
        ready_path=resolver_dir / "ready.json",
        names_path=names,
    )
    # Both were launched by warm_up from this thread, which lives as long as the run: each
    # dies with the thread that forked it (PR_SET_PDEATHSIG), so never from a worker thread.
    resolver_start = (
        ResolverStart(resolver_config, resolver_dir, warm=warm.resolver)
        if warm.resolver is not None
        else None
    )
    try:
        with timed("arm/proxy"):
            harness = Harness(start_proxy(config, warm=warm.proxy))
    except BaseException:
        if resolver_start is not None:
            resolver_start.cancel()
        if template is not None:
            template.cancel()
        raise
    try:
        (run_dir / "proxy-ca").chmod(0o700)  # the run CA's key stays the harness's
        bundle = run_dir / "ca-bundle.pem"
        write_ca_bundle(harness.proxy.ca_cert, bundle)
        bundle.chmod(0o644)
        netns: dict[str, str] = {}
        hosts: dict[str, str] = {}
        # No pull-request command ever runs as root: as root, each check gets a uid of
        # its own for this run, whatever the isolation.
        owners: dict[str, tuple[int | None, int | None]] = dict.fromkeys(ALL_CHECKS, (None, None))
        if os.geteuid() == 0:
            if not Path(system_tool("setpriv")).is_absolute():
                raise JailError("`setpriv` (util-linux) is needed to drop root; install it")
            with timed("arm/uids"):
                block = allocate_uids()
            harness.releases.append(block.release)
            owners = {c: (block.uid(i), block.uid(i)) for i, c in enumerate(ALL_CHECKS)}
        first_uid, first_gid = owners[ALL_CHECKS[0]]
        job = new_identity(plan.repo)
        # A worker that starts proves bubblewrap works too: one probe in the usual case.
        bwrap_tool = system_tool("bwrap")
        with timed("arm/bubblewrap probe"):
            worker_python = (
                _worker_python(bwrap_tool, first_uid, first_gid, job, decoys)
                if Path(bwrap_tool).is_absolute()
                else ""
            )
            bwrap_why = None if worker_python else bwrap_unavailable(first_uid, first_gid)
        if bwrap_why is not None and why_partial is None:
            why_partial = f"bubblewrap is needed for full isolation: {bwrap_why}"
        limits: dict[str, Limits] = {}
        tag = secrets.token_hex(4)
        with timed("arm/limits"):
            for check in ALL_CHECKS:
                limits[check] = made = make_limits(f"cujo-{tag}-{check}", NPROC_LIMIT)
                harness.releases.append(made.remove)
        if why_partial is None:
            try:
                assert resolver_start is not None
                with timed("arm/resolver"):
                    harness.resolver = resolver_start.result()
                with timed("arm/namespaces"):
                    for name in labels:
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
                # Fail closed: the run goes on, but says it could not be isolated, and
                # its verdict can then be at best unproven.
                why_partial = f"full isolation could not be set up: {exc}"
                netns, hosts = {}, {}
                for ns in harness.namespaces:
                    with contextlib.suppress(NetnsError, OSError):
                        ns.destroy()
                harness.namespaces = []
        passwd, group = _sandbox_accounts(run_dir)
        python = base_python(for_sandbox_user=first_uid is not None or bwrap_why is None)
        with timed("arm/venv template"):
            venv_template = template.result() if template is not None else ""
        if venv_template and python != base_python(for_sandbox_user=True):
            venv_template = ""  # made with another interpreter than the checks use
        with timed("arm/stage"):
            areas, finish_staging = stage(
                plan, run_dir, decoys, owners, limits, job,
                venv_template=venv_template,
                venv_made_at=template.made_at if template is not None else "",
                inside_home=INSIDE_HOME if bwrap_why is None else "",
            )  # fmt: skip
        # The receivers' areas, while the install runs (stage's docstring says why safely).
        harness.staging = _in_background(finish_staging, template)
        armed = Armed(
            run_dir=str(run_dir),
            plan_path=str(run_dir / "plan.json"),
            ca_bundle=str(bundle),
            proxy_host=config.listen_host,
            proxy_ports=dict(harness.proxy.ports),
            egress_log=str(config.log_path),
            decoys=[DecoySpec(name=d.name, value=d.value, env=d.env, file=d.file) for d in decoys],
            isolation="partial" if why_partial else "full",
            isolation_reason=why_partial or "",
            python=python,
            tool_path=_tool_path(),
            netns=netns,
            proxy_hosts=hosts,
            dns_names=str(names) if names is not None and why_partial is None else "",
            areas=areas,
            bwrap=system_tool("bwrap") if bwrap_why is None else "",
            hidden=sorted({*_hidden_harness(), str(run_dir), *(str(p) for p in hide)}),
            passwd=str(passwd),
            group=str(group),
            job=job,
            worker_python=worker_python,
        )
        (run_dir / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2))
        context = run_dir / "context.json"
        context.write_text(armed.model_dump_json(indent=2))
        context.chmod(0o600)
    except BaseException:
        if resolver_start is not None and harness.resolver is None:
            resolver_start.cancel()
        if template is not None:
            template.cancel()
        harness.stop()
        raise
    return armed, harness


def seed_home(
    home: Path, decoys: tuple[Decoy, ...], job: JobIdentity | None = None, plan: Plan | None = None
) -> list[Path]:
    """Create a throwaway HOME holding the decoy files; return their paths.

    With the job (and its plan), also what a hosted runner's HOME holds for a step:
    ``work/_temp`` with the event file and the step's file commands, and ``runners``.
    """
    home.mkdir(parents=True, exist_ok=True)
    paths = []
    for rel, content in decoy_files(decoys).items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if rel.startswith(".ssh/"):
            path.parent.chmod(0o700)
            path.chmod(0o600)
        paths.append(path)
    # An ordinary HOME has shell profiles; their presence is also what a write is compared to.
    for rel, content in ((".bashrc", "# ~/.bashrc\n"), (".profile", "# ~/.profile\n")):
        (home / rel).write_text(content)
    (home / ".cache" / "tmp").mkdir(parents=True)  # TMPDIR where there is no bubblewrap
    if job is not None and plan is not None:
        # The worker's tmpfs is mounted here; the folder itself is what a runner has.
        (home / "runners").mkdir()
        steps = {
            "work/_temp/_github_workflow/event.json": event_payload(job, plan),
            **file_commands(job),
        }
        for rel, content in steps.items():
            path = home / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return paths


def sandbox_env(
    armed: Armed,
    plan: Plan,
    *,
    check: str,
    phase: str,
    venv: str | None,
) -> dict[str, str]:
    """Return the whole environment of a pull-request command: CI-like, proxied, decoyed.

    Paths are as the command sees them: under bubblewrap, an ordinary runner's layout.
    """
    name = label(check, phase)
    # Inside a namespace 127.0.0.1 is the namespace's own loopback: the proxy is reached
    # at the host side of its veth instead.
    proxy = f"http://{armed.proxy_hosts.get(name, armed.proxy_host)}:{armed.proxy_ports[name]}"
    path = armed.tool_path if venv is None else f"{venv}/bin:{armed.tool_path}"
    home = armed.home_inside(check)
    ca = armed.ca_inside()
    env = {
        "PATH": path,
        "HOME": home,
        "USER": "runner",
        "LOGNAME": "runner",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        # Look like an ordinary Actions job (variables, decoys where a job keeps secrets),
        # so code that hides from sandboxes wakes up and code that steals finds decoys.
        **job_env(armed.job, plan, armed.decoy_objects(), home=home, temp=f"{home}/work/_temp"),
        # Every route out goes through the logging proxy.
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "ALL_PROXY": proxy,
        "NO_PROXY": "localhost,127.0.0.1,::1",
        "no_proxy": "localhost,127.0.0.1,::1",
        "npm_config_proxy": proxy,
        "npm_config_https_proxy": proxy,
        # One bundle (system CAs + the run's CA) through every variable clients read,
        # replacing whatever the machine set (requests lets REQUESTS_CA_BUNDLE win).
        "SSL_CERT_FILE": ca,
        "REQUESTS_CA_BUNDLE": ca,
        "PIP_CERT": ca,
        "CURL_CA_BUNDLE": ca,
        "NODE_EXTRA_CA_CERTS": ca,
        "npm_config_cafile": ca,
        "GIT_SSL_CAINFO": ca,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "npm_config_update_notifier": "false",
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if not armed.bwrap:
        # Under bubblewrap /tmp is the command's own; without it, a folder in its HOME.
        env["TMPDIR"] = f"{home}/.cache/tmp"
    return env

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
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cujo_action.decoys import Decoy, decoy_files, make_decoys
from cujo_action.dns import ResolverConfig, ResolverError, ResolverHandle, ResolverStart
from cujo_action.jail import Confinement, JailError, sandbox_user
from cujo_action.netns import NetNamespace, NetnsError, Redirect, unavailable
from cujo_action.proxy import ProxyConfig, ProxyHandle, start_proxy, write_ca_bundle
from cujo_action.schema import REGISTRY_HOSTS, CheckName, Isolation, Phase, Plan

# One proxy port per (check, phase): the port a request arrives on names who sent it.
LABELS: tuple[tuple[CheckName, Phase], ...] = (
    ("install", "install"),
    ("detonation", "install"),
    ("detonation", "import"),
    ("tests", "test"),
    ("probes", "probe"),
    ("smoke", "smoke"),
)


def label(check: str, phase: str) -> str:
    """Return the proxy label of a check's phase."""
    return f"{check}/{phase}"


class DecoySpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    value: str
    env: str | None
    file: str | None


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
    # proxy at (the host side of its veth); the sandbox user.
    netns: dict[str, str] = {}
    proxy_hosts: dict[str, str] = {}
    uid: int | None = None
    gid: int | None = None
    dns_names: str = ""  # the resolver's address → name file (full isolation)

    def decoy_objects(self) -> tuple[Decoy, ...]:
        """Return the decoys as the decoys module's type."""
        return tuple(Decoy(d.name, d.value, d.env, d.file) for d in self.decoys)

    def confinement(self, check: str, phase: str) -> Confinement | None:
        """Return how a phase's commands are confined (None under partial isolation)."""
        ns = self.netns.get(label(check, phase))
        if self.isolation != "full" or ns is None or self.uid is None or self.gid is None:
            return None
        return Confinement(netns=ns, uid=self.uid, gid=self.gid)

    def give(self, path: Path) -> None:
        """Hand ``path`` (recursively) to the sandbox user, so its commands may write it."""
        if self.uid is None or self.gid is None:
            return
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), self.uid, self.gid)
        os.lchown(path, self.uid, self.gid)


@dataclass
class Harness:
    """What ``arm`` started: stopped together, asked together whether it still runs."""

    proxy: ProxyHandle
    resolver: ResolverHandle | None = None
    namespaces: list[NetNamespace] = field(default_factory=list)

    def alive(self) -> bool:
        """Return whether every harness process still runs (else evidence is incomplete)."""
        return self.proxy.alive() and (self.resolver is None or self.resolver.alive())

    def stop(self) -> None:
        """Stop the proxy and the resolver and remove the namespaces, whatever fails."""

        def destroy(ns: NetNamespace) -> None:
            with contextlib.suppress(NetnsError, OSError):
                ns.destroy()

        # All at once: each part mostly waits on a process or the kernel.
        stops: list[Callable[[], object]] = [self.proxy.stop]
        if self.resolver is not None:
            stops.append(self.resolver.stop)
        stops += [partial(destroy, ns) for ns in self.namespaces]
        with ThreadPoolExecutor(len(stops)) as pool:
            for done in [pool.submit(stop) for stop in stops]:
                done.result()


def isolation_unavailable() -> str | None:
    """Return why full isolation cannot be had here, or None when it can."""
    if os.environ.get("CUJO_ISOLATION") == "partial":
        return "CUJO_ISOLATION=partial asked for proxy variables only"
    if reason := unavailable():
        return reason
    if shutil.which("setpriv") is None:
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

    Under full isolation the sandbox user runs it, so it must be reachable by anybody:
    a Python inside root's home (pyenv) is not, the system's is.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(sys.base_prefix) / "bin" / version, Path("/usr/bin/python3")]
    for candidate in candidates:
        if candidate.exists() and (not for_sandbox_user or _others_can_run(candidate)):
            return str(candidate)
    return sys.executable


def arm(plan: Plan, run_dir: Path) -> tuple[Armed, Harness]:
    """Seed decoys, start the harness and write the context check processes read."""
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o711)  # the sandbox user may pass through, never list or read
    evidence = run_dir / "evidence"
    evidence.mkdir(mode=0o700, exist_ok=True)
    decoys = make_decoys()
    allow = [*REGISTRY_HOSTS, *plan.policy.egress_allow]
    labels = [label(c, p) for c, p in LABELS]
    decoy_specs = [{"name": d.name, "value": d.value} for d in decoys]
    why_partial = isolation_unavailable()
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
    resolver_dir.mkdir(mode=0o700, exist_ok=True)
    # The resolver starts while the proxy does (each takes most of a second to import).
    # Both are launched from this thread, which lives as long as the run: each dies with
    # the thread that forked it (PR_SET_PDEATHSIG), so never from a worker thread.
    resolver_start = ResolverStart(resolver_config, resolver_dir) if why_partial is None else None
    try:
        harness = Harness(start_proxy(config))
    except BaseException:
        if resolver_start is not None:
            resolver_start.cancel()
        raise
    try:
        (run_dir / "proxy-ca").chmod(0o700)  # the run CA's key stays the harness's
        bundle = run_dir / "ca-bundle.pem"
        write_ca_bundle(harness.proxy.ca_cert, bundle)
        bundle.chmod(0o644)
        netns: dict[str, str] = {}
        hosts: dict[str, str] = {}
        uid = gid = None
        if why_partial is None:
            try:
                assert resolver_start is not None
                harness.resolver = resolver_start.result()
                uid, gid = sandbox_user()
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
                netns, hosts, uid, gid = {}, {}, None, None
                for ns in harness.namespaces:
                    with contextlib.suppress(NetnsError, OSError):
                        ns.destroy()
                harness.namespaces = []
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
            python=base_python(for_sandbox_user=why_partial is None),
            tool_path=_tool_path(),
            netns=netns,
            proxy_hosts=hosts,
            uid=uid,
            gid=gid,
            dns_names=str(names) if names is not None and why_partial is None else "",
        )
        (run_dir / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2))
        context = run_dir / "context.json"
        context.write_text(armed.model_dump_json(indent=2))
        context.chmod(0o600)
    except BaseException:
        if resolver_start is not None and harness.resolver is None:
            resolver_start.cancel()
        harness.stop()
        raise
    return armed, harness


def seed_home(home: Path, decoys: tuple[Decoy, ...]) -> list[Path]:
    """Create a throwaway HOME holding the decoy files; return their paths."""
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
    return paths


def sandbox_env(
    armed: Armed,
    plan: Plan,
    *,
    check: str,
    phase: str,
    home: Path,
    scratch: Path,
    venv: Path | None,
) -> dict[str, str]:
    """Return the whole environment of a pull-request command: CI-like, proxied, decoyed."""
    name = label(check, phase)
    # Inside a namespace 127.0.0.1 is the namespace's own loopback: the proxy is reached
    # at the host side of its veth instead.
    proxy = f"http://{armed.proxy_hosts.get(name, armed.proxy_host)}:{armed.proxy_ports[name]}"
    path = armed.tool_path if venv is None else f"{venv / 'bin'}:{armed.tool_path}"
    env = {
        "PATH": path,
        "HOME": str(home),
        "USER": "runner",
        "LOGNAME": "runner",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": str(scratch),
        "CUJO_SCRATCH": str(scratch),
        # Look like an ordinary Actions job, so code that hides from sandboxes wakes up.
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKFLOW": "CI",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_REF": "refs/pull/1/merge",
        "GITHUB_SHA": plan.head_sha,
        "GITHUB_SERVER_URL": "https://github.com",
        "RUNNER_OS": "Linux",
        "RUNNER_ARCH": "X64",
        "RUNNER_TEMP": str(scratch),
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
        "SSL_CERT_FILE": armed.ca_bundle,
        "REQUESTS_CA_BUNDLE": armed.ca_bundle,
        "PIP_CERT": armed.ca_bundle,
        "CURL_CA_BUNDLE": armed.ca_bundle,
        "NODE_EXTRA_CA_CERTS": armed.ca_bundle,
        "npm_config_cafile": armed.ca_bundle,
        "GIT_SSL_CAINFO": armed.ca_bundle,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "npm_config_update_notifier": "false",
        "npm_config_audit": "false",
        "npm_config_fund": "false",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for decoy in armed.decoys:
        if decoy.env:
            env[decoy.env] = decoy.value
    return env

"""Describe an armed run as each check process reads it (``context.json``).

``Armed`` names each check's area (uid, HOME, limits), how each phase's commands are
confined (namespace, uid, bubblewrap view with the decoy runner worker as pid 1), and
``sandbox_env`` builds the one environment pull-request commands see. Nothing of the
harness's own environment is passed through: the sandbox looks like a hosted runner's
step and holds only decoys. Under full isolation it names no proxy (each phase's
namespace catches every connection) and trusts the run's CA through the system bundle.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cujo_action.arm.actionsjob import (
    RUNNER_BIN,
    WORKER_ARGS,
    WORKER_EXE,
    JobIdentity,
    job_env,
    job_message,
    worker_env,
    worker_processes,
)
from cujo_action.find.decoys import Decoy
from cujo_action.net.proxy.config import SYSTEM_CA
from cujo_action.sandbox.cgroups import Limits
from cujo_action.sandbox.jail import INSIDE_HOME, Confinement, JailError, View, Worker
from cujo_action.schema import CheckName, Isolation, Phase, Plan

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
    ("privileged", "install"),
    ("privileged", "test"),
)


BASE_NICE = 10


def label(check: str, phase: str) -> str:
    """Return the proxy label of a check's phase."""
    return f"{check}/{phase}"


class ArmedDecoy(BaseModel):
    """One decoy as a check process is told it: its value and where it was placed."""

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
    decoys: list[ArmedDecoy]
    isolation: Isolation
    isolation_reason: str = ""  # why isolation is partial (empty when full)
    python: str  # the interpreter venvs are made from
    tool_path: str  # directories of build tools (node, npm) the sandbox may use
    # The image's tool variables whose folder the machine has (actionsjob.TOOL_HOMES).
    tool_homes: dict[str, str] = {}
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
    # Who the job looks like (actionsjob.py), the interpreter the decoy runner worker
    # runs with (empty: no worker, where bubblewrap or the interpreter cannot have one),
    # and its program as that interpreter compiled it (a host file only root reads).
    job: JobIdentity
    worker_python: str = ""
    worker_program: str = ""
    # Without root: each check's own copy of each watched tool (host copy, the tool's real
    # path), bound over the tool in its sandbox, so an open of the copy, which inotify
    # sees, is that check's exec and nobody else's (``arming.tool_copies``).
    tool_copies: dict[str, list[tuple[str, str]]] = {}

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
        ro += self.tool_copies.get(check, [])
        return View(
            bwrap=self.bwrap,
            binds=((self.area(check).home, INSIDE_HOME),),
            ro_binds=tuple(ro),
            hidden=tuple(self.hidden),
            worker=runner_worker(
                self.worker_python,
                compiled(self.worker_program),
                self.job,
                self.decoy_objects(),
                check,
            )
            if self.worker_python and self.worker_program
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
            # The base and the privileged job run beside the head, off its critical path:
            # they yield the CPU.
            nice=BASE_NICE if check in ("base", "privileged") else 0,
        )


def runner_worker(
    python: str, program: bytes, job: JobIdentity, decoys: tuple[Decoy, ...], check: str = ""
) -> Worker:
    """Return the decoy runner worker each command's sandbox starts as its pid 1, holding
    the message of ``check``'s job (what it runs for: ``JobIdentity.event``).

    ``program`` is ``actionsjob.worker_source()`` compiled by ``python``
    (``host.worker_program``). Its tmpfs covers the runner's ``bin`` only: the runner's
    root folder above it, with the decoy registration files (``decoyfiles.py``), is HOME's.
    """
    return Worker(
        python=python,
        exe=WORKER_EXE,
        argv=WORKER_ARGS,
        mount=RUNNER_BIN,
        env=tuple(worker_env(job).items()),
        program=program,
        processes=worker_processes(),
        message=job_message(job, job.event(check), decoys),
    )


@functools.cache
def compiled(path: str) -> bytes:
    """Return the worker's compiled program that ``arm`` wrote at ``path`` (read once)."""
    return Path(path).read_bytes()


# Trust without a variable where a client reads the system bundle, at the path a hosted
# runner has it (ca-certificates): under bubblewrap the run's bundle (the system's CAs and
# the run's CA) is bound there. Measured with each client and no variable at all: Python's
# ssl (urllib, http.client, pip 24.2+ through truststore, Debian's pip), curl and git read
# it. Three kinds of client keep roots of their own and read one variable each, set here
# to that same system path, as a runner behind a corporate proxy would have it:
# requests and pip before 24.2 (certifi's bundle) read REQUESTS_CA_BUNDLE; Node and npm
# (Node's built-in roots) read NODE_EXTRA_CA_CERTS; uv and Rust's webpki roots, and Python
# builds whose OpenSSL looks for /etc/ssl/cert.pem (python-build-standalone, as uv
# installs), read SSL_CERT_FILE. A client that trusts nothing of this makes a channel the
# proxy cannot read, and that is evidence of its own (decoy-then-opaque-channel).
SYSTEM_CA_VARIABLES: tuple[str, ...] = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
)
# Where the run's bundle is not at the system path (no bubblewrap, or a machine without
# the system bundle), every variable the clients read names it.
BUNDLE_CA_VARIABLES: tuple[str, ...] = (
    *SYSTEM_CA_VARIABLES,
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "npm_config_cafile",
    "GIT_SSL_CAINFO",
)
# Only where no network namespace catches connections (partial isolation: not root, no
# nftables, or bubblewrap refused) is every client told where the proxy is. A runner has
# none of these, so under full isolation none is set.
PROXY_VARIABLES: tuple[str, ...] = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "npm_config_proxy",
    "npm_config_https_proxy",
)
NO_PROXY = "localhost,127.0.0.1,::1"


def captured(armed: Armed, check: str, phase: str) -> bool:
    """Return whether a phase's every TCP connection is caught by its namespace.

    Under full isolation each phase has a network namespace whose TCP the guard sends to
    the proxy's transparent listener (``net/ns/nftguard.py``): a client needs no proxy
    setting to be seen, so it is given none.
    """
    return armed.isolation == "full" and label(check, phase) in armed.netns


def trust_env(armed: Armed) -> dict[str, str]:
    """Return the variables that make clients trust the run's CA, as few as suffice."""
    ca = armed.ca_inside()
    names = SYSTEM_CA_VARIABLES if ca == str(SYSTEM_CA) else BUNDLE_CA_VARIABLES
    return dict.fromkeys(names, ca)


def proxy_env(armed: Armed, check: str, phase: str) -> dict[str, str]:
    """Return the proxy variables of a phase: none where its namespace catches every
    connection; else the proxy's address for every client that reads one."""
    if captured(armed, check, phase):
        return {}
    # No namespace: the proxy listens on the host's loopback, which the command shares.
    proxy = f"http://{armed.proxy_host}:{armed.proxy_ports[label(check, phase)]}"
    return {**dict.fromkeys(PROXY_VARIABLES, proxy), "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}


def sandbox_env(
    armed: Armed,
    plan: Plan,
    *,
    check: str,
    phase: str,
    venv: str | None,
) -> dict[str, str]:
    """Return the whole environment of a pull-request command: a hosted runner step's,
    decoyed, trusting the run's CA.

    Paths are as the command sees them: under bubblewrap, an ordinary runner's layout.
    Under full isolation every name is one a hosted runner's step has, or a CA variable
    pointing at the system bundle; the proxy variables are only where no namespace
    catches connections (``proxy_env``).
    """
    path = armed.tool_path if venv is None else f"{venv}/bin:{armed.tool_path}"
    home = armed.home_inside(check)
    env = {
        "PATH": path,
        "HOME": home,
        "USER": "runner",
        "LOGNAME": "runner",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        # Look like an ordinary Actions job (variables, decoys where a job keeps secrets),
        # so code that hides from sandboxes wakes up and code that steals finds decoys.
        **job_env(
            armed.job,
            armed.job.event(check),
            armed.decoy_objects(),
            home=home,
            temp=f"{home}/work/_temp",
        ),
        **armed.tool_homes,
        **trust_env(armed),
        **proxy_env(armed, check, phase),
    }
    if not armed.bwrap:
        # Under bubblewrap /tmp is the command's own; without it, a folder in its HOME.
        env["TMPDIR"] = f"{home}/.cache/tmp"
    return env

"""Describe an armed run as each check process reads it (``context.json``).

``Armed`` names each check's area (uid, HOME, limits), how each phase's commands are
confined (namespace, uid, bubblewrap view with the decoy runner worker as pid 1), and
``sandbox_env`` builds the one environment pull-request commands see. Nothing of the
harness's own environment is passed through: the sandbox looks like an ordinary CI job
and holds only decoys.
"""

from __future__ import annotations

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
    worker_source,
)
from cujo_action.arm.decoys import Decoy
from cujo_action.net.proxyconfig import SYSTEM_CA
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


def runner_worker(python: str, job: JobIdentity, decoys: tuple[Decoy, ...]) -> Worker:
    """Return the decoy runner worker each command's sandbox starts as its pid 1.

    Its tmpfs covers the runner's ``bin`` only: the runner's root folder above it, with
    the decoy registration files (``decoyfiles.py``), is HOME's.
    """
    return Worker(
        python=python,
        exe=WORKER_EXE,
        argv=WORKER_ARGS,
        mount=RUNNER_BIN,
        env=tuple(worker_env(job).items()),
        source=worker_source(job_message(job, decoys)),
        processes=worker_processes(),
    )


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

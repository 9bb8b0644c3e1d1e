"""Make the sandbox look like a GitHub Actions job: its variables, files, checkout and runner.

Code that hides from sandboxes looks for what a real job has, and code that steals looks
where a real job keeps secrets. A hosted runner's job has (as of runner 2.321):

* the variables of a workflow step (``CI``, ``GITHUB_*``, ``RUNNER_*``, ``ImageOS``, and
  for JavaScript actions ``ACTIONS_RUNTIME_TOKEN``/``ACTIONS_ID_TOKEN_REQUEST_*``), with
  the workspace at ``/home/runner/work/<repo>/<repo>`` and the runner's temp folder,
  event file and file commands under ``/home/runner/work/_temp``. The job is the one
  that holds secrets once the pull request is merged: the push of the merge to the base
  branch (``pushevent.py`` says how it reads);
* the checkout ``actions/checkout`` leaves, whose ``.git/config`` keeps the job token in
  ``http.https://github.com/.extraheader`` as ``AUTHORIZATION: basic base64(x-access-
  token:TOKEN)`` (https://github.com/actions/checkout, ``persist-credentials``);
* the runner's worker, ``/home/runner/runners/<version>/bin/Runner.Worker spawnclient
  <in> <out>``, which holds the job message, secrets included, in its memory as
  ``"name":{"value":"…","isSecret":true}``: what the tj-actions/changed-files compromise
  (March 2025) read out of ``/proc/<pid>/mem``.

Pure: this module returns values (variables, file texts, /etc/passwd and /etc/group, the
worker's program); ``arm`` writes the files while it stages each check, and ``jail``
starts the worker.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cujo_action.arm.pullevent import target_context, target_env, target_event
from cujo_action.arm.pushevent import event_context, event_env, push_event
from cujo_action.arm.runnertree import count, literal, runner_tree
from cujo_action.find.decoys import Decoy
from cujo_action.net.lookalike.github_facts import GitHubFacts
from cujo_action.sandbox.jail import INSIDE_HOME, INSIDE_UID
from cujo_action.schema import (
    BASE_CHECK,
    PRIVILEGED_CHECK,
    ZERO_SHA,
    Plan,
    PullTarget,
    Push,
    Upstream,
)

# What a check's job runs for: a push (the merge's, or the base's), or the pull request
# as a base workflow with a privileged trigger receives it (the ``privileged`` check's).
JobEvent = Push | PullTarget

WORK = f"{INSIDE_HOME}/work"
TEMP = f"{WORK}/_temp"
RUNNER_VERSION = "2.321.0"
RUNNER_ROOT = f"{INSIDE_HOME}/runners"
RUNNER_BIN = f"{RUNNER_ROOT}/{RUNNER_VERSION}/bin"
WORKER_EXE = f"{RUNNER_BIN}/Runner.Worker"
# The worker's own command line: "spawnclient" and the two pipe handles the listener gave
# it. Its program is read from a file of that name in its folder, then removed.
WORKER_ARGS: tuple[str, ...] = ("spawnclient", "107", "110")
TOOL_CACHE = "/opt/hostedtoolcache"
IMAGE_OS = "ubuntu24"
# The image version whose readme the values below come from (``runner_profile.json``'s
# source: actions/runner-images, images/ubuntu/Ubuntu2404-Readme.md).
IMAGE_VERSION = "20250202.1.0"
ANDROID_SDK = "/usr/local/lib/android/sdk"
ANDROID_NDK = f"{ANDROID_SDK}/ndk/27.2.12479018"
# The versions the values below name (Ubuntu2404-Readme.md of IMAGE_VERSION: Gradle, the
# cached Go versions).
GRADLE_VERSION = "8.12.1"
GO_VERSIONS = ("1.21.13", "1.22.11", "1.23.5")
# What the image puts in /etc/environment, so every step has it: the readme's tables, and
# each install script's set_etc_environment_variable (images/ubuntu/scripts/build/ at the
# profile's commit; ImageOS/ImageVersion are above, XDG_CONFIG_HOME is HOME's, so
# job_env adds it).
IMAGE_ENV: tuple[tuple[str, str], ...] = (
    # configure-environment.sh, configure-dpkg.sh
    ("ACCEPT_EULA", "Y"),
    ("AGENT_TOOLSDIRECTORY", TOOL_CACHE),
    ("DEBIAN_FRONTEND", "noninteractive"),
    # install-actions-cache.sh
    ("ACTIONS_RUNNER_ACTION_ARCHIVE_CACHE", "/opt/actionarchivecache"),
    # install-azure-devops-cli.sh
    ("AZURE_EXTENSION_DIR", "/opt/az/azcliextensions"),
    # install-dotnetcore-sdk.sh
    ("DOTNET_SKIP_FIRST_TIME_EXPERIENCE", "1"),
    ("DOTNET_NOLOGO", "1"),
    ("DOTNET_MULTILEVEL_LOOKUP", "0"),
    # install-haskell.sh
    ("BOOTSTRAP_HASKELL_NONINTERACTIVE", "1"),
    # install-homebrew.sh
    ("HOMEBREW_NO_AUTO_UPDATE", "1"),
    ("HOMEBREW_CLEANUP_PERIODIC_FULL_DAYS", "3650"),
    # install-swift.sh
    ("SWIFT_PATH", "/usr/share/swift/usr/bin"),
    # Configure-Toolset.ps1: GOROOT_<major>_<minor>_X64 for each cached Go
    *(
        (f"GOROOT_{'_'.join(v.split('.')[:2])}_X64", f"{TOOL_CACHE}/go/{v}/x64")
        for v in GO_VERSIONS
    ),
    # the readme's tables
    ("CONDA", "/usr/share/miniconda"),
    ("VCPKG_INSTALLATION_ROOT", "/usr/local/share/vcpkg"),
    ("CHROMEWEBDRIVER", "/usr/local/share/chromedriver-linux64"),
    ("EDGEWEBDRIVER", "/usr/local/share/edge_driver"),
    ("GECKOWEBDRIVER", "/usr/local/share/gecko_driver"),
    ("SELENIUM_JAR_PATH", "/usr/share/java/selenium-server.jar"),
    ("JAVA_HOME_8_X64", "/usr/lib/jvm/temurin-8-jdk-amd64"),
    ("JAVA_HOME_11_X64", "/usr/lib/jvm/temurin-11-jdk-amd64"),
    ("JAVA_HOME_17_X64", "/usr/lib/jvm/temurin-17-jdk-amd64"),
    ("JAVA_HOME_21_X64", "/usr/lib/jvm/temurin-21-jdk-amd64"),
    ("ANDROID_HOME", ANDROID_SDK),
    ("ANDROID_SDK_ROOT", ANDROID_SDK),
    ("ANDROID_NDK", ANDROID_NDK),
    ("ANDROID_NDK_HOME", ANDROID_NDK),
    ("ANDROID_NDK_LATEST_HOME", ANDROID_NDK),
    ("ANDROID_NDK_ROOT", ANDROID_NDK),
)
# What the image's install scripts set for a tool to find itself, or where to put what it
# installs (set_etc_environment_variable, as above): a tool reads these, so each is set
# only where the machine has the folder it names (``host.tool_homes``; a hosted runner has
# them all). Elsewhere JAVA_HOME naming no JDK would stop a Gradle build, and PIPX_HOME a
# folder that cannot be made would stop pipx. (name, value, the path that must exist)
TOOL_HOMES: tuple[tuple[str, str, str], ...] = (
    # install-java-tools.sh: the default JDK (toolset-2404.json: 17), Ant and Gradle
    ("JAVA_HOME", "/usr/lib/jvm/temurin-17-jdk-amd64", "/usr/lib/jvm/temurin-17-jdk-amd64"),
    ("ANT_HOME", "/usr/share/ant", "/usr/share/ant"),
    ("GRADLE_HOME", f"/usr/share/gradle-{GRADLE_VERSION}", f"/usr/share/gradle-{GRADLE_VERSION}"),
    # install-google-chrome.sh
    ("CHROME_BIN", "/usr/bin/google-chrome", "/usr/bin/google-chrome"),
    # install-haskell.sh: where ghcup installs
    ("GHCUP_INSTALL_BASE_PREFIX", "/usr/local", "/usr/local/.ghcup"),
    # install-python.sh: where pipx installs
    ("PIPX_BIN_DIR", "/opt/pipx_bin", "/opt/pipx_bin"),
    ("PIPX_HOME", "/opt/pipx", "/opt/pipx"),
)
# What the runner's service manager and provisioner give every step (not in the image's
# documentation: read off a step's `env` on a hosted ubuntu-24.04 runner, image
# 20251112.124.1, printed in a public repository's CI log). The per-run values are the
# job's (JobIdentity); XDG_RUNTIME_DIR (/run/user/1001) and NVM_DIR (~/.nvm) are left out:
# the sandbox has neither folder, and a tool that finds the variable set uses the folder
# (nvm's installer stops when NVM_DIR names none).
SERVICE_ENV: tuple[tuple[str, str], ...] = (
    ("ENABLE_RUNNER_TRACING", "true"),
    ("POWERSHELL_DISTRIBUTION_CHANNEL", f"GitHub-Actions-{IMAGE_OS}"),
    ("SGX_AESM_ADDR", "1"),
    ("MEMORY_PRESSURE_WATCH",
     "/sys/fs/cgroup/system.slice/hosted-compute-agent.service/memory.pressure"),
    # systemd's memory-pressure threshold, base64: "some 200000 2000000\0"
    ("MEMORY_PRESSURE_WRITE", "c29tZSAyMDAwMDAgMjAwMDAwMAA="),
)  # fmt: skip
# The image's PATH, in its order (/etc/environment as configure-snap.sh and the
# installers leave it; /snap/bin twice, as a step sees it). Commands find Cujo's own
# folders first (``host.tool_path``); these come after, so nothing resolves differently.
IMAGE_PATH: tuple[str, ...] = (
    "/snap/bin",
    f"{INSIDE_HOME}/.local/bin",
    "/opt/pipx_bin",
    f"{INSIDE_HOME}/.cargo/bin",
    f"{INSIDE_HOME}/.config/composer/vendor/bin",
    "/usr/local/.ghcup/bin",
    f"{INSIDE_HOME}/.dotnet/tools",
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/games",
    "/usr/local/games",
    "/snap/bin",
)
# File commands a step appends to (GITHUB_ENV and GITHUB_PATH change every later step).
FILE_COMMANDS: tuple[tuple[str, str], ...] = (
    ("GITHUB_ENV", "set_env"),
    ("GITHUB_PATH", "add_path"),
    ("GITHUB_OUTPUT", "set_output"),
    ("GITHUB_STATE", "save_state"),
    ("GITHUB_STEP_SUMMARY", "step_summary"),
)

# What the job's GITHUB_TOKEN may do: GitHub's permissive default for a workflow run on a
# push to the repository (docs: "Permissions for the GITHUB_TOKEN"; id-token only when a
# workflow asks). The proxy's api.github.com answers by it (``github_facts``).
TOKEN_PERMISSIONS: tuple[tuple[str, str], ...] = (
    ("actions", "write"), ("attestations", "write"), ("checks", "write"),
    ("contents", "write"), ("deployments", "write"), ("discussions", "write"),
    ("issues", "write"), ("metadata", "read"), ("packages", "write"), ("pages", "write"),
    ("pull-requests", "write"), ("repository-projects", "write"),
    ("security-events", "write"), ("statuses", "write"),
)  # fmt: skip

# The accounts of a hosted ubuntu-24.04 runner, for the sandbox's /etc/passwd and /etc/group:
# Ubuntu 24.04's system users and groups (base-passwd's fixed ids, systemd's and the
# packages' own), the services the image installs (Ubuntu2404-Readme.md: PostgreSQL's
# ``postgres``, MySQL, Docker) and the runner's user, in adm, users, docker and
# systemd-journal as on a runner. The ids a package's install picks are plausible ones, not
# read off a runner. ``runner``'s line (uid, gid, name, HOME) is the one the sandbox
# always had, and its own group keeps its gid.
RUNNER_GROUPS = ("adm", "users", "systemd-journal", "docker")
_USERS: tuple[str, ...] = (
    "root:x:0:0:root:/root:/bin/bash",
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin",
    "bin:x:2:2:bin:/bin:/usr/sbin/nologin",
    "sys:x:3:3:sys:/dev:/usr/sbin/nologin",
    "sync:x:4:65534:sync:/bin:/bin/sync",
    "games:x:5:60:games:/usr/games:/usr/sbin/nologin",
    "man:x:6:12:man:/var/cache/man:/usr/sbin/nologin",
    "lp:x:7:7:lp:/var/spool/lpd:/usr/sbin/nologin",
    "mail:x:8:8:mail:/var/mail:/usr/sbin/nologin",
    "news:x:9:9:news:/var/spool/news:/usr/sbin/nologin",
    "uucp:x:10:10:uucp:/var/spool/uucp:/usr/sbin/nologin",
    "proxy:x:13:13:proxy:/bin:/usr/sbin/nologin",
    "www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin",
    "backup:x:34:34:backup:/var/backups:/usr/sbin/nologin",
    "list:x:38:38:Mailing List Manager:/var/list:/usr/sbin/nologin",
    "irc:x:39:39:ircd:/run/ircd:/usr/sbin/nologin",
    "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin",
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
    "systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin",
    "systemd-timesync:x:996:996:systemd Time Synchronization:/:/usr/sbin/nologin",
    "dhcpcd:x:100:65534:DHCP Client Daemon,,,:/usr/lib/dhcpcd:/bin/false",
    "messagebus:x:101:101::/nonexistent:/usr/sbin/nologin",
    "systemd-resolve:x:991:991:systemd Resolver:/:/usr/sbin/nologin",
    "syslog:x:102:102::/nonexistent:/usr/sbin/nologin",
    "uuidd:x:103:103::/run/uuidd:/usr/sbin/nologin",
    "tss:x:104:104:TPM software stack,,,:/var/lib/tpm:/bin/false",
    "sshd:x:105:65534::/run/sshd:/usr/sbin/nologin",
    "pollinate:x:106:1::/var/cache/pollinate:/bin/false",
    "tcpdump:x:107:108::/nonexistent:/usr/sbin/nologin",
    "landscape:x:108:109::/var/lib/landscape:/usr/sbin/nologin",
    "fwupd-refresh:x:989:989:Firmware update daemon:/var/lib/fwupd:/usr/sbin/nologin",
    "polkitd:x:990:990:User for polkitd:/:/usr/sbin/nologin",
    "_chrony:x:109:112:Chrony daemon,,,:/var/lib/chrony:/usr/sbin/nologin",
    f"runner:x:{INSIDE_UID}:{INSIDE_UID}:runner:{INSIDE_HOME}:/bin/bash",
    "dnsmasq:x:110:65534:dnsmasq,,,:/var/lib/misc:/usr/sbin/nologin",
    "mysql:x:111:116:MySQL Server,,,:/nonexistent:/bin/false",
    "postgres:x:112:117:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash",
)
_GROUPS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("root", 0, ()), ("daemon", 1, ()), ("bin", 2, ()), ("sys", 3, ()),
    ("adm", 4, ("syslog",)), ("tty", 5, ()), ("disk", 6, ()), ("lp", 7, ()),
    ("mail", 8, ()), ("news", 9, ()), ("uucp", 10, ()), ("man", 12, ()), ("proxy", 13, ()),
    ("kmem", 15, ()), ("dialout", 20, ()), ("fax", 21, ()), ("voice", 22, ()),
    ("cdrom", 24, ()), ("floppy", 25, ()), ("tape", 26, ()), ("sudo", 27, ()),
    ("audio", 29, ()), ("dip", 30, ()), ("www-data", 33, ()), ("backup", 34, ()),
    ("operator", 37, ()), ("list", 38, ()), ("irc", 39, ()), ("src", 40, ()),
    ("shadow", 42, ()), ("utmp", 43, ()), ("video", 44, ()), ("sasl", 45, ()),
    ("plugdev", 46, ()), ("staff", 50, ()), ("games", 60, ()), ("users", 100, ()),
    ("nogroup", 65534, ()), ("systemd-journal", 999, ()), ("systemd-network", 998, ()),
    ("systemd-timesync", 996, ()), ("input", 995, ()), ("sgx", 994, ()), ("kvm", 993, ()),
    ("render", 992, ()), ("messagebus", 101, ()), ("systemd-resolve", 991, ()),
    ("syslog", 102, ()), ("uuidd", 103, ()), ("tss", 104, ()), ("_ssh", 105, ()),
    ("rdma", 106, ()), ("tcpdump", 108, ()), ("landscape", 109, ()), ("polkitd", 990, ()),
    ("fwupd-refresh", 989, ()), ("_chrony", 112, ()), ("ssl-cert", 115, ("postgres",)),
    ("mysql", 116, ()), ("postgres", 117, ()), ("docker", 118, ()),
    ("runner", INSIDE_UID, ()),
)  # fmt: skip
_WORKER_SOURCE = Path(__file__).with_name("runnerworker.py")
_CPUS_MODELLED = 16


class JobIdentity(BaseModel):
    """Who the job is: repository, run, runner and the ids its files are named by (per run),
    and the push it runs for (``pushevent.py``): the merge's, and the base's for the base."""

    model_config = ConfigDict(frozen=True)

    owner: str
    repo: str
    repository_id: int
    owner_id: int
    run_id: int
    run_number: int
    job_id: str  # the check run's id, as GitHub names a job
    branch: str  # the branch pushed to: the pull request's base
    default_branch: str
    push: Push  # what the checks of the head run on: the merge of head into base
    base_push: Push  # what the base check runs on
    # What the ``privileged`` check's job receives (None: the base runs no head code).
    privileged: PullTarget | None = None
    actor: str
    runner_number: int
    plan_id: str
    job_uuid: str
    file_commands: str  # the uuid the runner gives each step's file-command files
    cache_host: str
    pipelines_host: str
    runtime_path: str  # the run's path on the pipelines and cache services
    cache_path: str
    # The runner service's own, per run (SERVICE_ENV): systemd's invocation, journal
    # stream and main pid, and the runner's id for the step's processes.
    invocation_id: str = Field(default_factory=lambda: secrets.token_hex(16))
    journal_stream: str = Field(default_factory=lambda: f"9:{10_000 + secrets.randbelow(9_000)}")
    service_pid: int = Field(default_factory=lambda: 1_800 + secrets.randbelow(200))
    tracking_id: str = Field(default_factory=lambda: f"github_{_uuid()}")

    @property
    def repository(self) -> str:
        """Return ``owner/repo``."""
        return f"{self.owner}/{self.repo}"

    @property
    def workspace(self) -> str:
        """Return the checkout's path as a hosted runner lays it out."""
        return f"{WORK}/{self.repo}/{self.repo}"

    def file_command(self, kind: str) -> str:
        """Return the path of one file command (``set_env``, ``add_path``, …) inside."""
        return f"{TEMP}/_runner_file_commands/{kind}_{self.file_commands}"

    def event(self, check: str) -> JobEvent:
        """Return what ``check``'s job runs for: the base's push for the base, the pull
        request for the ``privileged`` check (when the base runs head code), else the
        push of the merge."""
        if check == BASE_CHECK:
            return self.base_push
        if check == PRIVILEGED_CHECK and self.privileged is not None:
            return self.privileged
        return self.push


def event_file(job: JobIdentity, event: JobEvent, now: float) -> str:
    """Return the event file (``GITHUB_EVENT_PATH``) of a job that runs for ``event``."""
    if isinstance(event, PullTarget):
        return target_event(job, event, job.base_push.after, now)
    return push_event(job, event, now)


def _event_env(job: JobIdentity, event: JobEvent) -> dict[str, str]:
    if isinstance(event, PullTarget):
        return target_env(job, event, job.base_push.after)
    return event_env(job, event)


def _event_context(job: JobIdentity, event: JobEvent) -> list[dict[str, str]]:
    if isinstance(event, PullTarget):
        return target_context(job, event, job.base_push.after)
    return event_context(job, event)


def github_facts(job: JobIdentity) -> GitHubFacts:
    """Return the job as GitHub would know it, for the proxy's api.github.com answers:
    after the push, the branch is at the merge."""
    return GitHubFacts(
        repository=job.repository,
        repository_id=job.repository_id,
        owner_id=job.owner_id,
        default_branch=job.default_branch,
        base_sha=job.push.after if job.branch == job.default_branch else "",
        permissions=dict(TOKEN_PERMISSIONS),
        seed=secrets.randbits(63),
    )


def _uuid() -> str:
    raw = secrets.token_hex(16)
    return f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-{raw[16:20]}-{raw[20:]}"


def identity_of(plan: Plan) -> JobIdentity:
    """Return a fresh, plausible identity for the job of ``plan``: its upstream's push.

    A plan that names no upstream (made before plans did) reads as a push of its head to
    ``main`` of a made-up repository.
    """
    upstream = plan.upstream or Upstream(
        repository="octo-org/project",
        owner_id=1_000_000 + secrets.randbelow(150_000_000),
        branch="main",
        default_branch="main",
    )
    return new_identity(
        upstream,
        plan.push or Push(before=plan.base_sha, after=plan.head_sha),
        plan.base_push or Push(before=ZERO_SHA, after=plan.base_sha),
        plan.privileged,
    )


def new_identity(
    upstream: Upstream, push: Push, base_push: Push, privileged: PullTarget | None = None
) -> JobIdentity:
    """Return a fresh, plausible identity for a job of ``upstream`` run for ``push`` (the
    base check's for ``base_push``, the ``privileged`` check's for ``privileged``); the
    owner is who pushed."""
    owner, _, repo = upstream.repository.partition("/")
    run_id = 10_000_000_000 + secrets.randbelow(4_000_000_000)
    return JobIdentity(
        owner=owner,
        repo=repo,
        repository_id=100_000_000 + secrets.randbelow(800_000_000),
        owner_id=upstream.owner_id,
        run_id=run_id,
        run_number=1 + secrets.randbelow(4000),
        job_id=str(30_000_000_000 + secrets.randbelow(5_000_000_000)),
        branch=upstream.branch,
        default_branch=upstream.default_branch,
        push=push,
        base_push=base_push,
        privileged=privileged,
        actor=owner,
        runner_number=1_000_000_000 + secrets.randbelow(900_000_000),
        plan_id=_uuid(),
        job_uuid=_uuid(),
        file_commands=_uuid(),
        cache_host=f"acghubeus{1 + secrets.randbelow(2)}.actions.githubusercontent.com",
        pipelines_host=f"pipelinesghubeus{2 + secrets.randbelow(24)}.actions.githubusercontent.com",
        runtime_path=secrets.token_urlsafe(33),
        cache_path=secrets.token_urlsafe(33),
    )


def _decoy(decoys: Sequence[Decoy], name: str) -> str:
    for decoy in decoys:
        if decoy.name == name:
            return decoy.value
    raise KeyError(f"no decoy named {name}")


def job_env(
    job: JobIdentity, event: JobEvent, decoys: Sequence[Decoy], *, home: str, temp: str
) -> dict[str, str]:
    """Return the variables a workflow step (or a JavaScript action) sees on a hosted runner,
    in the job of ``event`` (``JobIdentity.event``).

    ``home`` and ``temp`` are HOME and the runner's temp folder as commands see them
    (the hosted layout under bubblewrap).
    """
    runtime = f"https://{job.pipelines_host}/{job.runtime_path}/"
    workspace = f"{home}/work/{job.repo}/{job.repo}"
    env = {
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION": "__run",
        "GITHUB_ACTION_REF": "",
        "GITHUB_ACTION_REPOSITORY": "",
        "GITHUB_ACTOR": job.actor,
        "GITHUB_ACTOR_ID": str(job.owner_id),
        "GITHUB_TRIGGERING_ACTOR": job.actor,
        "GITHUB_API_URL": "https://api.github.com",
        "GITHUB_GRAPHQL_URL": "https://api.github.com/graphql",
        "GITHUB_SERVER_URL": "https://github.com",
        # The event, ref, SHA and workflow: the push of the commit checked out, or the
        # pull request in the base's privileged job.
        **_event_env(job, event),
        "GITHUB_EVENT_PATH": f"{temp}/_github_workflow/event.json",
        "GITHUB_JOB": "test",
        "GITHUB_REPOSITORY": job.repository,
        "GITHUB_REPOSITORY_ID": str(job.repository_id),
        "GITHUB_REPOSITORY_OWNER": job.owner,
        "GITHUB_REPOSITORY_OWNER_ID": str(job.owner_id),
        "GITHUB_RETENTION_DAYS": "90",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_RUN_ID": str(job.run_id),
        "GITHUB_RUN_NUMBER": str(job.run_number),
        "GITHUB_WORKSPACE": workspace,
        "RUNNER_ARCH": "X64",
        "RUNNER_ENVIRONMENT": "github-hosted",
        "RUNNER_NAME": f"GitHub Actions {job.runner_number}",
        "RUNNER_OS": "Linux",
        "RUNNER_TEMP": temp,
        "RUNNER_TOOL_CACHE": TOOL_CACHE,
        "RUNNER_WORKSPACE": workspace.rsplit("/", 1)[0],
        "ImageOS": IMAGE_OS,
        "ImageVersion": IMAGE_VERSION,
        **dict(IMAGE_ENV),
        "XDG_CONFIG_HOME": f"{home}/.config",
        **dict(SERVICE_ENV),
        "INVOCATION_ID": job.invocation_id,
        "JOURNAL_STREAM": job.journal_stream,
        "SYSTEMD_EXEC_PID": str(job.service_pid),
        "RUNNER_TRACKING_ID": job.tracking_id,
        "ACTIONS_RUNTIME_URL": runtime,
        "ACTIONS_RESULTS_URL": "https://results-receiver.actions.githubusercontent.com/",
        "ACTIONS_CACHE_URL": f"https://{job.cache_host}/{job.cache_path}/",
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{runtime}_apis/distributedtask/hubs/Actions/plans/"
        f"{job.plan_id}/jobs/{job.job_uuid}/idtoken?api-version=2.0",
    }
    for var, kind in FILE_COMMANDS:
        env[var] = f"{temp}/_runner_file_commands/{kind}_{job.file_commands}"
    for decoy in decoys:
        if decoy.env:
            env[decoy.env] = decoy.value
    return env


def etc_passwd() -> str:
    """Return the sandbox's /etc/passwd: a hosted runner's users."""
    return "".join(f"{line}\n" for line in _USERS)


def etc_group() -> str:
    """Return the sandbox's /etc/group: a hosted runner's groups, ``runner`` in its four."""
    lines = []
    for name, gid, members in _GROUPS:
        everyone = [*members, "runner"] if name in RUNNER_GROUPS else list(members)
        lines.append(f"{name}:x:{gid}:{','.join(everyone)}\n")
    return "".join(lines)


def checkout_config(job: JobIdentity, decoys: Sequence[Decoy]) -> str:
    """Return ``.git/config`` as ``actions/checkout`` leaves it, with its extraheader."""
    token = _decoy(decoys, "CHECKOUT_TOKEN")
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return (
        "[core]\n"
        "\trepositoryformatversion = 0\n"
        "\tfilemode = true\n"
        "\tbare = false\n"
        "\tlogallrefupdates = true\n"
        '[remote "origin"]\n'
        f"\turl = https://github.com/{job.repository}\n"
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
        "[gc]\n"
        "\tauto = 0\n"
        '[http "https://github.com/"]\n'
        f"\textraheader = AUTHORIZATION: basic {basic}\n"
    )


def _secret(value: str) -> dict[str, object]:
    return {"value": value, "isSecret": True}


def job_message(job: JobIdentity, event: JobEvent, decoys: Sequence[Decoy]) -> bytes:
    """Return the job message the worker keeps, in the runner's own JSON, for the job of
    ``event``."""
    token = _decoy(decoys, "RUNNER_WORKER_GITHUB_TOKEN")
    message = {
        "messageType": "PipelineAgentJobRequest",
        "plan": {"scopeIdentifier": _uuid(), "planType": "actions", "planId": job.plan_id},
        "timeline": {"id": _uuid(), "changeId": 1},
        "jobId": job.job_uuid,
        "jobDisplayName": "test",
        "jobName": "__default",
        "requestId": secrets.randbelow(1 << 31),
        "resources": {
            "endpoints": [
                {
                    "data": {"ServerId": _uuid(), "ServerName": "github"},
                    "name": "SystemVssConnection",
                    "url": f"https://{job.pipelines_host}/{job.runtime_path}/",
                    "authorization": {
                        "parameters": {
                            "AccessToken": _decoy(decoys, "RUNNER_WORKER_RUNTIME_TOKEN")
                        },
                        "scheme": "OAuth",
                    },
                    "isShared": False,
                    "isReady": True,
                }
            ]
        },
        "variables": {
            "system.github.token": _secret(token),
            "github_token": _secret(token),
            "system.github.job": {"value": "test"},
            "system.github.runid": {"value": str(job.run_id)},
            "system.phaseDisplayName": {"value": "test"},
            "NPM_TOKEN": _secret(_decoy(decoys, "RUNNER_WORKER_NPM_TOKEN")),
        },
        "contextData": {
            "github": {
                "t": 2,
                "d": [
                    {"k": "repository", "v": job.repository},
                    {"k": "run_id", "v": str(job.run_id)},
                    *_event_context(job, event),
                ],
            }
        },
    }
    return json.dumps(message, separators=(",", ":")).encode()


def worker_env(job: JobIdentity) -> dict[str, str]:
    """Return the worker's own environment: the runner service's, with no job secrets."""
    return {
        "HOME": INSIDE_HOME,
        "USER": "runner",
        "LOGNAME": "runner",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "PATH": "/home/runner/.local/bin:/opt/pipx_bin:/home/runner/.cargo/bin:"
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin",
        "INVOCATION_ID": secrets.token_hex(16),
        "JOURNAL_STREAM": f"8:{10_000 + secrets.randbelow(20_000)}",
        "RUNNER_TOOL_CACHE": TOOL_CACHE,
        "AGENT_TOOLSDIRECTORY": TOOL_CACHE,
        "ImageOS": IMAGE_OS,
        "ImageVersion": IMAGE_VERSION,
        "GITHUB_ACTIONS_RUNNER_TRACE": "",
        "DOTNET_NOLOGO": "1",
        "DOTNET_SKIP_FIRST_TIME_EXPERIENCE": "1",
    }


def worker_source(cpus: int | None = None) -> bytes:
    """Return the worker's program: ``runnerworker.py`` holding the runner's process tree
    for ``cpus`` CPUs (this machine's by default: the sandbox sees the same) and the folder
    a step's script is written in, and calling ``main``.

    The job's message is not in it: each command's step brings the message of its check's
    job (``jail.Worker.step``), so one program, compiled once, serves the whole run.
    """
    tree = literal(runner_tree(cpus or _cpus(), RUNNER_ROOT, RUNNER_BIN))
    return (
        _WORKER_SOURCE.read_bytes()
        + b"\nTREE = " + repr(tree).encode()
        + b"\nSCRIPTS = " + repr(TEMP).encode()
        + b"\nmain()\n"
    )  # fmt: skip


def worker_processes(cpus: int | None = None) -> int:
    """Return how many processes the worker's program keeps beside the step (pid 1 on)."""
    return count(runner_tree(cpus or _cpus(), RUNNER_ROOT, RUNNER_BIN))


def _cpus() -> int:
    # Per-CPU kernel threads are modelled up to a large runner's 16 CPUs: each CPU more is
    # nine processes more for every command, against the check's process limit.
    return min(os.cpu_count() or 1, _CPUS_MODELLED)


def file_commands(job: JobIdentity) -> Mapping[str, str]:
    """Return the file-command files (path under HOME → empty text) a step is handed."""
    return {
        f"work/_temp/_runner_file_commands/{kind}_{job.file_commands}": ""
        for _, kind in FILE_COMMANDS
    }

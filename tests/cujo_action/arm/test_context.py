"""A pull-request command's environment is a hosted runner step's: no proxy variable where
its namespace catches every connection, the run's CA trusted through the system bundle."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from jobs import job_for

from cujo_action.arm.actionsjob import IMAGE_ENV, SERVICE_ENV, TOOL_HOMES
from cujo_action.arm.context import (
    BUNDLE_CA_VARIABLES,
    LABELS,
    SYSTEM_CA_VARIABLES,
    Armed,
    ArmedDecoy,
    CheckArea,
    label,
    sandbox_env,
)
from cujo_action.arm.fingerprint import load_profile
from cujo_action.arm.fingerprint_probe import CA_NAMES, shape
from cujo_action.arm.host import tool_homes
from cujo_action.find.decoys import make_decoys
from cujo_action.net.proxy.config import SYSTEM_CA
from cujo_action.sandbox.cgroups import Limits
from cujo_action.schema import Plan

DECOYS = make_decoys()
PLAN = types.SimpleNamespace(head_sha="a" * 40, base_sha="b" * 40)
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
needs_system_bundle = pytest.mark.skipif(
    not SYSTEM_CA.is_file(), reason="no system CA bundle on this machine"
)

# A step's environment on a hosted ubuntu-24.04 runner (image 20251112.124.1), as `env`
# printed it in a public repository's CI log: every name, and a value of the same shape
# (ids, users and versions changed; what bash adds itself, PWD, OLDPWD, SHLVL and _, left
# out). GITHUB_TOKEN and the JavaScript actions' ACTIONS_* variables are what a workflow
# hands a step or an action (`env:`, `with:`), so they are allowed beside these.
RUNNER_STEP: dict[str, str] = {
    "ACCEPT_EULA": "Y",
    "ACTIONS_RUNNER_ACTION_ARCHIVE_CACHE": "/opt/actionarchivecache",
    "AGENT_TOOLSDIRECTORY": "/opt/hostedtoolcache",
    "ANDROID_HOME": "/usr/local/lib/android/sdk",
    "ANDROID_NDK": "/usr/local/lib/android/sdk/ndk/27.3.13750724",
    "ANDROID_NDK_HOME": "/usr/local/lib/android/sdk/ndk/27.3.13750724",
    "ANDROID_NDK_LATEST_HOME": "/usr/local/lib/android/sdk/ndk/29.0.14206865",
    "ANDROID_NDK_ROOT": "/usr/local/lib/android/sdk/ndk/27.3.13750724",
    "ANDROID_SDK_ROOT": "/usr/local/lib/android/sdk",
    "ANT_HOME": "/usr/share/ant",
    "AZURE_EXTENSION_DIR": "/opt/az/azcliextensions",
    "BOOTSTRAP_HASKELL_NONINTERACTIVE": "1",
    "CHROMEWEBDRIVER": "/usr/local/share/chromedriver-linux64",
    "CHROME_BIN": "/usr/bin/google-chrome",
    "CI": "true",
    "CONDA": "/usr/share/miniconda",
    "DEBIAN_FRONTEND": "noninteractive",
    "DOTNET_MULTILEVEL_LOOKUP": "0",
    "DOTNET_NOLOGO": "1",
    "DOTNET_SKIP_FIRST_TIME_EXPERIENCE": "1",
    "EDGEWEBDRIVER": "/usr/local/share/edge_driver",
    "ENABLE_RUNNER_TRACING": "true",
    "GECKOWEBDRIVER": "/usr/local/share/gecko_driver",
    "GHCUP_INSTALL_BASE_PREFIX": "/usr/local",
    "GITHUB_ACTION": "run_tests",
    "GITHUB_ACTIONS": "true",
    "GITHUB_ACTION_REF": "",
    "GITHUB_ACTION_REPOSITORY": "",
    "GITHUB_ACTOR": "octocat",
    "GITHUB_ACTOR_ID": "9263674",
    "GITHUB_API_URL": "https://api.github.com",
    "GITHUB_BASE_REF": "main",
    "GITHUB_ENV": "/home/runner/work/_temp/_runner_file_commands/set_env_ae69dde9",
    "GITHUB_EVENT_NAME": "pull_request",
    "GITHUB_EVENT_PATH": "/home/runner/work/_temp/_github_workflow/event.json",
    "GITHUB_GRAPHQL_URL": "https://api.github.com/graphql",
    "GITHUB_HEAD_REF": "patch-1",
    "GITHUB_JOB": "test",
    "GITHUB_OUTPUT": "/home/runner/work/_temp/_runner_file_commands/set_output_ae69dde9",
    "GITHUB_PATH": "/home/runner/work/_temp/_runner_file_commands/add_path_ae69dde9",
    "GITHUB_REF": "refs/pull/1/merge",
    "GITHUB_REF_NAME": "1/merge",
    "GITHUB_REF_PROTECTED": "false",
    "GITHUB_REF_TYPE": "branch",
    "GITHUB_REPOSITORY": "octo/app",
    "GITHUB_REPOSITORY_ID": "1103994604",
    "GITHUB_REPOSITORY_OWNER": "octo",
    "GITHUB_REPOSITORY_OWNER_ID": "201211038",
    "GITHUB_RETENTION_DAYS": "90",
    "GITHUB_RUN_ATTEMPT": "1",
    "GITHUB_RUN_ID": "19804993580",
    "GITHUB_RUN_NUMBER": "6",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_SHA": "e51dcc05f34ba0bdb8ed9b97d6d1cda9971670c1",
    "GITHUB_STATE": "/home/runner/work/_temp/_runner_file_commands/save_state_ae69dde9",
    "GITHUB_STEP_SUMMARY": "/home/runner/work/_temp/_runner_file_commands/step_summary_ae69dde9",
    "GITHUB_TRIGGERING_ACTOR": "octocat",
    "GITHUB_WORKFLOW": "CI",
    "GITHUB_WORKFLOW_REF": "octo/app/.github/workflows/test.yml@refs/pull/1/merge",
    "GITHUB_WORKFLOW_SHA": "e51dcc05f34ba0bdb8ed9b97d6d1cda9971670c1",
    "GITHUB_WORKSPACE": "/home/runner/work/app/app",
    "GOROOT_1_22_X64": "/opt/hostedtoolcache/go/1.22.12/x64",
    "GOROOT_1_23_X64": "/opt/hostedtoolcache/go/1.23.12/x64",
    "GOROOT_1_24_X64": "/opt/hostedtoolcache/go/1.24.10/x64",
    "GOROOT_1_25_X64": "/opt/hostedtoolcache/go/1.25.4/x64",
    "GRADLE_HOME": "/usr/share/gradle-9.2.0",
    "HOME": "/home/runner",
    "HOMEBREW_CLEANUP_PERIODIC_FULL_DAYS": "3650",
    "HOMEBREW_NO_AUTO_UPDATE": "1",
    "INVOCATION_ID": "c47ad3b3a3a34abdbda76f3ef70f1a1f",
    "ImageOS": "ubuntu24",
    "ImageVersion": "20251112.124.1",
    "JAVA_HOME": "/usr/lib/jvm/temurin-17-jdk-amd64",
    "JAVA_HOME_11_X64": "/usr/lib/jvm/temurin-11-jdk-amd64",
    "JAVA_HOME_17_X64": "/usr/lib/jvm/temurin-17-jdk-amd64",
    "JAVA_HOME_21_X64": "/usr/lib/jvm/temurin-21-jdk-amd64",
    "JAVA_HOME_25_X64": "/usr/lib/jvm/temurin-25-jdk-amd64",
    "JAVA_HOME_8_X64": "/usr/lib/jvm/temurin-8-jdk-amd64",
    "JOURNAL_STREAM": "9:14049",
    "LANG": "C.UTF-8",
    "LOGNAME": "runner",
    "MEMORY_PRESSURE_WATCH": "/sys/fs/cgroup/system.slice/agent.service/memory.pressure",
    "MEMORY_PRESSURE_WRITE": "c29tZSAyMDAwMDAgMjAwMDAwMAA=",
    "NVM_DIR": "/home/runner/.nvm",
    "PATH": "/snap/bin:/home/runner/.local/bin:/opt/pipx_bin:/usr/local/bin:/usr/bin:/bin",
    "PIPX_BIN_DIR": "/opt/pipx_bin",
    "PIPX_HOME": "/opt/pipx",
    "POWERSHELL_DISTRIBUTION_CHANNEL": "GitHub-Actions-ubuntu24",
    "RUNNER_ARCH": "X64",
    "RUNNER_ENVIRONMENT": "github-hosted",
    "RUNNER_NAME": "GitHub Actions 1000000009",
    "RUNNER_OS": "Linux",
    "RUNNER_TEMP": "/home/runner/work/_temp",
    "RUNNER_TOOL_CACHE": "/opt/hostedtoolcache",
    "RUNNER_TRACKING_ID": "github_819f27de-9fc5-4438-b015-7b1c8da97345",
    "RUNNER_WORKSPACE": "/home/runner/work/app",
    "SELENIUM_JAR_PATH": "/usr/share/java/selenium-server.jar",
    "SGX_AESM_ADDR": "1",
    "SHELL": "/bin/bash",
    "SWIFT_PATH": "/usr/share/swift/usr/bin",
    "SYSTEMD_EXEC_PID": "1898",
    "USER": "runner",
    "VCPKG_INSTALLATION_ROOT": "/usr/local/share/vcpkg",
    "XDG_CONFIG_HOME": "/home/runner/.config",
    "XDG_RUNTIME_DIR": "/run/user/1001",
}
# The same step in the job of a push to main, which the sandbox reads as (issue 33): a
# pull request's refs are empty on any other event (docs: "Variables"; github/docs#18485).
ON_PUSH: dict[str, str] = {
    **RUNNER_STEP,
    "GITHUB_BASE_REF": "",
    "GITHUB_HEAD_REF": "",
    "GITHUB_EVENT_NAME": "push",
    "GITHUB_REF": "refs/heads/main",
    "GITHUB_REF_NAME": "main",
    "GITHUB_REF_PROTECTED": "true",
    "GITHUB_WORKFLOW_REF": "octo/app/.github/workflows/test.yml@refs/heads/main",
}
# Handed to a step by its workflow or to a JavaScript action by the runner (decoys there).
WORKFLOW_GIVEN = {d.env for d in DECOYS if d.env} | {
    "ACTIONS_RUNTIME_URL",
    "ACTIONS_RESULTS_URL",
    "ACTIONS_CACHE_URL",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
}
# The image version the profile documents has Go 1.21 cached (Ubuntu2404-Readme.md).
OLDER_IMAGE = {"GOROOT_1_21_X64"}
PROXY_NAMES = {
    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
    "NO_PROXY", "no_proxy", "npm_config_proxy", "npm_config_https_proxy",
}  # fmt: skip


def armed(
    *, full: bool, bwrap: str = "/usr/bin/bwrap", homes: dict[str, str] | None = None
) -> Armed:
    limits = Limits(kind="rlimits", pids_max=256, memory_mb=None)
    labels = [label(c, p) for c, p in LABELS]
    return Armed(
        run_dir="/srv/run",
        plan_path="/srv/run/plan.json",
        ca_bundle="/srv/run/ca-bundle.pem",
        proxy_host="127.0.0.1",
        proxy_ports={name: 40_000 + i for i, name in enumerate(labels)},
        egress_log="/srv/run/evidence/egress.jsonl",
        decoys=[ArmedDecoy(name=d.name, value=d.value, env=d.env, file=d.file) for d in DECOYS],
        isolation="full" if full else "partial",
        python="/usr/bin/python3",
        tool_path="/usr/bin:/bin",
        tool_homes=homes or {},
        netns={name: f"ns-{i}" for i, name in enumerate(labels)} if full else {},
        proxy_hosts={name: f"10.200.0.{i}" for i, name in enumerate(labels)} if full else {},
        areas={
            c: CheckArea(home=f"/srv/run/{c}/home", uid=5000, gid=5000, limits=limits)
            for c, _ in LABELS
        },
        bwrap=bwrap,
        job=job_for("octo/app"),
    )


def env_of(run: Armed, check: str = "tests", phase: str = "test") -> dict[str, str]:
    plan: Plan = PLAN  # type: ignore[assignment]
    return sandbox_env(run, plan, check=check, phase=phase, venv="/home/runner/work/venv")


@pytest.mark.parametrize(("check", "phase"), LABELS)
def test_no_proxy_variable_where_the_namespace_catches_every_connection(
    check: str, phase: str
) -> None:
    env = env_of(armed(full=True), check, phase)
    assert not [name for name in env if "proxy" in name.lower()]
    assert not [value for value in env.values() if "10.200.0." in value or "127.0.0.1" in value]


@needs_system_bundle
def test_the_run_ca_is_trusted_through_the_system_bundle_under_bubblewrap() -> None:
    env = env_of(armed(full=True))
    trusting = {name: env[name] for name in CA_NAMES if name in env}
    assert trusting == dict.fromkeys(SYSTEM_CA_VARIABLES, SYSTEM_BUNDLE)
    # The one path commands read is the system's, where the view binds the run's bundle.
    view = armed(full=True).view("tests")
    assert view is not None
    assert ("/srv/run/ca-bundle.pem", SYSTEM_BUNDLE) in view.ro_binds


def test_without_a_namespace_every_client_is_told_the_proxy_and_the_bundle() -> None:
    # The fallback (not root, no nftables, bubblewrap refused): no namespace catches
    # connections, so the variables are the only route, and no view binds the bundle.
    env = env_of(armed(full=False, bwrap=""))
    for name in PROXY_NAMES - {"all_proxy"}:
        if name.lower() != "no_proxy":
            assert env[name] == f"http://127.0.0.1:{40_000 + LABELS.index(('tests', 'test'))}"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    assert {name: env[name] for name in BUNDLE_CA_VARIABLES} == dict.fromkeys(
        BUNDLE_CA_VARIABLES, "/srv/run/ca-bundle.pem"
    )
    assert env["TMPDIR"] == "/srv/run/tests/home/.cache/tmp"


def test_a_partial_run_under_bubblewrap_keeps_the_proxy_variables() -> None:
    env = env_of(armed(full=False))
    assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")
    assert "TMPDIR" not in env


@pytest.mark.parametrize("full", [True, False])
def test_the_environment_is_a_subset_of_a_runner_steps_in_names_and_shapes(full: bool) -> None:
    homes = {name: value for name, value, _ in TOOL_HOMES}
    env = env_of(armed(full=full, homes=homes))
    if full:
        allowed = set(RUNNER_STEP) | WORKFLOW_GIVEN | OLDER_IMAGE | set(SYSTEM_CA_VARIABLES)
        assert sorted(set(env) - allowed) == []
    # Every name a runner step has too reads the same way: a path, a number, a flag, text.
    differing = {
        name: (shape(env[name]), shape(ON_PUSH[name]))
        for name in env
        if name in ON_PUSH and shape(env[name]) != shape(ON_PUSH[name])
    }
    assert differing == {}
    event = ("GITHUB_EVENT_NAME", "GITHUB_REF", "GITHUB_REF_NAME", "GITHUB_BASE_REF",
             "GITHUB_HEAD_REF", "GITHUB_REF_TYPE")  # fmt: skip
    assert {name: env[name] for name in event} == {name: ON_PUSH[name] for name in event}
    assert len(env) >= load_profile()["fields"]["env.count"]["at_least"]
    assert not [text for item in env.items() for text in item if "cujo" in text.lower()]


def test_every_image_and_service_variable_is_a_runners() -> None:
    for name, value in [*IMAGE_ENV, *SERVICE_ENV, *((n, v) for n, v, _ in TOOL_HOMES)]:
        assert name in RUNNER_STEP or name in OLDER_IMAGE, name
        assert shape(value) == shape(RUNNER_STEP.get(name, value)), name


def test_the_service_variables_are_the_runs_and_the_same_for_every_command() -> None:
    run = armed(full=True)
    first, again = env_of(run, "install", "install"), env_of(run, "tests", "test")
    service = ("INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "RUNNER_TRACKING_ID")
    assert [first[n] for n in service] == [again[n] for n in service]
    other = env_of(armed(full=True))
    assert first["INVOCATION_ID"] != other["INVOCATION_ID"]
    assert first["RUNNER_TRACKING_ID"] != other["RUNNER_TRACKING_ID"]
    assert first["RUNNER_TRACKING_ID"].startswith("github_")


def test_tool_homes_are_set_only_where_the_machine_has_them(tmp_path: Path) -> None:
    found = tool_homes()
    for name, value, needs in TOOL_HOMES:
        assert found.get(name) == (value if Path(needs).exists() else None)
    env = env_of(armed(full=True, homes={"JAVA_HOME": "/usr/lib/jvm/temurin-17-jdk-amd64"}))
    assert env["JAVA_HOME"] == "/usr/lib/jvm/temurin-17-jdk-amd64"
    assert "JAVA_HOME" not in env_of(armed(full=True))


def test_root_asks_only_about_host_folders_the_sandbox_cannot_write() -> None:
    # tool_homes runs as root while arming, before any pull-request code: each path it
    # asks about is an absolute path of the host's image, never HOME, /tmp or the run's.
    writable = ("/home/", "/tmp/", "/var/tmp/", "/dev/shm/", "/run/")
    for _, _, needs in TOOL_HOMES:
        assert needs.startswith("/"), needs
        assert ".." not in needs.split("/"), needs
        assert not needs.startswith(writable), needs


def test_a_checks_tool_copies_are_bound_over_the_tools_in_its_view_alone() -> None:
    job = job_for("octo/calc")
    area = CheckArea(home="/h", uid=None, gid=None, limits=Limits("rlimits", 1024, None))
    armed = Armed(
        run_dir="/r", plan_path="/r/plan.json", ca_bundle="/r/ca.pem", proxy_host="127.0.0.1",
        proxy_ports={}, egress_log="/r/e", decoys=[], isolation="full", python="/usr/bin/python3",
        tool_path="", areas={"install": area, "tests": area}, bwrap="/usr/bin/bwrap", job=job,
        tool_copies={"install": [("/r/checks/install/tools/sudo", "/usr/bin/sudo")]},
    )  # fmt: skip
    install, tests = armed.view("install"), armed.view("tests")
    assert install is not None
    assert tests is not None
    assert ("/r/checks/install/tools/sudo", "/usr/bin/sudo") in install.ro_binds
    assert not any(inside == "/usr/bin/sudo" for _, inside in tests.ro_binds)

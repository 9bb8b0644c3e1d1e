"""Arm a run: decoy secrets, the logging proxy with its per-run CA, and the run's layout.

``arm`` starts what watches the pull request; ``sandbox_env`` builds the one environment
pull-request commands see. Nothing of the harness's own environment is passed through:
the sandbox looks like an ordinary CI job and holds only decoys.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cujo_action.decoys import Decoy, decoy_files, make_decoys
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
    python: str  # the interpreter venvs are made from
    tool_path: str  # directories of build tools (node, npm) the sandbox may use

    def decoy_objects(self) -> tuple[Decoy, ...]:
        """Return the decoys as the decoys module's type."""
        return tuple(Decoy(d.name, d.value, d.env, d.file) for d in self.decoys)


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


def _base_python() -> str:
    """Return a real interpreter (not the harness's venv) to make the run's venvs from."""
    base = (
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    )
    return str(base) if base.exists() else sys.executable


def arm(plan: Plan, run_dir: Path) -> tuple[Armed, ProxyHandle]:
    """Seed decoys, start the logging proxy and write the context check processes read."""
    run_dir.mkdir(parents=True, exist_ok=True)
    evidence = run_dir / "evidence"
    evidence.mkdir(exist_ok=True)
    decoys = make_decoys()
    allow = [*REGISTRY_HOSTS, *plan.policy.egress_allow]
    config = ProxyConfig(
        labels=[label(c, p) for c, p in LABELS],
        confdir=run_dir / "proxy-ca",
        allow_hosts=allow,
        decoys=[{"name": d.name, "value": d.value} for d in decoys],
        log_path=evidence / "egress.jsonl",
        ready_path=run_dir / "proxy-ready.json",
    )
    handle = start_proxy(config)
    bundle = run_dir / "ca-bundle.pem"
    write_ca_bundle(handle.ca_cert, bundle)
    armed = Armed(
        run_dir=str(run_dir),
        plan_path=str(run_dir / "plan.json"),
        ca_bundle=str(bundle),
        proxy_host=config.listen_host,
        proxy_ports=dict(handle.ports),
        egress_log=str(config.log_path),
        decoys=[DecoySpec(name=d.name, value=d.value, env=d.env, file=d.file) for d in decoys],
        isolation="partial",
        python=_base_python(),
        tool_path=_tool_path(),
    )
    (run_dir / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2))
    (run_dir / "context.json").write_text(armed.model_dump_json(indent=2))
    return armed, handle


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
    proxy = f"http://{armed.proxy_host}:{armed.proxy_ports[label(check, phase)]}"
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

"""Lay the decoys out as files where a hosted runner's job leaves credentials.

A HOME no runner has (``~/.aws``, ``~/.pypirc``, ``~/.env``) is itself a tell: code that
checks where it runs sees it before it looks for secrets. So the decoy files are those a
job has once its usual steps ran:

* ``~/.docker/config.json`` as ``docker login`` (which ``docker/login-action`` runs)
  writes it on a runner, whose Docker has no credential store: ``{"auths": {"ghcr.io":
  {"auth": base64(user:token)}}}``, tab-indented, 0600, in a 0700 folder;
* the runner's registration, in its root folder (the folder above ``bin/``, where
  ``Runner.Worker`` lives: actions/runner's ``HostContext.GetConfigFile``): ``.runner``
  (its settings, no secret), ``.credentials`` (the OAuth client it signs in as) and
  ``.credentials_rsaparams`` (the RSA key it signs with), as ``ConfigurationStore`` and
  ``RSAFileKeyManager`` serialize them (indented JSON, camelCase names);
* an SSH key and gh's hosts file under HOME.

No ``.npmrc``: ``actions/setup-node`` writes one (under RUNNER_TEMP, with
``NPM_CONFIG_USERCONFIG`` pointing at it) only when given a ``registry-url``, and the
job's variables do not say it ran. The checkout's ``.git/config`` is
``actionsjob.checkout_config``.

Pure: ``staging.seed_home`` writes the files; each check's watcher watches the ones that
hold a decoy (``decoy_files``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import textwrap
import uuid
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from cujo_action.arm.actionsjob import RUNNER_BIN, WORK, JobIdentity
from cujo_action.find.decoys import Decoy, rsa_fields
from cujo_action.sandbox.jail import INSIDE_HOME

# The runner's root folder, relative to HOME (RUNNER_BIN's parent).
RUNNER_DIR = str(PurePosixPath(RUNNER_BIN).parent.relative_to(INSIDE_HOME))
RUNNER_SETTINGS = f"{RUNNER_DIR}/.runner"
RUNNER_CREDENTIALS = f"{RUNNER_DIR}/.credentials"
RUNNER_RSA = f"{RUNNER_DIR}/.credentials_rsaparams"
DOCKER_CONFIG = ".docker/config.json"
SSH_KEY = ".ssh/id_ed25519"
GH_HOSTS = ".config/gh/hosts.yml"
REGISTRY = "ghcr.io"
# Files and folders their writers keep from other users (the rest: 0644 and 0755).
PRIVATE_FILES = frozenset({SSH_KEY, DOCKER_CONFIG, RUNNER_RSA})
PRIVATE_FOLDERS = frozenset({".ssh", ".docker"})
_OPENSSH_WRAP = 70


def file_mode(rel: str) -> int:
    """Return the mode the tool that writes ``rel`` (relative to HOME) gives it."""
    return 0o600 if rel in PRIVATE_FILES else 0o644


def folder_mode(rel: str) -> int:
    """Return the mode of a folder on the way to a planted file (relative to HOME)."""
    return 0o700 if rel in PRIVATE_FOLDERS else 0o755


def _values(decoys: Iterable[Decoy]) -> dict[str, str]:
    return {d.name: d.value for d in decoys}


def docker_config(user: str, token: str) -> str:
    """Return ``~/.docker/config.json`` after ``docker login ghcr.io`` as ``user``.

    The docker CLI writes it with ``json.MarshalIndent(…, "", "\\t")``: tabs, and no
    newline at the end.
    """
    auth = base64.b64encode(f"{user}:{token}".encode()).decode()
    return json.dumps({"auths": {REGISTRY: {"auth": auth}}}, indent="\t")


def runner_credentials(client_id: str, job: JobIdentity) -> str:
    """Return the runner's ``.credentials``: the OAuth client it asks for its tokens as.

    ``ConfigurationManager`` saves a ``CredentialData`` (scheme, data) through
    Newtonsoft with camelCase names, indented by two spaces, no newline at the end. The
    token service's path names the account (a uuid of the job's, the same every time).
    """
    data = {
        "clientId": client_id,
        "authorizationUrl": "https://vstoken.actions.githubusercontent.com/_apis/oauth2/token/"
        + _uuid_of(f"{job.owner_id}/{job.plan_id}"),
        "requireFipsCryptography": "True",
    }
    return json.dumps({"scheme": "OAuth", "data": data}, indent=2)


def runner_rsa_params(key: str) -> str:
    """Return the runner's ``.credentials_rsaparams`` holding the ``RUNNER_RSA_KEY`` decoy.

    ``RSAFileKeyManager`` saves the key's parameters (``RSAParametersSerializable``:
    each a byte[] in base64) through Newtonsoft, indented, no newline at the end.
    """
    return json.dumps(rsa_fields(key), indent=2)


def runner_settings(job: JobIdentity) -> str:
    """Return the runner's ``.runner``: its settings (``RunnerSettings``), no secret.

    Named as ``RUNNER_NAME`` names it, served by the job's pipelines host, ephemeral (one
    job, as a hosted runner), working in the hosted layout's work folder.
    """
    settings = {
        "agentId": job.runner_number,
        "agentName": f"GitHub Actions {job.runner_number}",
        "poolId": 2,
        "poolName": "GitHub Actions",
        "ephemeral": True,
        "serverUrl": f"https://{job.pipelines_host}/{job.runtime_path}/",
        "workFolder": WORK,
        "useV2Flow": True,
        "serverUrlV2": "https://broker.actions.githubusercontent.com/",
    }
    return json.dumps(settings, indent=2)


def ssh_key(body: str) -> str:
    """Return an OpenSSH private key file around its base64 ``body``."""
    wrapped = "\n".join(textwrap.wrap(body, _OPENSSH_WRAP))
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{wrapped}\n-----END OPENSSH PRIVATE KEY-----\n"


def gh_hosts(token: str) -> str:
    """Return gh's ``hosts.yml`` after ``gh auth login`` with ``token``."""
    return (
        "github.com:\n"
        "    users:\n"
        "        ci-bot:\n"
        f"            oauth_token: {token}\n"
        "    git_protocol: https\n"
        f"    oauth_token: {token}\n"
        "    user: ci-bot\n"
    )


def decoy_files(decoys: Iterable[Decoy], job: JobIdentity) -> dict[str, str]:
    """Return the files under HOME (relative path → text) that hold the given decoys."""
    v = _values(decoys)
    files: dict[str, str] = {}
    if "DOCKER_LOGIN_TOKEN" in v:
        files[DOCKER_CONFIG] = docker_config(job.actor, v["DOCKER_LOGIN_TOKEN"])
    if "RUNNER_CLIENT_ID" in v:
        files[RUNNER_CREDENTIALS] = runner_credentials(v["RUNNER_CLIENT_ID"], job)
    if "RUNNER_RSA_KEY" in v:
        files[RUNNER_RSA] = runner_rsa_params(v["RUNNER_RSA_KEY"])
    if "SSH_PRIVATE_KEY" in v:
        files[SSH_KEY] = ssh_key(v["SSH_PRIVATE_KEY"])
    if "GH_OAUTH_TOKEN" in v:
        files[GH_HOSTS] = gh_hosts(v["GH_OAUTH_TOKEN"])
    return files


def decoy_paths(home: Path, decoys: Iterable[Decoy], job: JobIdentity) -> list[Path]:
    """Return where the decoy files sit in ``home``: what a check's watcher watches."""
    return [home / rel for rel in decoy_files(decoys, job)]


def runner_files(job: JobIdentity) -> dict[str, str]:
    """Return the runner's files under HOME that hold no decoy (relative path → text)."""
    return {RUNNER_SETTINGS: runner_settings(job)}


def _uuid_of(seed: str) -> str:
    """Return a version-4-shaped uuid drawn from ``seed`` (the same seed, the same uuid)."""
    return str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16], version=4))

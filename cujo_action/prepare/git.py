"""Run git for prepare: a scrubbed environment, safe settings, one deadline, no secret shown.

Every call runs with no hook, submodule, credential helper or ``ext::`` transport; a
token goes only in the environment, as an extra header scoped to the clone's origin; a
URL's credentials are redacted from everything said. Resolving refs, fetching a pull
request's head and making sure a commit is in the clone live here too.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cujo_action.schema import MAX_SHORT, clip

_SHA = re.compile(r"[0-9a-f]{40}")


class PrepareError(Exception):
    """A repository or ref that cannot be prepared; the message says what to fix."""


# Every git call gets these: no hook from any repository ever runs, no submodule is
# touched, no credential helper is asked, and only these transports are allowed (the
# `ext::` transport runs commands).
_GIT_CONFIG = (
    f"core.hooksPath={os.devnull}",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "credential.helper=",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
)

# Passed through from the harness: what git needs to find itself and reach the network
# (and the certificate bundle of a server whose CA is not the system's, as on some GHES).
_ENV_PASS = (
    "PATH",
    "TMPDIR",
    "GIT_SSL_CAINFO",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
)


def git_env(home: Path) -> dict[str, str]:
    """Return a scrubbed environment for git: no harness secrets, no user or system config."""
    env = {name: os.environ[name] for name in _ENV_PASS if name in os.environ}
    env.update(
        HOME=str(home),
        LC_ALL="C",  # git's messages, which PrepareError quotes, in one language
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_SSH_COMMAND="ssh -o BatchMode=yes",
    )
    return env


@dataclass
class GitResult:
    code: int
    out: bytes
    err: str


class Git:
    """Run git under one deadline with a scrubbed environment and the safe settings."""

    def __init__(self, env: dict[str, str], timeout: float, shown: str, raw: str) -> None:
        self.env, self.timeout, self.shown, self.raw = env, timeout, shown, raw
        self.deadline = time.monotonic() + timeout

    def run(
        self,
        *args: str,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> GitResult:
        """Run one git command in ``cwd`` (``stdin`` its input); return its code and output."""
        argv = ["git"]
        for setting in _GIT_CONFIG:
            argv += ["-c", setting]
        argv += args
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._late(args[0])
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # so a timeout kills git's helpers too
            )
        except FileNotFoundError:
            raise PrepareError("git is not on PATH; install git where Cujo runs.") from None
        with proc:
            try:
                out, err = proc.communicate(stdin, timeout=left)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise self._late(args[0]) from None
        return GitResult(proc.returncode, out, err.decode("utf-8", "replace"))

    def check(self, *args: str, cwd: Path, what: str) -> bytes:
        """Run git and return stdout, or raise PrepareError saying ``what`` failed."""
        result = self.run(*args, cwd=cwd)
        if result.code != 0:
            raise PrepareError(f"Could not {what}: {self.why(result)}")
        return result.out

    def why(self, result: GitResult) -> str:
        """Return git's telling stderr line, with any credentials in the URL hidden."""
        lines = [line.strip() for line in result.err.splitlines() if line.strip()]
        # The first fatal/error line names the cause; later lines are generic advice.
        line = next(
            (x for x in lines if x.startswith(("fatal:", "error:"))),
            lines[-1] if lines else f"git exited with code {result.code}",
        )
        return clip(line.replace(self.raw, self.shown), MAX_SHORT)

    def _late(self, command: str) -> PrepareError:
        return PrepareError(
            f"git {command} did not finish within the {self.timeout:g} s allowed to prepare "
            f"{self.shown}; check that the repository is reachable, or raise the deadline."
        )


def redact(repo: str) -> str:
    """Return ``repo`` with any user or token in a URL replaced by ***."""
    if "://" not in repo:
        return repo
    parts = urlsplit(repo)
    if "@" not in parts.netloc:
        return repo
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def check_ref(ref: str) -> None:
    if not ref or ref.startswith("-") or ":" in ref or any(c.isspace() for c in ref):
        raise PrepareError(f"{ref!r} is not a valid ref; give a branch, tag or commit SHA.")


def is_sha(ref: str) -> bool:
    return bool(_SHA.fullmatch(ref))


def _has_commit(git: Git, clone: Path, sha: str) -> bool:
    return git.run("cat-file", "-e", f"{sha}^{{commit}}", cwd=clone).code == 0


def _rev_parse(git: Git, cwd: Path, ref: str, env: Mapping[str, str] | None = None) -> str:
    result = git.run(
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{ref}^{{commit}}",
        cwd=cwd,
        env=env,
    )
    return result.out.decode().strip() if result.code == 0 else ""


def _unknown_ref(ref: str, shown: str) -> PrepareError:
    return PrepareError(f"{ref!r} is not a branch, tag or commit in {shown}.")


def resolve_local(git: Git, source: Path, ref: str) -> str:
    # The ceiling keeps git from finding an enclosing repository above `source`.
    sha = _rev_parse(git, source, ref, env={"GIT_CEILING_DIRECTORIES": str(source.parent)})
    if not sha:
        raise _unknown_ref(ref, git.shown)
    return sha


def resolve_remote(git: Git, clone: Path, ref: str) -> str:
    """Resolve ``ref`` against the remote, fetching it (e.g. refs/pull/7/head) if needed."""
    if is_sha(ref):
        if not _has_commit(git, clone, ref):
            fetched = git.run("fetch", "--quiet", "--no-tags", "origin", ref, cwd=clone)
            if fetched.code != 0 or not _has_commit(git, clone, ref):
                raise _unknown_ref(ref, git.shown)
        return ref
    fetched = git.run("fetch", "--quiet", "--no-tags", "origin", ref, cwd=clone)
    sha = _rev_parse(git, clone, "FETCH_HEAD") if fetched.code == 0 else ""
    # Not a name the remote has: maybe an abbreviated SHA or origin/<branch> in the clone.
    sha = sha or _rev_parse(git, clone, ref)
    if not sha:
        raise _unknown_ref(ref, git.shown)
    return sha


def auth_env(repo: str, token: str) -> dict[str, str]:
    """Return git's environment for sending ``token`` to ``repo``'s host, and only there."""
    parts = urlsplit(repo)
    if parts.scheme != "https" or not parts.hostname:
        raise PrepareError(
            f"a token is sent only over https; {redact(repo)} would carry it in clear text."
        )
    if "@" in parts.netloc:
        raise PrepareError(f"{redact(repo)} carries credentials of its own and a token.")
    if not token or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        # A newline would add a header of its own to every request git makes.
        raise PrepareError("the token is empty or holds spaces or control characters.")
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    # As actions/checkout authenticates (an extra header, not the URL), scoped to this
    # origin, with redirects refused so the header never follows one elsewhere.
    origin = f"{parts.scheme}://{parts.netloc}/"
    return {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": f"http.{origin}.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        "GIT_CONFIG_KEY_1": "http.followRedirects",
        "GIT_CONFIG_VALUE_1": "false",
    }


def fetch_pull_head(git: Git, clone: Path, number: int, head: str) -> str:
    """Fetch ``refs/pull/N/head`` and return it, which must still be the dispatched ``head``."""
    ref = f"refs/pull/{number}/head"
    # https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/reviewing-changes-in-pull-requests/checking-out-pull-requests-locally
    fetched = git.run(
        "fetch", "--quiet", "--no-tags", "origin", f"+{ref}:refs/cujo/pull/{number}", cwd=clone
    )
    if fetched.code != 0:
        raise PrepareError(
            f"Could not fetch {ref} from {git.shown}: {git.why(fetched)}. A private "
            "repository needs the job's token (action.yml passes github.token); a fork's "
            "head must be readable with it."
        )
    sha = _rev_parse(git, clone, f"refs/cujo/pull/{number}")
    if sha != head:
        raise PrepareError(
            f"The pull request's head moved: {ref} is now {sha or 'gone'}, but this run was "
            f"dispatched for {head} (a push or force push between dispatch and clone). "
            "Nothing was reviewed; the run for the new head reviews it."
        )
    return sha


def ensure_commit(git: Git, clone: Path, sha: str, ref: str) -> None:
    if _has_commit(git, clone, sha):
        return
    git.run("fetch", "--quiet", "--no-tags", "origin", sha, cwd=clone)
    if not _has_commit(git, clone, sha):
        raise PrepareError(
            f"{ref!r} resolves to {sha} in {git.shown}, but that commit could not be "
            "fetched from it; give a branch or tag that contains it."
        )

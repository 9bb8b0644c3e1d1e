"""Fetch a pull request from its remote into a throwaway clone (`cujo review OWNER/REPO#N`).

``OWNER/REPO#N``, a pull request URL, or ``--pr N`` inside a clone name a remote and a
number (``pullname``); ``refs/pull/N/head`` (as GitHub serves it) and the base branch
are fetched into a bare clone of their own, which the sandbox then clones as it clones
any local repository: nothing of the head is checked out on this machine. The base is
the pull request's own when GitHub can be asked, else ``--base``, else the remote's
default branch.

A token (``GH_TOKEN``, ``GITHUB_TOKEN``, else ``gh auth token``) goes to git alone, in its
environment as an extra header scoped to the remote's origin (never in argv, never in the
clone's config), only on GitHub's hosts (github.com, ``CUJO_GITHUB_WEB_URL``'s), and to
GitHub's API; the sandbox's environment never holds it, and nothing printed does. Light
on purpose (the standard library alone): it runs before the sandbox starts.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from app_relay.cli.pullname import PullError, PullTarget, redact, remote_target

# The variables a person's tokens come in: read for git and the API here, and taken out of
# the sandbox's environment (``sandbox_env``), as the model key is.
TOKEN_VARS = ("GH_TOKEN", "GITHUB_TOKEN")
SECRET_VARS = (*TOKEN_VARS, "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "ANTHROPIC_API_KEY")
GIT_TIMEOUT_S = 600.0
API_TIMEOUT_S = 20.0
# A pull request's JSON is a few tens of KB; anything far larger is not one.
MAX_API_ANSWER = 2_000_000
_SHA = re.compile(r"^[0-9a-f]{40}$")
# A branch name as GitHub answers it: what git accepts, and nothing an option could be.
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/+-]{1,255}(?<![./])$")


@dataclass
class FetchedPull:
    """A pull request fetched into a throwaway clone: the commits to review and where."""

    target: PullTarget
    clone: Path
    base_ref: str
    base_sha: str
    head_sha: str
    base_from: str  # "github", "--base" or "default branch"
    notes: list[str] = field(default_factory=list)
    # The pull request's own text as GitHub answered it (None where it was not asked, or
    # did not say): the workflow rules judge what the base's workflows make of it.
    title: str | None = None
    body: str | None = None
    head_ref: str | None = None

    def remove(self) -> None:
        """Remove the throwaway clone."""
        shutil.rmtree(self.clone, ignore_errors=True)

    def merge_target(self) -> dict[str, str]:
        """Return where the pull request merges, as the sandbox's ``--upstream`` and
        ``--base-branch`` take it (each left out when it is not a name the sandbox uses)."""
        from cujo_action.schema import BRANCH, REPO_NAME  # noqa: PLC0415  (pydantic: late)

        named = "/".join(self.target.owner_name) if self.target.owner_name else ""
        return {
            "upstream": named if REPO_NAME.fullmatch(named) else "",
            "base_branch": self.base_ref
            if BRANCH.fullmatch(self.base_ref) and not _SHA.match(self.base_ref)
            else "",
        }

    def as_json(self) -> dict[str, object]:
        """Return the ``pull_request`` object of ``cujo review --json``."""
        return {
            "repo": self.target.repo,
            "number": self.target.number,
            "url": self.target.shown_url,
            "base_ref": self.base_ref,
            "base_from": self.base_from,
        }


# --------------------------------------------------------------------------- naming


def target_of_clone(path: str, number: int) -> PullTarget:
    """Return pull request ``number`` of the clone at ``path``, from its ``origin`` remote."""
    if number < 1:
        raise PullError(f"--pr wants a pull request number above 0 (got {number})", 2)
    folder = Path(path).expanduser().resolve()
    inside = _git(["-C", str(folder), "rev-parse", "--git-dir"], env=_git_env({}))
    if inside.returncode != 0:
        raise PullError(
            f"{folder} is not a git clone: run `cujo review --pr {number}` inside a clone of "
            "the repository (or give --repo PATH of one), or name the pull request as OWNER/REPO#N",
            2,
        )
    got = _git(["-C", str(folder), "remote", "get-url", "origin"], env=_git_env({}))
    url = got.stdout.strip()
    if got.returncode != 0 or not url:
        raise PullError(
            f"the clone at {folder} has no `origin` remote to fetch pull request {number} "
            f"from: add one (git remote add origin URL) or name it as OWNER/REPO#{number}",
            2,
        )
    return remote_target(url, number)


# --------------------------------------------------------------------------- asking


def github_origins(env: Mapping[str, str]) -> set[str]:
    """Return the origins (``host[:port]``) the person's GitHub token is meant for.

    github.com, and the GitHub ``CUJO_GITHUB_WEB_URL`` names (GitHub Enterprise): a pull
    request URL on any other host never gets ``GH_TOKEN``, only what ``gh`` keeps for
    that very host.
    """
    origins = {"github.com"}
    if web := env.get("CUJO_GITHUB_WEB_URL", "").strip():
        netloc = urlsplit(web).netloc.rpartition("@")[2].lower()
        if netloc:
            origins.add(netloc)
    return origins


def token_of(env: Mapping[str, str], host: str, *, from_env: bool) -> str | None:
    """Return the person's token for ``host``: ``GH_TOKEN`` or ``GITHUB_TOKEN`` (when
    ``from_env``: the host is GitHub's), else what ``gh auth token`` keeps for the host."""
    if from_env:
        for name in TOKEN_VARS:
            if value := env.get(name, "").strip():
                return value
    gh = shutil.which("gh", path=env.get("PATH"))
    if gh is None or not host:
        return None
    try:
        done = subprocess.run(
            [gh, "auth", "token", "--hostname", host],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
            env={k: v for k, v in env.items() if k not in SECRET_VARS},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    token = done.stdout.strip()
    return token if done.returncode == 0 and token else None


def api_base(target: PullTarget, env: Mapping[str, str]) -> str | None:
    """Return GitHub's API for this remote, or None when there is none to ask.

    ``CUJO_GITHUB_API_URL`` when set (GitHub Enterprise, a test's fake); api.github.com
    for a github.com remote; otherwise nothing is asked (a bare repository, any other host).
    """
    if explicit := env.get("CUJO_GITHUB_API_URL", "").strip():
        if urlsplit(explicit).scheme not in ("http", "https"):
            raise PullError(f"CUJO_GITHUB_API_URL={explicit!r} is not an http(s) URL", 2)
        return explicit.rstrip("/")
    if target.host.lower() in ("github.com", "www.github.com"):
        return "https://api.github.com"
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: the token in the request must never follow one to another host."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def ask_pull(api: str, target: PullTarget, token: str | None) -> dict[str, object]:
    """Return GitHub's answer about the pull request, or raise PullError saying why not."""
    assert target.owner_name is not None
    owner, name = (quote(p, safe="") for p in target.owner_name)
    # http(s) only: api_base refuses any other scheme.
    request = urllib.request.Request(  # noqa: S310
        f"{api}/repos/{owner}/{name}/pulls/{target.number}",
        # https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
        headers={
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "cujo-review",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=API_TIMEOUT_S) as answer:
            raw = answer.read(MAX_API_ANSWER + 1)
    except urllib.error.HTTPError as exc:
        raise PullError(f"GitHub answered HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise PullError(f"GitHub could not be reached ({type(exc).__name__})") from None
    if len(raw) > MAX_API_ANSWER:
        raise PullError("GitHub's answer is larger than a pull request's")
    try:
        pull = json.loads(raw)
    except ValueError:
        raise PullError("GitHub's answer is not JSON") from None
    if not isinstance(pull, dict):
        raise PullError("GitHub's answer is not a pull request")
    return pull


def base_of(pull: Mapping[str, object]) -> str:
    """Return the base branch a pull request answer names (PullError when it names none)."""
    base = pull.get("base")
    ref = base.get("ref") if isinstance(base, dict) else None
    if not isinstance(ref, str) or not _BRANCH.match(ref):
        raise PullError("GitHub's answer names no usable base branch")
    return ref


def text_of(pull: Mapping[str, object]) -> dict[str, str | None]:
    """Return a pull request answer's title, body and head branch (None: not a string)."""
    head = pull.get("head")
    ref = head.get("ref") if isinstance(head, dict) else None
    title, body = pull.get("title"), pull.get("body")
    return {
        "title": title if isinstance(title, str) else None,
        # null when the pull request has no description.
        "body": body if isinstance(body, str) else "" if body is None and "body" in pull else None,
        "head_ref": ref if isinstance(ref, str) else None,
    }


# --------------------------------------------------------------------------- fetching


def sandbox_env(env: Mapping[str, str]) -> dict[str, str]:
    """Return ``env`` without the person's tokens and the model key: what the sandbox gets."""
    return {
        k: v
        for k, v in env.items()
        if k not in SECRET_VARS
        and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
        and k != "GIT_CONFIG_COUNT"
    }


def auth_config(url: str, token: str | None) -> dict[str, str]:
    """Return git's environment sending ``token`` to ``url``'s origin alone (https only)."""
    parts = urlsplit(url)
    if not token or parts.scheme != "https" or not parts.hostname or "@" in parts.netloc:
        return {}
    if any(not 0x21 <= ord(c) <= 0x7E for c in token):
        # A newline would add a header of its own to every request git makes.
        raise PullError("the token holds spaces or control characters; check GH_TOKEN", 2)
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    # As actions/checkout authenticates: an extra header scoped to this origin, redirects
    # refused so the header never follows one elsewhere.
    return {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": f"http.{parts.scheme}://{parts.netloc}/.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        "GIT_CONFIG_KEY_1": "http.followRedirects",
        "GIT_CONFIG_VALUE_1": "false",
    }


def _git_env(extra: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = sandbox_env(os.environ if base is None else base)
    # Never ask on a terminal: a refused credential is an error that says what to set.
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_SSH_COMMAND="ssh -o BatchMode=yes")
    env.update(extra)
    return env


def _git(
    args: list[str], *, env: Mapping[str, str], timeout: float = GIT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    # Settings git takes on every call: no hook runs, no `ext::` transport runs a command.
    argv = ["git", "-c", f"core.hooksPath={os.devnull}", "-c", "protocol.ext.allow=never", *args]
    try:
        return subprocess.run(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise PullError("git is not on PATH; install git") from None
    except subprocess.TimeoutExpired:
        raise PullError(f"git {args[0]} took longer than {timeout:.0f}s") from None


def _said(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return (lines[-1] if lines else f"git exited {done.returncode}")[:300]


def fetch_pull(
    target: PullTarget,
    *,
    base: str | None,
    env: Mapping[str, str],
    say: Callable[[str], None],
) -> FetchedPull:
    """Fetch the pull request's head and base into a throwaway clone (PullError: why not)."""
    # GitHub's API (api.github.com, or the one configured) takes the person's token; git
    # takes it only on GitHub's own hosts (github_origins).
    api_token = token_of(env, target.host, from_env=True)
    netloc = urlsplit(target.url).netloc.rpartition("@")[2].lower()
    token = (
        api_token
        if netloc in github_origins(env)
        else token_of(env, target.host, from_env=False)
        if urlsplit(target.url).scheme == "https"
        else None
    )
    notes: list[str] = []
    base_ref, base_from = base, "--base"
    github_head: object = None
    said: dict[str, str | None] = {}
    api = api_base(target, env) if target.owner_name else None
    if api is not None:
        try:
            pull = ask_pull(api, target, api_token)
            base_ref, base_from = base_of(pull), "github"
        except PullError as exc:
            instead = f"--base {base}" if base else "the remote's default branch"
            notes.append(f"GitHub gave no base for the pull request ({exc}); using {instead}")
        else:
            if base and base != base_ref:
                notes.append(f"GitHub names the base {base_ref}; --base {base} was not used")
            said_head = pull.get("head")
            github_head = said_head.get("sha") if isinstance(said_head, dict) else None
            said = text_of(pull)
    git_env = _git_env(auth_config(target.url, token), env)
    shown = redact(target.url)
    head_ref = f"refs/pull/{target.number}/head"
    listed = _git(["ls-remote", "--symref", target.url, "HEAD", head_ref], env=git_env)
    if listed.returncode != 0:
        hint = (
            "the token was refused or cannot read this repository: check GH_TOKEN"
            if token is not None
            else "a private repository needs a token: set GH_TOKEN (or sign in with `gh auth "
            "login`)"
            + (
                f"; GH_TOKEN goes only to GitHub's hosts: set CUJO_GITHUB_WEB_URL=https://{netloc}"
                " if this is your GitHub"
                if api_token is not None and urlsplit(target.url).scheme == "https"
                else ""
            )
        )
        raise PullError(f"cannot read {shown}: {_said(listed)}; {hint}")
    refs = _ls_remote(listed.stdout)
    if head_ref not in refs:
        raise PullError(
            f"the remote has no {head_ref} ({shown}): check the number, or that the remote "
            "serves pull requests as GitHub does"
        )
    if base_ref is None:
        base_ref, base_from = (
            refs.get("symref:HEAD", "").removeprefix("refs/heads/"),
            "default branch",
        )
        if not base_ref:
            raise PullError(f"{shown} names no default branch: give --base BRANCH")
    if base_ref.startswith("-") or not (_SHA.match(base_ref) or _BRANCH.match(base_ref)):
        raise PullError(f"--base {base_ref!r} is not a branch name or a commit SHA", 2)
    base_src = base_ref if _SHA.match(base_ref) else f"refs/heads/{base_ref}"
    clone = Path(tempfile.mkdtemp(prefix="cujo-pull-"))
    try:
        say(f"fetch: {head_ref} and {base_ref} from {shown}")
        for args in (
            ["init", "--quiet", "--bare", str(clone)],
            [
                "-C", str(clone), "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                target.url, f"+{head_ref}:refs/cujo/head", f"+{base_src}:refs/cujo/base",
            ],
        ):  # fmt: skip
            done = _git(args, env=git_env)
            if done.returncode != 0:
                raise PullError(
                    f"cannot fetch {head_ref} and {base_ref} from {shown}: {_said(done)}"
                )
        head_sha = _rev(clone, "refs/cujo/head")
        base_sha = _rev(clone, "refs/cujo/base")
    except BaseException:
        shutil.rmtree(clone, ignore_errors=True)
        raise
    if github_head is not None and github_head != head_sha:
        notes.append(
            f"GitHub names the head {str(github_head)[:40]}; the remote's {head_ref} is "
            f"{head_sha}, which is what was reviewed"
        )
    return FetchedPull(target, clone, base_ref, base_sha, head_sha, base_from, notes, **said)


def _ls_remote(out: str) -> dict[str, str]:
    refs: dict[str, str] = {}
    for line in out.splitlines():
        value, _, name = line.partition("\t")
        if value.startswith("ref: "):
            refs[f"symref:{name}"] = value.removeprefix("ref: ").strip()
        else:
            refs[name] = value
    return refs


def _rev(clone: Path, ref: str) -> str:
    done = _git(
        ["-C", str(clone), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        env=_git_env({}),
    )
    sha = done.stdout.strip()
    if done.returncode != 0 or not _SHA.match(sha):
        raise PullError(f"the fetched {ref} is not a commit")
    return sha

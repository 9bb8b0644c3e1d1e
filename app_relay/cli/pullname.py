"""Name a pull request: ``OWNER/REPO#N``, its URL, or a remote and a number.

``OWNER/REPO#N`` is looked up under ``CUJO_GITHUB_WEB_URL`` (default github.com); a pull
request URL keeps its host; a clone's ``origin`` (``prfetch.target_of_clone``) may be
https, ssh, scp-like or a path on disk. What is fetched from where is ``prfetch``'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

_NUMBER = r"[1-9][0-9]{0,9}"
_SHORT = re.compile(rf"^(?P<repo>[^#\s]+)#(?P<number>{_NUMBER})$")
# https://HOST/OWNER/REPO/pull/N, and its tabs (/files, /commits, /checks) as a browser shows.
_PULL_URL = re.compile(
    rf"^/(?P<owner>[^/]+)/(?P<name>[^/]+?)(?:\.git)?/pull/(?P<number>{_NUMBER})"
    r"(?:/(?:files|commits|checks))?/?$"
)
_SCP = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>[^/].*)$")


class PullError(Exception):
    """A pull request that cannot be named or fetched; the message says what to fix."""

    def __init__(self, message: str, code: int = 3) -> None:
        super().__init__(message)
        self.code = code  # 2: the command line is wrong; 3: the remote could not be read


@dataclass(frozen=True)
class PullTarget:
    """A pull request as named: the remote to fetch from, its number, and how to show it."""

    url: str  # what git fetches from
    number: int
    repo: str  # OWNER/REPO when the remote's path says so, else the remote as shown
    host: str  # the remote's host ("" for a file:// remote)
    owner_name: tuple[str, str] | None  # for asking GitHub's API

    @property
    def shown_url(self) -> str:
        """Return the pull request's web address (or the remote's, with ``#N``)."""
        parts = urlsplit(self.url)
        if parts.scheme in ("http", "https") and self.owner_name:
            owner, name = self.owner_name
            return (
                f"{parts.scheme}://{parts.hostname}{_port(parts)}/{owner}/{name}/pull/{self.number}"
            )
        return f"{redact(self.url)}#{self.number}"


def parse_target(text: str, env: Mapping[str, str]) -> PullTarget:
    """Return the pull request ``OWNER/REPO#N`` or a pull request URL names (PullError 2)."""
    from cujo_action.schema import REPO_NAME  # noqa: PLC0415  (pydantic: only for this form)

    text = text.strip()
    if m := _SHORT.match(text):
        repo = m["repo"]
        if not REPO_NAME.match(repo) or repo.split("/")[1] in (".", ".."):
            raise PullError(
                f"{text!r}: OWNER/REPO#N wants a GitHub owner and repository name "
                "(e.g. octo-org/widgets#7)",
                2,
            )
        web = (env.get("CUJO_GITHUB_WEB_URL") or "https://github.com").rstrip("/")
        owner, name = repo.split("/")
        return _target(f"{web}/{owner}/{name}.git", int(m["number"]), (owner, name))
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and parts.hostname:
        m = _PULL_URL.match(parts.path)
        if m is None or parts.query or parts.fragment:
            raise PullError(
                f"{redact(text)} is not a pull request URL: give https://HOST/OWNER/REPO/pull/N",
                2,
            )
        owner, name = m["owner"], m["name"]
        if not REPO_NAME.match(f"{owner}/{name}") or name in (".", ".."):
            raise PullError(f"{redact(text)} names no GitHub owner and repository", 2)
        base = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        return _target(f"{base}/{owner}/{name}.git", int(m["number"]), (owner, name))
    raise PullError(
        f"{redact(text)!r} names no pull request: give OWNER/REPO#N, a pull request URL "
        "(https://HOST/OWNER/REPO/pull/N), or --pr N inside a clone",
        2,
    )


def remote_target(url: str, number: int) -> PullTarget:
    """Return pull request ``number`` of the remote at ``url`` (https, ssh, scp-like, file)."""
    parts = urlsplit(url)
    if parts.scheme:
        path = parts.path
    elif m := _SCP.match(url):  # git@github.com:owner/repo.git
        path = "/" + m["path"]
    else:  # a path on disk, as a clone of a local repository has
        path = str(Path(url).expanduser().resolve())
        url = Path(path).as_uri()
    segments = [s for s in path.removesuffix("/").removesuffix(".git").split("/") if s]
    owner_name = (segments[-2], segments[-1]) if len(segments) >= 2 else None
    return _target(url, number, owner_name)


def _target(url: str, number: int, owner_name: tuple[str, str] | None) -> PullTarget:
    parts = urlsplit(url)
    host = parts.hostname or ""
    scp = None if parts.scheme else _SCP.match(url)
    if scp is not None:
        host = scp["host"]
    repo = "/".join(owner_name) if owner_name else redact(url)
    return PullTarget(url=url, number=number, repo=repo, host=host, owner_name=owner_name)


def _port(parts: object) -> str:
    port = getattr(parts, "port", None)
    return f":{port}" if port else ""


def redact(url: str) -> str:
    """Return ``url`` with any credentials it carries replaced by ``***``."""
    parts = urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, ""))
    return url

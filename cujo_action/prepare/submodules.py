"""Fetch a project's git submodules as its CI's checkout does, on the base's word.

A project whose tests read a submodule (a shared test suite, fixtures, a vendored
library) fails them at base and head alike without it, which says nothing of the change;
its CI checks them out (``actions/checkout`` with ``submodules: true``). So the review
does too, one level deep, before any code of the pull request runs:

* **where from** is the BASE commit's ``.gitmodules``, the maintainer's, never the
  checked-out tree's: a pull request that points a submodule at a host of its own changes
  nothing that is fetched (the plan says the head's entry was not followed);
* **which commit** is the gitlink the checked-out tree records: a pull request may move it,
  and what it then brings runs in the sandbox as the rest of the pull request does;
* **how**: over http(s) only (no ``file://``, ``ssh``, ``git://`` or ``ext::``; a
  relative URL resolves against the repository's own https URL), with none of the
  review's credentials, hooks off, into the empty folder git checked out for the gitlink;
  nested submodules are not fetched (said). A submodule that cannot be fetched is named
  with git's reason; the review goes on without it.

Every git call's settings are ``git.py``'s; the transports are narrowed again here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cujo_action import limits
from cujo_action.prepare.git import Git, PrepareError, git_env, redact

__all__ = ["GITLINK", "Fetched", "declared", "fetch", "gitlinks", "resolve"]

GITLINK = b"160000"  # a submodule's entry in a tree
MAX_FETCHED = limits.SUBMODULES_FETCHED
MAX_NAMED = limits.SUBMODULES_NAMED

# After git.py's settings, which allow file and ssh for the repository itself: a
# submodule comes over http(s) alone, and no redirect leads it elsewhere.
_NARROW = (
    "-c", "protocol.file.allow=never",
    "-c", "protocol.ssh.allow=never",
    "-c", "protocol.git.allow=never",
    "-c", "protocol.http.allow=always",
    "-c", "protocol.https.allow=always",
    "-c", "http.followRedirects=false",
)  # fmt: skip


@dataclass
class Fetched:
    """What one checkout's submodules came to: fetched, and left out with the reason."""

    fetched: list[str] = field(default_factory=list)  # "path (url) at sha"
    missing: list[str] = field(default_factory=list)  # "path: why"

    def notes(self, where: str) -> list[str]:
        """Return the plan's notes for the checkout called ``where`` ("head", "base")."""
        said = []
        if self.fetched:
            said.append(
                f"Git submodules at {where}, fetched as the base's .gitmodules names them: "
                + _named(self.fetched)
            )
        if self.missing:
            said.append(
                f"Git submodules at {where} left out (tests that read them fail and say "
                "nothing of the change): " + _named(self.missing)
            )
        return said


def _named(items: Sequence[str]) -> str:
    extra = len(items) - MAX_NAMED
    return "; ".join(items[:MAX_NAMED]) + (f"; and {extra} more" if extra > 0 else "") + "."


def gitlinks(git: Git, clone: Path, commit: str) -> dict[str, str]:
    """Return ``commit``'s submodule entries: path → the commit it records."""
    out = git.check("ls-tree", "-r", "-z", "--full-tree", commit, cwd=clone, what=f"list {commit}")
    found = {}
    for entry in out.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        parts = meta.split(b" ")
        if len(parts) == 3 and parts[0] == GITLINK:
            found[path.decode("utf-8", "replace")] = parts[2].decode("ascii", "replace")
    return found


def declared(git: Git, clone: Path, commit: str) -> dict[str, str]:
    """Return ``commit``'s ``.gitmodules`` as path → URL, read by git's own parser."""
    result = git.run("config", "--blob", f"{commit}:.gitmodules", "--null", "--list", cwd=clone)
    if result.code != 0:
        return {}  # no .gitmodules, or not one git can read: nothing is declared
    by_name: dict[str, dict[str, str]] = {}
    for entry in result.out.split(b"\0"):
        key, _, value = entry.decode("utf-8", "replace").partition("\n")
        if not key.startswith("submodule."):
            continue
        name, _, var = key.removeprefix("submodule.").rpartition(".")
        if name and var in ("path", "url"):
            by_name.setdefault(name, {})[var] = value
    return {d["path"]: d["url"] for d in by_name.values() if d.get("path") and d.get("url")}


def resolve(url: str, superproject: str) -> str | None:
    """Return the http(s) URL a ``.gitmodules`` URL names, or None when it names another
    transport (a relative URL resolves against ``superproject``'s, as git resolves it)."""
    if url.startswith(("https://", "http://")) and "@" not in url.split("/")[2]:
        return url
    if not url.startswith(("./", "../")) or not resolve(superproject, ""):
        return None
    base, rest = superproject.rstrip("/"), url
    while rest.startswith(("./", "../")):
        if rest.startswith("../"):
            base = base.rsplit("/", 1)[0]
        rest = rest.split("/", 1)[1]
    return resolve(f"{base}/{rest}", "") if "://" in base else None


def fetch(
    worktree: Path,
    links: Mapping[str, str],
    urls: Mapping[str, str],
    *,
    superproject: str,
    timeout: float,
) -> Fetched:
    """Fetch each submodule ``links`` records into ``worktree``, from ``urls`` (the base's
    declarations, path → URL); return what came and what did not, and why."""
    done = Fetched()
    git = Git(git_env(worktree.parent), timeout, shown="", raw="")
    for n, (path, sha) in enumerate(sorted(links.items())):
        if n >= MAX_FETCHED:
            done.missing.append(f"{path}: past the first {MAX_FETCHED} submodules fetched")
            continue
        url = urls.get(path)
        if url is None:
            done.missing.append(f"{path}: not in the base's .gitmodules")
            continue
        where = resolve(url, superproject)
        if where is None:
            done.missing.append(f"{path}: {redact(url)} is not an http(s) URL without credentials")
            continue
        try:
            why = _fetch_one(git, worktree / path, where, sha)
        except PrepareError as exc:
            why = str(exc)
        if why:
            done.missing.append(f"{path}: {why}")
        else:
            done.fetched.append(f"{path} ({where}) at {sha[:12]}")
    return done


def _fetch_one(git: Git, folder: Path, url: str, sha: str) -> str:
    """Fetch ``sha`` from ``url`` into ``folder``; return why not ("" when done)."""
    # The folder git checked out for the gitlink: a real, empty folder (a tree cannot hold
    # both a gitlink and a link at one path, and nothing of the pull request has run).
    if folder.is_symlink() or not folder.is_dir() or any(folder.iterdir()):
        return "its folder is not the empty one the checkout made"
    init = git.run("init", "--quiet", "--template=", str(folder), cwd=folder)
    if init.code != 0:
        return git.why(init)
    # One commit deep where the server allows it (as actions/checkout fetches); a server
    # that cannot (git's plain-HTTP protocol) gets the whole history instead.
    got = git.run(*_NARROW, "fetch", "--quiet", "--depth=1", "--no-tags", url, sha, cwd=folder)
    if got.code != 0:
        got = git.run(*_NARROW, "fetch", "--quiet", "--no-tags", url, sha, cwd=folder)
    if got.code != 0:
        return git.why(got).replace(url, _shown(url))
    out = git.run("checkout", "--quiet", "--detach", sha, cwd=folder)
    return "" if out.code == 0 else git.why(out)


def _shown(url: str) -> str:
    return url.split("?", 1)[0]

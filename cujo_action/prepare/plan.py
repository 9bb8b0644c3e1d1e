"""Clone head, merge it into base, add a worktree at base, settle the commands → Plan.

The policy (and the CI workflows) are read from the base commit's git objects and never
from head. What runs is what runs after the merge: the checkout is the merge of head into
base on the base branch (``merge.py``; head where it conflicts, and a note says so), and
its build files, read through ``_Checkout``, are settled into commands by ``settle``
(``settle.py`` says how). The base is settled too, from its own build files, so it can be
installed and tested beside the head. Who the upstream is and which branch the merge is
pushed to are named by ``upstream.py``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import annotated_types

from cujo_action.prepare import submodules
from cujo_action.prepare.git import (
    Git,
    PrepareError,
    auth_env,
    check_ref,
    ensure_commit,
    fetch_pull_head,
    git_env,
    is_sha,
    redact,
    resolve_local,
    resolve_remote,
)
from cujo_action.prepare.merge import Asked, check_out_merge, pushed
from cujo_action.prepare.privileged import pull_target, runs_head
from cujo_action.prepare.settle import Which, settle
from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.schema import (
    MAX_SHORT,
    MAX_TEXT,
    POLICY_FILE,
    Plan,
    PolicyError,
    clip,
    load_policy,
)

__all__ = ["prepare"]

WORKFLOWS = ".github/workflows"
MAX_WORKFLOWS = 20

# A build file larger than this is read only this far (and so usually fails to parse):
# head is untrusted and must not be able to make prepare read gigabytes.
READ_CAP = 1024 * 1024

_REMOTE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[\w.-]+@[\w.-]+:)")


def _base_policy_text(git: Git, clone: Path, base_sha: str) -> str | None:
    """Return base's .cujo.yml text (None when absent), read from git objects, never head."""
    out = git.check(
        "ls-tree", "-z", base_sha, "--", POLICY_FILE, cwd=clone, what="list the base commit"
    )
    if not out:
        return None
    meta, _, _ = out.decode("utf-8", "replace").partition("\t")
    mode, kind, blob = meta.split()
    if kind != "blob" or mode not in ("100644", "100755"):
        raise PolicyError(POLICY_FILE, None, "", "must be a regular file, not a link or folder")
    text = git.check("cat-file", "blob", blob, cwd=clone, what=f"read {POLICY_FILE} at base")
    return text.decode("utf-8", "replace")


def _base_workflows(git: Git, clone: Path, base_sha: str) -> dict[str, str]:
    """Return base's CI workflows (path → text, capped), read from git objects like the policy."""
    out = git.run("ls-tree", "-z", base_sha, "--", f"{WORKFLOWS}/", cwd=clone).out
    found: dict[str, str] = {}
    for entry in out.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        parts = meta.split()
        name = path.decode("utf-8", "replace")
        if len(parts) != 3 or parts[1] != b"blob" or not name.endswith((".yml", ".yaml")):
            continue
        if len(found) >= MAX_WORKFLOWS:
            break
        blob = git.run("cat-file", "blob", parts[2].decode(), cwd=clone)
        if blob.code == 0:
            found[name] = blob.out[:READ_CAP].decode("utf-8", "replace")
    return found


def _tracked_files(git: Git, clone: Path, head_sha: str) -> list[str]:
    """Return head's regular files; links and submodules are never read as build files."""
    out = git.check(
        "ls-tree", "-r", "-z", "--full-tree", head_sha, cwd=clone, what="list the head commit"
    )
    paths = []
    for entry in out.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        if meta.split(b" ", 1)[0] in (b"100644", b"100755"):
            paths.append(path.decode("utf-8", "replace"))
    return paths


def _fetch_submodules(
    git: Git,
    clone: Path,
    checkouts: Iterable[tuple[Path, str, str]],
    *,
    base_sha: str,
    superproject: str,
    timeout: float,
) -> list[str]:
    """Fetch each checkout's submodules from the base's URLs; return the plan's notes."""
    urls = submodules.declared(git, clone, base_sha)
    notes: list[str] = []
    for folder, commit, where in checkouts:
        links = submodules.gitlinks(git, clone, commit)
        if not links:
            continue
        if where == "head":
            theirs = submodules.declared(git, clone, commit)
            moved = sorted(p for p, url in theirs.items() if p in urls and urls[p] != url)
            if moved:
                notes.append(
                    "The pull request's .gitmodules names other URLs for "
                    + ", ".join(moved[: submodules.MAX_NAMED])
                    + ": not followed, the base's were used."
                )
        got = submodules.fetch(folder, links, urls, superproject=superproject, timeout=timeout)
        notes += got.notes(where)
    return notes


class _Checkout(Mapping[str, str]):
    """Head's tracked files as path → text, each read from the checkout on first use."""

    def __init__(self, root: Path, paths: Iterable[str]) -> None:
        self._root, self._paths, self._texts = root, set(paths), dict[str, str]()

    def __getitem__(self, path: str) -> str:
        if path not in self._paths:
            raise KeyError(path)
        if path not in self._texts:
            self._texts[path] = self._read(path)
        return self._texts[path]

    def __contains__(self, path: object) -> bool:
        # Mapping's default would read the file just to answer whether it exists.
        return path in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._paths))

    def __len__(self) -> int:
        return len(self._paths)

    def _read(self, path: str) -> str:
        try:
            fd = open_no_follow(self._root / path, "read")
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as handle:
            return handle.read(READ_CAP).decode("utf-8", "replace")


def _changed_files(git: Git, clone: Path, base_sha: str, head_sha: str) -> list[str]:
    """Return the files changed from the merge base of base and head to head (``base...head``)."""
    merge_base = git.run("merge-base", base_sha, head_sha, cwd=clone)
    # Unrelated histories have no merge base; compare with base itself, listing more, not less.
    start = merge_base.out.decode().strip() if merge_base.code == 0 else base_sha
    out = git.check(
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        start,
        head_sha,
        "--",
        cwd=clone,
        what="list the changed files",
    )
    return [p.decode("utf-8", "replace") for p in out.split(b"\0") if p]


def _max_items(field: str) -> int:
    """Return the schema's cap on the length of a Plan list field."""
    for meta in Plan.model_fields[field].metadata:
        if isinstance(meta, annotated_types.MaxLen):
            return meta.max_length
    raise AssertionError(f"Plan.{field} has no max_length")


# --------------------------------------------------------------------------- prepare


def prepare(
    repo: str,
    base: str,
    head: str,
    run_id: str,
    workdir: Path,
    *,
    git_timeout: float = 120,
    which: Which = shutil.which,
    pull_request: int | None = None,
    token: str | None = None,
    upstream: str = "",
    base_branch: str = "",
) -> Plan:
    """Check out the merge and base under ``workdir``, settle the commands, write plan.json.

    With ``pull_request``, head is fetched as ``refs/pull/N/head`` and must still be the
    commit ``head`` names. ``token`` (a clone URL over https only) is sent to that host
    as GitHub's Actions checkout sends it, in the environment of root's git commands
    alone: never in a URL, a file, the clone's config or the plan. ``upstream``
    (``owner/name``) and ``base_branch`` name the repository and the branch the pull
    request merges into, where the clone cannot tell (``upstream.py``).
    """
    workdir = Path(workdir).resolve()
    head_dir, base_dir = workdir / "head", workdir / "base"
    privileged_dir = workdir / "privileged"
    for path in (head_dir, base_dir, privileged_dir):
        if path.exists():
            raise PrepareError(f"{path} already exists; give prepare an empty work directory.")
    for ref in (base, head):
        check_ref(ref)
    workdir.mkdir(parents=True, exist_ok=True)
    env = git_env(workdir)
    clone = ["clone", "--no-checkout", "--quiet", "--no-recurse-submodules", "--"]

    if pull_request is not None and (not is_sha(head) or pull_request < 1):
        raise PrepareError(
            f"a pull request's head is checked against the exact commit: give head as a "
            f"40-hex SHA and a pull request number above 0 (got {head!r}, {pull_request!r})."
        )
    source: Path | None = None
    if _REMOTE.match(repo):
        if token is not None:
            env.update(auth_env(repo, token))
        git = Git(env, git_timeout, shown=redact(repo), raw=repo)
        git.check(*clone, repo, str(head_dir), cwd=workdir, what=f"clone {git.shown}")
        base_sha = resolve_remote(git, head_dir, base)
        if pull_request is not None:
            head_sha = fetch_pull_head(git, head_dir, pull_request, head)
        else:
            head_sha = resolve_remote(git, head_dir, head)
    elif token is not None or pull_request is not None:
        raise PrepareError(
            f"{repo} is a local path: a token and a pull request number go with a clone URL."
        )
    else:
        source = Path(repo).expanduser().resolve()
        git = Git(env, git_timeout, shown=str(source), raw=str(source))
        if not source.is_dir():
            raise PrepareError(f"{repo} is not a git repository (no such directory).")
        ceiling = {"GIT_CEILING_DIRECTORIES": str(source.parent)}
        if git.run("rev-parse", "--git-dir", cwd=source, env=ceiling).code != 0:
            raise PrepareError(f"{repo} is not a git repository.")
        base_sha = resolve_local(git, source, base)
        head_sha = resolve_local(git, source, head)
        git.check(*clone, str(source), str(head_dir), cwd=workdir, what=f"clone {git.shown}")
        ensure_commit(git, head_dir, base_sha, base)
        ensure_commit(git, head_dir, head_sha, head)

    # PolicyError propagates: the caller makes the run `error` with file, line and key.
    policy = load_policy(_base_policy_text(git, head_dir, base_sha), POLICY_FILE)
    # What runs is what runs after the merge: check it out, on the branch it is pushed to.
    forge = _REMOTE.match(repo) is not None and not repo.startswith("file:")
    target, merged = check_out_merge(
        git,
        head_dir,
        Asked(repo, forge, source, base, head, pull_request, upstream, base_branch),
        base_sha,
        head_sha,
    )
    git.check(
        "worktree",
        "add",
        "--quiet",
        "--detach",
        str(base_dir),
        base_sha,
        cwd=head_dir,
        what=f"add a worktree at {base_sha}",
    )
    ci = _base_workflows(git, head_dir, base_sha)
    # A base workflow with a privileged trigger that checks out the head: the head is
    # installed and tested again in that job, checked out at the head commit.
    runs = runs_head(ci)
    pull = None
    if runs is not None:
        pull = pull_target(git, head_dir, base_sha, head_sha, head, pull_request, runs)
        git.check(
            "worktree", "add", "--quiet", "--detach", str(privileged_dir), head_sha,
            cwd=head_dir, what=f"add a worktree at {head_sha}",
        )  # fmt: skip
    # The submodules the checkouts record, from where the base says (``submodules.py``).
    fetched = _fetch_submodules(
        git, head_dir, ((head_dir, merged.sha, "head"), (base_dir, base_sha, "base")),
        base_sha=base_sha, superproject=repo if forge else "", timeout=git_timeout,
    )  # fmt: skip
    settled = settle(
        _Checkout(head_dir, _tracked_files(git, head_dir, merged.sha)), policy, which=which, ci=ci
    )
    changed = _changed_files(git, head_dir, base_sha, head_sha)
    # The base as it builds and tests itself, under the same policy and CI, from its own
    # build files: run beside the head, so what the base already does is told apart.
    at_base = settle(
        _Checkout(base_dir, _tracked_files(git, head_dir, base_sha)), policy, which=which, ci=ci
    )

    plan = Plan(
        run_id=run_id,
        repo=clip(git.shown, MAX_TEXT),
        base_sha=base_sha,
        head_sha=head_sha,
        policy_from=base_sha,
        policy=policy,
        ecosystem=settled.ecosystem,
        build_files=[clip(f, MAX_SHORT) for f in settled.build_files[: _max_items("build_files")]],
        install=clip(settled.install, MAX_TEXT),
        test=clip(settled.test, MAX_TEXT),
        smoke=clip(settled.smoke, MAX_TEXT),
        unproven_reason=settled.unproven_reason,
        notes=[
            *([merged.note] if merged.note else []),
            *settled.notes,
            *fetched,
        ][: _max_items("notes")],
        test_sources=list(settled.test_sources[: _max_items("test_sources")]),
        base_ecosystem=at_base.ecosystem,
        base_install=clip(at_base.install, MAX_TEXT),
        base_test=clip(at_base.test, MAX_TEXT),
        changed_files=[clip(p, MAX_TEXT) for p in changed[: _max_items("changed_files")]],
        head_dir=str(head_dir),
        base_dir=str(base_dir),
        upstream=target,
        push=pushed(git, head_dir, merged.sha, base_sha, merged=merged.merged),
        base_push=pushed(git, head_dir, base_sha),
        privileged=pull,
        privileged_dir=str(privileged_dir) if pull is not None else "",
    )
    (workdir / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2) + "\n")
    return plan

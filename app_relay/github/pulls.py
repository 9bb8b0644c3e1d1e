"""Read a pull request and its repository: the pull request, its files, a file, a permission.

Part of the gateway (``client.py`` composes it): reads only, each fail-closed.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from typing import Final

from app_relay.github.answers import ChangedFiles, GitHubError, PullRequest
from app_relay.github.payloads import path_segment, positive, repo_path
from app_relay.github.transport import PER_PAGE, GatewayTransport
from app_relay.github.vocab import LOGIN, OBJECT_ID, PERMISSIONS, Permission

# GitHub lists at most 3,000 files of a pull request, at most 100 a page:
# https://docs.github.com/en/rest/pulls/pulls#list-pull-requests-files
MAX_PULL_FILES: Final = 3_000


class PullRequestReads(GatewayTransport):
    """Read a pull request, the files it changes, a file at a ref, and who may do what."""

    def pull_request(self, repo: str, number: int) -> PullRequest:
        """Read a pull request."""
        # https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
        a = self._get(f"{repo_path(repo)}/pulls/{positive('number', number)}")
        head, base, user = a.obj("head"), a.obj("base"), a.obj("user")
        head_repo = head.opt_obj("repo")
        got = a.integer("number")
        if got != number:
            raise GitHubError(a.call, f"field 'number' is {got}, asked for {number}")
        return PullRequest(
            number=got,
            head_sha=head.text("sha", pattern=OBJECT_ID),
            base_sha=base.text("sha", pattern=OBJECT_ID),
            base_ref=base.text("ref"),
            head_repo_full_name=None if head_repo is None else head_repo.text("full_name"),
            author_login=user.text("login", pattern=LOGIN),
            author_type=user.text("type"),
            draft=a.flag("draft"),
            state="open" if a.one_of("state", ("open", "closed")) == "open" else "closed",
            # Missing (an old GitHub Enterprise) reads as NONE: new here, so it waits last.
            author_association=(
                a.opt_text("author_association") if "author_association" in a.data else None
            )
            or "NONE",
            title=a.opt_text("title") if "title" in a.data else None,
            # null when the pull request has no description.
            body=(a.opt_text("body") or "") if "body" in a.data else None,
            head_ref=head.opt_text("ref") if "ref" in head.data else None,
        )

    def pull_request_files(self, repo: str, number: int) -> ChangedFiles:
        """List the paths a pull request changes (a rename lists both names), up to 3,000."""
        # https://docs.github.com/en/rest/pulls/pulls#list-pull-requests-files
        path = f"{repo_path(repo)}/pulls/{positive('number', number)}/files"
        listed, more = self._first_pages(path, None, {}, MAX_PULL_FILES // PER_PAGE)
        found: list[str] = []
        patches: list[tuple[str, str | None]] = []
        for a in listed:
            found.append(a.text("filename"))
            patches.append((found[-1], a.opt_text("patch") if "patch" in a.data else None))
            if "previous_filename" in a.data and a.data["previous_filename"] is not None:
                found.append(a.text("previous_filename"))
        incomplete = (
            f"GitHub lists at most {MAX_PULL_FILES:,} files of a pull request and listed "
            f"{len(listed):,}, so more may be changed"
            if more
            else ""
        )
        return ChangedFiles(tuple(found), incomplete, tuple(patches))

    def file_at(self, repo: str, path: str, ref: str, *, max_bytes: int = 1_000_000) -> str | None:
        """Read a text file at a ref; None when it does not exist there."""
        # https://docs.github.com/en/rest/repos/contents#get-repository-content
        quoted = urllib.parse.quote(path.strip("/"), safe="/")
        if not quoted or ".." in path.split("/"):
            raise ValueError(f"not a repository file path: {path!r}")
        url = f"{repo_path(repo)}/contents/{quoted}"
        try:
            a = self._get(url, {"ref": ref})
        except GitHubError as exc:
            if exc.status == 404:
                return None
            raise
        a.one_of("type", ("file",))
        size = a.integer("size")
        if size > max_bytes:
            raise GitHubError(a.call, f"{path} is {size} bytes, over the cap of {max_bytes}")
        a.one_of("encoding", ("base64",))
        content = a.opt_text("content") or ""
        try:
            raw = base64.b64decode(content, validate=False)
        except (binascii.Error, ValueError):
            raise GitHubError(a.call, "field 'content' is not base64") from None
        if len(raw) != size:
            raise GitHubError(a.call, f"field 'content' holds {len(raw)} bytes, 'size' says {size}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GitHubError(a.call, f"{path} is not UTF-8 text") from None

    # -- who may --

    def permission(self, repo: str, login: str) -> Permission:
        """Read a user's permission on a repository; never cached."""
        # https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user
        if not LOGIN.fullmatch(login):
            raise ValueError(f"not a GitHub login: {login!r}")
        a = self._get(f"{repo_path(repo)}/collaborators/{path_segment(login)}/permission")
        # `role_name` names maintain and triage, which `permission` folds into write and
        # read; a custom role's name is none of ours, and then `permission` holds its base.
        role = a.opt_text("role_name") if "role_name" in a.data else None
        level = role if role in PERMISSIONS else a.one_of("permission", PERMISSIONS)
        for known in PERMISSIONS:
            if level == known:
                return known
        raise GitHubError(a.call, f"unknown permission {level!r}")

    def default_branch(self, repo: str) -> str:
        """Read a repository's default branch."""
        # https://docs.github.com/en/rest/repos/repos#get-a-repository
        return self._get(repo_path(repo)).text("default_branch")

"""Accept what a worm does with a stolen token as GitHub would: repositories, gists, pushes."""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
from typing import Any
from urllib.parse import quote

from cujo_action.net.lookalike.github_base import (
    ECHO_BUDGET,
    TREE_ENTRIES,
    clean_name,
    git_blob_sha,
    text_of,
)
from cujo_action.net.lookalike.github_facts import API, DOCS, WEB, Kind
from cujo_action.net.lookalike.github_objects import ApiObjects
from cujo_action.net.lookalike.web import Answer, Asked, iso_time

_NAME_IN_JSON = re.compile(rb'"name"\s*:\s*"([^"\\]{1,100})"')


class ApiWrites(ApiObjects):
    """Answer writes: accepted as GitHub accepts them, or GitHub's 404."""

    def _write(self, asked: Asked, kind: Kind, now: float, parts: list[str]) -> Answer:
        """Answer a write: accepted as GitHub accepts it, or GitHub's 404."""
        fields = _fields(asked)
        if fields is None:
            return self._error(asked, kind, now, 400, "Problems parsing JSON")
        method = asked.method
        if method == "POST" and parts == ["user", "repos"]:
            return self._new_repository(asked, kind, now, fields, self.owner, "")
        if method == "POST" and len(parts) == 3 and parts[0] == "orgs" and parts[2] == "repos":
            return self._new_repository(
                asked, kind, now, fields, clean_name(parts[1]), "Organization"
            )
        if method == "POST" and parts == ["gists"]:
            return self._new_gist(asked, kind, now, fields)
        if len(parts) < 4 or parts[0] != "repos":
            return self._error(asked, kind, now, 404, "Not Found")
        owner, repo, rest = clean_name(parts[1]), clean_name(parts[2]), parts[3:]
        if method == "PUT" and rest[0] == "contents" and len(rest) > 1:
            return self._put_contents(asked, kind, now, fields, owner, repo, "/".join(rest[1:]))
        if method == "POST" and rest == ["git", "blobs"]:
            sha = _blob_sha(fields, asked.body_cut) or self._sha()
            url = f"{API}/repos/{owner}/{repo}/git/blobs/{sha}"
            return self._created(asked, kind, now, {"url": url, "sha": sha}, url, "contents=write")
        if method == "POST" and rest == ["git", "trees"]:
            return self._new_tree(asked, kind, now, fields, owner, repo)
        if method == "POST" and rest == ["git", "commits"]:
            value = self._commit(kind, now, owner, repo, fields)
            return self._created(asked, kind, now, value, value["url"], "contents=write")
        if method == "POST" and rest == ["git", "refs"]:
            ref = text_of(fields.get("ref"), 255) or "refs/heads/main"
            value = self._ref(owner, repo, ref, text_of(fields.get("sha"), 40) or self._sha())
            return self._created(asked, kind, now, value, value["url"], "contents=write")
        if method == "PATCH" and rest[:2] == ["git", "refs"] and len(rest) > 2:
            ref = "refs/" + "/".join(rest[2:])[:255]
            value = self._ref(owner, repo, ref, text_of(fields.get("sha"), 40) or self._sha())
            return self._reply(asked, kind, now, 200, value, permission="contents=write")
        dispatch = rest == ["dispatches"] or (
            len(rest) == 4 and rest[:2] == ["actions", "workflows"] and rest[3] == "dispatches"
        )
        if method == "POST" and dispatch:
            return self._reply(asked, kind, now, 204, None, permission="actions=write")
        return self._error(asked, kind, now, 404, "Not Found")

    def _created(
        self, asked: Asked, kind: Kind, now: float, value: Any, location: str, permission: str
    ) -> Answer:
        return self._reply(asked, kind, now, 201, value, extra=(("location", location),),
                           permission=permission, scopes="repo")  # fmt: skip

    def _new_repository(
        self,
        asked: Asked,
        kind: Kind,
        now: float,
        fields: dict[str, Any],
        owner: str,
        owner_type: str,
    ) -> Answer:
        name = text_of(fields.get("name"), 100) or _name_in(asked.body)
        if not name:
            doc = f"{DOCS}/repos/repos#create-a-repository-for-the-authenticated-user"
            failed = {
                "message": "Repository creation failed.",
                "errors": [{"resource": "Repository", "code": "missing_field", "field": "name"}],
                "documentation_url": doc,
                "status": "422",
            }
            return self._reply(asked, kind, now, 422, failed)
        org_id = 100_000_000 + self.rng.randrange(90_000_000) if owner_type else 0
        repo = self._repository(
            now, owner, clean_name(name),
            repo_id=900_000_000 + self.rng.randrange(100_000_000),
            owner_id=org_id, owner_type=owner_type,
            private=fields.get("private") is True,
            description=text_of(fields.get("description"), 350) or None,
            new=True, with_permissions="user",
        )  # fmt: skip
        return self._created(asked, kind, now, repo, repo["url"], "administration=write")

    def _new_gist(self, asked: Asked, kind: Kind, now: float, fields: dict[str, Any]) -> Answer:
        gist_id = f"{self.rng.getrandbits(128):032x}"
        files_in = fields.get("files")
        files_in = files_in if isinstance(files_in, dict) else {}
        budget = ECHO_BUDGET
        files: dict[str, Any] = {}
        for raw_name, spec in list(files_in.items())[:20]:
            name = text_of(raw_name, 255) or "gistfile1.txt"
            content = text_of(spec.get("content"), 10**9) if isinstance(spec, dict) else ""
            shown = content[:budget]
            budget -= len(shown)
            sha = git_blob_sha(content.encode())
            files[name] = {
                "filename": name,
                "type": "text/plain",
                "language": None,
                "raw_url": f"https://gist.githubusercontent.com/{self.owner}/{gist_id}/raw/"
                f"{sha}/{quote(name)}",
                "size": len(content.encode()),
                "truncated": len(shown) < len(content),
                "content": shown,
                "encoding": "utf-8",
            }
        base = f"{API}/gists/{gist_id}"
        value = {
            "url": base,
            "forks_url": f"{base}/forks",
            "commits_url": f"{base}/commits",
            "id": gist_id,
            "node_id": self._node_id("G_kwDO", 24),
            "git_pull_url": f"https://gist.github.com/{gist_id}.git",
            "git_push_url": f"https://gist.github.com/{gist_id}.git",
            "html_url": f"https://gist.github.com/{self.owner}/{gist_id}",
            "files": files,
            "public": fields.get("public") is True,
            "created_at": iso_time(now),
            "updated_at": iso_time(now),
            "description": text_of(fields.get("description"), 1000) or None,
            "comments": 0,
            "comments_enabled": True,
            "user": None,
            "comments_url": f"{base}/comments",
            "owner": self._account(self.owner, self.facts.owner_id, self.facts.owner_type),
            "forks": [],
            "history": [
                {
                    "user": self._account(self.owner, self.facts.owner_id, self.facts.owner_type),
                    "version": self._sha(),
                    "committed_at": iso_time(now),
                    "change_status": {"total": 1, "additions": 1, "deletions": 0},
                    "url": f"{base}/{self._sha()}",
                }
            ],
            "truncated": False,
        }
        return self._reply(asked, kind, now, 201, value, extra=(("location", base),),
                           scopes="gist")  # fmt: skip

    def _put_contents(
        self,
        asked: Asked,
        kind: Kind,
        now: float,
        fields: dict[str, Any],
        owner: str,
        repo: str,
        path: str,
    ) -> Answer:
        path = posixpath.normpath("/" + path).lstrip("/")[:1024]
        branch = text_of(fields.get("branch"), 255) or self.facts.default_branch
        sha = _blob_sha({"content": fields.get("content"), "encoding": "base64"}, asked.body_cut)
        sha = sha or self._sha()
        size = len(_decoded(fields.get("content"), "base64") or b"")
        qpath, qbranch = quote(path), quote(branch, safe="")
        base = f"{API}/repos/{owner}/{repo}"
        html = f"{WEB}/{owner}/{repo}/blob/{qbranch}/{qpath}"
        content: dict[str, Any] = {
            "name": posixpath.basename(path),
            "path": path,
            "sha": sha,
            "size": size,
            "url": f"{base}/contents/{qpath}?ref={qbranch}",
            "html_url": html,
            "git_url": f"{base}/git/blobs/{sha}",
            "download_url": f"https://raw.githubusercontent.com/{owner}/{repo}/{qbranch}/{qpath}",
            "type": "file",
        }
        content["_links"] = {"self": content["url"], "git": content["git_url"], "html": html}
        commit = self._commit(kind, now, owner, repo, {
            "message": fields.get("message"),
            "parents": [self.base_sha],
            "author": fields.get("author"),
            "committer": fields.get("committer"),
        })  # fmt: skip
        value = {"content": content, "commit": commit}
        status = 200 if fields.get("sha") else 201
        if status == 200:
            return self._reply(asked, kind, now, 200, value, permission="contents=write")
        return self._created(asked, kind, now, value, content["url"], "contents=write")

    def _new_tree(
        self, asked: Asked, kind: Kind, now: float, fields: dict[str, Any], owner: str, repo: str
    ) -> Answer:
        sha = self._sha()
        base = f"{API}/repos/{owner}/{repo}/git"
        given = fields.get("tree")
        entries = []
        for item in given[:TREE_ENTRIES] if isinstance(given, list) else []:
            if not isinstance(item, dict):
                continue
            kind_of = text_of(item.get("type"), 10) or "blob"
            entry_sha = text_of(item.get("sha"), 40)
            if not entry_sha and isinstance(item.get("content"), str):
                entry_sha = git_blob_sha(item["content"].encode())
            entry_sha = entry_sha or self._sha()
            entry: dict[str, Any] = {
                "path": text_of(item.get("path"), 255),
                "mode": text_of(item.get("mode"), 6) or "100644",
                "type": kind_of,
                "sha": entry_sha,
            }
            if kind_of == "blob" and isinstance(item.get("content"), str):
                entry["size"] = len(item["content"].encode())
            entry["url"] = f"{base}/{'trees' if kind_of == 'tree' else 'blobs'}/{entry_sha}"
            entries.append(entry)
        url = f"{base}/trees/{sha}"
        value = {"sha": sha, "url": url, "tree": entries, "truncated": False}
        return self._created(asked, kind, now, value, url, "contents=write")


def _name_in(body: bytes) -> str:
    """Return the "name" a JSON body cut short still shows, if any."""
    found = _NAME_IN_JSON.search(body)
    return found.group(1).decode(errors="replace") if found else ""


def _fields(asked: Asked) -> dict[str, Any] | None:
    """Return a write's JSON fields: {} when empty or cut short; None when not JSON."""
    text = asked.body.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return {} if asked.body_cut else None
    return value if isinstance(value, dict) else {}


def _decoded(content: Any, encoding: str) -> bytes | None:
    """Return a blob's bytes as GitHub would read them (base64 or utf-8)."""
    if not isinstance(content, str):
        return None
    if encoding == "base64":
        try:
            return base64.b64decode("".join(content.split()), validate=True)
        except binascii.Error:
            return None
    return content.encode()


def _blob_sha(fields: dict[str, Any], cut: bool) -> str:
    """Return the sha of a blob a write carries whole ("" when it is not whole)."""
    if cut:
        return ""
    data = _decoded(fields.get("content"), text_of(fields.get("encoding"), 10) or "utf-8")
    return git_blob_sha(data) if data is not None else ""

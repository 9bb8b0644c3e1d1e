"""GitHub's objects as its REST API shows them: accounts, repositories, refs, commits."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from cujo_action.net.lookalike.github_base import ApiBase, text_of
from cujo_action.net.lookalike.github_facts import ACTIONS_BOT, API, REPO_LINKS, WEB, Kind, id_code
from cujo_action.net.lookalike.web import iso_time


class ApiObjects(ApiBase):
    """The job's accounts, repository, refs and commits, as GitHub's JSON."""

    def _account(self, login: str, account_id: int, kind: str = "User") -> dict[str, Any]:
        base = f"{API}/users/{login}"
        prefix = "O_kgDO" if kind == "Organization" else "U_kgDO"
        return {
            "login": login,
            "id": account_id,
            "node_id": prefix + id_code(account_id),
            "avatar_url": f"https://avatars.githubusercontent.com/u/{account_id}?v=4",
            "gravatar_id": "",
            "url": base,
            "html_url": f"{WEB}/{login}",
            "followers_url": f"{base}/followers",
            "following_url": f"{base}/following{{/other_user}}",
            "gists_url": f"{base}/gists{{/gist_id}}",
            "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{base}/subscriptions",
            "organizations_url": f"{base}/orgs",
            "repos_url": f"{base}/repos",
            "events_url": f"{base}/events{{/privacy}}",
            "received_events_url": f"{base}/received_events",
            "type": kind,
            "user_view_type": "public",
            "site_admin": False,
        }

    def _owner_full(self, now: float, *, private: bool) -> dict[str, Any]:
        value = self._account(self.owner, self.facts.owner_id, self.facts.owner_type)
        value.update(
            {
                "name": None, "company": None, "blog": "", "location": None, "email": None,
                "hireable": None, "bio": None, "twitter_username": None,
                "public_repos": self.stats["repos"] + 1, "public_gists": 0,
                "followers": self.stats["stars"], "following": 0,
                "created_at": self._since(now, self.ages[0]),
                "updated_at": self._since(now, self.ages[2]),
            }
        )  # fmt: skip
        if private:
            value["user_view_type"] = "private"
            value.update(
                {
                    "private_gists": 0, "total_private_repos": 0, "owned_private_repos": 0,
                    "disk_usage": 1000 + self.stats["repos"] * 800, "collaborators": 0,
                    "two_factor_authentication": True,
                    "plan": {"name": "free", "space": 976562499, "collaborators": 0,
                             "private_repos": 10000},
                }
            )  # fmt: skip
        return value

    def _permissions(self, kind: Kind | None) -> dict[str, bool] | None:
        """Return a repository's ``permissions`` as the token asking sees them."""
        if kind == "installation":
            write = self.facts.permissions.get("contents") == "write"
            return {"admin": False, "maintain": False, "push": write, "triage": write,
                    "pull": True}  # fmt: skip
        if kind == "user":
            return {"admin": True, "maintain": True, "push": True, "triage": True, "pull": True}
        return None

    def _repository(
        self,
        now: float,
        owner: str,
        name: str,
        *,
        repo_id: int = 0,
        owner_id: int = 0,
        owner_type: str = "",
        private: bool = False,
        description: str | None = None,
        new: bool = False,
        with_permissions: Kind | None = None,
    ) -> dict[str, Any]:
        repo_id = repo_id or self.facts.repository_id
        full = f"{owner}/{name}"
        base = f"{API}/repos/{full}"
        created = iso_time(now) if new else self._since(now, self.ages[1])
        pushed = iso_time(now) if new else self._since(now, self.ages[2])
        stats = dict.fromkeys(self.stats, 0) if new else self.stats
        value: dict[str, Any] = {
            "id": repo_id,
            "node_id": "R_kgDO" + id_code(repo_id),
            "name": name,
            "full_name": full,
            "private": private,
            "owner": self._account(owner, owner_id or self.facts.owner_id,
                                   owner_type or self.facts.owner_type),
            "html_url": f"{WEB}/{full}",
            "description": description,
            "fork": False,
            "url": base,
        }  # fmt: skip
        for key, tail in REPO_LINKS:
            value[key] = base + tail
        value.update(
            {
                "created_at": created, "updated_at": pushed, "pushed_at": pushed,
                "git_url": f"git://github.com/{full}.git", "ssh_url": f"git@github.com:{full}.git",
                "clone_url": f"{WEB}/{full}.git", "svn_url": f"{WEB}/{full}", "homepage": None,
                "size": 0 if new else 40 + stats["repos"] * 37, "stargazers_count": stats["stars"],
                "watchers_count": stats["stars"], "language": None if new else "Python",
                "has_issues": True, "has_projects": True, "has_downloads": True,
                "has_wiki": True, "has_pages": False, "has_discussions": False,
                "forks_count": stats["forks"], "mirror_url": None, "archived": False,
                "disabled": False, "open_issues_count": stats["issues"], "license": None,
                "allow_forking": True, "is_template": False,
                "web_commit_signoff_required": False, "topics": [],
                "visibility": "private" if private else "public", "forks": stats["forks"],
                "open_issues": stats["issues"], "watchers": stats["stars"],
                "default_branch": self.facts.default_branch,
            }
        )  # fmt: skip
        permissions = self._permissions(with_permissions)
        if permissions is not None:
            value["permissions"] = permissions
        if not new:
            value["network_count"] = stats["forks"]
            value["subscribers_count"] = 1 + stats["stars"] // 4
        return value

    def _ref(self, owner: str, repo: str, ref: str, sha: str) -> dict[str, Any]:
        base = f"{API}/repos/{owner}/{repo}/git"
        return {
            "ref": ref,
            "node_id": self._node_id("REF_kwDO", 24),
            "url": f"{base}/{quote(ref)}",
            "object": {"sha": sha, "type": "commit", "url": f"{base}/commits/{sha}"},
        }

    def _commit(
        self, kind: Kind, now: float, owner: str, repo: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        sha = self._sha()
        base = f"{API}/repos/{owner}/{repo}/git"
        tree = text_of(fields.get("tree"), 40) or self._sha()
        parents = fields.get("parents")
        parents = (
            [p for p in parents if isinstance(p, str)][:8] if isinstance(parents, list) else []
        )
        if kind == "installation":
            name, email = ACTIONS_BOT
        else:
            name, email = self.owner, f"{self.facts.owner_id}+{self.owner}@users.noreply.github.com"
        people = {}
        for role in ("author", "committer"):
            given = fields.get(role)
            given = given if isinstance(given, dict) else {}
            people[role] = {
                "name": text_of(given.get("name"), 100) or name,
                "email": text_of(given.get("email"), 100) or email,
                "date": iso_time(now),
            }
        return {
            "sha": sha,
            "node_id": self._node_id("C_kwDO", 30),
            "url": f"{base}/commits/{sha}",
            "html_url": f"{WEB}/{owner}/{repo}/commit/{sha}",
            **people,
            "tree": {"sha": tree, "url": f"{base}/trees/{tree}"},
            "message": text_of(fields.get("message"), 1000),
            "parents": [
                {"url": f"{base}/commits/{p}", "html_url": f"{WEB}/{owner}/{repo}/commit/{p}",
                 "sha": text_of(p, 40)}
                for p in parents
            ],
            "verification": {"verified": False, "reason": "unsigned", "signature": None,
                             "payload": None, "verified_at": None},
        }  # fmt: skip

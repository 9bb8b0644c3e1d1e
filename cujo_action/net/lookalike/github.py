"""Answer a sunk request to api.github.com as GitHub's REST API would, for the decoy job.

Code that checks for a real runner asks GitHub things an empty answer gives away (``/zen``
returns a proverb, ``/rate_limit`` a quota); code that stole the job's token asks what it
can do with it, then does it. Both get GitHub's answers, shaped as its REST documentation
shows them (docs.github.com/rest: meta, rate-limit, repos, users, apps/installations,
gists, repos/contents, git, actions/workflows), with GitHub's headers, for the job Cujo
made up (``GitHubFacts``: the repository ``GITHUB_REPOSITORY`` names, its ids, the token's
permissions as the job states them).

Who asks decides the answer, as on GitHub:

* no ``Authorization``: anonymous, 60 requests an hour; writes are 401;
* a token Cujo planted (a decoy) that is an installation token (``ghs_``, as the job's
  ``GITHUB_TOKEN`` and the checkout's): 1,000 an hour, ``/user`` is 403 "Resource not
  accessible by integration", ``/installation/repositories`` lists the repository;
* a planted user token (``gho_``, ``ghp_``, …): 5,000 an hour, ``/user`` is the owner;
* any other token: 401 "Bad credentials", as GitHub says of a token it never issued.

What a worm does with a stolen token next is accepted with GitHub's answer: a repository
(``POST /user/repos``, ``/orgs/{org}/repos``), a gist (``POST /gists``), a file or a
workflow pushed (``PUT …/contents/…``, the git data API's blobs, trees, commits and refs),
a dispatch. Such a request carries the decoy and is critical before it is answered, so
accepting it costs nothing and shows the worm's next step. (GitHub would refuse an
installation token some of these; that difference is seen only by code that has already
spent a decoy.) Anything else is GitHub's 404.

Deterministic given ``GitHubFacts.seed`` and the times asked at; pure (no I/O).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from cujo_action.net.lookalike.github_facts import DOCS, META, ROOT, TEXT_TYPE, ZEN, Kind
from cujo_action.net.lookalike.github_writes import ApiWrites
from cujo_action.net.lookalike.web import Answer, Asked


class GitHubApi(ApiWrites):
    """GitHub's REST API for one decoy job, with each identity's rate limit kept."""

    def answer(self, asked: Asked, now: float) -> Answer:
        """Return GitHub's answer to ``asked``."""
        if self._start is None:
            self._start = now
        kind = self.kind(asked)
        if kind == "bad":
            self._quotas["anonymous"].spend(now, count=False)  # its headers say the hour
            return self._error(asked, kind, now, 401, "Bad credentials")
        method = asked.method
        if method == "OPTIONS":
            return self._preflight(now)
        parts = [unquote(p) for p in asked.path.strip("/").split("/")] if asked.path != "/" else []
        quota = self._quotas[kind]
        if not quota.spend(now, count=parts != ["rate_limit"]):
            return self._over_quota(asked, kind, now)
        if method in ("GET", "HEAD"):
            return self._read(asked, kind, now, parts)
        if kind == "anonymous":
            return self._error(asked, kind, now, 401, "Requires authentication")
        return self._write(asked, kind, now, parts)

    def server_error(self, asked: Asked, now: float) -> Answer:
        """Return GitHub's 500, for an answer that could not be given whole."""
        return self._error(asked, self.kind(asked), now, 500, "Server Error")

    def _read(self, asked: Asked, kind: Kind, now: float, parts: list[str]) -> Answer:
        """Answer a GET or HEAD."""
        if not parts:
            return self._reply(asked, kind, now, 200, ROOT)
        if parts == ["zen"]:
            body = self.rng.choice(ZEN).encode()
            return Answer(200, self._headers(asked, kind, TEXT_TYPE, now, body=body), body)
        if parts == ["meta"]:
            return self._reply(asked, kind, now, 200, META)
        if parts == ["rate_limit"]:
            return self._reply(asked, kind, now, 200, self._rate_limit(kind))
        if parts == ["user"]:
            return self._user(asked, kind, now)
        if parts == ["installation", "repositories"]:
            return self._installation(asked, kind, now)
        if len(parts) == 2 and parts[0] == "users" and parts[1].lower() == self.owner.lower():
            return self._reply(asked, kind, now, 200, self._owner_full(now, private=False))
        if len(parts) == 3 and parts[0] == "repos" and self._ours(parts[1], parts[2]):
            value = self._repository(now, self.owner, self.name, with_permissions=kind)
            return self._reply(asked, kind, now, 200, value, permission="metadata=read",
                               scopes="repo")  # fmt: skip
        if (
            len(parts) == 7
            and parts[0] == "repos"
            and self._ours(parts[1], parts[2])
            and parts[3:6] in (["git", "ref", "heads"], ["git", "refs", "heads"])
            and parts[6] == self.facts.default_branch
        ):
            value = self._ref(self.owner, self.name, f"refs/heads/{parts[6]}", self.base_sha)
            return self._reply(asked, kind, now, 200, value, permission="contents=read")
        return self._error(asked, kind, now, 404, "Not Found")

    def _user(self, asked: Asked, kind: Kind, now: float) -> Answer:
        doc = f"{DOCS}/users/users#get-the-authenticated-user"
        if kind == "anonymous":
            return self._error(asked, kind, now, 401, "Requires authentication", doc)
        if kind == "installation":
            return self._error(asked, kind, now, 403, "Resource not accessible by integration", doc)
        return self._reply(asked, kind, now, 200, self._owner_full(now, private=True))

    def _installation(self, asked: Asked, kind: Kind, now: float) -> Answer:
        doc = f"{DOCS}/apps/installations#list-repositories-accessible-to-the-app-installation"
        if kind == "anonymous":
            return self._error(asked, kind, now, 401, "Requires authentication", doc)
        if kind == "user":
            message = (
                "You must authenticate with an installation access token in order to list "
                "repositories for an installation."
            )
            return self._error(asked, kind, now, 403, message, doc)
        value = {
            "total_count": 1,
            "repository_selection": "selected",
            "repositories": [self._repository(now, self.owner, self.name)],
        }
        return self._reply(asked, kind, now, 200, value)

    def _rate_limit(self, kind: Kind) -> dict[str, Any]:
        core = self._quotas[kind]
        authed = kind != "anonymous"

        def entry(limit: int, used: int = 0, reset: int = 0) -> dict[str, int]:
            reset = reset or core.reset
            return {"limit": limit, "used": used, "remaining": limit - used, "reset": reset}

        rate = entry(core.limit, core.used)
        resources = {
            "core": rate,
            "search": entry(30 if authed else 10, reset=core.reset - 3540),
            "graphql": entry(core.limit if authed else 0),
            "integration_manifest": entry(5000),
            "source_import": entry(100 if authed else 5, reset=core.reset - 3540),
            "code_scanning_upload": entry(1000 if authed else 60),
            "code_scanning_autofix": entry(10, reset=core.reset - 3540),
            "actions_runner_registration": entry(10000),
            "scim": entry(15000),
            "dependency_snapshots": entry(100, reset=core.reset - 3540),
            "dependency_sbom": entry(100, reset=core.reset - 3540),
            "audit_log": entry(1750),
            "audit_log_streaming": entry(15),
            "code_search": entry(10, reset=core.reset - 3540),
        }
        return {"resources": resources, "rate": rate}

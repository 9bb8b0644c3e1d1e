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

import base64
import binascii
import hashlib
import json
import posixpath
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

from cujo_action.net.lookalike_web import Answer, Asked, http_date, iso_time
from cujo_action.net.proxyconfig import GitHubFacts

API = "https://api.github.com"
WEB = "https://github.com"
DOCS = "https://docs.github.com/rest"
API_HOST = "api.github.com"
# The API versions GitHub serves (docs: "API versions"); the first is the default.
API_VERSIONS = ("2022-11-28", "2026-03-10")

Kind = Literal["anonymous", "installation", "user", "bad"]
# Primary rate limits an hour (docs: "Rate limits for the REST API"): unauthenticated,
# GITHUB_TOKEN in a workflow (per repository), and a user's token.
HOURLY: dict[str, int] = {"anonymous": 60, "installation": 1000, "user": 5000}
INSTALLATION_PREFIXES = ("ghs_",)
USER_PREFIXES = ("gho_", "ghp_", "ghu_", "github_pat_")
# The scopes ``gh auth login`` asks for, which a user token planted for gh carries.
USER_SCOPES = "gist, read:org, repo, workflow"
# The GitHub Actions bot, author of what GITHUB_TOKEN commits.
ACTIONS_BOT = ("github-actions[bot]", "41898282+github-actions[bot]@users.noreply.github.com")

# GitHub's proverbs, one per answer to /zen (the Zen of GitHub).
ZEN: tuple[str, ...] = (
    "Responsive is better than fast.",
    "It's not fully shipped until it's fast.",
    "Anything added dilutes everything else.",
    "Practicality beats purity.",
    "Approachable is better than simple.",
    "Mind your words, they are important.",
    "Speak like a human.",
    "Half measures are as bad as nothing at all.",
    "Encourage flow.",
    "Non-blocking is better than blocking.",
    "Favor focus over features.",
    "Avoid administrative distraction.",
    "Design for failure.",
    "Keep it logically awesome.",
)

# /meta: GitHub's published addresses (docs: "About GitHub's IP addresses") and SSH keys
# (docs: "GitHub's SSH key fingerprints"). The actions list is a sample of Azure's ranges.
_CORE_V4 = ["192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20", "143.55.64.0/20"]
_CORE_V6 = ["2a0a:a440::/29", "2606:50c0::/32"]
_SSH_KEYS = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmxkZMy7"
    "opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg=",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQCj7ndNxQowgcQnjshcLrqPEiiphnt+VTTvDP6mHBL9j1aNUkY4Ue1g"
    "vwnGLVlOhGeYrnZaMgRK6+PKCUXaDbC7qtbW8gIkhL7aGCsOr/C56SJMy/BCZfxd1nWzAOxSDPgVsmerOBYfNqltV9/h"
    "WCqBywINIR+5dIg6JTJ72pcEpEjcYgXkE2YEFXV1JHnsKgbLWNlhScqb2UmyRkQyytRLtL+38TGxkxCflmO+5Z8CSSNY"
    "7GidjMIZ7Q4zMjA2n1nGrlTDkzwDCsw+wqFPGQA179cnfGWOWRVruj16z6XyvxvjJwbz0wQZ75XK5tKSb7FNyeIEs4TT"
    "4jk+S4dhPeAUC5y+bDYirYgM4GC7uEnztnZyaVWQ7B381AK4Qdrwt51ZqExKbQpTUNn+EjqoTwvqNj4kqx5QUCI0ThS/"
    "YkOxJCXmPUWZbhjpCg56i+2aB6CmK2JGhn57K5mj0MNdBXA4/WnwH6XoPWJzK5Nyu2zB3nAZp+S5hpQs+p1vN1/wsjk=",
]
META: dict[str, Any] = {
    "verifiable_password_authentication": False,
    "ssh_key_fingerprints": {
        "SHA256_ECDSA": "p2QAMXNIC1TJYWeIOttrVc98/R1BUFWu3/LiyKgUfQM",
        "SHA256_ED25519": "+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU",
        "SHA256_RSA": "uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s",
    },
    "ssh_keys": _SSH_KEYS,
    "hooks": [*_CORE_V4, *_CORE_V6],
    "web": [*_CORE_V4, "20.201.28.151/32", "20.205.243.166/32", "20.87.245.0/32", *_CORE_V6],
    "api": [*_CORE_V4, "20.201.28.148/32", "20.205.243.168/32", "20.87.245.6/32", *_CORE_V6],
    "git": [*_CORE_V4, "20.201.28.151/32", "20.205.243.166/32", "20.87.245.0/32", *_CORE_V6],
    "github_enterprise_importer": ["192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20"],
    "packages": ["140.82.121.33/32", "140.82.121.34/32", "140.82.113.33/32", "140.82.113.34/32"],
    "pages": [
        "192.30.252.153/32", "192.30.252.154/32", "185.199.108.153/32", "185.199.109.153/32",
        "185.199.110.153/32", "185.199.111.153/32", "2606:50c0:8000::153/128",
        "2606:50c0:8001::153/128", "2606:50c0:8002::153/128", "2606:50c0:8003::153/128",
    ],
    "importer": ["52.23.85.212/32", "52.0.228.224/32", "52.22.155.48/32"],
    "actions": [
        "4.148.0.0/16", "4.149.0.0/18", "4.149.64.0/19", "4.149.96.0/19", "4.149.128.0/17",
        "4.150.0.0/18", "4.150.64.0/18", "4.150.128.0/18", "4.150.192.0/19", "4.150.224.0/19",
        "13.64.0.0/16", "13.65.0.0/16", "13.66.0.0/17", "13.66.128.0/17", "13.67.0.0/17",
        "20.1.128.0/17", "20.3.0.0/16", "20.7.0.0/16", "20.9.0.0/17", "20.10.0.0/16",
        "40.64.0.0/16", "40.65.0.0/16", "52.146.0.0/17", "52.147.0.0/19", "52.148.0.0/18",
    ],
    "actions_macos": ["13.105.117.0/31", "13.105.117.2/31", "13.105.220.0/25"],
    "dependabot": ["192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20", "143.55.64.0/20"],
    "copilot": ["192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20", "143.55.64.0/20"],
    "domains": {
        "website": ["*.github.com", "*.github.dev", "*.github.io", "*.githubassets.com",
                    "*.githubusercontent.com"],
        "codespaces": ["*.github.com", "*.api.github.com", "*.githubusercontent.com",
                       "*.vscode-cdn.net", "*.github.dev", "*.visualstudio.com"],
        "copilot": ["*.github.com", "*.githubusercontent.com", "default.exp-tas.com",
                    "*.githubcopilot.com", "copilot-proxy.githubusercontent.com"],
        "packages": ["mavenregistryv2prod.blob.core.windows.net",
                     "npmregistryv2prod.blob.core.windows.net",
                     "nugetregistryv2prod.blob.core.windows.net",
                     "rubygemsregistryv2prod.blob.core.windows.net",
                     "npm.pkg.github.com", "ghcr.io", "*.ghcr.io", "*.pkg.github.com"],
        "actions": ["*.actions.githubusercontent.com", "productionresultssa0.blob.core.windows.net",
                    "results-receiver.actions.githubusercontent.com", "*.blob.core.windows.net",
                    "*.pkg.github.com", "ghcr.io"],
    },
}  # fmt: skip

# GET / : the API's hypermedia root (docs: meta, "GitHub API Root").
ROOT: dict[str, str] = {
    "current_user_url": f"{API}/user",
    "current_user_authorizations_html_url": f"{WEB}/settings/connections/applications"
    "{/client_id}",
    "authorizations_url": f"{API}/authorizations",
    "code_search_url": f"{API}/search/code?q={{query}}{{&page,per_page,sort,order}}",
    "commit_search_url": f"{API}/search/commits?q={{query}}{{&page,per_page,sort,order}}",
    "emails_url": f"{API}/user/emails",
    "emojis_url": f"{API}/emojis",
    "events_url": f"{API}/events",
    "feeds_url": f"{API}/feeds",
    "followers_url": f"{API}/user/followers",
    "following_url": f"{API}/user/following{{/target}}",
    "gists_url": f"{API}/gists{{/gist_id}}",
    "hub_url": f"{API}/hub",
    "issue_search_url": f"{API}/search/issues?q={{query}}{{&page,per_page,sort,order}}",
    "issues_url": f"{API}/issues",
    "keys_url": f"{API}/user/keys",
    "label_search_url": f"{API}/search/labels?q={{query}}&repository_id={{repository_id}}"
    "{&page,per_page}",
    "notifications_url": f"{API}/notifications",
    "organization_url": f"{API}/orgs/{{org}}",
    "organization_repositories_url": f"{API}/orgs/{{org}}/repos{{?type,page,per_page,sort}}",
    "organization_teams_url": f"{API}/orgs/{{org}}/teams",
    "public_gists_url": f"{API}/gists/public",
    "rate_limit_url": f"{API}/rate_limit",
    "repository_url": f"{API}/repos/{{owner}}/{{repo}}",
    "repository_search_url": f"{API}/search/repositories?q={{query}}{{&page,per_page,sort,order}}",
    "current_user_repositories_url": f"{API}/user/repos{{?type,page,per_page,sort}}",
    "starred_url": f"{API}/user/starred{{/owner}}{{/repo}}",
    "starred_gists_url": f"{API}/gists/starred",
    "topic_search_url": f"{API}/search/topics?q={{query}}{{&page,per_page}}",
    "user_url": f"{API}/users/{{user}}",
    "user_organizations_url": f"{API}/user/orgs",
    "user_repositories_url": f"{API}/users/{{user}}/repos{{?type,page,per_page,sort}}",
    "user_search_url": f"{API}/search/users?q={{query}}{{&page,per_page,sort,order}}",
}

# Headers every API answer carries (after the per-answer ones), as GitHub sends them.
_CORS_EXPOSE = (
    "ETag, Link, Location, Retry-After, X-GitHub-OTP, X-RateLimit-Limit, "
    "X-RateLimit-Remaining, X-RateLimit-Used, X-RateLimit-Resource, X-RateLimit-Reset, "
    "X-OAuth-Scopes, X-Accepted-OAuth-Scopes, X-Poll-Interval, X-GitHub-Media-Type, "
    "X-GitHub-SSO, X-GitHub-Request-Id, Deprecation, Sunset"
)
_TAIL: tuple[tuple[str, str], ...] = (
    ("access-control-expose-headers", _CORS_EXPOSE),
    ("access-control-allow-origin", "*"),
    ("strict-transport-security", "max-age=31536000; includeSubdomains; preload"),
    ("x-frame-options", "deny"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "0"),
    ("referrer-policy", "origin-when-cross-origin, strict-origin-when-cross-origin"),
    ("content-security-policy", "default-src 'none'"),
    ("vary", "Accept-Encoding, Accept, X-Requested-With"),
    ("server", "github.com"),
)
JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain;charset=utf-8"

# Echoed content (a gist's files) and listed entries (a tree's) an answer carries at most:
# the answer stays well under ``limits.ANSWER_BODY`` whatever the request held.
ECHO_BUDGET = 8 * 1024
TREE_ENTRIES = 100
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_IN_JSON = re.compile(rb'"name"\s*:\s*"([^"\\]{1,100})"')
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass
class _Quota:
    """One identity's primary rate limit: its hour and what it used of it."""

    limit: int
    used: int
    first: int  # seconds from the first request to the end of the hour under way
    reset: int = 0

    def spend(self, now: float, count: bool) -> bool:
        """Count a request (when ``count``); return whether the quota allows it."""
        if not self.reset:
            self.reset = int(now) + self.first
        elif now >= self.reset:
            self.used, self.reset = 0, int(now) + 3600
        if self.used >= self.limit:
            return False
        if count:
            self.used += 1
        return True

    @property
    def remaining(self) -> int:
        """Return what is left of the hour's quota."""
        return max(self.limit - self.used, 0)


def clean_name(text: str, fallback: str = "repo") -> str:
    """Return ``text`` as GitHub spells a repository name (other characters become '-')."""
    name = _NAME_CHARS.sub("-", text)[:100].strip(".")
    return name or fallback


def git_blob_sha(data: bytes) -> str:
    """Return the sha git (and GitHub) names a blob of ``data`` by."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _json(value: Any) -> bytes:
    # GitHub's API answers pretty-printed JSON, two spaces deep.
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def _token(authorization: str) -> str | None:
    """Return the token an Authorization header carries (None: no header)."""
    scheme, _, value = authorization.strip().partition(" ")
    if not scheme:
        return None
    value = value.strip()
    if scheme.lower() in ("token", "bearer"):
        return value
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return ""
        # git sends the token as the password; some clients as the user ("x-oauth-basic").
        return password if password not in ("", "x-oauth-basic") else user
    return ""


class GitHubApi:
    """GitHub's REST API for one decoy job, with each identity's rate limit kept."""

    def __init__(self, facts: GitHubFacts, tokens: Iterable[str]) -> None:
        """Know the job and the tokens Cujo planted (the only ones GitHub would accept)."""
        self.facts = facts
        self.tokens = frozenset(
            t for t in tokens if t.startswith(INSTALLATION_PREFIXES + USER_PREFIXES)
        )
        # Not a secret: ids, shas and proverbs made up, the same again for the same seed.
        self.rng = random.Random(facts.seed)  # noqa: S311
        owner, _, name = facts.repository.partition("/")
        self.owner, self.name = owner or "octo-org", name or "project"
        rng = self.rng
        # What each identity had used of its hour before the job's first request.
        used = {"anonymous": (0, 12), "installation": (2, 40), "user": (0, 200)}
        self._quotas = {
            who: _Quota(HOURLY[who], rng.randint(*span), rng.randint(600, 3600))
            for who, span in used.items()
        }
        self.installation_id = 40_000_000 + rng.randrange(20_000_000)
        self.runner_ip = f"20.{rng.randint(1, 250)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        self.base_sha = facts.base_sha or self._sha()
        # Ages, fixed once: the owner's account, the repository, its last push.
        self.ages = (
            rng.randint(3 * 365, 9 * 365) * 86400,
            rng.randint(90, 3 * 365) * 86400,
            rng.randint(600, 3 * 86400),
        )
        self.stats = {k: rng.randint(0, 40) for k in ("stars", "forks", "issues", "repos")}
        self._start: float | None = None

    # ---- helpers

    def _sha(self) -> str:
        return f"{self.rng.getrandbits(160):040x}"

    def _node_id(self, prefix: str, length: int = 8) -> str:
        return prefix + "".join(self.rng.choice(_BASE62) for _ in range(length))

    def _request_id(self, now: float) -> str:
        r = self.rng
        return (
            f"{r.getrandbits(16):04X}:{r.getrandbits(24):06X}:{r.getrandbits(28):07X}:"
            f"{r.getrandbits(28):07X}:{int(now) & 0xFFFFFFFF:08X}"
        )

    def _since(self, now: float, age: int) -> str:
        start = self._start if self._start is not None else now
        return iso_time(start - age)

    def kind(self, asked: Asked) -> Kind:
        """Return who asks: anonymous, an installation or a user token, or a bad token."""
        token = _token(asked.header("authorization"))
        if token is None:
            return "anonymous"
        if token not in self.tokens:
            return "bad"
        return "installation" if token.startswith(INSTALLATION_PREFIXES) else "user"

    def _headers(
        self,
        asked: Asked,
        kind: Kind,
        content_type: str,
        now: float,
        *,
        body: bytes,
        extra: tuple[tuple[str, str], ...] = (),
        permission: str = "",
        scopes: str = "",
    ) -> tuple[tuple[str, str], ...]:
        quota = self._quotas["anonymous" if kind == "bad" else kind]
        version = asked.header("x-github-api-version")
        version = version if version in API_VERSIONS else API_VERSIONS[0]
        authed = kind in ("installation", "user")
        head: list[tuple[str, str]] = [("date", http_date(now))]
        if content_type:
            head.append(("content-type", content_type))
        if body and content_type == JSON_TYPE and kind != "bad":
            head += [
                ("cache-control", f"{'private' if authed else 'public'}, max-age=60, s-maxage=60"),
                ("vary", "Accept, Authorization, Cookie, X-GitHub-OTP"),
                ("etag", f'W/"{hashlib.sha256(body).hexdigest()}"'),
            ]
        if kind == "user":
            head += [("x-oauth-scopes", USER_SCOPES), ("x-accepted-oauth-scopes", scopes)]
        head += list(extra)
        head.append(("x-github-media-type", "github.v3; format=json"))
        if kind == "installation" and permission:
            head.append(("x-accepted-github-permissions", permission))
        head += [
            ("x-github-api-version-selected", version),
            ("x-ratelimit-limit", str(quota.limit)),
            ("x-ratelimit-remaining", str(quota.remaining)),
            ("x-ratelimit-reset", str(quota.reset)),
            ("x-ratelimit-used", str(quota.used)),
            ("x-ratelimit-resource", "core"),
        ]
        return (*head, *_TAIL, ("x-github-request-id", self._request_id(now)))

    def _reply(
        self,
        asked: Asked,
        kind: Kind,
        now: float,
        status: int,
        value: Any,
        **options: Any,
    ) -> Answer:
        """Return a JSON answer with GitHub's headers."""
        body = _json(value) if value is not None else b""
        content_type = JSON_TYPE if value is not None else ""
        headers = self._headers(asked, kind, content_type, now, body=body, **options)
        return Answer(status, headers, body)

    def _error(
        self, asked: Asked, kind: Kind, now: float, status: int, message: str, doc: str = DOCS
    ) -> Answer:
        value = {"message": message, "documentation_url": doc, "status": str(status)}
        return self._reply(asked, kind, now, status, value)

    # ---- the API

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

    def _preflight(self, now: float) -> Answer:
        return Answer(
            204,
            (
                ("date", http_date(now)),
                ("access-control-allow-origin", "*"),
                ("access-control-allow-headers", "Authorization, Content-Type, If-Match, "
                 "If-Modified-Since, If-None-Match, If-Unmodified-Since, Accept-Encoding, "
                 "X-GitHub-OTP, X-Requested-With, User-Agent, GraphQL-Features, "
                 "X-Github-Next-Global-ID, X-GitHub-Api-Version"),
                ("access-control-allow-methods", "GET, POST, PATCH, PUT, DELETE"),
                ("access-control-max-age", "86400"),
                *_TAIL[2:],
                ("x-github-request-id", self._request_id(now)),
            ),
            b"",
        )  # fmt: skip

    def _over_quota(self, asked: Asked, kind: Kind, now: float) -> Answer:
        who = {
            "anonymous": f"for {self.runner_ip}. (But here's the good news: Authenticated "
            "requests get a higher rate limit. Check out the documentation for more details.)",
            "installation": f"for installation ID {self.installation_id}.",
            "user": f"for user ID {self.facts.owner_id}.",
        }[kind]
        doc = f"{DOCS}/overview/rate-limits-for-the-rest-api"
        value = {"message": f"API rate limit exceeded {who}", "documentation_url": doc}
        return self._reply(asked, kind, now, 403, value)

    def _ours(self, owner: str, repo: str) -> bool:
        return (owner.lower(), repo.lower()) == (self.owner.lower(), self.name.lower())

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

    # ---- what GitHub's objects look like

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
        tree = _text(fields.get("tree"), 40) or self._sha()
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
                "name": _text(given.get("name"), 100) or name,
                "email": _text(given.get("email"), 100) or email,
                "date": iso_time(now),
            }
        return {
            "sha": sha,
            "node_id": self._node_id("C_kwDO", 30),
            "url": f"{base}/commits/{sha}",
            "html_url": f"{WEB}/{owner}/{repo}/commit/{sha}",
            **people,
            "tree": {"sha": tree, "url": f"{base}/trees/{tree}"},
            "message": _text(fields.get("message"), 1000),
            "parents": [
                {"url": f"{base}/commits/{p}", "html_url": f"{WEB}/{owner}/{repo}/commit/{p}",
                 "sha": _text(p, 40)}
                for p in parents
            ],
            "verification": {"verified": False, "reason": "unsigned", "signature": None,
                             "payload": None, "verified_at": None},
        }  # fmt: skip

    # ---- what a worm does with a stolen token

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
            ref = _text(fields.get("ref"), 255) or "refs/heads/main"
            value = self._ref(owner, repo, ref, _text(fields.get("sha"), 40) or self._sha())
            return self._created(asked, kind, now, value, value["url"], "contents=write")
        if method == "PATCH" and rest[:2] == ["git", "refs"] and len(rest) > 2:
            ref = "refs/" + "/".join(rest[2:])[:255]
            value = self._ref(owner, repo, ref, _text(fields.get("sha"), 40) or self._sha())
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
        name = _text(fields.get("name"), 100) or _name_in(asked.body)
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
            description=_text(fields.get("description"), 350) or None,
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
            name = _text(raw_name, 255) or "gistfile1.txt"
            content = _text(spec.get("content"), 10**9) if isinstance(spec, dict) else ""
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
            "description": _text(fields.get("description"), 1000) or None,
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
        branch = _text(fields.get("branch"), 255) or self.facts.default_branch
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
            kind_of = _text(item.get("type"), 10) or "blob"
            entry_sha = _text(item.get("sha"), 40)
            if not entry_sha and isinstance(item.get("content"), str):
                entry_sha = git_blob_sha(item["content"].encode())
            entry_sha = entry_sha or self._sha()
            entry: dict[str, Any] = {
                "path": _text(item.get("path"), 255),
                "mode": _text(item.get("mode"), 6) or "100644",
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


# A repository's API links, as every repository object has them (also the push event's:
# ``arm/pushevent.py``).
REPO_LINKS: tuple[tuple[str, str], ...] = (
    ("forks_url", "/forks"), ("keys_url", "/keys{/key_id}"),
    ("collaborators_url", "/collaborators{/collaborator}"), ("teams_url", "/teams"),
    ("hooks_url", "/hooks"), ("issue_events_url", "/issues/events{/number}"),
    ("events_url", "/events"), ("assignees_url", "/assignees{/user}"),
    ("branches_url", "/branches{/branch}"), ("tags_url", "/tags"),
    ("blobs_url", "/git/blobs{/sha}"), ("git_tags_url", "/git/tags{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"), ("trees_url", "/git/trees{/sha}"),
    ("statuses_url", "/statuses/{sha}"), ("languages_url", "/languages"),
    ("stargazers_url", "/stargazers"), ("contributors_url", "/contributors"),
    ("subscribers_url", "/subscribers"), ("subscription_url", "/subscription"),
    ("commits_url", "/commits{/sha}"), ("git_commits_url", "/git/commits{/sha}"),
    ("comments_url", "/comments{/number}"), ("issue_comment_url", "/issues/comments{/number}"),
    ("contents_url", "/contents/{+path}"), ("compare_url", "/compare/{base}...{head}"),
    ("merges_url", "/merges"), ("archive_url", "/{archive_format}{/ref}"),
    ("downloads_url", "/downloads"), ("issues_url", "/issues{/number}"),
    ("pulls_url", "/pulls{/number}"), ("milestones_url", "/milestones{/number}"),
    ("notifications_url", "/notifications{?since,all,participating}"),
    ("labels_url", "/labels{/name}"), ("releases_url", "/releases{/id}"),
    ("deployments_url", "/deployments"),
)  # fmt: skip


def id_code(number: int) -> str:  # also ``arm/pushevent.py``
    """Return the tail GitHub's newer node ids carry for a database id (a packed form)."""
    packed = number.to_bytes(5, "big").lstrip(b"\0") or b"\0"
    return base64.urlsafe_b64encode(b"\x04" + packed).decode().rstrip("=")


def _text(value: Any, limit: int) -> str:
    """Return ``value`` if it is a string, clipped; else ""."""
    return value[:limit] if isinstance(value, str) else ""


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
    data = _decoded(fields.get("content"), _text(fields.get("encoding"), 10) or "utf-8")
    return git_blob_sha(data) if data is not None else ""


def is_github_api(host: str) -> bool:
    """Return whether ``host`` is GitHub's REST API."""
    return host.lower().rstrip(".") == API_HOST

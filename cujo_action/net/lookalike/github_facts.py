"""The look-alike GitHub's givens: the decoy job, GitHub's hosts, quotas and fixed answers.

``GitHubFacts`` is the job Cujo made up, as GitHub would know it (the proxy's config
carries it); the rest is what GitHub's REST API says the same to everyone: its hosts and
versions, each identity's hourly quota, the proverbs of ``/zen``, ``/meta``, the root
document, the headers every answer carries and a repository's links.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
TAIL: tuple[tuple[str, str], ...] = (
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


# GitHub's permissive default for a workflow's GITHUB_TOKEN (docs: "Permissions for the
# GITHUB_TOKEN"); ``actionsjob.TOKEN_PERMISSIONS`` states the decoy job's.
RESTRICTED: dict[str, str] = {"contents": "read", "metadata": "read", "packages": "read"}


class GitHubFacts(BaseModel):
    """The decoy job as GitHub would know it: its repository, ids and token's permissions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repository: str = "octo-org/project"  # GITHUB_REPOSITORY
    repository_id: int = 400_000_000  # GITHUB_REPOSITORY_ID
    owner_id: int = 9_000_000  # GITHUB_REPOSITORY_OWNER_ID
    owner_type: Literal["User", "Organization"] = "User"
    default_branch: str = "main"
    base_sha: str = ""  # the default branch's head ("" : one is made up)
    # The installation token's permissions, as the job states them.
    permissions: dict[str, str] = Field(default_factory=lambda: dict(RESTRICTED))
    seed: int = 0


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


def is_github_api(host: str) -> bool:
    """Return whether ``host`` is GitHub's REST API."""
    return host.lower().rstrip(".") == API_HOST

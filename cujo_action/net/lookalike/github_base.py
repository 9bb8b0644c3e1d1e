"""The look-alike GitHub's state for one job: its identities, quotas, ids and headers."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cujo_action import limits
from cujo_action.net.lookalike.github_facts import (
    API_VERSIONS,
    DOCS,
    HOURLY,
    INSTALLATION_PREFIXES,
    JSON_TYPE,
    TAIL,
    USER_PREFIXES,
    USER_SCOPES,
    GitHubFacts,
    Kind,
)
from cujo_action.net.lookalike.web import Answer, Asked, http_date, iso_time

# Echoed content (a gist's files) and listed entries (a tree's) an answer carries at most:
# the answer stays well under ``limits.ANSWER_BODY`` whatever the request held.
ECHO_BUDGET = limits.ANSWER_ECHO
TREE_ENTRIES = 100
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
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


def text_of(value: Any, limit: int) -> str:
    """Return ``value`` if it is a string, clipped; else ""."""
    return value[:limit] if isinstance(value, str) else ""


class ApiBase:
    """One decoy job as GitHub's REST API keeps it: identities, quotas, ids, headers."""

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
        return (*head, *TAIL, ("x-github-request-id", self._request_id(now)))

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
                *TAIL[2:],
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

"""Read what a catch-up sweep needs as one installation: its repositories, open pull
requests, and whether a head already carries this App's ``cujo/guard``.

Part of the gateway (``client.py`` composes it): reads only, each fail-closed, each list
bounded by a number of pages the caller gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app_relay.github.answers import GitHubAnswer, GitHubError, parse_time
from app_relay.github.payloads import checked_sha, repo_path
from app_relay.github.transport import PER_PAGE, GatewayTransport
from app_relay.github.vocab import OBJECT_ID


@dataclass(frozen=True, slots=True)
class InstalledRepo:
    """A repository the installation reaches."""

    full_name: str
    id: int
    default_branch: str
    archived: bool


@dataclass(frozen=True, slots=True)
class OpenPull:
    """An open pull request as listed; ``data`` is GitHub's object, for a synthetic event."""

    number: int
    head_sha: str
    draft: bool
    updated_at: float  # epoch seconds, GitHub's clock
    data: dict[str, Any]


class CatchUpReads(GatewayTransport):
    """List the installation's repositories and open pull requests; find a guard."""

    def installation_repos(self, *, max_pages: int = 10) -> tuple[list[InstalledRepo], bool]:
        """List the repositories this installation reaches; say whether the list ended."""
        # https://docs.github.com/en/rest/apps/installations#list-repositories-accessible-to-the-app-installation
        path = "/installation/repositories"
        found: list[InstalledRepo] = []
        listed, more = self._first_pages(path, "repositories", {}, max_pages)
        for a in listed:
            archived = a.flag("archived") if "archived" in a.data else False
            disabled = a.flag("disabled") if "disabled" in a.data else False
            found.append(
                InstalledRepo(
                    full_name=a.text("full_name"),
                    id=a.positive("id"),
                    default_branch=a.text("default_branch"),
                    archived=archived or disabled,
                )
            )
        return found, not more

    def open_pulls(
        self, repo: str, *, updated_since: float | None, max_pages: int
    ) -> tuple[list[OpenPull], bool]:
        """List open pull requests, most recently updated first, down to ``updated_since``.

        Say whether the list ended (its last page, or a pull request older than the
        bound) within ``max_pages``.
        """
        # https://docs.github.com/en/rest/pulls/pulls#list-pull-requests
        path = f"{repo_path(repo)}/pulls"
        call = f"GET {path}"
        found: list[OpenPull] = []
        for page in range(1, max_pages + 1):
            params = {
                "state": "open",
                "sort": "updated",
                "direction": "desc",
                "per_page": PER_PAGE,
                "page": page,
            }
            _, data = self._request("GET", path, params=params, idempotent=True)
            if not isinstance(data, list):
                raise GitHubError(call, "answer body is not a JSON list")
            for i, item in enumerate(data):
                pull = _open_pull(call, i, item)
                if updated_since is not None and pull.updated_at < updated_since:
                    return found, True
                found.append(pull)
            if len(data) < PER_PAGE:
                return found, True
        return found, False

    def has_guard(self, repo: str, head_sha: str, *, name: str = "cujo/guard") -> bool:
        """Say whether a commit carries a check run ``name`` made by this App."""
        # https://docs.github.com/en/rest/checks/runs#list-check-runs-for-a-git-reference
        path = f"{repo_path(repo)}/commits/{checked_sha('head_sha', head_sha)}/check-runs"
        params = {"check_name": name, "app_id": self.app_id, "filter": "all", "per_page": 1}
        a = self._get(path, params)
        if a.integer("total_count") == 0:
            return False
        for run in a.items("check_runs"):
            app = run.opt_obj("app")
            if run.text("name") == name and app is not None and app.integer("id") == self.app_id:
                return True
        # GitHub filtered by name and App, yet lists another: believe neither, say no guard.
        return False


def _open_pull(call: str, index: int, item: object) -> OpenPull:
    a = GitHubAnswer(call, item)
    a.where = f"[{index}]"
    a.one_of("state", ("open",))
    head = a.obj("head")
    return OpenPull(
        number=a.positive("number"),
        head_sha=head.text("sha", pattern=OBJECT_ID),
        draft=a.flag("draft"),
        updated_at=parse_time(call, "updated_at", a.text("updated_at")),
        data=a.data,
    )

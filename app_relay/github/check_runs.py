"""Write this App's check runs: create one (found again by its ``external_id``), move it.

Part of the gateway (``client.py`` composes it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app_relay.github.answers import CheckRun, GitHubAnswer, GitHubError, answered_at
from app_relay.github.payloads import (
    CheckAction,
    CheckOutput,
    actions_payload,
    capped_text,
    checked_sha,
    output_payload,
    positive,
    repo_path,
)
from app_relay.github.transport import GatewayTransport
from app_relay.github.vocab import (
    CHECK_STATUSES,
    CONCLUSIONS,
    CONCLUSIONS_SEEN,
    OBJECT_ID,
    STATUSES_SEEN,
    CheckStatus,
    Conclusion,
)


class CheckRunCalls(GatewayTransport):
    """Create, find and update this App's check runs."""

    def create_check_run(
        self,
        repo: str,
        head_sha: str,
        *,
        name: str = "cujo/guard",
        status: CheckStatus = "in_progress",
        conclusion: Conclusion | None = None,
        output: CheckOutput,
        actions: Sequence[CheckAction] = (),
        external_id: str | None = None,
    ) -> int:
        """Create a check run on a commit and return its id.

        ``external_id`` names the run it belongs to, so a retry can find a check run an
        earlier attempt made (``find_check_run``) instead of making a second one.
        """
        return self.create_check_run_answer(
            repo,
            head_sha,
            name=name,
            status=status,
            conclusion=conclusion,
            output=output,
            actions=actions,
            external_id=external_id,
        ).id

    def create_check_run_answer(
        self,
        repo: str,
        head_sha: str,
        *,
        name: str = "cujo/guard",
        status: CheckStatus = "in_progress",
        conclusion: Conclusion | None = None,
        output: CheckOutput,
        actions: Sequence[CheckAction] = (),
        external_id: str | None = None,
    ) -> CheckRun:
        """Create a check run on a commit and return it as GitHub answered (with its time)."""
        # https://docs.github.com/en/rest/checks/runs#create-a-check-run
        if status not in CHECK_STATUSES:
            raise ValueError(f"not a check run status: {status!r}")
        if (status == "completed") != (conclusion is not None):
            raise ValueError("a check run is created completed exactly when it has a conclusion")
        if conclusion is not None and conclusion not in CONCLUSIONS:
            raise ValueError(f"not a conclusion Cujo sets: {conclusion!r}")
        body: dict[str, object] = {
            "name": capped_text("name", name, 255),
            "head_sha": checked_sha("head_sha", head_sha),
            "status": status,
            "output": output_payload(output),
        }
        if conclusion is not None:
            body["conclusion"] = conclusion
        if external_id is not None:
            body["external_id"] = capped_text("external_id", external_id, 255)
        if actions:
            body["actions"] = actions_payload(actions)
        path = f"{repo_path(repo)}/check-runs"
        # A repeated POST would make a second check run: never retried here.
        headers, data = self._request("POST", path, body=body, idempotent=False)
        run = _check_run(f"POST {path}", data, headers)
        if run.head_sha != head_sha or run.name != name:
            raise GitHubError(f"POST {path}", "the answer is about another commit or check")
        return run

    def find_check_run(
        self, repo: str, head_sha: str, *, name: str, external_id: str
    ) -> int | None:
        """Return the id of this App's check run ``name`` on a commit made for ``external_id``."""
        # https://docs.github.com/en/rest/checks/runs#list-check-runs-for-a-git-reference
        path = f"{repo_path(repo)}/commits/{checked_sha('head_sha', head_sha)}/check-runs"
        params = {"check_name": name, "app_id": self._app.app_id, "filter": "all"}
        for a in self._pages(path, "check_runs", params):
            app = a.opt_obj("app")
            if (
                a.text("name") == name
                and a.opt_text("external_id") == external_id
                and app is not None
                and app.integer("id") == self._app.app_id
            ):
                return a.integer("id")
        return None

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: Conclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
    ) -> CheckRun:
        """Move a check run: status, conclusion, output, buttons."""
        # https://docs.github.com/en/rest/checks/runs#update-a-check-run
        body: dict[str, object] = {}
        if status is not None:
            if status not in CHECK_STATUSES:
                raise ValueError(f"not a check run status: {status!r}")
            body["status"] = status
        if conclusion is not None:
            if conclusion not in CONCLUSIONS:
                raise ValueError(f"not a conclusion Cujo sets: {conclusion!r}")
            body["conclusion"] = conclusion
        elif status == "completed":
            raise ValueError("a completed check run needs a conclusion")
        if output is not None:
            body["output"] = output_payload(output)
        if actions is not None:
            body["actions"] = actions_payload(actions)
        if not body:
            raise ValueError("nothing to update")
        path = f"{repo_path(repo)}/check-runs/{positive('check_run_id', check_run_id)}"
        # Setting the same fields twice leaves the same check run: safe to retry.
        headers, data = self._request("PATCH", path, body=body, idempotent=True)
        run = _check_run(f"PATCH {path}", data, headers)
        if run.id != check_run_id or (conclusion is not None and run.conclusion != conclusion):
            raise GitHubError(f"PATCH {path}", "the answer does not show the update")
        return run


def _check_run(call: str, data: object, headers: Mapping[str, str] | None = None) -> CheckRun:
    a = GitHubAnswer(call, data)
    return CheckRun(
        id=a.integer("id"),
        name=a.text("name"),
        head_sha=a.text("head_sha", pattern=OBJECT_ID),
        status=a.one_of("status", STATUSES_SEEN),
        conclusion=a.opt_one_of("conclusion", CONCLUSIONS_SEEN),
        answered_at=answered_at(headers),
    )

"""Drive GitHub Actions: dispatch a workflow, follow its runs and jobs, list its artifacts.

Part of the gateway (``client.py`` composes it). A dispatch is never retried (a repeated
POST would start a second run); reads and a cancel are. Downloading what a run left is
``downloads.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from github.WorkflowRun import WorkflowRun as PyGithubWorkflowRun

from app_relay.github.answers import (
    Artifact,
    DispatchResult,
    GitHubError,
    Job,
    Workflow,
    WorkflowRun,
    read_steps,
)
from app_relay.github.payloads import path_segment, positive, repo_path
from app_relay.github.transport import GatewayTransport
from app_relay.github.vocab import CONCLUSIONS_SEEN, OBJECT_ID, STATUSES_SEEN, Reader


class ActionsCalls(GatewayTransport):
    """Dispatch workflows, follow their runs and jobs, list artifacts, cancel a run."""

    def dispatch_workflow(
        self, repo: str, workflow_file: str, ref: str, inputs: Mapping[str, str | bool]
    ) -> DispatchResult:
        """Dispatch a workflow at a ref, with run details when GitHub gives them."""
        # https://docs.github.com/en/rest/actions/workflows#create-a-workflow-dispatch-event
        # Its documented limits: at most 10 inputs, and 65,535 characters in all.
        if len(inputs) > 10 or len(json.dumps(dict(inputs))) > 65_535:
            raise ValueError("a dispatch takes at most 10 inputs and 65,535 characters")
        if not all(isinstance(v, str | bool) for v in inputs.values()):
            raise ValueError("dispatch inputs are strings or booleans")
        repo_path(repo)
        workflow = self._github.get_repo(repo).get_workflow(workflow_file)
        call = f"POST {repo_path(repo)}/actions/workflows/{path_segment(workflow_file)}/dispatches"

        def send() -> DispatchResult:
            # With throw=True PyGithub answers True for a 204 (a GitHub that gives no
            # run details) despite its annotation, hence `object`.
            run: object = workflow.create_dispatch(
                ref, inputs=dict(inputs), throw=True, return_run_details=True
            )
            if run is True:
                return DispatchResult(None, None)
            if not isinstance(run, PyGithubWorkflowRun):
                raise GitHubError(call, f"dispatch answered {type(run).__name__}")
            run_id, html_url = run.id, run.html_url
            if not isinstance(run_id, int) or isinstance(run_id, bool) or run_id <= 0:
                raise GitHubError(call, "field 'workflow_run_id' is not a positive integer")
            if not isinstance(html_url, str) or not html_url:
                raise GitHubError(call, "field 'html_url' is not a non-empty string")
            return DispatchResult(run_id, html_url)

        try:
            # A repeated POST would start a second run: never retried.
            return self._attempt(call, send, idempotent=False)
        except (KeyError, TypeError) as exc:
            raise GitHubError(call, f"field {exc} is missing from the run details") from exc

    def list_workflow_runs(
        self, repo: str, workflow_file: str, created_after: datetime | None = None
    ) -> list[WorkflowRun]:
        """List a workflow's runs, newest first, optionally only those created since a time."""
        # https://docs.github.com/en/rest/actions/workflow-runs#list-workflow-runs-for-a-workflow
        path = f"{repo_path(repo)}/actions/workflows/{path_segment(workflow_file)}/runs"
        params: dict[str, object] = {}
        if created_after is not None:
            if created_after.tzinfo is None:
                raise ValueError("created_after must carry a time zone")
            stamp = created_after.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            params["created"] = f">={stamp}"
        return [_workflow_run(r) for r in self._pages(path, "workflow_runs", params)]

    def workflow_run(self, repo: str, run_id: int) -> WorkflowRun:
        """Read one workflow run (a conditional request: reconciling repeats it)."""
        # https://docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run
        run = _workflow_run(self._get(_run_path(repo, run_id), conditional=True))
        if run.id != run_id:
            raise GitHubError(f"GET run {run_id}", f"answered run {run.id}")
        return run

    def workflow_jobs(self, repo: str, run_id: int) -> list[Job]:
        """List the jobs of a workflow run, each with its steps.

        A conditional request per page (the poll repeats it): unchanged jobs are answered
        304, which costs nothing against the rate limit, and read from the answer kept.
        """
        # https://docs.github.com/en/rest/actions/workflow-jobs#list-jobs-for-a-workflow-run
        path = f"{_run_path(repo, run_id)}/jobs"
        return [
            Job(
                id=a.integer("id"),
                name=a.text("name"),
                status=a.text("status"),
                steps=read_steps(a.data.get("steps")),
            )
            for a in self._pages(path, "jobs", {}, conditional=True)
        ]

    def cancel_workflow_run(self, repo: str, run_id: int) -> bool:
        """Cancel a workflow run; False when it had already finished."""
        # https://docs.github.com/en/rest/actions/workflow-runs#cancel-a-workflow-run
        path = f"{_run_path(repo, run_id)}/cancel"
        try:
            # Cancelling twice cancels once: safe to retry.
            self._request("POST", path, idempotent=True)
        except GitHubError as exc:
            if exc.status == 409:  # "Cannot cancel a workflow run that is completed."
                return False
            raise
        return True

    def run_artifacts(self, repo: str, run_id: int) -> list[Artifact]:
        """List a workflow run's artifacts."""
        # https://docs.github.com/en/rest/actions/artifacts#list-workflow-run-artifacts
        path = f"{_run_path(repo, run_id)}/artifacts"
        return [
            Artifact(
                id=a.integer("id"),
                name=a.text("name"),
                size_in_bytes=a.integer("size_in_bytes"),
                expired=a.flag("expired"),
            )
            for a in self._pages(path, "artifacts", {})
        ]

    def workflow(self, repo: str, workflow_file: str) -> Workflow | None:
        """Read a workflow by its file name; None when GitHub does not know it."""
        # https://docs.github.com/en/rest/actions/workflows#get-a-workflow
        try:
            a = self._get(f"{repo_path(repo)}/actions/workflows/{path_segment(workflow_file)}")
        except GitHubError as exc:
            if exc.status == 404:
                return None
            raise
        return Workflow(id=a.integer("id"), path=a.text("path"), state=a.text("state"))

    def dispatch_workflow_plain(
        self, repo: str, workflow_file: str, ref: str, inputs: Mapping[str, str | bool]
    ) -> DispatchResult:
        """Dispatch a workflow without asking for run details (GHES up to 3.20 refuses that)."""
        # https://docs.github.com/en/enterprise-server@3.20/rest/actions/workflows#create-a-workflow-dispatch-event
        if len(inputs) > 10 or len(json.dumps(dict(inputs))) > 65_535:
            raise ValueError("a dispatch takes at most 10 inputs and 65,535 characters")
        workflow = self._github.get_repo(repo).get_workflow(workflow_file)
        call = f"POST {repo_path(repo)}/actions/workflows/{path_segment(workflow_file)}/dispatches"

        def send() -> DispatchResult:
            workflow.create_dispatch(ref, inputs=dict(inputs), throw=True)
            return DispatchResult(None, None)

        # A repeated POST would start a second run: never retried.
        return self._attempt(call, send, idempotent=False)


def _run_path(repo: str, run_id: int) -> str:
    """Return the REST path of a workflow run."""
    return f"{repo_path(repo)}/actions/runs/{positive('run_id', run_id)}"


def _workflow_run(a: Reader) -> WorkflowRun:
    return WorkflowRun(
        id=a.integer("id"),
        name=a.opt_text("name"),
        display_title=a.text("display_title"),
        status=a.one_of("status", STATUSES_SEEN),
        conclusion=a.opt_one_of("conclusion", CONCLUSIONS_SEEN),
        head_sha=a.text("head_sha", pattern=OBJECT_ID),
        run_attempt=a.integer("run_attempt"),
    )

"""Run the sandbox somewhere and hand back its bundle.

``localrun.LocalRunner`` runs the sandbox on this machine (the embedded default, and the
relay's runner when there is no Actions). ``ActionsRunner``
dispatches the repository's Cujo workflow on its default branch, finds the workflow run
(from the run details, or by the run-name ``cujo <run id>``), folds ``workflow_job`` and
``workflow_run`` webhooks into progress, cancels, and fetches the ``cujo-reports``
artifact: only from a run that concluded ``success`` and carries this run's name, capped,
unpacked safely and validated against the run it dispatched. Anything wrong is an error
that says why, which the caller turns into an ``error`` run, never ``clean``.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, ParamSpec, Protocol, TypeVar

from app_relay.github.answers import (
    Artifact,
    DispatchResult,
    GitHubError,
    Job,
    JobStep,
    WorkflowRun,
    answer_message,
    read_steps,
)
from app_relay.github.vocab import (
    CONCLUSIONS_SEEN,
    STATUSES_SEEN,
    WORKFLOW_JOB_ACTIONS,
    WORKFLOW_RUN_ACTIONS,
    Reader,
)
from app_relay.runs.bundle_intake import open_bundle
from cujo_action.evidence.reader import Bundle, BundleError
from cujo_action.schema import REPO_NAME, RUN_ID, RUN_ID_CHARS, SHA

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _asking(what: str, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Return ``call``'s answer; a GitHub or answer error becomes ``RunnerError(what: why)``."""
    try:
        return call(*args, **kwargs)
    except (GitHubError, ValueError) as exc:
        raise RunnerError(f"{what}: {exc}") from exc


# ---- GitHub Actions ------------------------------------------------------------------

WORKFLOW: Final = "cujo.yml"
ARTIFACT: Final = "cujo-reports"
# The zip is compressed; what it inflates to is capped again by bundle.unpack_bundle.
MAX_ARTIFACT_BYTES: Final = 64 * 1024 * 1024
# The sandbox job of the reusable workflow, and how much of its log is read.
SANDBOX_JOB: Final = "cujo sandbox"
MAX_JOB_LOG_BYTES: Final = 64 * 1024 * 1024
_TITLE = re.compile(rf"cujo ({RUN_ID_CHARS})")
log = logging.getLogger(__name__)


class RunnerError(Exception):
    """The sandbox on Actions could not be started, found or trusted; the run is ``error``."""


# Everything ``fetch_bundle`` raises for a bundle it will not hand over.
FETCH_ERRORS: Final = (RunnerError, BundleError)


class ActionsGateway(Protocol):
    """The Actions calls ``ActionsRunner`` makes; ``github.GitHubGateway`` implements them."""

    def dispatch_workflow(
        self, repo: str, workflow_file: str, ref: str, inputs: Mapping[str, str | bool]
    ) -> DispatchResult: ...

    def dispatch_workflow_plain(
        self, repo: str, workflow_file: str, ref: str, inputs: Mapping[str, str | bool]
    ) -> DispatchResult: ...

    def list_workflow_runs(
        self, repo: str, workflow_file: str, created_after: datetime | None = None
    ) -> list[WorkflowRun]: ...

    def workflow_run(self, repo: str, run_id: int) -> WorkflowRun: ...

    def cancel_workflow_run(self, repo: str, run_id: int) -> bool: ...

    def run_artifacts(self, repo: str, run_id: int) -> list[Artifact]: ...

    def download_artifact(
        self, repo: str, artifact_id: int, dest: Path, max_bytes: int
    ) -> Path: ...

    def workflow_jobs(self, repo: str, run_id: int) -> list[Job]: ...

    def job_log(self, repo: str, job_id: int, max_bytes: int) -> str: ...


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The workflow run a dispatch started (always found, or ``dispatch`` raised)."""

    workflow_run_id: int
    html_url: str | None
    correlated: bool  # found by its run-name because GitHub gave no run details


@dataclass(frozen=True, slots=True)
class RunProgress:
    """One ``workflow_job`` or ``workflow_run`` webhook, folded into what a run needs."""

    event: Literal["workflow_job", "workflow_run"]
    action: str
    repo: str
    workflow_run_id: int
    run_attempt: int | None
    status: str
    conclusion: str | None
    # A job waiting on an environment's reviewers: the run waits on a person.
    waiting: bool
    environment: str | None  # the environment it waits on, when the payload says
    # workflow_run only: the run-name, "cujo <run id>" for Cujo's runs.
    display_title: str | None
    # The workflow run's commit: the default branch's, never the pull request's head.
    head_sha: str
    workflow_path: str | None  # workflow_run only, e.g. ".github/workflows/cujo.yml"
    job_name: str | None  # workflow_job only
    steps: tuple[JobStep, ...] = ()  # workflow_job only: each step's progress

    @property
    def cujo_run_id(self) -> str | None:
        """Return the Cujo run id the run-name carries, if it is one of Cujo's runs."""
        m = _TITLE.fullmatch(self.display_title or "")
        return m.group(1) if m else None


@dataclass(frozen=True, slots=True)
class Unfolded:
    """A webhook that is not run progress Cujo follows, or is malformed; says why."""

    reason: str


class _Malformed(Exception):
    pass


def _malformed(field: str, problem: str) -> _Malformed:
    return _Malformed(f"{field or 'payload'} {problem}")


def _fold(event_name: str, body: object) -> RunProgress:
    if event_name not in ("workflow_job", "workflow_run"):
        raise _Malformed(f"event {event_name[:40]!r} is not workflow_job or workflow_run")
    payload = Reader(body, _malformed)
    if event_name == "workflow_job":
        action = payload.one_of("action", WORKFLOW_JOB_ACTIONS)
        obj = payload.obj("workflow_job")
        run_id = obj.positive("run_id")
        title, path, job = None, None, obj.text("name")
    else:
        action = payload.one_of("action", WORKFLOW_RUN_ACTIONS)
        obj = payload.obj("workflow_run")
        run_id = obj.positive("id")
        title, path, job = obj.text("display_title"), obj.text("path"), None
    attempt = obj.opt_positive("run_attempt")
    status = obj.one_of("status", STATUSES_SEEN)
    conclusion = obj.opt_one_of("conclusion", CONCLUSIONS_SEEN)
    if action == "completed" and (status != "completed" or conclusion is None):
        raise _Malformed(f"{obj.where} is 'completed' without a completed status and a conclusion")
    if status == "completed" and conclusion is None:
        raise _Malformed(f"{obj.where}.status is completed but it has no conclusion")
    repo = payload.obj("repository").text("full_name", pattern=REPO_NAME)
    # The environment a job waits on, when the payload says (absent on most jobs).
    deployment = payload.data.get("deployment")
    environment = (
        Reader(deployment, _malformed, "deployment").opt_text("environment")
        if isinstance(deployment, dict) and "environment" in deployment
        else None
    )
    return RunProgress(
        event="workflow_job" if event_name == "workflow_job" else "workflow_run",
        action=action,
        repo=repo,
        workflow_run_id=run_id,
        run_attempt=attempt,
        status=status,
        conclusion=conclusion,
        waiting=status == "waiting" or action == "waiting",
        environment=environment,
        display_title=title,
        head_sha=obj.text("head_sha", pattern=SHA),
        workflow_path=path,
        job_name=job,
        steps=read_steps(obj.data.get("steps")) if event_name == "workflow_job" else (),
    )


def read_progress(event_name: str, payload: object) -> RunProgress | Unfolded:
    """Fold a ``workflow_job`` or ``workflow_run`` webhook, or say why it cannot be."""
    try:
        return _fold(event_name, payload)
    except _Malformed as exc:
        return Unfolded(f"{event_name[:40]}: {exc}")


def fold_event(event_name: str, payload: object) -> RunProgress | None:
    """Fold a webhook into run progress; None (the reason logged) when it is not one."""
    folded = read_progress(event_name, payload)
    if isinstance(folded, Unfolded):
        log.info("webhook not folded into run progress: %s", folded.reason)
        return None
    return folded


def refuses_run_details(exc: GitHubError) -> bool:
    """Return whether a dispatch was refused for asking for run details, as GHES does.

    GitHub Enterprise Server up to 3.20 answers 400 to the unknown ``return_run_details``
    field; a 422 counts too when GitHub's message names the field. Any other
    refusal (a missing trigger, unexpected inputs) is not retried: it would fail again.
    """
    message = answer_message(exc) or exc.reason
    return exc.status == 400 or (exc.status == 422 and "return_run_details" in message)


class SandboxRunner(Protocol):
    """Where the sandbox runs, as a run moves through it: ``ActionsRunner`` on Actions."""

    def dispatch(
        self,
        repo: str,
        default_branch: str,
        *,
        run_id: str,
        base_sha: str,
        head_sha: str,
        pull_request: int,
    ) -> Dispatched:
        """Start the sandbox workflow for one run."""
        ...

    def fold_event(self, event_name: str, payload: object) -> RunProgress | None:
        """Fold a workflow webhook into progress, or None when it is not one."""
        ...

    def fetch_bundle(
        self,
        repo: str,
        workflow_run_id: int,
        *,
        run_id: str,
        head_sha: str,
        base_sha: str,
        dest: Path,
    ) -> Bundle:
        """Download and validate a finished run's bundle."""
        ...

    def cancel(self, repo: str, workflow_run_id: int) -> bool:
        """Cancel a workflow run (which also ends a wait on a person)."""
        ...

    def find_dispatched(self, repo: str, run_id: str, since: datetime) -> int | None:
        """Return the workflow run a dispatch for ``run_id`` started, if there is one."""
        ...

    def job_log(self, repo: str, workflow_run_id: int) -> str:
        """Return the log of the run's sandbox job (the tamper record is in it)."""
        ...


@dataclass(eq=False)  # a runner is one thing, compared by identity as before
class ActionsRunner:
    """Run the sandbox as a workflow on GitHub Actions and fetch its bundle, fail-closed.

    ``gateways`` gives the gateway acting on a repository (its installation's); the
    workflow file lives on, and is always dispatched from, the default branch.
    """

    gateways: Callable[[str], ActionsGateway]
    _: KW_ONLY
    workflow: str = WORKFLOW
    max_artifact_bytes: int = MAX_ARTIFACT_BYTES
    correlate_polls: int = 10
    correlate_every_s: float = 3.0
    correlate_deadline_s: float = 60.0
    clock_skew_s: float = 120.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        if self.correlate_polls < 1:
            raise ValueError("correlate_polls must be at least 1")

    @classmethod
    def with_gateway(cls, gateway: ActionsGateway, **kw: Any) -> ActionsRunner:
        """Build a runner that uses one gateway for every repository."""
        return cls(lambda _repo: gateway, **kw)

    fold_event = staticmethod(fold_event)
    read_progress = staticmethod(read_progress)

    def dispatch(
        self,
        repo: str,
        default_branch: str,
        *,
        run_id: str,
        base_sha: str,
        head_sha: str,
        pull_request: int,
    ) -> Dispatched:
        """Start the sandbox workflow on the default branch and return its workflow run."""
        if not RUN_ID.fullmatch(run_id):
            raise RunnerError(f"run id {run_id[:80]!r} is not 1-64 of [A-Za-z0-9._-]")
        for name, sha in (("base", base_sha), ("head", head_sha)):
            if not SHA.fullmatch(sha):
                raise RunnerError(f"{name} {sha[:80]!r} is not a 40-hex commit SHA")
        if isinstance(pull_request, bool) or not isinstance(pull_request, int) or pull_request < 1:
            raise RunnerError(f"pull request {pull_request!r} is not a positive number")
        if not default_branch:
            raise RunnerError("no default branch to dispatch on")
        inputs = {
            "run-id": run_id,
            "base-sha": base_sha,
            "head-sha": head_sha,
            "pull-request": str(pull_request),
        }
        gateway = self.gateways(repo)
        since = datetime.fromtimestamp(self.clock() - self.clock_skew_s, UTC)
        try:
            try:
                result = gateway.dispatch_workflow(repo, self.workflow, default_branch, inputs)
            except GitHubError as exc:
                if not refuses_run_details(exc):
                    raise
                # Nothing was started (GitHub refused the request): one plain dispatch,
                # then the run is found by its run-name.
                result = gateway.dispatch_workflow_plain(
                    repo, self.workflow, default_branch, inputs
                )
        except (GitHubError, ValueError) as exc:
            raise RunnerError(f"dispatching {self.workflow} on {default_branch}: {exc}") from exc
        if result.workflow_run_id is not None:
            return Dispatched(result.workflow_run_id, result.html_url, correlated=False)
        return self._correlate(gateway, repo, default_branch, run_id, since)

    def _correlate(
        self,
        gateway: ActionsGateway,
        repo: str,
        default_branch: str,
        run_id: str,
        since: datetime,
    ) -> Dispatched:
        # GitHub answered 204 without run details: find the run by its run-name.
        title = f"cujo {run_id}"
        deadline = self.clock() + self.correlate_deadline_s
        polls = 0
        while True:
            polls += 1
            try:
                runs = gateway.list_workflow_runs(repo, self.workflow, created_after=since)
            except GitHubError as exc:
                raise RunnerError(f"finding the workflow run named {title!r}: {exc}") from exc
            found = [r for r in runs if r.display_title == title]
            if len(found) > 1:
                ids = ", ".join(str(r.id) for r in found[:5])
                raise RunnerError(
                    f"{len(found)} workflow runs are named {title!r} ({ids}); refusing to guess"
                )
            if found:
                return Dispatched(found[0].id, None, correlated=True)
            left = deadline - self.clock()
            if polls >= self.correlate_polls or left <= 0:
                break
            self.sleep(min(self.correlate_every_s, left))
        raise RunnerError(
            f"dispatched {self.workflow} on {default_branch} but no workflow run named "
            f"{title!r} appeared after {polls} look(s) within {self.correlate_deadline_s:g}s"
        )

    def find_dispatched(self, repo: str, run_id: str, since: datetime) -> int | None:
        """Return the workflow run a dispatch for ``run_id`` started, if GitHub lists one.

        For a run whose relay died between dispatching and recording the answer: one
        look by run-name, no waiting; two runs of one name is an error, never a guess.
        """
        title = f"cujo {run_id}"
        try:
            runs = self.gateways(repo).list_workflow_runs(repo, self.workflow, created_after=since)
        except GitHubError as exc:
            raise RunnerError(f"finding the workflow run named {title!r}: {exc}") from exc
        found = [r for r in runs if r.display_title == title]
        if len(found) > 1:
            ids = ", ".join(str(r.id) for r in found[:5])
            raise RunnerError(f"{len(found)} workflow runs are named {title!r} ({ids})")
        return found[0].id if found else None

    def cancel(self, repo: str, workflow_run_id: int) -> bool:
        """Cancel a workflow run (which also ends a wait on a person); False if it had ended."""
        try:
            return self.gateways(repo).cancel_workflow_run(repo, workflow_run_id)
        except (GitHubError, ValueError) as exc:
            raise RunnerError(f"cancelling workflow run {workflow_run_id}: {exc}") from exc

    def job_log(self, repo: str, workflow_run_id: int) -> str:
        """Return the log of the run's sandbox job (the tamper record is in it).

        Raise ``RunnerError`` saying why when it cannot be read: no such job, no
        ``actions: read``, a log over the cap.
        """
        gateway = self.gateways(repo)
        where = f"workflow run {workflow_run_id}"
        jobs = _asking(f"listing the jobs of {where}", gateway.workflow_jobs, repo, workflow_run_id)
        # The caller's job calls the reusable workflow: GitHub names it "<caller> / cujo sandbox".
        sandbox = [j for j in jobs if j.name == SANDBOX_JOB or j.name.endswith(f" / {SANDBOX_JOB}")]
        if not sandbox:
            raise RunnerError(f"{where} has no job named {SANDBOX_JOB!r}")
        return "\n".join(
            _asking(
                f"reading the log of job {job.id} of {where}",
                gateway.job_log,
                repo,
                job.id,
                MAX_JOB_LOG_BYTES,
            )
            for job in sandbox
        )

    def fetch_bundle(
        self,
        repo: str,
        workflow_run_id: int,
        *,
        run_id: str,
        head_sha: str,
        base_sha: str,
        dest: Path,
    ) -> Bundle:
        """Download, unpack and validate the bundle of a finished, successful workflow run.

        ``dest`` (absent or empty) receives the bundle's files. Raise ``RunnerError`` or
        ``BundleError`` (``FETCH_ERRORS``) saying why on anything else.
        """
        gateway = self.gateways(repo)
        where = f"workflow run {workflow_run_id}"
        run = _asking(f"reading {where}", gateway.workflow_run, repo, workflow_run_id)
        if run.status != "completed":
            raise RunnerError(f"{where} is {run.status}, not completed")
        if run.conclusion != "success":
            raise RunnerError(
                f"{where} concluded {run.conclusion!r}, not 'success': its artifacts are not "
                "trusted"
            )
        if run.display_title != f"cujo {run_id}":
            raise RunnerError(
                f"{where} is named {run.display_title[:80]!r}, not 'cujo {run_id}': "
                "it is not this run's"
            )
        artifacts = _asking(
            f"listing the artifacts of {where}", gateway.run_artifacts, repo, workflow_run_id
        )
        named = [a for a in artifacts if a.name == ARTIFACT]
        if not named:
            raise RunnerError(f"{where} has no artifact named {ARTIFACT!r}")
        if len(named) > 1:
            raise RunnerError(
                f"{where} has {len(named)} artifacts named {ARTIFACT!r}; refusing to choose"
            )
        (artifact,) = named
        if artifact.expired:
            raise RunnerError(f"the {ARTIFACT!r} artifact of {where} has expired")
        if artifact.size_in_bytes > self.max_artifact_bytes:
            raise RunnerError(
                f"the {ARTIFACT!r} artifact of {where} is {artifact.size_in_bytes} bytes, "
                f"over the cap of {self.max_artifact_bytes}"
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".cujo-artifact-", dir=dest.parent) as tmp:
            archive = Path(tmp) / f"{ARTIFACT}.zip"
            _asking(
                f"downloading the {ARTIFACT!r} artifact of {where}",
                gateway.download_artifact,
                repo,
                artifact.id,
                archive,
                self.max_artifact_bytes,
            )
            return open_bundle(archive, dest, run_id=run_id, head_sha=head_sha, base_sha=base_sha)

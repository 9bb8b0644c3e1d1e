"""Run the changed jobs that run after the merge, in a running check's sandbox, as a runner would.

The I/O around ``workflow_jobs``: read the CI files at base and at the merge from the
pristine clone's git objects (``ci_files``, as the workflows check does: nothing a pull
request can write is on the way), choose the jobs, and run each ``run:`` step as a further
command of the check (the smoke check): the evaluated script is written to the runner's
temp folder as the check's own uid (``CheckRun.write_file``), then run with the step's
shell, ``env:`` and working directory, confined, watched and searched like any of the
check's commands; its egress is the check's (``smoke:egress:N``). The command's first
line names the workflow file, the job and the step. ``secrets.*`` and ``github.token``
are the run's decoys (``workflow_jobs.secret_decoy``). Capped (``limits.py``), loudly.
"""

from __future__ import annotations

import json
import shlex
import tempfile
import time
import uuid
from pathlib import Path

from cujo_action import limits
from cujo_action.arm.actionsjob import event_file
from cujo_action.arm.context import sandbox_env
from cujo_action.checks.ci_files import read_ci
from cujo_action.checks.harness import CheckRun
from cujo_action.checks.workflow_jobs import (
    JobContext,
    JobPlan,
    JobRun,
    StepPlan,
    choose,
    github_context,
    plan_job,
    plan_step,
    secret_decoy,
)
from cujo_action.limits import LimitId
from cujo_action.prepare.git import Git, PrepareError, git_env
from cujo_action.sandbox.jail import JailError
from cujo_action.schema import Phase, clip

GIT_TIMEOUT = 120.0
PHASE: Phase = "smoke"
# What the report says of each step (one observation per step), and of a job not run.
WORKFLOW_STEP = "workflow_step"
WORKFLOW_JOB = "workflow_job"


def _one_line(text: str, size: int = 120) -> str:
    return clip(" ".join(text.split()), size)


class WorkflowJobs:
    """The changed jobs of one review, run in ``run``'s sandbox."""

    def __init__(self, run: CheckRun, venv: str | None) -> None:
        self.run, self.venv = run, venv
        self.plan = run.plan
        self.started = time.monotonic()
        self.ran_steps = 0
        self.said: list[str] = []
        self.path = ""  # the steps' PATH before GITHUB_PATH adds to it

    # ------------------------------------------------------------------ choosing

    def chosen(self) -> list[JobRun]:
        """Return the jobs to run, reading the CI files from the clone's objects."""
        merged_sha = self.plan.push.after if self.plan.push is not None else self.plan.head_sha
        clone = Path(self.plan.head_dir)
        with tempfile.TemporaryDirectory(prefix="git-") as home:
            git = Git(git_env(Path(home)), GIT_TIMEOUT, shown=self.plan.repo, raw=self.plan.repo)
            base = read_ci(git, clone, self.plan.base_sha)
            merged = read_ci(git, clone, merged_sha)
        if merged.unread or merged.too_large:
            # The workflows check cuts and names these; here only what is not run is said.
            self.said.append("some CI files were not read (see the workflows check)")
        branch = self.plan.upstream.branch if self.plan.upstream is not None else "main"
        runs, passed = choose(base.texts, merged.texts, self.plan.changed_files, branch)
        for p in passed:
            self.run.observe(WORKFLOW_JOB, f"{p.path}: not run: {p.why}", path=p.path)
        return runs

    # ------------------------------------------------------------------ running

    def context(self, job: JobRun) -> JobContext:
        """Return what the job's expressions read, from the step's own variables."""
        armed, check = self.run.armed, self.run.check
        env = sandbox_env(armed, self.plan, check=check, phase=PHASE, venv=self.venv)
        self.path = env.get("PATH", "")
        event = json.loads(event_file(armed.job, armed.job.event(check), time.time()))
        decoys = {d.name: d.value for d in armed.decoy_objects()}
        token = decoys.get("GITHUB_TOKEN", "")
        github = github_context(env, event, token, job.event)
        github.update(job=job.job_id, workflow=str(job.workflow.get("name") or job.path))
        runner = {"os": "Linux", "arch": "X64", "environment": "github-hosted",
                  "name": env.get("RUNNER_NAME", ""), "temp": env.get("RUNNER_TEMP", ""),
                  "tool_cache": env.get("RUNNER_TOOL_CACHE", "")}  # fmt: skip
        return JobContext(
            github=github,
            runner=runner,
            secret=lambda name: decoys.get(secret_decoy(name), ""),
            workspace=self.run.src,
            temp=env.get("RUNNER_TEMP", f"{armed.home_inside(check)}/work/_temp"),
        )

    def left(self) -> float:
        return limits.WORKFLOW_RUN_TIME - (time.monotonic() - self.started)

    def run_all(self, jobs: list[JobRun]) -> None:
        """Run each job in turn, within the caps."""
        kept = jobs[: limits.WORKFLOW_JOBS]
        if len(jobs) > len(kept):
            rest = [f"{j.path}#{j.job_id}" for j in jobs[len(kept) :]]
            self.run.cut("workflow-jobs", dropped=len(rest), kept=len(kept),
                         detail=f"not run: {', '.join(rest[:10])}")  # fmt: skip
        for n, job in enumerate(kept):
            if self.left() <= 0:
                rest = [f"{j.path}#{j.job_id}" for j in kept[n:]]
                self.run.cut("workflow-run-time", dropped=len(rest), kept=n,
                             detail=f"not run: {', '.join(rest[:10])}")  # fmt: skip
                break
            self.run_job(job)

    def run_job(self, job: JobRun) -> None:
        ctx = self.context(job)
        plan = plan_job(job, ctx)
        where = f"{job.path}, job `{job.job_id}` (on {job.event}; {job.why})"
        if plan.skipped:
            self.run.observe(WORKFLOW_JOB, f"{where}: not run: {plan.skipped}", path=job.path)
            self._job_notes(plan, where)
            return
        self.run.say(f"workflow job {job.path}#{job.job_id} on {job.event}")
        started = time.monotonic()
        steps = plan.steps
        kept = min(len(steps), limits.WORKFLOW_STEPS)
        if len(steps) > kept:
            self.run.cut("workflow-steps", dropped=len(steps) - kept, kept=kept,
                         detail=f"{where}: steps after the {kept}th not run")  # fmt: skip
        ran = 0
        env_at_start = self.run.file_command("GITHUB_ENV")
        path_at_start = self.run.file_command("GITHUB_PATH")
        for index in range(kept):
            job_left = limits.WORKFLOW_JOB_TIME - (time.monotonic() - started)
            if job_left <= 0 or self.left() <= 0:
                limit: LimitId = "workflow-job-time" if job_left <= 0 else "workflow-run-time"
                self.run.cut(limit, dropped=kept - index, kept=index,
                             detail=f"{where}: steps from #{index + 1} not run")  # fmt: skip
                break
            step = plan_step(plan, index, ctx)
            outputs_before = self.run.file_command("GITHUB_OUTPUT")
            outcome = self._step(job, plan, step, ctx, min(job_left, self.left()))
            plan.record(index, outputs_before, self.run.file_command("GITHUB_OUTPUT"), outcome)
            ran += 1
            # What the step set for the later ones, as the runner sets it.
            plan.carry(
                env_at_start, self.run.file_command("GITHUB_ENV"),
                path_at_start, self.run.file_command("GITHUB_PATH"),
            )  # fmt: skip
        self._job_notes(plan, where)
        secrets = f"; secrets read (as decoys): {', '.join(plan.secrets_read)}" * bool(
            plan.secrets_read
        )
        self.run.observe(
            WORKFLOW_JOB,
            f"{where}: {ran} step(s) taken, "
            f"{'failed' if plan.status.failed else 'succeeded'}{secrets}",
            path=job.path,
        )

    def _job_notes(self, plan: JobPlan, where: str) -> None:
        for note in plan.notes:
            self.run.observe(WORKFLOW_JOB, f"{where}: {note}", path=plan.run.path)
        if plan.unevaluated:
            self.run.cut(
                "workflow-expression", dropped=len(plan.unevaluated),
                detail=f"{where}: not evaluated, read as '': {'; '.join(plan.unevaluated[:5])}",
            )  # fmt: skip

    def _step(
        self, job: JobRun, plan: JobPlan, step: StepPlan, ctx: JobContext, left: float
    ) -> str:
        """Take one step; return its outcome (``success``, ``failure`` or ``skipped``)."""
        said = f"{job.path}, job `{job.job_id}`, step {step.index + 1} `{_one_line(step.label)}`"
        if step.kind != "run":
            what = {"emulated": "emulated", "not-run": "not run", "skipped": "skipped"}
            uses = f" (`{step.uses}`)" if step.uses else ""
            self.run.observe(WORKFLOW_STEP, f"{said}{uses}: {what[step.kind]}: {step.note}",
                             path=job.path)  # fmt: skip
            return "skipped" if step.kind == "skipped" else "success"
        path = f"{ctx.temp}/{uuid.uuid4()}{step.suffix}"
        named = f"{job.path} · job {job.job_id} · step {step.index + 1}: {_one_line(step.label)}"
        command = step.shell.replace("{0}", shlex.quote(path))
        cwd = self.run.src
        if step.working_directory:
            cwd = f"{cwd}/{step.working_directory}".rstrip("/")
        timeout = min(float(limits.WORKFLOW_STEP_TIME), max(left, 1.0))
        try:
            self.run.write_file(path, step.script.encode())
        except (JailError, OSError) as exc:
            self.run.observe(WORKFLOW_STEP, f"{said}: not run: its script could not be "
                             f"written ({clip(str(exc), 300)})", path=job.path)  # fmt: skip
            plan.status.failed = True
            return "failure"
        # The job's own names, where the check's variables name its usual job.
        env = {
            **step.env,
            "GITHUB_JOB": job.job_id,
            "GITHUB_EVENT_NAME": job.event,
            "GITHUB_WORKFLOW": str(ctx.github.get("workflow", "")),
            "GITHUB_WORKFLOW_REF": f"{ctx.github.get('repository', '')}/{job.path}@"
            f"{ctx.github.get('ref', '')}",
        }
        if plan.github_path:
            env["PATH"] = ":".join([*plan.github_path, self.path])
        outcome = self.run.run(
            f"# {named}\n{command}", phase=PHASE, timeout=timeout, cwd=cwd, venv=self.venv,
            env=env, workflow_step=named,
        )  # fmt: skip
        self.ran_steps += 1
        failed = outcome.exit_code != 0
        if failed and not step.continue_on_error:
            plan.status.failed = True
        if outcome.timed_out:
            self.run.cut(
                "workflow-step-time", dropped=1, detail=f"{said}: killed after {timeout:.0f}s"
            )
        self.run.observe(
            WORKFLOW_STEP,
            f"{said}: ran `{_one_line(step.template, 300)}` with `{step.shell}`"
            f"{f' in {step.working_directory}' if step.working_directory else ''}: "
            f"exit {outcome.exit_code}",
            path=job.path,
        )
        if step.unevaluated:
            self.run.observe(WORKFLOW_STEP, f"{said}: ran with '' for: "
                             f"{'; '.join(step.unevaluated[:5])}", path=job.path)  # fmt: skip
        return "failure" if failed else "success"


def run_workflow_jobs(run: CheckRun, *, received: bool) -> str:
    """Run the changed jobs that run after the merge; return what to add to the summary."""
    jobs = WorkflowJobs(run, None)
    try:
        chosen = jobs.chosen()
    except PrepareError as exc:
        run.cut("workflow-jobs", dropped=1, detail=f"the CI files could not be read: {exc}")
        return "the workflow jobs could not be read from git"
    if not chosen:
        return ""
    if not received:
        run.receive_install()
    jobs.venv = run.venv if run.plan.ecosystem != "node" else None
    jobs.run_all(chosen)
    shown = ", ".join(f"{j.path}#{j.job_id}" for j in chosen[:5])
    more = f" and {len(chosen) - 5} more" if len(chosen) > 5 else ""
    said = "".join(f"; {s}" for s in jobs.said)
    return f"workflow jobs run after the merge: {shown}{more} ({jobs.ran_steps} run: step(s)){said}"

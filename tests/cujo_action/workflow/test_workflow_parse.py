"""A workflow is read as GitHub reads it: `on` a key, every value with its own line."""

from __future__ import annotations

from repo_paths import SAMPLES

from cujo_action.workflow.parse import ACTION_JOB, parse

WORKFLOWS = SAMPLES / "workflows"


def sample(name: str) -> str:
    return (WORKFLOWS / name).read_text()


def test_on_is_the_triggers_in_each_of_its_three_forms() -> None:
    # YAML 1.1 reads a bare `on` as true; composing keeps it the key GitHub reads.
    assert parse("w.yml", "on: push\njobs: {}\n").triggers == {"push": 1}
    assert parse("w.yml", "on: [push, pull_request_target]\n").triggers == {
        "push": 1,
        "pull_request_target": 1,
    }
    ci = parse(".github/workflows/ci.yml", sample("ci.yml"))
    assert ci.triggers == {"pull_request": 3, "push": 4}
    assert ci.permissions == "{}"


def test_each_expression_carries_the_line_it_is_written_on() -> None:
    flow = parse(".github/workflows/branch-injection.yml", sample("branch-injection.yml"))
    step = next(s for s in flow.steps() if s.ident == "Note the branch")
    assert step.run is not None
    assert step.run.block
    assert [(e, line) for e, line, _ in step.run.expressions] == [
        ("github.head_ref", 15),
        ("env.PR_TITLE", 16),
    ]
    # The offset is where the expression is in the value, for reading the shell there.
    _expr, _, offset = step.run.expressions[0]
    assert step.run.value[offset:].startswith("${{ github.head_ref }}")
    assert step.run.line_at(offset) == 15
    job = flow.job("format")
    assert job is not None
    assert job.env["PR_TITLE"].expressions[0][:2] == (
        "github.event.pull_request.title",
        10,
    )


def test_folded_and_quoted_values_keep_their_lines_by_the_files_text() -> None:
    text = (
        "on: push\n"
        "jobs:\n"
        "  a:\n"
        "    steps:\n"
        "      - run: >\n"
        "          echo ${{ github.sha }}\n"
        "          and ${{ github.ref }}\n"
        '      - run: "echo ${{ github.actor }}"\n'
        "      - uses: actions/checkout@v4\n"
        "        with: {ref: '${{ github.head_ref }}', path: x}\n"
    )
    steps = parse("w.yml", text).steps()
    assert steps[0].run is not None
    assert "\n" not in steps[0].run.value.strip()
    assert [line for _, line, _ in steps[0].run.expressions] == [6, 7]
    assert steps[1].run is not None
    assert steps[1].run.expressions[0][1] == 8
    assert steps[2].with_["ref"].expressions[0][:2] == ("github.head_ref", 10)


def test_a_step_is_named_by_id_name_action_or_command_whatever_its_place() -> None:
    text = (
        "on: push\njobs:\n  a:\n    steps:\n"
        "      - id: build\n        run: make\n"
        "      - name: Test\n        run: make test\n"
        "      - uses: actions/checkout@v4\n"
        "      - uses: actions/checkout@v3\n"
        "      - run: ./deploy.sh --now\n"
    )
    idents = [s.ident for s in parse("w.yml", text).steps()]
    assert idents == [
        "build",
        "Test",
        "uses actions/checkout",
        "uses actions/checkout#2",
        "run ./deploy.sh --now",
    ]


def test_a_composite_action_is_one_job_of_its_steps() -> None:
    text = (
        "name: x\nruns:\n  using: composite\n  steps:\n"
        "    - run: echo ${{ inputs.who }}\n      shell: bash\n"
    )
    action = parse("tools/act/action.yml", text)
    assert action.kind == "action"
    assert not action.triggers
    assert [j.id for j in action.jobs] == [ACTION_JOB]
    assert action.steps()[0].shell == "bash"


def test_what_github_would_not_run_says_why_and_nothing_else() -> None:
    broken = parse("w.yml", "on: push\njobs:\n  a: [\n")
    assert broken.error.startswith("not valid YAML at line")
    assert not broken.jobs
    assert parse("w.yml", "- a list\n").error.startswith("not a mapping")


def test_an_alias_is_read_where_it_stands_not_expanded() -> None:
    text = (
        "on: push\n"
        "env: &e\n  A: ${{ secrets.A }}\n"
        "jobs:\n  a:\n    env: *e\n    steps:\n      - run: echo\n"
    )
    flow = parse("w.yml", text)
    job = flow.job("a")
    assert job is not None
    assert job.env["A"].value == "${{ secrets.A }}"

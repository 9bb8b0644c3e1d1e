"""Each check's job reads as the post-merge push: its variables, event file and job message.

The event file is held against GitHub's own push payloads (octokit/webhooks' examples in
``tests/samples/webhooks``), key by key and type by type, never against the builder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jobs import BASE, MERGE, job_for

from cujo_action.arm.actionsjob import JobIdentity, job_env, job_message, new_identity
from cujo_action.arm.pushevent import push_event
from cujo_action.find.decoys import make_decoys
from cujo_action.schema import Push, PushedCommit, Upstream

SAMPLES = Path(__file__).parents[2] / "samples" / "webhooks"
# A push payload a webhook delivers to an App carries its installation; a job's does not.
WEBHOOK_ONLY = {"installation"}
NOW = 1_770_000_000.0
DECOYS = make_decoys()
HEAD = "c" * 40


def sample(name: str) -> dict[str, Any]:
    data = json.loads((SAMPLES / f"push.{name}.json").read_text())
    assert isinstance(data, dict)
    return data


def merged_job() -> JobIdentity:
    """Return a job of octo/app run for a merge: the pull request's commit, then the merge."""
    commits = [
        PushedCommit(
            id=HEAD, tree_id="d" * 40, message="Add a feature\n\nwhy",
            timestamp="2026-01-02T03:04:05+01:00",
            author_name="Mona", author_email="mona@example.com",
            committer_name="Mona", committer_email="mona@example.com",
            added=["feature.py"], modified=["setup.py"],
        ),
        PushedCommit(
            id=MERGE, tree_id="e" * 40,
            message="Merge pull request #7 from octo/feature\n\nAdd a feature",
            timestamp="2026-01-03T00:00:00Z", author_name="octo",
            author_email="4242424+octo@users.noreply.github.com",
            committer_name="GitHub", committer_email="noreply@github.com",
            added=["feature.py"], modified=["setup.py"],
        ),
    ]  # fmt: skip
    upstream = Upstream(repository="octo/app", owner_id=4_242_424, branch="main",
                        default_branch="main")  # fmt: skip
    return new_identity(
        upstream,
        Push(before=BASE, after=MERGE, merged=True, commits=commits),
        Push(before="0" * 40, after=BASE),
    )


def kinds(value: dict[str, Any]) -> dict[str, str]:
    return {key: type(item).__name__ for key, item in value.items()}


@pytest.mark.parametrize("name", ["with-new-branch", "with-no-username-committer"])
def test_the_event_file_is_shaped_as_githubs_push_payload(name: str) -> None:
    real = sample(name)
    made = json.loads(push_event(merged_job(), merged_job().push, NOW))
    assert set(made) == set(real) - WEBHOOK_ONLY
    # Every field GitHub sends of the repository, the pusher, the sender and a commit,
    # each of the same JSON type (null where GitHub writes null).
    for part in ("repository", "pusher", "sender"):
        assert kinds(made[part]).items() >= kinds(real[part]).items(), part
    for commit in (*made["commits"], made["head_commit"]):
        assert set(commit) == set(real["head_commit"])
        assert kinds(commit) == kinds(real["head_commit"])
    assert (made["created"], made["deleted"], made["forced"], made["base_ref"]) == (
        False,
        False,
        False,
        None,
    )


def test_the_event_file_agrees_with_the_variables_and_the_checkout() -> None:
    job = merged_job()
    event = json.loads(push_event(job, job.push, NOW))
    env = job_env(job, job.push, DECOYS, home="/home/runner", temp="/home/runner/work/_temp")
    assert (env["GITHUB_EVENT_NAME"], env["GITHUB_REF"], env["GITHUB_REF_NAME"]) == (
        "push",
        "refs/heads/main",
        "main",
    )
    # As on any push: a pull request's refs are empty.
    assert (env["GITHUB_BASE_REF"], env["GITHUB_HEAD_REF"]) == ("", "")
    assert event["ref"] == env["GITHUB_REF"]
    assert event["after"] == env["GITHUB_SHA"] == env["GITHUB_WORKFLOW_SHA"] == MERGE
    assert event["before"] == BASE
    assert event["head_commit"]["id"] == MERGE
    assert [c["id"] for c in event["commits"]] == [HEAD, MERGE]
    assert event["repository"]["full_name"] == env["GITHUB_REPOSITORY"] == "octo/app"
    assert event["repository"]["default_branch"] == "main"
    assert event["repository"]["owner"]["id"] == int(env["GITHUB_REPOSITORY_OWNER_ID"])
    assert event["sender"]["login"] == event["pusher"]["name"] == env["GITHUB_ACTOR"]
    assert event["sender"]["id"] == int(env["GITHUB_ACTOR_ID"])
    assert env["GITHUB_WORKFLOW_REF"] == "octo/app/.github/workflows/ci.yml@refs/heads/main"
    assert event["compare"] == f"https://github.com/octo/app/compare/{BASE[:12]}...{MERGE[:12]}"


def test_a_commit_names_the_accounts_github_knows_by_their_address() -> None:
    job = merged_job()
    merge = json.loads(push_event(job, job.push, NOW))["head_commit"]
    assert merge["committer"] == {"name": "GitHub", "email": "noreply@github.com",
                                  "username": "web-flow"}  # fmt: skip
    assert merge["author"]["username"] == "octo"
    plain = json.loads(push_event(job, job.push, NOW))["commits"][0]
    assert "username" not in plain["author"]  # an address GitHub knows no account of
    assert plain["message"] == "Add a feature\n\nwhy"
    assert (plain["added"], plain["removed"], plain["modified"]) == (
        ["feature.py"],
        [],
        ["setup.py"],
    )


def test_the_base_checks_job_is_the_push_of_the_base() -> None:
    job = job_for("octo/app")
    base, tests, install = job.event("base"), job.event("tests"), job.event("install")
    assert isinstance(base, Push)
    assert isinstance(tests, Push)
    assert isinstance(install, Push)
    assert (base.after, tests.after, install.after) == (
        BASE,
        MERGE,
        MERGE,
    )
    env = job_env(job, base, DECOYS, home="/home/runner", temp="/home/runner/work/_temp")
    event = json.loads(push_event(job, base, NOW))
    assert env["GITHUB_SHA"] == event["after"] == BASE
    assert (env["GITHUB_EVENT_NAME"], env["GITHUB_REF"]) == ("push", "refs/heads/main")
    assert event["created"] is True  # the base here is its branch's first commit
    assert event["head_commit"] is None  # no commit listed: nothing to show


def test_the_worker_holds_the_push_in_its_job_message() -> None:
    job = job_for("octo/app", branch="release/2.x")
    github = json.loads(job_message(job, job.push, DECOYS))["contextData"]["github"]["d"]
    held = {entry["k"]: entry["v"] for entry in github}
    assert held["event_name"] == "push"
    assert (held["ref"], held["ref_name"], held["sha"]) == (
        "refs/heads/release/2.x",
        "release/2.x",
        MERGE,
    )
    assert held["repository"] == "octo/app"
    assert "pull_request" not in json.dumps(github)

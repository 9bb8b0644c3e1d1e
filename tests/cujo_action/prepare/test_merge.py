"""What runs is what runs after the merge: prepare's merge, its push and the upstream's name.

The merge is checked against git's own ``merge --no-ff`` in a clone of its own (the oracle
from outside: what GitHub's merge button pushes), never against ``merge.py``'s reading.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import GitRepo

from cujo_action.prepare.git import Git, PrepareError, git_env
from cujo_action.prepare.plan import prepare
from cujo_action.prepare.upstream import repository_of, upstream_name
from cujo_action.schema import Plan


def feature(path: Path, base: dict[str, str | None], *heads: dict[str, str | None]) -> GitRepo:
    """Return a repository whose main holds ``base`` and whose ``feature`` adds ``heads``."""
    repo = GitRepo(path)
    repo.write({"README.md": "demo\n", **base}).commit("base")
    repo.branch("feature").checkout("feature")
    for number, head in enumerate(heads, 1):
        repo.write(head).commit(f"head {number}\n\nwhy it changes")
    repo.checkout("main")
    return repo


def plan_of(
    repo: GitRepo, tmp_path: Path, base: str = "main", head: str = "feature", **kw: str
) -> Plan:
    return prepare(str(repo.path), base, head, "run-1", tmp_path / "work", **kw)  # type: ignore[arg-type]


def merged_by_git(repo: GitRepo, tmp_path: Path) -> str:
    """Return the tree ``git merge --no-ff feature`` makes on main, in a clone of its own."""
    clone = GitRepo(tmp_path / "oracle")
    clone.git("fetch", "--quiet", str(repo.path), "main:base", "feature:feature")
    clone.git("checkout", "--quiet", "base")
    clone.git("merge", "--quiet", "--no-ff", "--no-edit", "feature")
    return clone.git("rev-parse", "HEAD^{tree}")


def test_the_checks_run_on_head_merged_into_base_as_githubs_merge_button_makes_it(
    tmp_path: Path,
) -> None:
    repo = feature(tmp_path / "src", {"a.txt": "1\n", "b.txt": "1\n"},
                   {"b.txt": "2\n"}, {"c.txt": "new\n", "a.txt": None})  # fmt: skip
    repo.write({"z.txt": "main moves on\n"}).commit("main moves on")
    base, head = repo.sha("main"), repo.sha("feature")
    plan = plan_of(repo, tmp_path)
    assert plan.push is not None
    assert plan.upstream is not None
    checkout = GitRepo(Path(plan.head_dir))
    merge = plan.push.after
    assert plan.push.merged
    assert (plan.head_sha, plan.base_sha) == (head, base)  # the reports name the pull request's
    assert checkout.git("rev-list", "--parents", "-n1", "HEAD").split() == [merge, base, head]
    assert checkout.git("rev-parse", "HEAD^{tree}") == merged_by_git(repo, tmp_path)
    assert {p.name for p in Path(plan.head_dir).iterdir()} == {
        ".git", "README.md", "b.txt", "c.txt", "z.txt",
    }  # fmt: skip
    owner = plan.upstream.repository.split("/")[0]
    shown = checkout.git("show", "-s", "--format=%an <%ae>%n%cn <%ce>%n%B", "HEAD").splitlines()
    assert shown[:2] == [
        f"{owner} <{plan.upstream.owner_id}+{owner}@users.noreply.github.com>",
        "GitHub <noreply@github.com>",
    ]
    assert shown[2].startswith("Merge pull request #")
    assert shown[2].endswith(f" from {owner}/feature")
    assert shown[3:] == ["", "head 2"]
    # Checked out on the base branch, as actions/checkout leaves a push: nothing else.
    assert checkout.git("rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert checkout.git("rev-parse", "origin/main") == merge
    assert checkout.git("for-each-ref", "--format=%(refname)", "refs/heads") == "refs/heads/main"
    assert checkout.git("status", "--porcelain") == ""


def test_the_push_lists_the_pull_requests_commits_then_the_merge(tmp_path: Path) -> None:
    repo = feature(tmp_path / "src", {"a.txt": "1\n", "b.txt": "1\n"},
                   {"b.txt": "2\n"}, {"c.txt": "new\n", "a.txt": None})  # fmt: skip
    base, head = repo.sha("main"), repo.sha("feature")
    plan = plan_of(repo, tmp_path)
    assert plan.push is not None
    assert plan.base_push is not None
    push = plan.push
    assert push.before == base
    commits = [(c.id, c.added, c.removed, c.modified) for c in push.commits]
    first = repo.git("rev-parse", "feature~1")
    assert commits == [
        (first, [], [], ["b.txt"]),
        (head, ["c.txt"], ["a.txt"], []),
        # The merge brings the branch everything the pull request changed.
        (push.after, ["c.txt"], ["a.txt"], ["b.txt"]),
    ]
    assert push.commits[1].message == "head 2\n\nwhy it changes"
    assert push.commits[1].author_email == "author@example.invalid"
    assert push.commits[1].timestamp.endswith("Z")
    assert (push.commits[-1].committer_name, push.commits[-1].committer_email) == (
        "GitHub",
        "noreply@github.com",
    )
    # The base check's job is the push of the base commit alone.
    assert plan.base_push.after == base
    assert plan.base_push.before == "0" * 40  # its repository's first commit
    assert [c.id for c in plan.base_push.commits] == [base]


def test_a_conflict_runs_the_checks_on_head_and_says_so(tmp_path: Path) -> None:
    repo = feature(tmp_path / "src", {"app.py": "v = 1\n"}, {"app.py": "v = 2\n"})
    repo.write({"app.py": "v = 3\n"}).commit("main changes the same line")
    head = repo.sha("feature")
    plan = plan_of(repo, tmp_path)
    assert plan.push is not None
    assert (plan.push.after, plan.push.merged) == (head, False)
    assert plan.notes[0].startswith("head conflicts with base (app.py)")
    assert "the checks ran on head" in plan.notes[0]
    checkout = GitRepo(Path(plan.head_dir))
    assert checkout.sha() == head
    assert checkout.git("rev-parse", "--abbrev-ref", "HEAD") == "main"  # still a push to main
    assert (Path(plan.head_dir) / "app.py").read_text() == "v = 2\n"


def test_a_head_already_in_base_is_not_merged_and_says_so(tmp_path: Path) -> None:
    repo = feature(tmp_path / "src", {}, {"app.py": ""})
    repo.git("merge", "--quiet", "--ff-only", "feature")
    plan = plan_of(repo, tmp_path, base="main", head="feature")
    assert plan.push is not None
    assert (plan.push.after, plan.push.merged) == (repo.sha("feature"), False)
    assert plan.notes[0].startswith("head is already in base")


def test_the_build_files_are_settled_from_the_merge(tmp_path: Path) -> None:
    # Base gained its package after the pull request forked; head adds the tests.
    repo = feature(tmp_path / "src", {}, {"tests/test_app.py": "def test(): pass\n"})
    repo.write({"setup.py": "from setuptools import setup\nsetup()\n"}).commit("package")
    plan = plan_of(repo, tmp_path)
    assert plan.build_files == ["setup.py"]
    assert plan.test.endswith("-s tests")


def test_a_pull_requests_head_fetched_from_its_ref_leaves_no_trace_of_the_fetch(
    tmp_path: Path,
) -> None:
    repo = feature(tmp_path / "src", {"app.py": "v = 1\n"}, {"app.py": "v = 2\n"})
    head = repo.sha("feature")
    repo.git("update-ref", "refs/pull/7/head", head)
    repo.git("branch", "-D", "feature")
    plan = prepare(
        f"file://{repo.path}", repo.sha("main"), head, "run-1", tmp_path / "work", pull_request=7
    )
    checkout = GitRepo(Path(plan.head_dir))
    assert checkout.git("show", "-s", "--format=%s", "HEAD").startswith("Merge pull request #7 ")
    refs = checkout.git("for-each-ref", "--format=%(refname)")
    assert "cujo" not in refs
    assert "refs/pull" not in refs
    assert not (Path(plan.head_dir) / ".git" / "FETCH_HEAD").exists()


# --------------------------------------------------------------------------- naming


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("https://github.com/pallets/itsdangerous.git", ("pallets", "itsdangerous")),
        ("https://x-access-token:t@github.com/python-attrs/attrs", ("python-attrs", "attrs")),
        ("git@github.com:pytest-dev/pluggy.git", ("pytest-dev", "pluggy")),
        ("https://ghe.example.com/we_ird/na:me", ("we-ird", "na-me")),
        # A path's folders are this machine's: never a repository's name.
        ("/tmp/pytest-of-root/attack-http0/repo", None),
        ("file:///srv/mirror/octo/app.git", None),
        ("https://github.com/solo", None),
    ],
)
def test_a_clone_url_names_the_repository_as_github_spells_it(
    url: str, named: tuple[str, str] | None
) -> None:
    assert repository_of(url) == named


def _git(tmp_path: Path) -> Git:
    return Git(git_env(tmp_path), 60, shown="repo", raw="repo")


def test_a_local_repository_is_named_by_its_origin_on_a_forge(tmp_path: Path) -> None:
    repo = feature(tmp_path / "deep" / "mine" / "checkout", {}, {"a": ""})
    repo.git("remote", "add", "origin", "git@github.com:octo-org/widgets.git")
    plan = plan_of(repo, tmp_path)
    assert plan.upstream is not None
    assert plan.upstream.repository == "octo-org/widgets"


def test_a_local_repository_with_no_forge_is_named_plausibly_never_by_its_path(
    tmp_path: Path,
) -> None:
    repo = feature(tmp_path / "secret-place" / "widgets", {}, {"a": ""})
    named = upstream_name(_git(tmp_path), str(repo.path), repo.path, repo.path, repo.sha("main"))
    # The base commit's author (author@example.invalid), the repository's folder.
    assert named == "author/widgets"
    assert "secret-place" not in named
    assert str(tmp_path).strip("/").split("/")[0] not in named
    # An author GitHub knows by a private address: their account.
    noreply = "12345+octo-dev@users.noreply.github.com"
    repo.git("commit", "--quiet", "--amend", "--no-edit", f"--author=Octo <{noreply}>")
    named = upstream_name(_git(tmp_path), str(repo.path), repo.path, repo.path, repo.sha())
    assert named == "octo-dev/widgets"


def test_the_upstream_and_branch_given_are_the_ones_used(tmp_path: Path) -> None:
    repo = feature(tmp_path / "src", {}, {"a": ""})
    plan = plan_of(repo, tmp_path, base=repo.sha("main"), upstream="acme/rockets",
                   base_branch="release/2.x")  # fmt: skip
    assert plan.upstream is not None
    assert (plan.upstream.repository, plan.upstream.branch) == ("acme/rockets", "release/2.x")
    assert GitRepo(Path(plan.head_dir)).git("rev-parse", "--abbrev-ref", "HEAD") == "release/2.x"
    with pytest.raises(PrepareError, match="owner/name"):
        plan_of(repo, tmp_path / "again", upstream="../../etc")


def test_the_base_branch_is_the_branch_at_the_base_commit(tmp_path: Path) -> None:
    repo = feature(tmp_path / "src", {}, {"a": ""})
    repo.git("branch", "-m", "main", "trunk")
    repo.git("tag", "v1", "trunk")
    # Given as a SHA (as the relay and `cujo review` give it) or as a tag.
    for base in (repo.sha("trunk"), "v1"):
        plan = plan_of(repo, tmp_path / base[:8], base=base)
        assert plan.upstream is not None
        assert (plan.upstream.branch, plan.upstream.default_branch) == ("trunk", "trunk")

"""`cujo doctor` against the fake GitHub: one line per check, the fix when it fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakegithub import FakeGitHub, required_checks_rules
from fakegithub.fixture import fake_github, fake_github_key  # noqa: F401  (fixtures)

from app_relay.cli import main as cli

GOOD = "octo/guarded"
BAD = "octo/open"


@pytest.fixture
def fake(
    fake_github: FakeGitHub,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> FakeGitHub:
    """Point the relay's settings at the fake; one guarded repository and one that is not."""
    for name, value in {
        "CUJO_APP_ID": str(fake_github.app_id),
        "CUJO_PRIVATE_KEY": fake_github.private_key_pem,
        "CUJO_WEBHOOK_SECRET": "webhook-secret-for-the-doctor",
        "CUJO_GITHUB_API_URL": fake_github.url,
        "CUJO_DATABASE_URL": f"sqlite:///{tmp_path / 'cujo.db'}",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CUJO_WORKFLOW", raising=False)
    monkeypatch.delenv("CUJO_PRIVATE_KEY_FILE", raising=False)
    fake_github.add_repo(GOOD, default_branch="trunk")
    fake_github.state.add_workflow(GOOD, "cujo.yml")
    pinned = {"context": "cujo/guard", "integration_id": fake_github.app_id}
    fake_github.state.set_rules(GOOD, "trunk", required_checks_rules(GOOD, pinned))
    fake_github.add_repo(BAD)
    return fake_github


def doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(["doctor", *argv])
    return code, capsys.readouterr().out.splitlines()


def test_a_repository_the_guard_holds_passes_every_check(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0, lines
    assert lines == [
        f"ok    the Cujo app is installed on {GOOD} (installation {fake.installation_id})",
        "ok    the app has the permissions it needs",
        "ok    `.github/workflows/cujo.yml` on the default branch: active",
        "ok    This block holds the merge: `cujo/guard` is a required check on `trunk`, "
        "pinned to the Cujo app.",
    ]
    # The default branch was asked of GitHub, and the guard read on it.
    assert fake.state.calls("GET", f"^/repos/{GOOD}$")
    assert fake.state.calls("GET", f"^/repos/{GOOD}/rules/branches/trunk$")


def test_a_repository_without_workflow_or_guard_fails_with_the_fixes(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor(capsys, "--repo", BAD)
    assert code == 1
    assert lines[:2] == [
        f"ok    the Cujo app is installed on {BAD} (installation {fake.installation_id})",
        "ok    the app has the permissions it needs",
    ]
    assert lines[2].startswith("FAIL  `.github/workflows/cujo.yml` on the default branch: ")
    assert "Fix: add the sandbox workflow there" in lines[2]
    assert lines[3] == (
        "FAIL  This block does NOT hold the merge: `cujo/guard` is not a required check on "
        "`main`. To fix: require `cujo/guard` from the Cujo app in a ruleset on `main`."
    )
    assert len(lines) == 4


def test_another_branch_and_an_unpinned_check(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.state.repos[GOOD].branches["release"] = "d" * 40
    fake.state.set_rules(GOOD, "release", required_checks_rules(GOOD, {"context": "cujo/guard"}))
    code, lines = doctor(capsys, "--repo", GOOD, "--branch", "release")
    assert code == 1
    assert lines[-1].startswith(
        "FAIL  This block does NOT hold the merge: `cujo/guard` is required"
    )
    assert "any workflow job named `cujo/guard`" in lines[-1]


def test_missing_permissions_are_named(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.state.installation_permissions.update({"checks": "read", "administration": "read"})
    del fake.state.installation_permissions["issues"]
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert lines[1] == (
        "FAIL  the app has the permissions it needs: missing checks: write, issues: write. "
        "Fix: grant them in the app's settings (Permissions and events), then accept them "
        "on the installation."
    )


def test_administration_is_not_needed(fake: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    # Without it the protection read is refused, and the branch read stands in.
    del fake.state.installation_permissions["administration"]
    fake.state.refuse_protection(GOOD, 403, "Resource not accessible by integration")
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0, lines
    assert fake.state.calls("GET", f"^/repos/{GOOD}/branches/trunk$")


def test_a_repository_without_the_app_stops_at_the_first_line(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.state.add_repo("octo/elsewhere")  # no installation
    code, lines = doctor(capsys, "--repo", "octo/elsewhere")
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith("FAIL  the Cujo app is installed on octo/elsewhere: ")
    assert "HTTP 404" in lines[0]
    assert "Fix: install the app on this repository" in lines[0]


def test_settings_that_are_missing_are_a_usage_error(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUJO_APP_ID")
    assert cli.main(["doctor", "--repo", GOOD]) == 2
    assert "CUJO_APP_ID" in capsys.readouterr().err

"""`cujo doctor` against the fake GitHub: one line per check, the fix when it fails."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from fakegithub import FakeGitHub, app_policies, hook_log, required_checks_rules, sign_ins
from fakegithub.fixture import fake_github, fake_github_key  # noqa: F401  (fixtures)
from repo_paths import TOP

from app_relay.cli import doctor_setup as more
from app_relay.cli import main as cli
from app_relay.store.revision import head_revision

GOOD = "octo/guarded"
BAD = "octo/open"
PINNED = "a1" * 20
WORKFLOW = (
    "jobs:\n  sandbox:\n"
    f"    uses: cujo-dev/cujo/.github/workflows/sandbox.yml@{PINNED} # main, no release\n"
)


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
    fake_github.state.put_file(GOOD, "trunk", ".github/workflows/cujo.yml", WORKFLOW)
    fake_github.add_repo(BAD)
    # The relay runs the pinned commit; its board signs in with the App's client.
    client = sign_ins(fake_github.state)
    for name, value in {
        "CUJO_RELAY_COMMIT": PINNED,
        "CUJO_OAUTH_CLIENT_ID": client.client_id,
        "CUJO_OAUTH_CLIENT_SECRET": client.client_secret,
        "CUJO_BOARD_URL": "https://relay.example.test",
        "ANTHROPIC_API_KEY": "sk-ant-doctor-never-prints-this",
    }.items():
        monkeypatch.setenv(name, value)
    # One delivery that reached the relay.
    hook_log(fake_github.state).add("pull_request", {"action": "opened"}, status_code=202)
    assert cli.main(["relay", "migrate"]) == 0
    return fake_github


def doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = cli.main(["doctor", *argv])
    return code, capsys.readouterr().out.splitlines()


def line_of(lines: list[str], words: str) -> str:
    """Return the one line holding ``words``."""
    (found,) = [line for line in lines if words in line]
    return found


def test_a_repository_the_guard_holds_passes_every_check(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0, lines
    assert lines[:4] == [
        f"ok    the Cujo app is installed on {GOOD} (installation {fake.installation_id})",
        "ok    the app has the permissions it needs",
        "ok    `.github/workflows/cujo.yml` on the default branch: active",
        "ok    This block holds the merge: `cujo/guard` is a required check on `trunk`, "
        "pinned to the Cujo app.",
    ]
    assert lines[4:] == [
        f"ok    `.github/workflows/cujo.yml` pins {PINNED[:12]} (main, no release), the commit "
        "this relay runs",
        f"ok    Actions run on {GOOD} and may use Cujo's workflow and actions",
        f"ok    fork pull requests of {GOOD}: GitHub holds their own workflows for approval "
        "(first time contributors); Cujo's runs are dispatched by the relay, which reviews "
        "every one",
        "ok    the App subscribes to every event the relay uses (7)",
        "ok    1 webhook deliveries in the last 24 hours, all delivered",
        "ok    the board's sign-in is the App's client; its callback is "
        "https://relay.example.test/signin/callback (a callback URL in the App's settings, "
        "as register set it)",
        f"ok    the record is at migration {head_revision()}, the newest this relay knows",
        "ok    a model key is set (ANTHROPIC_API_KEY): the model judge and diff reviews run",
    ]
    assert fake.state.calls("GET", "^/app/hook/deliveries$")
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
    assert lines[4] == (
        "FAIL  `.github/workflows/cujo.yml` could not be read on the default branch. Fix: "
        "copy examples/workflow.yml there, its `uses:` line pinned as docs/install.md says."
    )


def test_another_branch_and_an_unpinned_check(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.state.repos[GOOD].branches["release"] = "d" * 40
    fake.state.set_rules(GOOD, "release", required_checks_rules(GOOD, {"context": "cujo/guard"}))
    code, lines = doctor(capsys, "--repo", GOOD, "--branch", "release")
    assert code == 1
    guard = line_of(lines, "This block")
    assert guard.startswith("FAIL  This block does NOT hold the merge: `cujo/guard` is required")
    assert "any workflow job named `cujo/guard`" in guard


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


# -- past the guard (issue 23): each line names the fix --------------------------------


def test_a_workflow_pinning_another_commit_than_the_relays_fails(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUJO_RELAY_COMMIT", "b2" * 20)
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert line_of(lines, "pins") == (
        f"FAIL  `.github/workflows/cujo.yml` pins {PINNED[:12]} (main, no release) but this "
        f"relay runs {more.relay_version().version}, commit {'b2' * 6}: the workflow's reports "
        "may not be what this relay reads. Fix: pin the relay's commit in the workflow, or "
        "install the relay from the pinned commit."
    )


def test_a_relay_of_unknown_commit_warns_and_a_matching_release_passes(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUJO_RELAY_COMMIT")
    monkeypatch.setattr(more, "relay_version", lambda: more.RelayVersion("0.3.1", None))
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0, lines  # a warning does not fail the doctor
    warned = line_of(lines, "pins")
    assert warned.startswith("warn  `.github/workflows/cujo.yml` pins a1a1a1a1a1a1 (main, no ")
    assert "set CUJO_RELAY_COMMIT to the commit you deployed" in warned
    released = WORKFLOW.replace("# main, no release", "# v0.3.1")
    fake.state.put_file(GOOD, "trunk", ".github/workflows/cujo.yml", released)
    code, lines = doctor(capsys, "--repo", GOOD)
    assert line_of(lines, "pins") == (
        f"ok    `.github/workflows/cujo.yml` pins {PINNED[:12]} (v0.3.1), the release this "
        "relay runs (0.3.1)"
    )
    unpinned = WORKFLOW.replace(f"@{PINNED} # main, no release", "@v0")
    fake.state.put_file(GOOD, "trunk", ".github/workflows/cujo.yml", unpinned)
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert "calls Cujo at `v0`, not a commit" in line_of(lines, "calls Cujo")


def test_a_relay_installed_from_git_knows_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    # pip records a VCS install's commit in direct_url.json (PEP 610).
    class Installed:
        version = "0.1.0"

        def read_text(self, name: str) -> str | None:
            assert name == "direct_url.json"
            return json.dumps(
                {
                    "url": "https://github.com/cujo-dev/cujo",
                    "vcs_info": {"vcs": "git", "commit_id": PINNED, "requested_revision": "x"},
                }
            )

    monkeypatch.setattr(more.metadata, "distribution", lambda name: Installed())
    assert more.relay_version({}) == more.RelayVersion("0.1.0", PINNED)
    # CUJO_RELAY_COMMIT (the image's build argument) says it first.
    assert more.relay_version({"CUJO_RELAY_COMMIT": "C3" * 20}).commit == "c3" * 20


def test_failed_webhook_deliveries_are_counted_with_the_fix(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    log = hook_log(fake.state)
    log.add("pull_request", {"action": "opened"}, status_code=0)
    log.add("issue_comment", {"action": "created"}, status_code=502)
    # Failed, then redelivered: not lost.
    redone = log.add("check_run", {"action": "rerequested"}, status_code=0)
    log.add("check_run", {}, status_code=202, guid=redone["guid"], redelivery=True)
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert line_of(lines, "webhook deliveries") == (
        "FAIL  2 of 5 webhook deliveries in the last 24 hours never reached the relay (newest: "
        "issue_comment 0 min ago, HTTP 502). Fix: make the App's webhook URL reach `cujo relay "
        "serve` (the TLS proxy, the relay's logs); the relay's catch-up asks GitHub again for "
        "them on start and every CUJO_CATCH_UP_EVERY_S seconds."
    )


def test_no_delivery_at_all_warns(fake: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    hook_log(fake.state).deliveries.clear()
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0
    assert line_of(lines, "webhook delivery").startswith(
        "warn  no webhook delivery in the last 24 hours. Fix: open a pull request"
    )


def test_events_the_app_does_not_subscribe_to_are_named(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    app_policies(fake.state).events[:] = ["pull_request", "issue_comment", "check_run"]
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert line_of(lines, "subscribe") == (
        "FAIL  the App does not subscribe to branch_protection_rule, repository_ruleset, "
        "workflow_job, workflow_run. Fix: tick them in the App's settings (Permissions and "
        "events → Subscribe to events), then accept the change on each installation."
    )


@pytest.mark.parametrize(
    ("policy", "verdict", "words"),
    [
        ({"enabled": False}, "FAIL", "Actions are disabled on octo/guarded. Fix: enable them"),
        ({"enabled": True, "allowed_actions": "local_only"}, "FAIL", "only its own actions"),
        ({"enabled": True, "allowed_actions": "selected"}, "warn", "only selected actions run"),
    ],
)
def test_an_actions_policy_that_stops_cujos_workflow_is_named(
    fake: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    policy: dict[str, object],
    verdict: str,
    words: str,
) -> None:
    app_policies(fake.state).actions[GOOD] = policy
    app_policies(fake.state).fork_approval[GOOD] = "all_external_contributors"
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == (1 if verdict == "FAIL" else 0)
    assert line_of(lines, words).startswith(verdict)
    assert "(all external contributors)" in line_of(lines, "fork pull requests")


def test_an_actions_policy_the_app_may_not_read_warns(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    del fake.state.installation_permissions["administration"]
    fake.state.refuse_protection(GOOD, 403, "Resource not accessible by integration")
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0
    assert line_of(lines, "Actions policy").startswith(
        f"warn  the Actions policy of {GOOD} is not readable (the App has no Administration: "
    )
    assert not [line for line in lines if "fork pull requests" in line]


def test_the_sign_in_unset_warns_and_another_client_fails(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = sign_ins(fake.state).client_secret
    monkeypatch.setenv("CUJO_OAUTH_CLIENT_ID", "Iv23liSomeOtherApp")
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert line_of(lines, "CUJO_OAUTH_CLIENT_ID") == (
        f"FAIL  CUJO_OAUTH_CLIENT_ID is not this App's client (GitHub says "
        f"{sign_ins(fake.state).client_id}). Fix: set it and a client secret of this App "
        "(`cujo relay register` writes them; or copy them from the App's settings)."
    )
    monkeypatch.delenv("CUJO_OAUTH_CLIENT_ID")
    monkeypatch.delenv("CUJO_OAUTH_CLIENT_SECRET")
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0
    assert line_of(lines, "sign-in").startswith("warn  the board's sign-in is not set")
    assert not [line for line in lines if secret in line]


def test_the_record_behind_the_relays_migrations_fails(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "cujo.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '0003'")
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 1
    assert line_of(lines, "the record") == (
        f"FAIL  the record is at migration 0003; this relay's newest is {head_revision()}. "
        "Fix: `cujo relay migrate` (a record newer than the relay needs the relay that "
        "migrated it)."
    )


def test_a_record_not_made_yet_warns(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for made in tmp_path.glob("cujo*.db*"):
        made.unlink()
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0
    assert line_of(lines, "the record").startswith("warn  the record (sqlite:///")
    assert "does not exist yet. Fix: `cujo relay migrate`" in line_of(lines, "the record")
    assert not (tmp_path / "cujo.db").exists()  # the doctor made nothing


def test_no_model_key_warns_and_a_key_is_never_printed(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, lines = doctor(capsys, "--repo", GOOD)
    assert not [line for line in lines if "sk-ant-doctor" in line]
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    code, lines = doctor(capsys, "--repo", GOOD)
    assert code == 0
    assert line_of(lines, "model key") == (
        "warn  no model key (ANTHROPIC_API_KEY): the deterministic judge decides alone. Fix: "
        "set ANTHROPIC_API_KEY in the relay's environment for the model judge."
    )


def test_the_guides_ruleset_command_makes_the_block_hold(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/install.md step 6: the body `gh api … repos/OWNER/NAME/rulesets` sends.
    guide = (TOP / "docs" / "install.md").read_text()
    body = re.search(r"rulesets --input - <<EOF\n(.*?)\nEOF\n", guide, re.DOTALL)
    assert body is not None
    ruleset = json.loads(body[1].replace("$CUJO_APP_ID", str(fake.app_id)))
    assert ruleset["conditions"]["ref_name"]["include"] == ["~DEFAULT_BRANCH"]
    # GitHub lists a branch's rules as the ruleset's, with where they come from.
    source = {"ruleset_source_type": "Repository", "ruleset_source": BAD, "ruleset_id": 7}
    fake.state.set_rules(BAD, "main", [{**rule, **source} for rule in ruleset["rules"]])
    _, lines = doctor(capsys, "--repo", BAD)
    assert line_of(lines, "This block") == (
        "ok    This block holds the merge: `cujo/guard` is a required check on `main`, "
        "pinned to the Cujo app."
    )

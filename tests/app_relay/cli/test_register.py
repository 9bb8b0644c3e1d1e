"""`cujo relay register`: the App manifest flow against the fake GitHub on loopback.

The browser's part is played with requests: read the start page's form, POST it to
GitHub's new-App page (the fake answers as GitHub does once the owner confirms: a
redirect to the manifest's redirect_url with code and state), then follow that redirect
to the register server, which exchanges the code and writes the relay's settings.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from fakegithub import FakeGitHub, sign_ins
from repo_paths import TOP

from app_relay.board.access import GitHubAccess, access_from_env
from app_relay.cli.register import RegisterServer, Registration, build_manifest, settings_paths
from app_relay.github.app_auth import GitHubApp
from app_relay.settings import load_settings

RELAY = "https://relay.example.test"
# What the relay's code uses, and nothing else (docs/install.md says why for each).
PERMISSIONS = {
    "metadata": "read",
    "contents": "read",
    "pull_requests": "write",
    "checks": "write",
    "issues": "write",
    "actions": "write",
    "administration": "read",
}


class Flow:
    """A register server for one registration, and the browser's steps through it."""

    def __init__(self, fake: FakeGitHub, folder: Path, org: str | None = None) -> None:
        fake.state.manifest_app_pem = fake.private_key_pem
        self.fake = fake
        self.registration = Registration(
            github_url=fake.url, api_url=fake.url, relay_url=RELAY, org=org, folder=folder
        )
        self.server = RegisterServer(("127.0.0.1", 0), self.registration)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def form(self) -> tuple[str, dict[str, object]]:
        """Return the start page's form action and the manifest it sends."""
        page = requests.get(f"{self.url}/", timeout=5)
        assert page.status_code == 200
        action = unescape(re.search(r'<form method="post" action="([^"]+)"', page.text)[1])  # type: ignore[index]
        field = re.search(r'name="manifest" value="([^"]+)"', page.text)[1]  # type: ignore[index]
        return action, json.loads(unescape(field))

    def to_github(self) -> str:
        """POST the manifest to GitHub; return the redirect back, aimed at this server."""
        action, manifest = self.form()
        answer = requests.post(
            action, data={"manifest": json.dumps(manifest)}, allow_redirects=False, timeout=5
        )
        assert answer.status_code == 302, answer.text
        location = answer.headers["Location"]
        assert location.startswith(f"{RELAY}/register/done?")
        # The relay's TLS proxy routes its public address to this server.
        return self.url + location.removeprefix(RELAY)


@pytest.fixture
def flow(fake_github: FakeGitHub, tmp_path: Path) -> Iterator[Flow]:
    """A registration for the user's account, writing into tmp_path/settings."""
    flow = Flow(fake_github, tmp_path / "settings")
    yield flow
    flow.close()


def test_the_manifest_asks_for_what_the_relay_uses_and_nothing_more() -> None:
    manifest = build_manifest(RELAY)
    assert manifest["default_permissions"] == PERMISSIONS
    assert "members" not in manifest["default_permissions"]
    assert set(manifest["default_events"]) == {
        "pull_request",
        "issue_comment",
        "check_run",
        "workflow_run",
        "workflow_job",
        # A ruleset or branch protection edit drops the guard's kept answer (issue 23).
        "repository_ruleset",
        "branch_protection_rule",
    }
    assert manifest["hook_attributes"] == {"url": f"{RELAY}/webhook", "active": True}
    assert manifest["redirect_url"] == f"{RELAY}/register/done"
    # The board's sign-in callback is the relay's, not the placeholder (issue 23).
    assert manifest["callback_urls"] == [f"{RELAY}/signin/callback"]
    assert manifest["public"] is False


def test_merge_is_an_opt_in_that_adds_contents_write_and_nothing_else() -> None:
    plain, opted = build_manifest(RELAY), build_manifest(RELAY, merge=True)
    assert plain["default_permissions"]["contents"] == "read"
    assert opted["default_permissions"] == {**PERMISSIONS, "contents": "write"}
    assert {k: v for k, v in opted.items() if k != "default_permissions"} == {
        k: v for k, v in plain.items() if k != "default_permissions"
    }


def test_the_install_guide_documents_the_merge_opt_in() -> None:
    guide = (TOP / "docs" / "install.md").read_text()
    assert "--merge" in guide
    assert re.search(r"^\| Contents: write \(with `--merge`\) \| \S", guide, re.MULTILINE)


def test_every_permission_is_justified_in_the_install_guide() -> None:
    guide = (TOP / "docs" / "install.md").read_text()
    for name, access in PERMISSIONS.items():
        title = name.replace("_", " ").capitalize()
        assert re.search(rf"^\| {title}: {access} \| \S", guide, re.MULTILINE), name


def test_the_start_page_posts_the_manifest_to_the_new_app_page(flow: Flow) -> None:
    action, manifest = flow.form()
    parts = urlsplit(action)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{flow.fake.url}/settings/apps/new"
    assert parse_qs(parts.query)["state"] == [flow.registration.state]
    assert manifest == build_manifest(RELAY)


def test_an_organisation_gets_its_own_new_app_page(fake_github: FakeGitHub, tmp_path: Path) -> None:
    flow = Flow(fake_github, tmp_path / "s", org="octo-org")
    try:
        action, _ = flow.form()
        assert urlsplit(action).path == "/organizations/octo-org/settings/apps/new"
        assert requests.get(flow.to_github(), timeout=5).status_code == 200
    finally:
        flow.close()


def test_the_code_becomes_settings_the_relay_starts_with(
    flow: Flow, fake_github: FakeGitHub
) -> None:
    answer = requests.get(flow.to_github(), timeout=5)
    assert answer.status_code == 200, answer.text
    assert "/apps/cujo/installations/new" in answer.text
    env_file, key_file = settings_paths(flow.registration.folder)
    for path in (env_file, key_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    values = dict(
        line.split("=", 1) for line in env_file.read_text().splitlines() if not line.startswith("#")
    )
    assert values["CUJO_APP_ID"] == str(fake_github.app_id)
    assert values["CUJO_WEBHOOK_SECRET"] == "e340154128314309424b7c8e90325147d99fdafa"
    assert Path(values["CUJO_PRIVATE_KEY_FILE"]) == key_file.resolve()
    # The App's OAuth client, for the board's sign-in, is kept beside them (issue 23).
    client = sign_ins(fake_github.state)
    assert values["CUJO_OAUTH_CLIENT_ID"] == client.client_id
    assert values["CUJO_OAUTH_CLIENT_SECRET"] == client.client_secret
    assert values["CUJO_BOARD_URL"] == RELAY
    # GitHub took the manifest's callback: the board's, at the relay's public address.
    assert client.callback_urls == {f"{RELAY}/signin/callback"}
    # Never shown: not on the page GitHub sends the owner back to, not in the App's repr.
    for secret in (client.client_secret, values["CUJO_WEBHOOK_SECRET"]):
        assert secret not in answer.text
        assert secret not in repr(flow.registration.created)
    access = access_from_env(values, fake_github.url)
    assert isinstance(access, GitHubAccess)
    settings = load_settings(values)
    assert settings.app_id == fake_github.app_id
    # The written key is the App's: GitHub accepts the JWT it signs.
    fake_github.add_repo("octo/app")
    app = GitHubApp(
        app_id=settings.app_id,
        private_key=settings.private_key.reveal(),
        base_url=settings.github_api_url,
    )
    try:
        assert app.repo_installation("octo/app") == fake_github.installation_id
    finally:
        app.close()
    assert flow.registration.finished.is_set()
    # A second visit of the redirect changes nothing.
    assert requests.get(flow.to_github(), timeout=5).status_code == 410


def test_a_redirect_with_another_state_is_refused_and_no_code_is_spent(flow: Flow) -> None:
    back = flow.to_github().replace(f"state={flow.registration.state}", "state=forged")
    answer = requests.get(back, timeout=5)
    assert answer.status_code == 400
    assert "state does not match" in answer.text
    assert flow.fake.state.calls("POST", "/app-manifests/") == []
    assert not flow.registration.folder.exists()


def test_a_code_github_no_longer_honours_writes_nothing_and_says_why(flow: Flow) -> None:
    back = flow.to_github()
    flow.fake.state.manifest_codes.clear()  # used, or older than an hour
    answer = requests.get(back, timeout=5)
    assert answer.status_code == 502
    assert "HTTP 404" in answer.text
    assert not flow.registration.folder.exists()
    assert not flow.registration.finished.is_set()


def test_the_command_refuses_to_overwrite_a_registration_and_plain_http(tmp_path: Path) -> None:
    folder = tmp_path / "settings"
    folder.mkdir()
    (folder / "relay.env").write_text("CUJO_APP_ID=1\n")

    def register(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app_relay", "relay", "register", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    taken = register("--url", RELAY, "--settings-dir", str(folder), "--port", "0")
    assert taken.returncode == 2
    assert "registered there already" in taken.stderr
    clear = register("--url", "http://relay.example.test", "--settings-dir", str(tmp_path / "x"))
    assert clear.returncode == 2
    assert "must use https" in clear.stderr

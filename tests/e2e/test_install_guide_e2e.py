"""docs/install.md followed end to end against the fake GitHub on loopback (issue 23).

Each step of the guide is done as it says, with the commands and the environment
variables it names; where a step is a click on GitHub (create the App, install it, add
the workflow file), the test does the fake's equivalent and the comment names the step.
The commands it runs are read out of the guide itself (the pin's `sed`, the ruleset's
`gh api` request), so this test breaks when the guide changes shape.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from html import unescape
from pathlib import Path
from typing import Any

import requests
from cujorun import CUJO
from fakegithub import FakeGitHub, fake_sha, hook_log, sign_ins
from relayprocess import RelayProcess
from relayworld import (
    REPO,
    Actions,
    open_pull,
    pull_request_event,
    set_up_repo,
    synthetic,
    wait_for,
)
from repo_paths import TOP

GUIDE = TOP / "docs" / "install.md"
RELAY_URL = "https://relay.example.test"
EXFIL = "collector.exfil.test"
PORT0 = ("--port", "0")  # any free port for the register pages


def guide_step(number: int) -> str:
    """Return the text of the guide's section ``## number.``."""
    text = GUIDE.read_text()
    found = re.search(rf"^## {number}\. .*?(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert found, f"docs/install.md has no step {number}"
    return found.group(0)


def free_port() -> int:
    """Return a free loopback port (the relay keeps one address, as behind its proxy)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def sourced(env_file: Path, base: dict[str, str]) -> dict[str, str]:
    """Return the environment after `set -a; . relay.env; set +a`, as step 3 does."""
    out = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; set +a; env -0', "bash", str(env_file)],
        env=base,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def checks(fake: FakeGitHub, head: str) -> list[dict[str, Any]]:
    """Return the check runs on ``head``."""
    return [c for c in fake.state.repos[REPO].check_runs.values() if c["head_sha"] == head]


def doctor(env: dict[str, str]) -> tuple[int, list[str]]:
    """Run `cujo doctor --repo OWNER/NAME` as step 5 says."""
    done = subprocess.run(
        [str(CUJO), "doctor", "--repo", REPO],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout.splitlines()


def register(fake: FakeGitHub, env: dict[str, str]) -> None:
    """Step 2: `cujo relay register --url …`, and the browser's part of the manifest flow."""
    # GitHub generates the App's key at the conversion; the fake hands out its own.
    fake.state.manifest_app_pem = fake.private_key_pem
    command = guide_step(2)
    assert "cujo relay register --url https://relay.example.org " in command
    proc = subprocess.Popen(
        # --github-url: the guide's GHES form, pointing at the fake; --port 0: any free port.
        [str(CUJO), "relay", "register", "--url", RELAY_URL, "--github-url", fake.url, *PORT0],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()
        served = re.search(r"served here on (http://\S+?)/\)", said)
        assert served, said
        local = served.group(1)
        # "Open https://relay.example.org/, press Create the App on GitHub, and confirm."
        page = requests.get(f"{local}/", timeout=10)
        action = unescape(re.search(r'<form method="post" action="([^"]+)"', page.text)[1])  # type: ignore[index]
        manifest = unescape(re.search(r'name="manifest" value="([^"]+)"', page.text)[1])  # type: ignore[index]
        back = requests.post(action, data={"manifest": manifest}, allow_redirects=False, timeout=10)
        assert back.status_code == 302, back.text
        # GitHub sends the browser back to the relay's public address (the TLS proxy).
        done = requests.get(local + back.headers["Location"].removeprefix(RELAY_URL), timeout=10)
        assert done.status_code == 200, done.text
        assert "/installations/new" in done.text  # "The page links to the App's install page."
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


class GuideActions(Actions):
    """The fake's Actions, sending `workflow_run` through the App's webhook as GitHub does."""

    def send(self, body: dict[str, Any]) -> None:
        """Deliver a workflow_run webhook with the App's registered secret."""
        hook_log(self.fake.state).deliver("workflow_run", body)


def test_the_install_guide_followed_step_by_step_ends_with_a_block_that_holds(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake = fake_github
    home = tmp_path / "home"
    home.mkdir()
    # The maintainer's machine: a HOME of its own, the installed `cujo` on PATH.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUJO_", "ANTHROPIC_"))}
    env.pop("XDG_DATA_HOME", None)
    env |= {"HOME": str(home), "PATH": f"{CUJO.parent}:{env.get('PATH', '')}"}

    # 1. Install the relay: COMMIT is what examples/workflow.yml pins, read with the
    # guide's own `sed` (the `curl` of raw.githubusercontent.com is the file in this tree).
    sed = re.search(r"\| sed -n '([^']+)'\)", guide_step(1))
    assert sed, "step 1 no longer reads COMMIT with sed"
    commit = subprocess.run(
        ["sed", "-n", sed.group(1), str(TOP / "examples" / "workflow.yml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", commit), commit
    # pip records the commit it installed from; this checkout says it as the guide allows.
    env["CUJO_RELAY_COMMIT"] = commit

    # 2. Create the GitHub App. The API is the fake's (CUJO_GITHUB_API_URL, step 3's table).
    env["CUJO_GITHUB_API_URL"] = fake.url
    register(fake, env)
    settings = home / ".local" / "share" / "cujo"
    env_file = settings / "relay.env"
    assert (
        env_file.stat().st_mode & 0o777,
        (settings / "app-private-key.pem").stat().st_mode & 0o777,
    ) == (0o600, 0o600)
    client = sign_ins(fake.state)
    assert client.callback_urls == {f"{RELAY_URL}/signin/callback"}

    # 3. Start the relay: `set -a; . relay.env; set +a; cujo relay serve`.
    relay_env = sourced(env_file, env)
    assert relay_env["CUJO_APP_ID"] == str(fake.app_id)
    assert relay_env["CUJO_OAUTH_CLIENT_ID"] == client.client_id
    port = free_port()
    relay = RelayProcess(fake, settings, port=port)
    # The guide's settings only (its defaults for the record and the key's file), and pacing.
    relay.env = dict(relay_env)
    relay.database = f"sqlite:///{settings / 'cujo.db'}"  # the default record (step 3)
    # GitHub delivers the App's webhooks to https://relay.example.test/webhook; the TLS
    # proxy routes them to the relay's port. The secret is the one GitHub generated.
    hooks = hook_log(fake.state)
    hooks.url = lambda: f"http://127.0.0.1:{port}"
    hooks.secret = relay_env["CUJO_WEBHOOK_SECRET"]
    fake.state.webhook_sinks.append(hooks.deliver)
    actions = GuideActions(fake, lambda: relay.url, synthetic()).install()
    base = fake_sha()
    try:
        relay.start()
        assert requests.get(f"{relay.url}/healthz", timeout=10).status_code == 200

        # 4. Install the App on the repository (GitHub's Install App page: the fake's
        # installation) and copy examples/workflow.yml to .github/workflows/cujo.yml on the
        # default branch.
        set_up_repo(fake, base_sha=base, policy=None)
        workflow = (TOP / "examples" / "workflow.yml").read_text()
        assert f"sandbox.yml@{commit} # main, no release" in guide_step(4)
        for ref in ("main", base):
            fake.state.put_file(REPO, ref, ".github/workflows/cujo.yml", workflow)

        # 5. The first review: a pull request opens; GitHub sends its webhook.
        clean = fake_sha()
        open_pull(fake, 1, head=clean, base=base)
        assert (
            hooks.deliver(
                "pull_request", pull_request_event(fake, number=1, head=clean, base=base)
            )["status_code"]
            == 202
        )
        wait_for(
            "cujo/guard on the first pull request",
            lambda: [c["status"] for c in checks(fake, clean)] == ["completed"],
            120,
        )
        (check,) = checks(fake, clean)
        assert (check["name"], check["conclusion"]) == ("cujo/guard", "success")
        assert [r["state"] for r in fake.state.repos[REPO].reviews.values()] == ["COMMENTED"]
        # `cujo doctor`: every line ok or warn but the block's, which step 6 makes hold.
        code, lines = doctor(relay_env)
        failing = [line for line in lines if line.startswith("FAIL")]
        assert (code, len(failing)) == (1, 1), lines
        assert "This block does NOT hold the merge" in failing[0], lines

        # 6. Make the block hold the merge: the guide's `gh api` request, as a repository
        # admin (a user token, as `gh` holds), its heredoc expanded by the shell.
        step6 = guide_step(6)
        call = re.search(
            r"gh api --method (\w+) (\S+) --input - <<EOF\n(.*?)\nEOF\n", step6, re.DOTALL
        )
        assert call, "step 6 no longer creates the ruleset with `gh api … --input -`"
        method, path, heredoc = call.groups()
        body = subprocess.run(
            ["bash", "-c", f'. "$1"\ncat <<EOF\n{heredoc}\nEOF', "bash", str(env_file)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        client.add_user("octo-admin", {REPO})
        client.tokens["gho_octo_admin"] = ("octo-admin", fake.state.clock() + 3600)
        made = requests.request(
            method,
            f"{fake.url}/{path.replace('OWNER/NAME', REPO)}",
            data=body,
            headers={
                "Authorization": "token gho_octo_admin",
                "Accept": "application/vnd.github+json",
            },
            timeout=10,
        )
        assert made.status_code == 201, made.text
        assert json.loads(body)["rules"][0]["parameters"]["required_status_checks"] == [
            {"context": "cujo/guard", "integration_id": fake.app_id}
        ]
        code, lines = doctor(relay_env)
        assert code == 0, lines
        assert any(line.startswith("ok    This block holds the merge") for line in lines), lines

        # …and a block then holds: a pull request the sandbox blocks gets a failing guard
        # whose summary says the merge waits on it.
        bad = fake_sha()
        actions.producers[bad] = synthetic(install_egress_to=EXFIL)
        open_pull(fake, 2, head=bad, base=base)
        hooks.deliver("pull_request", pull_request_event(fake, number=2, head=bad, base=base))
        wait_for(
            "cujo/guard on the blocked pull request",
            lambda: [c["status"] for c in checks(fake, bad)] == ["completed"],
            120,
        )
        (check,) = checks(fake, bad)
        assert check["conclusion"] == "failure", check["output"]
        assert "This block holds the merge" in check["output"]["summary"], check["output"]
        fake.state.wait_for_actions(timeout_s=60)
    finally:
        relay.stop()
    assert len(actions.dispatches) == 2, relay.log()
    assert all(d["status_code"] in (200, 202) for d in hooks.deliveries), hooks.deliveries

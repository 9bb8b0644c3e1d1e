"""Write this folder's cassettes by capturing the gateway against the fake GitHub.

Run from the repository root: ``.venv/bin/python tests/cassettes/github/make_cassettes.py``
(or name the cassettes to write).
The fake models GitHub's documented answers; the capture is then moved to
``https://api.github.com`` so the cassettes replay against the real base URL. Nothing here
talks to GitHub.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import vcr

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "fakes"))  # tests/fakes/, for fakegithub

from fakegithub import (  # noqa: E402
    FakeGitHubServer,
    FakeState,
    classic_protection,
    make_key,
    required_checks_rules,
)

from app_relay.github.app_auth import GitHubApp  # noqa: E402
from app_relay.github.client import GitHubGateway  # noqa: E402
from app_relay.github.payloads import CheckAction, CheckOutput, ReviewComment  # noqa: E402
from app_relay.github.protection import read_hold  # noqa: E402

# The moment the captures pretend to happen; replays pin the gateway's clock to it.
NOW = 1_768_478_400.0  # 2026-01-15T12:00:00Z
REPO = "octo-org/widgets"
HEAD = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
BASE = "c5b97d5ae6c19d5c5df71a34c7fbeeda2479ccbc"
INSTALLATION = 52_173_914
APP_ID = 1_234_567


def scenarios() -> dict[str, Callable[[GitHubGateway], object]]:
    """Name each cassette and the gateway call it captures."""
    return {
        "pull_request": lambda gw: gw.pull_request(REPO, 1347),
        "create_check_run": lambda gw: gw.create_check_run(
            REPO,
            HEAD,
            status="in_progress",
            output=CheckOutput("Cujo is reviewing", "The sandbox is running."),
            actions=[CheckAction("Retry", "Run the review again", "retry")],
        ),
        "post_advisory_review": lambda gw: gw.post_advisory_review(
            REPO,
            1347,
            HEAD,
            "Cujo: clean. Every check produced evidence.",
            [ReviewComment("setup.py", 12, "Reads the environment at install time.")],
        ),
        "permission": lambda gw: gw.permission(REPO, "hubot"),
        "dispatch_with_run_details": lambda gw: gw.dispatch_workflow(
            REPO, "cujo.yml", "main", {"run-id": "r-0001", "head-sha": HEAD}
        ),
        **dict.fromkeys(GUARD_WORLDS, guard_read),
    }


def guard_read(gw: GitHubGateway) -> object:
    """Read whether cujo/guard holds the merge of main."""
    return read_hold(gw, REPO, "main", APP_ID)


PINNED = {"context": "cujo/guard", "app_id": APP_ID}
# What the main branch holds in each guard cassette (docs/design.md section 8.3's reading rules).
GUARD_WORLDS: dict[str, Callable[[FakeState], None]] = {
    "guard_rulesets_only": lambda s: s.set_rules(
        REPO,
        "main",
        required_checks_rules(REPO, {"context": "cujo/guard", "integration_id": APP_ID}),
    ),
    "guard_classic_only": lambda s: s.set_protection(
        REPO, "main", classic_protection(REPO, "main", PINNED)
    ),
    "guard_neither": lambda s: None,
    "guard_no_admin_rights": lambda s: (
        s.set_protection(REPO, "main", classic_protection(REPO, "main", PINNED)),
        s.refuse_protection(REPO, 404, "Not Found"),
    ),
    "guard_integration_403_unpinned": lambda s: (
        s.set_protection(
            REPO,
            "main",
            classic_protection(REPO, "main", {"context": "cujo/guard", "app_id": None}),
        ),
        s.refuse_protection(REPO, 403, "Resource not accessible by integration"),
    ),
    "guard_pinned_to_another_app": lambda s: s.set_rules(
        REPO,
        "main",
        required_checks_rules(REPO, {"context": "cujo/guard", "integration_id": 15368}),
    ),
    "guard_rule_without_type": lambda s: s.set_rules(
        REPO,
        "main",
        [required_checks_rules(REPO)[0], {"ruleset_source_type": "Repository", "ruleset_id": 43}],
    ),
}


def world(state: FakeState) -> None:
    """Set up the repository the scenarios read and write."""
    state.add_repo(REPO, installation_id=INSTALLATION)
    state.repos[REPO].branches["main"] = BASE
    state.add_pull(REPO, 1347, head_sha=HEAD, base_sha=BASE, author="octocat", head_ref="fix")
    state.set_role(REPO, "hubot", "maintain")
    state.add_workflow(REPO, "cujo.yml", "Cujo", run_name=lambda i: f"cujo {i['run-id']}")


HEADER = (
    "# Written from GitHub's REST documentation and docs/design.md section 8.3, captured against\n"
    "# tests/fakes/fakegithub: NOT recorded from GitHub. See README.md beside this file.\n"
)


def main(only: list[str]) -> None:
    """Capture every scenario (or those named) into its own cassette."""
    key = make_key()
    for name, call in scenarios().items():
        if only and name not in only:
            continue
        state = FakeState(app_id=APP_ID, public_key_pem=key.public_pem, clock=lambda: NOW)
        world(state)
        GUARD_WORLDS.get(name, lambda s: None)(state)
        server = FakeGitHubServer(state).start()
        path = HERE / f"{name}.yaml"
        path.unlink(missing_ok=True)
        try:
            app = GitHubApp(
                app_id=APP_ID,
                private_key=key.private_pem,
                base_url=server.url,
                seconds_between_requests=None,
                seconds_between_writes=None,
                clock=lambda: NOW,
            )
            with vcr.use_cassette(
                str(path), record_mode="all", filter_headers=["authorization", "user-agent"]
            ):
                call(app.gateway(INSTALLATION))
        finally:
            server.stop()
        assert state.unknown_requests == [], state.unknown_requests
        text = path.read_text().replace(server.url, "https://api.github.com")
        # A token-shaped string in a repository trips secret scanning; it is not needed.
        for token in state.tokens:
            text = text.replace(token, "FAKE-INSTALLATION-TOKEN")
        path.write_text(HEADER + text)
        print(f"wrote {path.relative_to(HERE.parents[2])}")


if __name__ == "__main__":
    main(sys.argv[1:])

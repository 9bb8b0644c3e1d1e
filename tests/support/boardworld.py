"""Runs in a real record and the board served on loopback, for the board's tests and bench."""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
import uvicorn
from fakegithub import FakeGitHub, SignIns, sign_ins
from fastapi import FastAPI

from app_relay.decide.hits import RuleContext
from app_relay.decide.judge import decide, error_verdict
from app_relay.settings import RelaySettings, Secret
from app_relay.store import Store
from app_relay.verdict import Finding, Verdict
from cujo_action.evidence.bundle import write_manifest
from cujo_action.evidence.reportfit import parse_report
from cujo_action.schema import CHECK_NAMES, Plan

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
DEMO_EXFIL = SAMPLES / "demo-exfil"
DEADLINE_S = 10.0


class Served:
    """An ASGI app under uvicorn in a thread, on a loopback port bound before it starts."""

    def __init__(self, app: FastAPI) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True
        )

    def __enter__(self) -> Served:
        self.thread.start()
        # The socket already listens: the first request waits for the server to take it.
        requests.get(f"{self.url}/static/board.css", timeout=DEADLINE_S).raise_for_status()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(DEADLINE_S)
        self.listener.close()


def relay_settings(store: Store, api_url: str = "http://127.0.0.1:9") -> RelaySettings:
    """Return the relay's settings over ``store``, talking to GitHub at ``api_url``."""
    return RelaySettings(
        app_id=1,
        private_key=Secret(
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
        ),
        webhook_secret=Secret("test-webhook-secret"),
        github_api_url=api_url,
        database_url=store.url,
        workflow="cujo.yml",
        anthropic_api_key=None,
    )


@dataclass(frozen=True)
class Recorded:
    """A run put in the record by a test: its id, repository and head."""

    run_id: str
    repo: str
    head_sha: str


def sha(n: int, fill: str = "a") -> str:
    """Return a 40-hex commit SHA that differs by ``n``."""
    return f"{n:08x}".ljust(40, fill)


def pull_request_run(
    store: Store,
    repo: str,
    number: int,
    run_id: str,
    *,
    head_sha: str | None = None,
    mode: str = "sandbox",
    holds: str | None = "holds",
    workflow_run_id: int | None = None,
) -> Recorded:
    """Record a pull request's run as `running`, bound to GitHub like the relay binds it."""
    session = store.open_session(repo, number, "github")
    head = head_sha or sha(number)
    store.start_run(
        session,
        run_id,
        sha(0, "b"),
        head,
        mode,  # type: ignore[arg-type]
        github={
            "installation_id": 77,
            "check_run_id": 900 + number,
            "base_ref": "main",
            "holds": holds,
            "workflow_run_id": workflow_run_id,
        },
    )
    return Recorded(run_id, repo, head)


def local_run(store: Store, repo: str, run_id: str, *, mode: str = "sandbox") -> Recorded:
    """Record a local review's run as `running`."""
    session = store.open_session(repo, None, "local")
    head = sha(len(run_id), "c")
    store.start_run(session, run_id, sha(0, "b"), head, mode)  # type: ignore[arg-type]
    return Recorded(run_id, repo, head)


def clean_verdict(summary: str = "Nothing above warn; every check produced evidence.") -> Verdict:
    """Return a clean verdict of the hard rules."""
    return Verdict(state="clean", summary=summary, judge="deterministic")


def blocked_verdict(title: str = "POST to collector.exfil.test carried a decoy") -> Verdict:
    """Return a blocked verdict with one critical finding."""
    finding = Finding(
        id="F1",
        rule="decoy-egress",
        severity="critical",
        check="install",
        title=title,
        evidence=["install:egress:1"],
    )
    return Verdict(
        state="blocked", summary="Blocked by 1 critical finding.", findings=[finding],
        judge="deterministic",
    )  # fmt: skip


def errored(reason: str = "the sandbox exited 2 without a bundle") -> Verdict:
    """Return an error verdict."""
    return error_verdict(reason)


def demo_exfil_run(store: Store, folder: Path, *, repo: str = "octo/tinycalc") -> Recorded:
    """Record the demo's real exfiltration as a pull request's blocked run, with its bundle.

    The plan and reports are those in ``tests/samples/demo-exfil`` (recorded from a run
    of the sandbox, before the workflows check existed); the verdict is the hard rules'
    on them.
    """
    plan = Plan.model_validate_json((DEMO_EXFIL / "plan.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(DEMO_EXFIL / "plan.json", folder / "plan.json")
    reports = []
    for check in CHECK_NAMES:
        if not (DEMO_EXFIL / f"{check}.json").exists():
            continue
        raw = (DEMO_EXFIL / f"{check}.json").read_bytes()
        (folder / f"{check}.json").write_bytes(raw)
        reports.append(
            parse_report(raw, run_id=plan.run_id, head_sha=plan.head_sha, base_sha=plan.base_sha)
        )
    write_manifest(folder, plan.run_id, plan.head_sha, plan.base_sha)
    session = store.open_session(repo, 12, "github")
    store.start_run(
        session,
        plan.run_id,
        plan.base_sha,
        plan.head_sha,
        "sandbox",
        github={"installation_id": 77, "check_run_id": 4321, "holds": "holds"},
    )
    store.add_event(plan.run_id, "dispatched", "workflow run 5150")
    store.bind_github(plan.run_id, workflow_run_id=5150)
    verdict = decide(reports, expected=CHECK_NAMES, ctx=RuleContext())
    store.finish_run(plan.run_id, verdict, plan.model_dump_json(by_alias=True), str(folder))
    return Recorded(plan.run_id, repo, plan.head_sha)


def alice_signs_in(fake: FakeGitHub, setenv: Callable[[str, str], None]) -> SignIns:
    """Make octo/open and octo/secret; alice reads only the first and is signed in to GitHub.

    ``setenv`` points the relay's board at the fake's OAuth client.
    """
    fake.add_repo("octo/open")
    fake.add_repo("octo/secret")
    people = sign_ins(fake.state)
    people.add_user("alice", {"octo/open"})
    people.signed_in_as = "alice"
    setenv("CUJO_OAUTH_CLIENT_ID", people.client_id)
    setenv("CUJO_OAUTH_CLIENT_SECRET", people.client_secret)
    setenv("CUJO_GITHUB_WEB_URL", fake.url)
    return people

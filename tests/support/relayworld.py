"""A pull request's world for the relay's tests: the fake GitHub set up, webhooks, bundles.

Webhook bodies start from the octokit samples in ``samples/webhooks`` and carry the
repository, pull request and workflow run of the test. ``Actions`` is the fake GitHub's
Actions behaviour: on a dispatch it runs the real sandbox (``python -m cujo_action run``)
on a local repository, uploads the bundle as ``cujo-reports``, marks the workflow run
``success`` and sends the ``workflow_run`` completed webhook back to the relay.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from bundlefactory import make_plan, make_report
from fakegithub import Dispatch, FakeGitHub, zip_bytes
from hooksignature import github_signature

from cujo_action.evidence.bundle import write_manifest
from cujo_action.schema import CHECK_NAMES, Policy

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "webhooks"
SECRET = "relay-test-secret"
REPO = "octo/tinycalc"
WORKFLOW = "cujo.yml"


def sample(name: str) -> dict[str, Any]:
    """Return a sample webhook body as a dict."""
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    assert isinstance(data, dict)
    return data


def pull_request_event(
    fake: FakeGitHub, *, number: int, head: str, base: str, action: str = "opened"
) -> dict[str, Any]:
    """Return a ``pull_request`` webhook body for a pull request of ``REPO``."""
    body = copy.deepcopy(sample("pull_request.opened"))
    body["action"] = action
    body["number"] = number
    pr = body["pull_request"]
    pr["number"] = number
    pr["head"]["sha"] = head
    pr["base"]["sha"] = base
    pr["base"]["ref"] = "main"
    pr["user"]["login"] = "alice"
    pr["user"]["type"] = "User"
    body["repository"]["full_name"] = REPO
    body["repository"]["default_branch"] = "main"
    body["installation"] = {"id": fake.installation_id}
    return body


def workflow_run_event(fake: FakeGitHub, run: Mapping[str, Any]) -> dict[str, Any]:
    """Return a ``workflow_run`` webhook body for a run the fake holds, as it stands."""
    body = copy.deepcopy(sample("workflow_run.completed"))
    body["action"] = "completed" if run["status"] == "completed" else "in_progress"
    wr = body["workflow_run"]
    for key in ("id", "display_title", "status", "conclusion", "head_sha", "path", "run_attempt"):
        wr[key] = run[key]
    body["repository"]["full_name"] = REPO
    body["installation"] = {"id": fake.installation_id}
    return body


def post_webhook(
    url: str, event: str, body: Mapping[str, Any] | bytes, delivery: str | None = None
) -> requests.Response:
    """Sign and POST a webhook to the relay, as GitHub does."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": github_signature(SECRET, raw),
    }
    return requests.post(f"{url}/webhook", data=raw, headers=headers, timeout=30)


def set_up_repo(fake: FakeGitHub, *, base_sha: str, policy: str | None) -> None:
    """Create ``REPO`` with the Cujo workflow and ``.cujo.yml`` at the base commit."""
    fake.add_repo(REPO)
    fake.state.repos[REPO].branches["main"] = base_sha
    fake.state.add_workflow(REPO, WORKFLOW, run_name=lambda inputs: f"cujo {inputs['run-id']}")
    if policy is not None:
        fake.state.put_file(REPO, base_sha, ".cujo.yml", policy)


def open_pull(
    fake: FakeGitHub, number: int, *, head: str, base: str, files: list[str] | None = None
) -> None:
    """Open (or move the head of) a pull request on the fake."""
    fake.state.add_pull(REPO, number, head_sha=head, base_sha=base)
    fake.state.set_pull_files(REPO, number, files or ["tinycalc/calc.py"])


def zip_folder(folder: Path) -> bytes:
    """Zip a bundle folder the way upload-artifact does: relative paths, files only."""
    files = {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }
    return zip_bytes(files)


def synthetic_bundle(
    folder: Path,
    *,
    run_id: str,
    head: str,
    base: str,
    bound_to: str | None = None,
    plan_policy: Policy | None = None,
    install_egress_to: str | None = None,
    unproven: bool = False,
    workflows: list[dict[str, object]] | None = None,
) -> Path:
    """Write a complete, fully isolated bundle (for ``bound_to``'s run id if given).

    Clean unless ``install_egress_to`` names a host the install reached; ``plan_policy``
    is the policy plan.json claims (the defaults unless given); ``workflows`` are the
    workflows check's observations.
    """
    rid = bound_to or run_id
    folder.mkdir(parents=True, exist_ok=True)
    plan = make_plan(run_id=rid, base_sha=base, head_sha=head, policy=plan_policy or Policy())
    (folder / "plan.json").write_text(plan.model_dump_json(by_alias=True))
    for check in CHECK_NAMES:
        over: dict[str, object] = {}
        if check == "install" and install_egress_to is not None:
            over["egress"] = [
                {
                    "id": "install:egress:1",
                    "phase": "install",
                    "host": install_egress_to,
                    "port": 443,
                    "method": "POST",
                    "url": f"https://{install_egress_to}/collect",
                    "bytes_out": 512,
                }
            ]
        if workflows and check == "workflows":
            over["observations"] = workflows
        if unproven and check == "smoke":
            # The build could not run: no evidence, so the commit is not proven safe.
            over["status"] = "skipped"
            over["summary"] = "nothing recognisable to build"
        report = make_report(check, run_id=rid, base_sha=base, head_sha=head, **over)
        (folder / f"{check}.json").write_text(report.dump())
    write_manifest(folder, rid, head, base)
    return folder


# Writes a bundle to the folder; may return the job's log (what the harness printed).
Producer = Callable[[Dispatch, Path], str | None]


def real_sandbox(repo_path: Path) -> Producer:
    """Return a producer that runs the real sandbox on a local clone source."""

    def produce(dispatch: Dispatch, out: Path) -> str | None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cujo_action",
                "run",
                "--repo",
                str(repo_path),
                "--base",
                dispatch.inputs["base-sha"],
                "--head",
                dispatch.inputs["head-sha"],
                "--run-id",
                dispatch.inputs["run-id"],
                "--out",
                str(out),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert (out / "manifest.json").exists(), done.stderr[-3000:]
        # The harness's stderr is what the job's log holds (its tamper record included).
        return done.stderr

    return produce


def synthetic(
    bound_to: str | None = None,
    *,
    plan_policy: Policy | None = None,
    install_egress_to: str | None = None,
    unproven: bool = False,
    workflows: list[dict[str, object]] | None = None,
) -> Producer:
    """Return a producer of ``synthetic_bundle`` (clean, unless asked otherwise)."""

    def produce(dispatch: Dispatch, out: Path) -> str | None:
        synthetic_bundle(
            out,
            run_id=dispatch.inputs["run-id"],
            head=dispatch.inputs["head-sha"],
            base=dispatch.inputs["base-sha"],
            bound_to=bound_to,
            plan_policy=plan_policy,
            install_egress_to=install_egress_to,
            unproven=unproven,
            workflows=workflows,
        )
        return None  # no harness ran: there is no job log to serve

    return produce


@dataclass
class Actions:
    """The fake's Actions: produce a bundle, upload it, complete the run, call back."""

    fake: FakeGitHub
    relay_url: Callable[[], str | None]
    produce: Producer
    # Dispatches wait on their gate (by head SHA) before producing: a test holds a run.
    gates: dict[str, threading.Event] = field(default_factory=dict)
    dispatches: list[Dispatch] = field(default_factory=list)
    # Completion webhooks that could not be delivered (the relay was down), to redeliver.
    undelivered: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delivered: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    producers: dict[str, Producer] = field(default_factory=dict)

    def install(self) -> Actions:
        """Register with the fake GitHub."""
        self.fake.state.on_dispatch(self.run)
        return self

    def hold(self, head_sha: str) -> threading.Event:
        """Hold dispatches of ``head_sha`` until the returned event is set."""
        return self.gates.setdefault(head_sha, threading.Event())

    def run(self, dispatch: Dispatch) -> None:
        """Behave as the sandbox workflow does on a runner."""
        self.dispatches.append(dispatch)
        state = self.fake.state
        state.set_run(REPO, dispatch.run_id, status="in_progress")
        gate = self.gates.get(dispatch.inputs["head-sha"])
        if gate is not None:
            assert gate.wait(600), "a held dispatch was never released"
        with tempfile.TemporaryDirectory(prefix="cujo-actions-") as tmp:
            out = Path(tmp) / "out"
            producer = self.producers.get(dispatch.inputs["head-sha"], self.produce)
            job_log = producer(dispatch, out)
            state.add_artifact(REPO, dispatch.run_id, archive=zip_folder(out))
            if job_log is not None:
                state.set_job_log(REPO, dispatch.run_id, job_log)
        # Success even after a cancel: reports that arrive late must still post nothing.
        run = state.set_run(REPO, dispatch.run_id, status="completed", conclusion="success")
        self.send(workflow_run_event(self.fake, dict(run)))

    def send(self, body: dict[str, Any]) -> None:
        """Deliver a workflow_run webhook, or keep it for redelivery when the relay is down."""
        delivery = str(uuid.uuid4())
        url = self.relay_url()
        try:
            if url is None:
                raise requests.ConnectionError("the relay is down")
            answer = post_webhook(url, "workflow_run", body, delivery)
            answer.raise_for_status()
        except requests.RequestException:
            self.undelivered.append((delivery, body))
        else:
            self.delivered.append((delivery, body))


def wait_for(what: str, cond: Callable[[], object], timeout_s: float = 300.0) -> Any:
    """Poll ``cond`` until it is truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = cond()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
